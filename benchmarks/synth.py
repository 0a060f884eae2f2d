"""Benchmark of DP synthetic data (issue 30): two-way TV error and time, dpkit against peers.

    .venv/bin/python benchmarks/synth.py                     # full run
    .venv/bin/python benchmarks/synth.py --reps 1 --eps 1    # a smoke run

Datasets (read from ``--data-dir``, default ``/work/shared/data``; never copied):

* ``california_housing.csv`` (20,640 rows, 9 numeric columns), each column cut
  into 16 equal-width bins over DECLARED bounds (public, written below from the
  dataset's documented ranges, not computed from the data; values beyond them
  go to the end bins).
* ``titanic.csv`` (891 rows): Survived, Pclass, Sex, SibSp, Parch, Embarked
  by declared domains, Age and Fare by declared bounds (16 bins).

For each ε in ``--eps`` (default 0.3, 1, 3) at δ = 10⁻⁹, ρ is the largest
zCDP ρ whose CKS conversion fits (ε, δ) (:func:`dpkit.accounting.largest_rho`),
and every method spends that ρ: dpkit's MST and AIM through
``Session.synthesize``; OpenDP 0.16's ``dp.mbi.MST()`` and
``dp.mbi.AIM(queries=2)`` (a ρ-zCDP compositor, one contribution per row:
the same add/remove-one-row guarantee) in ``--opendp-python`` (see
``benchmarks/requirements-synth.txt``); SmartNoise synth's ``mst`` and ``aim``
in ``--smartnoise-python`` (``requirements-snsynth.txt``; it takes (ε, δ) and
converts to ρ itself). Peers run as subprocesses (``benchmarks/_synth_peers.py``)
with a per-run timeout ``--peer-timeout``; a timeout is reported as such.
Every method gets the same declared cells: OpenDP its keys and cuts;
SmartNoise a transformer fitted on every declared code (left to itself, its
preprocessor reads the categories off the data, which no DP guarantee
covers, and drops the empty cells for free).

Ablations (``--methods``): ``dpkit-mst-nomerge`` keeps every cell after
MST's one-way step (no merge of rare cells, :mod:`dpkit.synth.compression`);
``dpkit-aim-merge`` merges them in AIM too; ``dpkit-aim-halfoneway`` gives
AIM's one-way marginals half of ρ (OpenDP's split) instead of the paper's
round share; ``dpkit-aim-halfoneway-merge`` both. Runs in pieces: ``--out`` per piece,
then ``--from-json A.json B.json ... --out FILE`` writes one table.

Error: the average and the maximum two-way total-variation distance over all
column pairs (:func:`dpkit.synth.evaluate`, not DP: the benchmark reads the real
table) between the real table and a synthetic table of the same size, both
coded by the same public bins; ``--reps`` repetitions, mean ± sd. Seconds: the
wall time of the release (fit and sampling included). Results: ``--out``
(Markdown table, and the same as JSON next to it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import subprocess
import tempfile
import time
import warnings
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpkit.accounting import largest_rho
from dpkit.errors import PrivacyWarning
from dpkit.synth import aim, compression, evaluate
from dpkit.tables import Session

ROOT = Path(__file__).resolve().parent.parent
DELTA = 1e-9
BINS = 16

#: Declared (public) bounds of California housing's columns: the documented ranges of the 1990
#: census block groups (income in $10k capped at 15, age capped at 52, value in $100k capped at 5,
#: the state's latitude/longitude box) and, for the heavy-tailed ratios and population, a range
#: covering the bulk (the rest clamps into the end bin).
CALIFORNIA: dict[str, tuple[float, float]] = {
    "MedInc": (0.0, 15.0001),
    "HouseAge": (0.0, 52.0001),
    "AveRooms": (0.0, 12.0),
    "AveBedrms": (0.0, 3.0),
    "Population": (0.0, 6000.0),
    "AveOccup": (0.0, 6.0),
    "Latitude": (32.0, 42.5),
    "Longitude": (-124.5, -114.0),
    "MedHouseVal": (0.0, 5.00002),
}

#: Titanic: declared domains (categories) and bounds (numbers) of the documented columns.
TITANIC: dict[str, Any] = {
    "Survived": [0, 1],
    "Pclass": [1, 2, 3],
    "Sex": ["male", "female"],
    "Age": (0.0, 80.0001),
    "SibSp": list(range(9)),
    "Parch": list(range(7)),
    "Fare": (0.0, 520.0),
    "Embarked": ["C", "Q", "S"],
}

DATASETS = {
    "california": ("california_housing.csv", CALIFORNIA),
    "titanic": ("titanic.csv", TITANIC),
}


def _edges(bounds: tuple[float, float]) -> np.ndarray:
    return np.linspace(bounds[0], bounds[1], BINS + 1)


def _types(spec: dict[str, Any]) -> dict[str, str]:
    out = {}
    for c, v in spec.items():
        if isinstance(v, tuple):
            out[c] = "DOUBLE"
        else:
            out[c] = "VARCHAR" if isinstance(v[0], str) else "BIGINT"
    return out


def codes(frame: pd.DataFrame, spec: dict[str, Any], side: str = "right") -> pd.DataFrame:
    """Every column as its public cell code (the missing cell last); ``side``: the bins' closed end.

    ``side="right"``: bins ``[a, b)`` (dpkit's and our SmartNoise coding); ``"left"``: ``(a, b]``
    (OpenDP's left-open cuts), so each method is scored against the real table binned as it
    binned it.
    """
    out = {}
    for c, v in spec.items():
        if isinstance(v, tuple):
            e = _edges(v)
            x = pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=np.float64)
            code = np.clip(np.searchsorted(e[1:-1], x, side=side), 0, BINS - 1)  # type: ignore[call-overload]
            out[c] = np.where(np.isfinite(x), code, BINS)
        else:
            index = {str(k): i for i, k in enumerate(v)}
            out[c] = np.array([index.get(_key(x), len(v)) for x in frame[c]])
    return pd.DataFrame(out)


def _key(x: Any) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "<missing>"
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def _dpkit(path: Path, spec: dict[str, Any], method: str, eps: float, rows: int, seed: int):
    schema = {
        "columns": {
            c: ({"bounds": list(v)} if isinstance(v, tuple) else {"domain": list(v)})
            for c, v in spec.items()
        }
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        header = pd.read_csv(path, nrows=0).columns  # the other columns: declared text, unused
        s = Session.from_csv(
            path,
            types={**dict.fromkeys(header, "VARCHAR"), **_types(spec)},
            schema=schema,
            epsilon=100.0,
            delta=1e-6,
            accountant="zcdp",
            materialize=True,
        )
        start = time.perf_counter()
        result = s.synthesize(
            method,
            rows=rows,
            epsilon=eps,
            delta=DELTA,
            columns=list(spec),
            bins=BINS,
            rng=np.random.default_rng(seed),
        )
    return result.table, time.perf_counter() - start, "dpkit"


@contextlib.contextmanager
def _ablated(variant: list[str]) -> Iterator[None]:
    """dpkit with one of its choices changed, for the ablation rows (``dpkit-mst-nomerge``, ...).

    ``nomerge``: no rare cells merged after the one-way step (every cell kept;
    MST merges by default); ``merge``: AIM merges them too
    (:data:`dpkit.synth.aim.MERGE_RARE_CELLS`); ``halfoneway``: AIM's one-way
    marginals get half of ρ (OpenDP's split) instead of the paper's round share
    (:data:`dpkit.synth.aim.ONE_WAY_SHARE`).
    """
    saved = (compression.SUPPORT_SIGMAS, aim.ONE_WAY_SHARE, aim.MERGE_RARE_CELLS)
    unknown = set(variant) - {"nomerge", "merge", "halfoneway"}
    if unknown:
        raise SystemExit(f"unknown dpkit variant(s): {sorted(unknown)}")
    if "nomerge" in variant:
        compression.SUPPORT_SIGMAS = -math.inf
    if "merge" in variant:
        aim.MERGE_RARE_CELLS = True
    if "halfoneway" in variant:
        aim.ONE_WAY_SHARE = Fraction(1, 2)
    try:
        yield
    finally:
        compression.SUPPORT_SIGMAS, aim.ONE_WAY_SHARE, aim.MERGE_RARE_CELLS = saved


def _peer(
    python: Path,
    lib: str,
    path: Path,
    spec: dict[str, Any],
    method: str,
    eps: float,
    seed: int,
    timeout: float,
) -> tuple[pd.DataFrame | None, float, str]:
    columns = {
        c: ({"cuts": [float(x) for x in _edges(v)[1:-1]]} if isinstance(v, tuple) else {"keys": v})
        for c, v in spec.items()
    }
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "synth.csv"
        job = {
            "lib": lib,
            "method": method,
            "path": str(path),
            "columns": columns,
            "rho": float(largest_rho(eps, DELTA)),
            "epsilon": eps,
            "delta": DELTA,
            "seed": seed,
            "out": str(out),
        }
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(job), encoding="utf-8")
        try:
            done = subprocess.run(
                [str(python), str(ROOT / "benchmarks" / "_synth_peers.py"), str(spec_path)],
                capture_output=True,
                text=True,
                check=False,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return None, timeout, f"timeout after {timeout:g} s"
        if done.returncode != 0:
            return (
                None,
                float("nan"),
                "failed: " + " / ".join(done.stderr.strip().splitlines()[-3:])[-400:],
            )
        report = json.loads(done.stdout.strip().splitlines()[-1])
        return pd.read_csv(out), float(report["seconds"]), f"{lib} {report['version']}"


def _stats(values: list[float], digits: int = 4) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/work/shared/data"))
    parser.add_argument("--eps", type=float, nargs="+", default=[0.3, 1.0, 3.0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    parser.add_argument(
        "--methods",
        nargs="+",
        default=[
            "dpkit-mst",
            "dpkit-aim",
            "opendp-mst",
            "opendp-aim",
            "smartnoise-mst",
            "smartnoise-aim",
        ],
    )
    parser.add_argument("--peer-timeout", type=float, default=600.0)
    parser.add_argument(
        "--opendp-python", type=Path, default=ROOT / ".venv-bench-synth" / "bin" / "python"
    )
    parser.add_argument(
        "--smartnoise-python", type=Path, default=ROOT / ".venv-bench-snsynth" / "bin" / "python"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "synth.md")
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        default=None,
        help="write --out from the JSON of earlier runs (run in pieces) instead of running",
    )
    args = parser.parse_args()
    if args.from_json:
        pieces = [json.loads(p.read_text(encoding="utf-8")) for p in args.from_json]
        _write(args, [row for piece in pieces for row in piece])
        return

    rows_out: list[dict[str, Any]] = []
    for name in args.datasets:
        file, spec = DATASETS[name]
        path = args.data_dir / file
        real = pd.read_csv(path, usecols=list(spec))[list(spec)]
        for eps in args.eps:
            for label in args.methods:
                lib, method, *variant = label.split("-")
                means: list[float] = []
                maxes: list[float] = []
                secs: list[float] = []
                note = ""
                for rep in range(args.reps):
                    seed = 1000 * rep + 17
                    if lib == "dpkit":
                        with _ablated(variant):
                            synth, sec, note = _dpkit(path, spec, method, eps, len(real), seed)
                        side = "right"
                    else:
                        python = args.opendp_python if lib == "opendp" else args.smartnoise_python
                        if not python.exists():
                            note = f"not run: no {python}"
                            break
                        synth, sec, note = _peer(
                            python, lib, path, spec, method, eps, seed, args.peer_timeout
                        )
                        side = "left" if lib == "opendp" else "right"
                        if synth is None:
                            break
                    real_codes = codes(real, spec, side)
                    synth_codes = synth if lib == "smartnoise" else codes(synth, spec, side)
                    ev = evaluate(real_codes, synth_codes[list(spec)], list(spec))
                    means.append(ev.mean)
                    maxes.append(ev.max)
                    secs.append(sec)
                row = {
                    "dataset": name,
                    "eps": eps,
                    "rho": float(largest_rho(eps, DELTA)),
                    "method": label,
                    "tv_mean": means,
                    "tv_max": maxes,
                    "seconds": secs,
                    "note": note,
                }
                print(json.dumps(row), flush=True)
                rows_out.append(row)
    _write(args, rows_out)


def _write(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    lines = [
        "# DP synthetic data: two-way TV error (issue 30)",
        "",
        f"`benchmarks/synth.py --reps {args.reps} --eps {' '.join(f'{e:g}' for e in args.eps)}`"
        f" (peer timeout {args.peer_timeout:g} s), δ = 1e-9, every method at the same ρ (zCDP).",
        "TV: two-way total-variation distance between the real table and a synthetic table of the",
        "same size, averaged (mean) and maximised (max) over all column pairs; mean ± sd over reps.",
        "",
        "| dataset | ε | ρ | method | TV mean | TV max | seconds | note |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['eps']:g} | {r['rho']:.4g} | {r['method']} | "
            f"{_stats(r['tv_mean'])} | {_stats(r['tv_max'])} | "
            f"{_stats(r['seconds'], 1)} | {r['note']} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
