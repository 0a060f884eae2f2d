"""How long ``import dpkit`` takes: the median over fresh interpreters, and where the time goes.

Run: ``.venv/bin/python benchmarks/import_time.py [--runs 10] [--module dpkit] [--src PATH]``

Each run starts a new interpreter with ``python -X importtime -c "import dpkit"``
and reads its report: the module's cumulative import time (the figure the
floor of issue 27 bounds, 0.5 s), the process's wall time (interpreter
start-up included, for reference) and every module's cumulative time. Prints
the median total and the ten modules with the largest median cumulative time.
``--src`` measures another source tree (e.g. an export of an older commit:
``git archive <commit> src | tar -x -C /tmp/old`` then ``--src /tmp/old/src``).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict

FLOOR_SECONDS = 0.5
_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)$")


def one_run(module: str, src: str | None) -> tuple[float, float, dict[str, float]]:
    """(cumulative seconds of ``module``, wall seconds, {module: cumulative seconds})."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    wall = time.perf_counter() - start
    cumulative: dict[str, float] = {}
    for line in out.stderr.splitlines():
        match = _LINE.match(line)
        if match:
            cumulative[match.group(4)] = int(match.group(2)) / 1e6
    return cumulative[module], wall, cumulative


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--module", default="dpkit")
    parser.add_argument("--src", default=None, help="a source tree to put first on sys.path")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)

    totals, walls = [], []
    per_module: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.runs):
        total, wall, cumulative = one_run(args.module, args.src)
        totals.append(total)
        walls.append(wall)
        for name, seconds in cumulative.items():
            per_module[name].append(seconds)

    median = statistics.median(totals)
    print(f"import {args.module}: {args.runs} fresh interpreters (python -X importtime)")
    print(
        f"  median cumulative import time: {median:.3f} s (min {min(totals):.3f}, max {max(totals):.3f})"
    )
    print(f"  median wall time, start-up included: {statistics.median(walls):.3f} s")
    print(f"  top {args.top} modules by median cumulative time:")
    ranked = sorted(per_module.items(), key=lambda kv: -statistics.median(kv[1]))
    for name, seconds in ranked[: args.top]:
        print(f"    {statistics.median(seconds):8.3f} s  {name}")
    if args.module == "dpkit":
        verdict = "within" if median <= FLOOR_SECONDS else "ABOVE"
        print(f"  {verdict} the {FLOOR_SECONDS} s floor")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
