"""Session.histogram and Session.histogram2d against a plain DuckDB GROUP BY, same run.

Issue 14's floor: a private histogram over 10 million rows with 4,096 equal
bins within 1.3× of a plain ``GROUP BY`` of the bin index. The table is made
in DuckDB (``range`` plus a hash-based uniform value, no download), the
session is ``Session.from_duckdb`` on it, and every timing is the best of
``--repeats`` runs (the noise and the budget included for dpkit). The same for
a 2-D histogram with 256 × 256 cells against a ``GROUP BY`` of both indices.
Usage::

    python benchmarks/histograms_session_speed.py [--rows 10000000] [--bins 4096]
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable

import duckdb

from dpkit import Session


def best(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--bins", type=int, default=4096)
    parser.add_argument("--cells", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # the seeded session warns that it is for tests
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT (hash(i) % 1000000) / 10000.0 AS x, "
        "(hash(i + 7) % 1000000) / 10000.0 AS y FROM range(?) r(i)",
        [args.rows],
    )
    n, w = args.bins, 100.0 / args.bins
    plain = (
        f"SELECT least(greatest(CAST(floor(x / {w!r}) AS BIGINT), 0), {n - 1}) AS b, count(*) "
        "FROM t GROUP BY b"
    )
    m, v = args.cells, 100.0 / args.cells
    plain_2d = (
        f"SELECT least(greatest(CAST(floor(x / {v!r}) AS BIGINT), 0), {m - 1}) AS bx, "
        f"least(greatest(CAST(floor(y / {v!r}) AS BIGINT), 0), {m - 1}) AS b_y, count(*) "
        "FROM t GROUP BY bx, b_y"
    )
    types = {"x": "DOUBLE", "y": "DOUBLE"}
    session = Session.from_duckdb("t", connection=con, types=types, epsilon=1e6, rng=1)
    rows = []
    t_plain = best(lambda: con.execute(plain).fetchnumpy(), args.repeats)
    t_dp = best(
        lambda: session.histogram("x", epsilon=1.0, bins=n, bounds=(0.0, 100.0)), args.repeats
    )
    rows.append((f"histogram, {n:,} bins", t_plain, t_dp))
    t_plain2 = best(lambda: con.execute(plain_2d).fetchnumpy(), args.repeats)
    t_dp2 = best(
        lambda: session.histogram2d(
            "x", "y", epsilon=1.0, bins=m, bounds=((0.0, 100.0), (0.0, 100.0))
        ),
        args.repeats,
    )
    rows.append((f"histogram2d (AGrid), {m} × {m} cells", t_plain2, t_dp2))
    print(f"{args.rows:,} rows, best of {args.repeats}, duckdb {duckdb.__version__}")
    print("| query | plain GROUP BY (s) | dpkit Session (s) | ratio |")
    print("|---|---|---|---|")
    for name, a, b in rows:
        print(f"| {name} | {a:.3f} | {b:.3f} | {b / a:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
