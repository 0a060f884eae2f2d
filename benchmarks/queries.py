"""Benchmark of private table queries (issue 3, "Performance"). One command measures all:

    .venv/bin/python benchmarks/queries.py            # full run (a few minutes on 2 cores)
    .venv/bin/python benchmarks/queries.py --quick    # smaller, for a smoke test

1. DuckDB, 10 M generated rows: dpkit's noisy count / sum / mean / median and a
   100-group mean, each timed against the same plain DuckDB aggregation.
2. Peers, same generated data: diffprivlib (``tools.mean``, ``tools.quantile``,
   ``tools.histogram``) and OpenDP, run in the isolated ``.venv-bench`` (see
   ``benchmarks/requirements-peers.txt``) through ``benchmarks/_peers.py``:
   median absolute error over ``--reps`` repetitions at ε = 0.1 and 1 on the
   first ``--error-rows`` rows, and time per release on all rows.
3. Spark local mode on ``us_babynames_1880_2010.csv``: sum of births by sex and
   by decade, with time, against plain Spark.

Data is generated (seeded) in memory or read from ``--babynames``; nothing is
written into the repository except the small summary ``--out`` (JSON, and the
same tables as Markdown next to it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpkit.tables import Session
from dpkit.tables import queries as Q
from dpkit.tables.engines.duckdb_engine import connect

ROOT = Path(__file__).resolve().parent.parent
BOUNDS = (0.0, 100.0)
BINS = 20
GRID = Q.QUANTILE_GRID  # dpkit's default quantile grid (public candidates), given to OpenDP too
COARSE_GRID = 10_001  # a coarser grid, also run by both dpkit and OpenDP
CLIP = "CASE WHEN x < 0.0 THEN 0.0 WHEN x > 100.0 THEN 100.0 ELSE x END"


def _median_time(fn: Callable[[], Any], reps: int) -> float:
    fn()  # warm-up (caches, first-run planning)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def generate(rows: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.round(np.clip(rng.normal(50.0, 15.0, rows), -20, 140), 3)  # a few outside the bounds
    g = rng.integers(0, 100, rows)
    return x, g


# --------------------------------------------------------------------------- 1. DuckDB


def duckdb_section(x: np.ndarray, g: np.ndarray, reps: int) -> list[dict[str, Any]]:
    import pyarrow as pa

    con = connect()
    con.register("generated", pa.table({"x": x, "g": g}))
    con.execute("CREATE TABLE bench AS SELECT * FROM generated")
    con.unregister("generated")
    types = {"x": "DOUBLE", "g": "BIGINT"}
    session = Session.from_duckdb("bench", connection=con, types=types, epsilon=1e9, rng=0)
    keys = list(range(100))
    # (name, plain SQL, the same aggregation with the clipping DP needs, dpkit)
    cases: list[tuple[str, str, str, Callable[[], Any]]] = [
        ("count", "SELECT count(*) FROM bench", "", lambda: session.count(epsilon=1.0)),
        (
            "count where x > 50",
            "SELECT count(*) FROM bench WHERE x > 50.0",
            "",
            lambda: session.count(epsilon=1.0, where={"x": (">", 50.0)}),
        ),
        (
            "bounds check only (no DP)",
            "SELECT sum(x) FROM bench",
            "SELECT count(*) FROM bench WHERE x < 0.0 OR x > 100.0",
            lambda: con.execute("SELECT count(*) FROM bench WHERE x < 0.0 OR x > 100.0").fetchall(),
        ),
        (
            "sum",
            "SELECT sum(x) FROM bench",
            f"SELECT count(*), sum({CLIP}) FROM bench",
            lambda: session.sum("x", epsilon=1.0, bounds=BOUNDS),
        ),
        (
            "mean",
            "SELECT avg(x) FROM bench",
            f"SELECT count(*), sum({CLIP}) FROM bench",
            lambda: session.mean("x", epsilon=1.0, bounds=BOUNDS),
        ),
        (
            "median",
            "SELECT median(x) FROM bench",
            "",
            lambda: session.median("x", epsilon=1.0, bounds=BOUNDS),
        ),
        (
            "histogram, 4,096 bins",
            f"SELECT CAST(floor(x / {BOUNDS[1] / 4096!r}) AS BIGINT) AS b, count(*) FROM bench GROUP BY b",
            "",
            lambda: session.histogram("x", epsilon=1.0, bounds=BOUNDS, bins=4096),
        ),
        (
            "mean by 100 groups",
            "SELECT g, avg(x) FROM bench GROUP BY g",
            f"SELECT g, count(*), sum({CLIP}) FROM bench GROUP BY g",
            lambda: session.mean("x", epsilon=1.0, bounds=BOUNDS, group_by="g", keys=keys),
        ),
    ]
    out = []
    for name, sql, clipped_sql, private in cases:
        plain = _median_time(lambda sql=sql: con.execute(sql).fetchall(), reps)
        clipped = (
            _median_time(lambda q=clipped_sql: con.execute(q).fetchall(), reps)
            if clipped_sql
            else plain
        )
        noisy = _median_time(private, reps)
        out.append(
            {
                "query": name,
                "plain_s": plain,
                "clipped_s": clipped,
                "dpkit_s": noisy,
                "ratio": noisy / plain,
                "ratio_clipped": noisy / clipped,
            }
        )
    return out


# --------------------------------------------------------------------------- 2. peers


def dpkit_errors(small: np.ndarray, epsilons: list[float], reps: int) -> dict[str, float]:
    import pandas as pd

    session = Session.from_pandas(
        pd.DataFrame({"x": small}), types={"x": "DOUBLE"}, epsilon=1e9, rng=7
    )
    truths = {
        "mean": float(np.clip(small, *BOUNDS).mean()),
        "median": float(np.median(small)),
        "histogram": np.histogram(np.clip(small, *BOUNDS), bins=BINS, range=BOUNDS)[0].astype(
            float
        ),
    }
    out = {}
    for eps in epsilons:
        errs_coarse = [
            abs(
                session.median("x", epsilon=eps, bounds=BOUNDS, grid_size=COARSE_GRID).value
                - truths["median"]
            )
            for _ in range(reps)
        ]
        out[f"dpkit@{COARSE_GRID}/median/{eps}"] = float(np.median(errs_coarse))
        for kind in ("mean", "median", "histogram"):
            errs = []
            for _ in range(reps):
                if kind == "mean":
                    value: Any = session.mean("x", epsilon=eps, bounds=BOUNDS).value
                elif kind == "median":
                    value = session.median("x", epsilon=eps, bounds=BOUNDS).value
                else:
                    value = session.histogram("x", epsilon=eps, bins=BINS, bounds=BOUNDS).value
                errs.append(float(np.abs(np.asarray(value, dtype=float) - truths[kind]).mean()))
            out[f"dpkit/{kind}/{eps}"] = float(np.median(errs))
    return out


def dpkit_times(x: np.ndarray, reps: int) -> dict[str, float]:
    import pandas as pd

    session = Session.from_pandas(pd.DataFrame({"x": x}), types={"x": "DOUBLE"}, epsilon=1e9, rng=3)
    return {
        "dpkit/mean": _median_time(lambda: session.mean("x", epsilon=1.0, bounds=BOUNDS), reps),
        "dpkit/median": _median_time(lambda: session.median("x", epsilon=1.0, bounds=BOUNDS), reps),
        "dpkit/histogram": _median_time(
            lambda: session.histogram("x", epsilon=1.0, bins=BINS, bounds=BOUNDS), reps
        ),
    }


def peers_section(
    x: np.ndarray, error_rows: int, reps: int, time_reps: int, python: Path
) -> dict[str, Any]:
    epsilons = [0.1, 1.0]
    small = x[:error_rows]
    result: dict[str, Any] = {
        "errors": dpkit_errors(small, epsilons, reps),
        "times": dpkit_times(x, time_reps),
    }
    if not python.exists():
        result["peers"] = f"skipped: {python} not found (see benchmarks/requirements-peers.txt)"
        return result
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "small.npy", small)
        np.save(Path(tmp) / "big.npy", x)
        spec = {
            "error_data": str(Path(tmp) / "small.npy"),
            "time_data": str(Path(tmp) / "big.npy"),
            "bounds": list(BOUNDS),
            "bins": BINS,
            "grid_size": GRID,
            "coarse_grid_size": COARSE_GRID,
            "epsilons": epsilons,
            "reps": reps,
            "time_reps": time_reps,
        }
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        done = subprocess.run(
            [str(python), str(ROOT / "benchmarks" / "_peers.py"), str(spec_path)],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        result["peers"] = "failed: " + done.stderr[-2000:]
        return result
    peers = json.loads(done.stdout.strip().splitlines()[-1])
    result["errors"].update(peers["errors"])
    result["times"].update(peers["times"])
    result["versions"] = peers["versions"]
    return result


# --------------------------------------------------------------------------- 3. Spark


def spark_section(path: Path, reps: int) -> list[dict[str, Any]] | str:
    if not path.exists():
        return f"skipped: {path} not found"
    try:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F
    except ImportError:
        return "skipped: PySpark is not installed"
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("dpkit-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "2g")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    schema = "year INT, name STRING, sex STRING, births INT"
    df = spark.read.csv(str(path), header=True, schema=schema).withColumn(
        "decade", (F.floor(F.col("year") / 10) * 10).cast("int")
    )
    df.cache().count()  # read the file once; both sides then aggregate from memory
    # Public bounds: one (year, name, sex) row holds at most 100,000 births.
    types = {
        "year": "INTEGER", "name": "VARCHAR", "sex": "VARCHAR", "births": "INTEGER",
        "decade": "INTEGER",
    }  # fmt: skip
    session = Session.from_spark(df, types=types, epsilon=1e9, rng=11)
    decades = list(range(1880, 2020, 10))
    cases: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (
            "sum births by sex",
            lambda: df.groupBy("sex").agg(F.sum("births")).collect(),
            lambda: session.sum(
                "births", epsilon=1.0, bounds=(0, 100_000), group_by="sex", keys=["F", "M"]
            ),
        ),
        (
            "sum births by decade",
            lambda: df.groupBy("decade").agg(F.sum("births")).collect(),
            lambda: session.sum(
                "births", epsilon=1.0, bounds=(0, 100_000), group_by="decade", keys=decades
            ),
        ),
    ]
    out: list[dict[str, Any]] = []
    for name, plain, private in cases:
        t_plain = _median_time(plain, reps)
        t_dp = _median_time(private, reps)
        release = private()
        truth = {r[0]: r[1] for r in plain()}
        rel_err = max(abs(release.value[k] - truth[k]) / truth[k] for k in release.keys)
        out.append(
            {
                "query": name,
                "plain_s": t_plain,
                "dpkit_s": t_dp,
                "ratio": t_dp / t_plain,
                "max_rel_error": rel_err,
            }
        )
    spark.stop()
    return out


# --------------------------------------------------------------------------- report


def report(results: dict[str, Any]) -> str:
    lines = [
        f"## DuckDB, {results['rows']:,} generated rows (median of {results['time_reps']} runs)",
        "",
    ]
    lines += [
        "| query | plain DuckDB (s) | plain, clipped (s) | dpkit (s) | dpkit / plain | dpkit / clipped |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results["duckdb"]:
        lines.append(
            f"| {r['query']} | {r['plain_s']:.4f} | {r['clipped_s']:.4f} | {r['dpkit_s']:.4f} "
            f"| {r['ratio']:.2f} | {r['ratio_clipped']:.2f} |"
        )
    peers = results["peers"]
    lines += [
        "",
        f"## Peers: median absolute error over {results['reps']} releases "
        f"(first {results['error_rows']:,} rows; histogram: mean over {BINS} bins; "
        f"median: OpenDP gets dpkit's {GRID:,} candidates, diffprivlib is continuous)",
        "",
    ]
    if "peers" in peers:
        lines.append(f"peers {peers['peers']}")
    lines += ["| query | ε | dpkit | diffprivlib | OpenDP |", "|---|---:|---:|---:|---:|"]
    for kind in ("mean", "median", "histogram"):
        for eps in (0.1, 1.0):
            cells = [
                peers["errors"].get(f"{lib}/{kind}/{eps}")
                for lib in ("dpkit", "diffprivlib", "opendp")
            ]
            lines.append(
                f"| {kind} | {eps} | "
                + " | ".join("—" if c is None else f"{c:.4g}" for c in cells)
                + " |"
            )
            if kind == "median":
                coarse = [
                    peers["errors"].get(f"{lib}@{COARSE_GRID}/median/{eps}")
                    for lib in ("dpkit", "opendp")
                ]
                lines.append(
                    f"| median, both on {COARSE_GRID:,} candidates | {eps} | "
                    + " | ".join("—" if c is None else f"{c:.4g}" for c in coarse[:1])
                    + " | | "
                    + ("—" if coarse[1] is None else f"{coarse[1]:.4g}")
                    + " |"
                )
    lines += ["", f"Time per release on all {results['rows']:,} rows (s):", ""]
    lines += ["| query | dpkit | diffprivlib | OpenDP |", "|---|---:|---:|---:|"]
    for kind in ("mean", "median", "histogram"):
        cells = [peers["times"].get(f"{lib}/{kind}") for lib in ("dpkit", "diffprivlib", "opendp")]
        lines.append(
            f"| {kind} | " + " | ".join("—" if c is None else f"{c:.3f}" for c in cells) + " |"
        )
    if "versions" in peers:
        lines.append(f"\nversions: {peers['versions']}")
    lines += ["", "## Spark local mode, babynames", ""]
    spark = results["spark"]
    if isinstance(spark, str):
        lines.append(spark)
    else:
        lines += [
            "| query | plain Spark (s) | dpkit (s) | ratio | max relative error |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in spark:
            lines.append(
                f"| {r['query']} | {r['plain_s']:.3f} | {r['dpkit_s']:.3f} | {r['ratio']:.2f} | {r['max_rel_error']:.2e} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--error-rows", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=200, help="releases per error estimate")
    parser.add_argument("--time-reps", type=int, default=5)
    parser.add_argument(
        "--peers-python", type=Path, default=ROOT / ".venv-bench" / "bin" / "python"
    )
    parser.add_argument(
        "--babynames",
        type=Path,
        default=ROOT.parent / "shared" / "data" / "us_babynames_1880_2010.csv",
    )
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument(
        "--skip-peers", action="store_true", help="only dpkit's own errors and times"
    )
    parser.add_argument("--quick", action="store_true", help="1 M rows, 20 reps (a smoke test)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "queries.json"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.error_rows, args.reps, args.time_reps = 1_000_000, 20_000, 20, 3
    x, g = generate(args.rows)
    results: dict[str, Any] = {
        "rows": args.rows,
        "error_rows": args.error_rows,
        "reps": args.reps,
        "time_reps": args.time_reps,
    }
    print(f"[1/3] DuckDB timings on {args.rows:,} rows ...", file=sys.stderr)
    results["duckdb"] = duckdb_section(x, g, args.time_reps)
    print("[2/3] errors and times against diffprivlib and OpenDP ...", file=sys.stderr)
    results["peers"] = peers_section(
        x,
        args.error_rows,
        args.reps,
        min(args.time_reps, 3),
        Path("/nonexistent") if args.skip_peers else args.peers_python,
    )
    print("[3/3] Spark on babynames ...", file=sys.stderr)
    results["spark"] = (
        "skipped" if args.skip_spark else spark_section(args.babynames, min(args.time_reps, 3))
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=float), encoding="utf-8")
    text = report(results)
    args.out.with_suffix(".md").write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
