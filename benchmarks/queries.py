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
4. 100 mean queries (issue 29), one batch at a total (ε, δ) = (1, 10⁻⁶), on
   ``--rows`` generated rows: RMSE per query of dpkit today (basic composition,
   Laplace, ε = 0.01 each), dpkit's sessions with ``accountant="zcdp" | "rdp" |
   "pld"`` and Gaussian/auto noise at the largest per-query ε that
   ``session.afford`` admits 100 times, OpenDP (zCDP compositor) and Tumult
   Analytics (ρ-zCDP session; its own ``.venv-bench-tumult``, see
   ``benchmarks/requirements-tumult.txt``). Run it alone with ``--means-only``
   (merged into ``--out``, the other sections kept).
5. Per-person bounding (issue 34): count, sum and grouped mean with
   ``privacy_unit`` and ``max_contributions=5`` at 10⁶, 10⁷ and 10⁸ rows (Parquet
   written into ``--bounding-dir``, default a temporary directory), time and
   RSS against a plain GROUP BY; see ``benchmarks/_bounding.py``. Run it with
   ``--bounding`` (alone, merged into ``--out`` like ``--means-only``).
6. Seven queries against five peers (issue 33): median, grouped and plain
   means, counts (one bounded per person) and a sum on one table of persons,
   ε = 1 each, RMSE over ``--people-reps`` releases and time per release for
   dpkit, OpenDP, Tumult Analytics, SmartNoise SQL, PipelineDP and PyDP, each
   in its own environment; see ``benchmarks/_people.py``. Run it with
   ``--people`` (alone; writes ``--people-out`` and the JSON next to it).

Data is generated (seeded) in memory or read from ``--babynames``; nothing is
written into the repository except the small summary ``--out`` (JSON, and the
same tables as Markdown next to it).
"""

from __future__ import annotations

import argparse
import json
import math
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


# --------------------------------------------------------------------------- 4. 100 means

MEANS = 100  # questions in the batch
TOTAL = (1.0, 1e-6)  # the batch's total (ε, δ)
GROUPS = 200  # g is uniform on 0..199; question k is the mean of x over k <= g < k + 100
#: dpkit's session settings: today's (basic, Laplace) and the accountants that compose ρ or better
DPKIT_SETTINGS = [
    ("basic", "laplace"),
    ("zcdp", "gaussian"),
    ("rdp", "gaussian"),
    ("pld", "gaussian"),
    ("pld", "auto"),
    ("pld", "laplace"),
]


def generate_means(rows: int, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """x as in :func:`generate` (a few values outside the public bounds) and g on 0..199."""
    rng = np.random.default_rng(seed)
    x = np.round(np.clip(rng.normal(50.0, 15.0, rows), -20, 140), 3)
    return x, rng.integers(0, GROUPS, rows)


def mean_truths(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 100 exact answers (NumPy, x clipped to the bounds) and the rows each one averages."""
    sums = np.bincount(g, weights=np.clip(x, *BOUNDS), minlength=GROUPS)
    counts = np.bincount(g, minlength=GROUPS).astype(float)
    s = np.array([sums[k : k + MEANS].sum() for k in range(MEANS)])
    n = np.array([counts[k : k + MEANS].sum() for k in range(MEANS)])
    return s / n, n


def _largest_epsilon(session: Any, spec_of: Callable[[float], Any]) -> float:
    """The largest per-query ε (to 1e-6 relative) at which the session affords all 100 queries."""
    lo, hi = 0.0, TOTAL[0]
    while hi - lo > 1e-6 * hi:
        mid = (lo + hi) / 2
        if session.afford(spec_of(mid), limit=MEANS) >= MEANS:
            lo = mid
        else:
            hi = mid
    return lo


def _sum_noise_sd(release: Any) -> tuple[float, float]:
    """Standard deviations of the noise on the (centred) sum and on the count, from the release."""
    details = release.details
    if "noise" in details:  # Gaussian steps state their σ
        return details["noise"]["sum"]["sigma"], details["noise"]["count"]["sigma"]
    radius = (BOUNDS[1] - BOUNDS[0]) / 2
    if details.get("estimator") == "two-sided sums":
        # Laplace of scale b on A = Σ(x - lo) and on B = Σ(hi - x): the centred sum
        # (A - B)/2 and the count (A + B)/(2 r) carry uncorrelated noise of these sds
        pair_sd = math.sqrt(2) * details["scale"]
        return pair_sd / math.sqrt(2), pair_sd / (math.sqrt(2) * radius)
    # Laplace of scale radius / ε on the sum centred at the middle of the bounds
    split = details["epsilon_split"]
    return math.sqrt(2) * radius / split["sum"], math.sqrt(2) / split["count"]


def dpkit_means(x: np.ndarray, g: np.ndarray, reps: int) -> list[dict[str, Any]]:
    """dpkit: 100 means per repetition in a fresh session of total (1, 1e-6), for each setting."""
    import warnings

    import pyarrow as pa

    from dpkit.errors import PrivacyWarning
    from dpkit.tables import QuerySpec
    from dpkit.tables.engines.base import Condition

    truth, _ = mean_truths(x, g)
    con = connect()
    con.register("generated", pa.table({"x": x, "g": g}))
    con.execute("CREATE TABLE means AS SELECT * FROM generated")
    con.unregister("generated")
    types = {"x": "DOUBLE", "g": "BIGINT"}
    windows = [[Condition("g", ">=", k), Condition("g", "<", k + MEANS)] for k in range(MEANS)]
    out: list[dict[str, Any]] = []
    for rule, noise in DPKIT_SETTINGS:
        label = f"dpkit, accountant={rule!r}, noise={noise!r}"
        print(f"      {label} ...", file=sys.stderr)

        def open_session(rep: int, rule: str = rule, noise: str = noise) -> Any:
            with warnings.catch_warnings():  # pld: valid here, the 100 queries are fixed in advance
                warnings.simplefilter("ignore", PrivacyWarning)
                kwargs: dict[str, Any] = {}
                if rule != "basic":  # basic/laplace: today's Session, unchanged arguments
                    kwargs = {"accountant": rule, "noise": noise}
                return Session.from_duckdb(
                    "means", connection=con, types=types, epsilon=TOTAL[0], delta=TOTAL[1],
                    rng=1000 * rep + len(out), **kwargs,
                )  # fmt: skip

        start = time.perf_counter()
        if rule == "basic":
            epsilon = TOTAL[0] / MEANS
        else:
            epsilon = _largest_epsilon(
                open_session(0),
                lambda e: QuerySpec("mean", "x", epsilon=e, bounds=BOUNDS, where=windows[0]),
            )
        search_s = time.perf_counter() - start
        errors: list[float] = []
        start = time.perf_counter()
        for rep in range(reps):
            session = open_session(rep)
            for k in range(MEANS):
                release = session.mean("x", epsilon=epsilon, bounds=BOUNDS, where=windows[k])
                errors.append(release.value - truth[k])
        answer_s = (time.perf_counter() - start) / (reps * MEANS)
        sum_sd, count_sd = _sum_noise_sd(release)
        out.append(
            {
                "setting": label,
                "epsilon": epsilon,
                "rho": release.privacy.rho,
                "sum_sd": sum_sd,
                "count_sd": count_sd,
                "centred": True,
                "rmse": float(np.sqrt(np.mean(np.square(errors)))),
                "answers": len(errors),
                "spent": str(session.spent),
                "search_s": search_s,
                "query_s": answer_s,
            }
        )
    return out


def predicted_rmse(row: dict[str, Any], truth: np.ndarray, n: np.ndarray) -> float:
    """RMSE of (S + Z_s) / (N + Z_c) by the delta method, from the stated noise of sum and count."""
    shift = truth - (sum(BOUNDS) / 2 if row["centred"] else 0.0)
    var = (row["sum_sd"] ** 2 + (shift * row["count_sd"]) ** 2) / n**2
    return float(np.sqrt(var.mean()))


def peers_means(
    x: np.ndarray, g: np.ndarray, reps: int, answered: dict[str, int], pythons: dict[str, Path]
) -> list[dict[str, Any]]:
    """OpenDP and Tumult, each in its own isolated environment, on the same data and questions."""
    from dpkit.accounting.composition import largest_rho

    truth, _ = mean_truths(x, g)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "x.npy", x)
        np.save(Path(tmp) / "g.npy", g)
        for lib, python in pythons.items():
            label = {"opendp": "OpenDP", "tumult": "Tumult Analytics"}[lib]
            row: dict[str, Any] = {"setting": label}
            if not python.exists():
                row["not_run"] = f"{python} not found (see benchmarks/requirements-*.txt)"
                out.append(row)
                continue
            print(f"      {label} ...", file=sys.stderr)
            spec = {
                "experiment": "means",
                "lib": lib,
                "x": str(Path(tmp) / "x.npy"),
                "g": str(Path(tmp) / "g.npy"),
                "bounds": list(BOUNDS),
                "queries": MEANS,
                "answered": answered[lib],
                "window": MEANS,
                "total": list(TOTAL),
                "rho": float(largest_rho(*TOTAL)),  # Tumult has no (ε, δ) → ρ conversion of its own
                "reps": reps,
            }
            spec_path = Path(tmp) / f"{lib}.json"
            spec_path.write_text(json.dumps(spec), encoding="utf-8")
            done = subprocess.run(
                [str(python), str(ROOT / "benchmarks" / "_peers.py"), str(spec_path)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                out.append({**row, "not_run": "failed: " + done.stderr[-1500:]})
                continue
            peer = json.loads(done.stdout.strip().splitlines()[-1])
            errors = [v - truth[k] for k, v in peer.pop("answers")]
            row.update(peer)
            row["rmse"] = float(np.sqrt(np.mean(np.square(errors))))
            row["answers"] = len(errors)
            out.append(row)
    return out


def means_section(
    rows: int, reps: int, answered: dict[str, int], pythons: dict[str, Path]
) -> dict[str, Any]:
    x, g = generate_means(rows)
    truth, n = mean_truths(x, g)
    result: dict[str, Any] = {
        "rows": rows,
        "reps": reps,
        "rows_per_query": [float(n.min()), float(n.max())],
        "dpkit": dpkit_means(x, g, reps),
        "peers": peers_means(x, g, reps, answered, pythons),
    }
    for row in result["dpkit"] + result["peers"]:
        if "sum_sd" in row:
            row["predicted_rmse"] = predicted_rmse(row, truth, n)
    return result


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


MEANS_HEADING = "## 100 mean queries at a total (ε, δ) = (1, 10⁻⁶)"


def means_report(means: dict[str, Any]) -> str:
    lo, hi = means["rows_per_query"]
    lines = [
        MEANS_HEADING,
        "",
        f"`benchmarks/queries.py --means-only`: {means['rows']:,} generated rows (x ~ N(50, 15²) "
        f"rounded, a few outside the public bounds {BOUNDS}; g uniform on 0..{GROUPS - 1}). "
        f"Question k = 0..{MEANS - 1}: the mean of x over the rows with k ≤ g < k + {MEANS} "
        f"({lo:,.0f}–{hi:,.0f} rows each, overlapping; n is not public). The whole batch of "
        f"{MEANS} is one guarantee (1, 10⁻⁶) under add/remove one row. RMSE against NumPy's exact "
        'means over all answers; "predicted" is the delta-method RMSE of noisy sum / noisy count '
        "from the noise each library states. σ: standard deviation of the noise on the sum "
        "(centred at the middle of the bounds where the library centres) and on the count.",
        "",
        "| setting | per-query ε | per-query ρ | σ sum | σ count | RMSE per query | predicted RMSE "
        "| answers | time per query (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in means["dpkit"] + means["peers"]:
        if "not_run" in row:
            lines.append(f"| {row['setting']} | not run: {row['not_run'][:300]} | | | | | | | |")
            continue
        eps = row.get("epsilon")
        rho = row.get("rho")
        lines.append(
            f"| {row['setting']} | {'—' if eps is None else f'{eps:.5f}'} "
            f"| {'—' if rho is None else f'{rho:.4e}'} | {row['sum_sd']:,.0f} "
            f"| {row['count_sd']:,.1f} | {row['rmse']:.3e} | {row['predicted_rmse']:.3e} "
            f"| {row['answers']:,} | {row['query_s']:.3f} |"
        )
    notes = [
        "",
        f"dpkit: {means['reps']} fresh sessions of {MEANS} answers per setting; the per-query ε is "
        "the largest with `session.afford(spec) >= 100` (bisection); basic composition gets "
        "1/100 each. The budget spent by the last session is in the JSON (`spent`).",
    ]
    for row in means["peers"]:
        if "not_run" in row:
            continue
        notes.append(
            f"{row['setting']}: budget split evenly over {MEANS} queries, total ρ = "
            f"{row['rho_total']:.6f}; it answered the first {row['answers'] // means['reps']} of the "
            f"{MEANS} questions per session ({means['reps']} sessions) — all {MEANS} questions have "
            f"the same size and noise, so its RMSE estimates the batch's; {row['mechanism']}; "
            f"versions {row['versions']}."
        )
    return "\n".join(lines + notes)


def _write_means(out: Path, means: dict[str, Any]) -> str:
    """Merge the means section into the JSON and the Markdown, keeping every other section."""
    return _write_section(out, "means", means, MEANS_HEADING, means_report(means))


def _write_section(out: Path, key: str, data: dict[str, Any], heading: str, section: str) -> str:
    """Merge one section into the JSON (under ``key``) and the Markdown, keeping the others."""
    results = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    results[key] = data
    out.write_text(json.dumps(results, indent=2, default=float), encoding="utf-8")
    md = out.with_suffix(".md")
    text = md.read_text(encoding="utf-8") if md.exists() else ""
    if heading in text:
        before, _, after = text.partition(heading)
        rest = after.find("\n## ")
        text = before + section + ("\n" + after[rest:] if rest >= 0 else "\n")
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section + "\n"
    md.write_text(text, encoding="utf-8")
    return section


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
    parser.add_argument(
        "--means-only",
        action="store_true",
        help="run only section 4 (100 means at (1, 1e-6)); merge it into --out, keep the rest",
    )
    parser.add_argument("--means-reps", type=int, default=3, help="sessions of 100 answers")
    parser.add_argument(
        "--opendp-queries", type=int, default=10, help="of the 100 questions OpenDP answers"
    )
    parser.add_argument(
        "--tumult-queries", type=int, default=2, help="of the 100 questions Tumult answers"
    )
    parser.add_argument(
        "--tumult-python", type=Path, default=ROOT / ".venv-bench-tumult" / "bin" / "python"
    )
    parser.add_argument(
        "--bounding",
        action="store_true",
        help="run only section 5 (per-person bounding); merge it into --out, keep the rest",
    )
    parser.add_argument(
        "--bounding-rows", default="1000000,10000000,100000000", help="comma-separated sizes"
    )
    parser.add_argument(
        "--bounding-dir", type=Path, default=None, help="where the Parquet goes (a temp dir in it)"
    )
    parser.add_argument(
        "--bounding-one-part-max",
        type=int,
        default=10_000_000,
        help="largest table on which the one-window plan (as before issue 34) also runs",
    )
    parser.add_argument(
        "--bounding-engines", default="duckdb,spark", help="comma-separated: duckdb, spark"
    )
    parser.add_argument(
        "--bounding-reps", type=int, default=1, help="runs of each private query (median time)"
    )
    parser.add_argument(
        "--people",
        action="store_true",
        help="run only section 6 (issue 33: seven queries against five peers); writes --people-out",
    )
    parser.add_argument("--people-rows", type=int, default=1_000_000)
    parser.add_argument(
        "--people-reps", type=int, default=50, help="releases per library and query"
    )
    parser.add_argument(
        "--people-dpkit-reps",
        type=int,
        default=None,
        help="dpkit's releases per query (default --people-reps): more pin its RMSE and CI coverage",
    )
    parser.add_argument(
        "--people-queries",
        default=None,
        help="comma-separated: run only these of the seven queries (merge with --people-merge)",
    )
    parser.add_argument(
        "--people-times",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSON",
        help="with --people-merge: take each time per release from these short runs instead "
        "(the median over them; run them back to back so every library meets the same load)",
    )
    parser.add_argument(
        "--people-pool",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSON",
        help="with --people-merge: add these runs' releases to the merged rows of the same "
        "library and query (a slow peer run in chunks), instead of replacing them",
    )
    parser.add_argument(
        "--people-merge",
        type=Path,
        nargs="+",
        default=None,
        help="write one report from the JSON of several --people runs (same rows), run nothing",
    )
    parser.add_argument(
        "--people-libs",
        default="dpkit,opendp,tumult,smartnoise,pipelinedp,pydp",
        help="comma-separated: dpkit, opendp, tumult, smartnoise, pipelinedp, pydp",
    )
    parser.add_argument(
        "--people-dir", type=Path, default=None, help="where the Parquet goes (a temp dir in it)"
    )
    parser.add_argument(
        "--people-venvs",
        type=Path,
        default=ROOT,
        help="the folder holding .venv-bench, .venv-bench-tumult and .venv-bench-google",
    )
    parser.add_argument(
        "--people-out",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "queries_people.md",
        help="the Markdown report (the JSON goes next to it)",
    )
    parser.add_argument("--quick", action="store_true", help="1 M rows, 20 reps (a smoke test)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "queries.json"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.error_rows, args.reps, args.time_reps = 1_000_000, 20_000, 20, 3
    if args.quick:  # section 4 on 10⁵ rows, one session each
        args.means_rows, args.means_reps = 100_000, 1
        args.opendp_queries, args.tumult_queries = min(args.opendp_queries, 2), 1
    else:
        args.means_rows = args.rows
    pythons = {"opendp": args.peers_python, "tumult": args.tumult_python}
    if args.skip_peers:
        pythons = {lib: Path("/nonexistent") for lib in pythons}
    answered = {"opendp": args.opendp_queries, "tumult": args.tumult_queries}
    if args.people or args.people_merge:
        import _people

        if args.people_merge:
            data = _people.merge([json.loads(p.read_text("utf-8")) for p in args.people_merge])
            if args.people_pool:
                chunks = [json.loads(p.read_text("utf-8")) for p in args.people_pool]
                data = _people.pool(data, chunks)
            if args.people_times:
                timed = [json.loads(p.read_text("utf-8")) for p in args.people_times]
                data = _people.retime(data, timed)
        else:
            libs = args.people_libs.split(",")
            print(f"[6] people: {args.people_rows:,} rows, {libs} ...", file=sys.stderr)
            data = _people.run(
                args.people_rows,
                args.people_reps,
                libs,
                args.people_venvs,
                args.people_dir,
                args.people_dpkit_reps,
                args.people_queries.split(",") if args.people_queries else None,
            )
        # a merge may hold a slow peer's few releases: the report marks those ratios instead
        smoke = data["rows"] < 1_000_000 or (data["reps"] < 50 and not args.people_merge)
        text = _people.report(data, smoke)
        args.people_out.parent.mkdir(parents=True, exist_ok=True)
        args.people_out.with_suffix(".json").write_text(
            json.dumps(data, indent=2, default=float), encoding="utf-8"
        )
        args.people_out.write_text(text + "\n", encoding="utf-8")
        print(text)
        return
    if args.bounding:
        import _bounding

        sizes = [int(float(v)) for v in args.bounding_rows.split(",")]
        print(f"[5] per-person bounding at {sizes} rows ...", file=sys.stderr)
        engines = tuple(args.bounding_engines.split(","))
        data = _bounding.run(
            sizes, args.bounding_dir, args.bounding_one_part_max, engines, args.bounding_reps
        )
        if args.out.exists():  # keep the rows of engines this run did not measure
            data = _bounding.merged(json.loads(args.out.read_text()).get("bounding"), data)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        print(_write_section(args.out, "bounding", data, _bounding.HEADING, _bounding.report(data)))
        return
    if args.means_only:
        print(f"[4/4] 100 means on {args.means_rows:,} rows ...", file=sys.stderr)
        means = means_section(args.means_rows, args.means_reps, answered, pythons)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        print(_write_means(args.out, means))
        return
    x, g = generate(args.rows)
    results: dict[str, Any] = {
        "rows": args.rows,
        "error_rows": args.error_rows,
        "reps": args.reps,
        "time_reps": args.time_reps,
    }
    print(f"[1/4] DuckDB timings on {args.rows:,} rows ...", file=sys.stderr)
    results["duckdb"] = duckdb_section(x, g, args.time_reps)
    print("[2/4] errors and times against diffprivlib and OpenDP ...", file=sys.stderr)
    results["peers"] = peers_section(
        x,
        args.error_rows,
        args.reps,
        min(args.time_reps, 3),
        Path("/nonexistent") if args.skip_peers else args.peers_python,
    )
    print("[3/4] Spark on babynames ...", file=sys.stderr)
    results["spark"] = (
        "skipped" if args.skip_spark else spark_section(args.babynames, min(args.time_reps, 3))
    )
    del x, g
    print(f"[4/4] 100 means on {args.means_rows:,} rows ...", file=sys.stderr)
    means = means_section(args.means_rows, args.means_reps, answered, pythons)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=float), encoding="utf-8")
    text = report(results)
    args.out.with_suffix(".md").write_text(text + "\n", encoding="utf-8")
    print(text + "\n\n" + _write_means(args.out, means))


if __name__ == "__main__":
    main()
