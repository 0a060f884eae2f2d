"""Section 5 of ``benchmarks/queries.py`` (issue 34): per-person bounding at 10⁶–10⁸ rows.

A synthetic table of persons with 1–20 rows each (``pid``, ``region`` in 0..9,
``x`` in [0, 100)) is written as Parquet into a temporary directory (never
the repository) and loaded into a DuckDB table. dpkit's noisy count, sum and
grouped mean (10 public regions) with ``privacy_unit="pid"`` and
``max_contributions=5`` are timed against the plain DuckDB aggregation of the
same shape, with the process's RSS sampled every 10 ms: its level before the
query, the peak growth over it, and the level after (relative to before).
Plans: ``parts`` is the engine's default (``DuckDBEngine(rows_per_part=2²⁴)``:
persons split into parts by a hash of the id, run one after another; in each,
an ungrouped query keeps a person's rows by a per-person aggregate and a
grouped one by a window; memory handed back after the query); ``one part``
runs the same plan with the whole table as one part (as e3bef4d did, whose
plan was a window for every query), only up to ``--bounding-one-part-max`` rows.
Spark (``--bounding-engines spark``; local[2], 2 GB driver heap, the heap being
Spark's memory setting) reads the same Parquet for every query; the RSS
columns are then the Java process's, where Spark's work happens.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")
QUERIES = ("count", "sum", "grouped mean")
HEADING = "## 5. Per-person bounding (issue 34)"


def rss_mb() -> float:
    """This process's resident set size, MB (from /proc: no psutil needed)."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * PAGE / 1e6


def measured(fn: Callable[[], Any], rss: Callable[[], float] = rss_mb) -> dict[str, float]:
    """Run ``fn`` once: seconds, RSS before (MB), peak growth over it, and RSS after minus before.

    ``rss`` is the process to watch (default this one).
    """
    before = rss()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            done.wait(0.01)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    try:
        fn()
    finally:
        seconds = time.perf_counter() - start
        done.set()
        thread.join()
    after = rss()
    peak[0] = max(peak[0], after)
    return {"s": seconds, "rss_mb": before, "peak_mb": peak[0] - before, "after_mb": after - before}


def repeated(fn: Callable[[], Any], reps: int, rss: Callable[[], float] = rss_mb) -> dict[str, Any]:
    """:func:`measured` ``reps`` times: the median time, the largest peak, the last "after"."""
    runs = [measured(fn, rss) for _ in range(reps)]
    times = sorted(r["s"] for r in runs)
    return {
        "s": times[len(times) // 2],
        "times": times,
        "rss_mb": runs[0]["rss_mb"],
        "peak_mb": max(r["peak_mb"] for r in runs),
        "after_mb": runs[-1]["after_mb"],
    }


def write_table(con: Any, rows: int, directory: Path) -> Path:
    """``rows``/10.5 persons with 1–20 rows each (about ``rows`` rows) as Parquet in ``directory``."""
    path = directory / f"bounding_{rows}.parquet"
    if not path.exists():
        persons = max(1, round(rows / 10.5))
        con.execute(
            f"COPY (SELECT p AS pid, CAST(hash(p, r, 1) % 10 AS INTEGER) AS region, "
            f"CAST(hash(p, r, 2) % 100000 AS DOUBLE) / 1000 AS x "
            f"FROM range({persons}) AS a(p), LATERAL range(CAST(1 + hash(p) % 20 AS BIGINT)) AS b(r)) "
            f"TO '{path}' (FORMAT parquet)"
        )
    return path


def _calls(session: Any) -> dict[str, Callable[[], Any]]:
    """The three private queries of the section on ``session``."""
    return {
        "count": lambda: session.count(epsilon=1.0),
        "sum": lambda: session.sum("x", epsilon=1.0, bounds=(0.0, 100.0)),
        "grouped mean": lambda: session.mean(
            "x", epsilon=1.0, bounds=(0.0, 100.0), group_by="region", keys=list(range(10))
        ),
    }


OPTIONS = {"epsilon": 100.0, "privacy_unit": "pid", "max_contributions": 5, "rng": 1}


def _duckdb(path: Path, one_part_max: int, reps: int) -> list[dict[str, Any]]:
    from dpkit.tables import Session
    from dpkit.tables.engines import DuckDBEngine
    from dpkit.tables.engines.duckdb_engine import connect

    out: list[dict[str, Any]] = []
    con = connect()
    base = rss_mb()
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{path}')")
    n = int(con.execute("SELECT count(*) FROM t").fetchone()[0])
    common = {"engine": "duckdb", "rows": n, "loaded_mb": rss_mb() - base}
    plain = {
        "count": "SELECT count(*) FROM t",
        "sum": "SELECT sum(least(greatest(x, 0), 100)) FROM t",
        "grouped mean": "SELECT region, avg(x) FROM t GROUP BY region",
    }
    for q in QUERIES:
        entry = measured(lambda sql=plain[q]: con.execute(sql).fetchall())
        out.append({**common, "plan": "plain GROUP BY", "query": q, **entry})
        print(f"      duckdb {n:,} plain {q}: {entry}", flush=True)
    plans = {"parts": None, "one part": 1 << 62}
    for plan, per_part in plans.items():
        if per_part is not None and n > one_part_max:
            continue
        engine = DuckDBEngine(con, "t", rows_per_part=per_part)
        calls = _calls(Session(engine, **OPTIONS))  # type: ignore[arg-type]
        for q in QUERIES:
            entry = repeated(calls[q], reps)
            out.append({**common, "plan": plan, "query": q, **entry})
            print(f"      duckdb {n:,} {plan} {q}: {entry}", flush=True)
    con.close()
    return out


def _spark(spark: Any, path: Path, reps: int) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    from dpkit.tables import Session

    pid = spark.sparkContext._gateway.proc.pid  # the JVM, where Spark's work happens

    def jvm_mb() -> float:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * PAGE / 1e6

    df = spark.read.parquet(str(path))
    n = df.count()
    common = {"engine": "spark", "rows": n, "loaded_mb": 0.0}
    clipped = F.least(F.greatest(F.col("x"), F.lit(0.0)), F.lit(100.0))
    plain: dict[str, Callable[[], Any]] = {
        "count": lambda: df.count(),
        "sum": lambda: df.agg(F.sum(clipped)).collect(),
        "grouped mean": lambda: df.groupBy("region").agg(F.avg("x")).collect(),
    }
    types = {"pid": "BIGINT", "region": "INTEGER", "x": "DOUBLE"}
    session = Session.from_spark(df, types=types, **OPTIONS)  # type: ignore[arg-type]
    private = _calls(session)
    out: list[dict[str, Any]] = []
    for plan, calls in (("plain GROUP BY", plain), ("dpkit", private)):
        for q in QUERIES:
            entry = repeated(calls[q], reps if plan == "dpkit" else 1, jvm_mb)
            out.append({**common, "plan": plan, "query": q, **entry})
            print(f"      spark {n:,} {plan} {q}: {entry}", flush=True)
    return out


def _spark_session() -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("dpkit-bounding")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(
    sizes: list[int],
    directory: Path | None,
    one_part_max: int,
    engines: tuple[str, ...] = ("duckdb",),
    reps: int = 1,
) -> dict[str, Any]:
    """The section's results: one entry per engine, size and plan."""
    from dpkit.tables.engines.duckdb_engine import connect

    out: list[dict[str, Any]] = []
    spark = _spark_session() if "spark" in engines else None
    try:
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            for rows in sizes:
                con = connect()
                path = write_table(con, rows, Path(tmp))
                con.close()
                if "duckdb" in engines:
                    out += _duckdb(path, one_part_max, reps)
                if spark is not None:
                    out += _spark(spark, path, reps)
    finally:
        if spark is not None:
            spark.stop()
    today = time.strftime("%Y-%m-%d")
    out = [{**r, "date": today} for r in out]
    return {
        "sizes": sizes,
        "one_part_max": one_part_max,
        "engines": engines,
        "reps": reps,
        "results": out,
    }


def merged(earlier: dict[str, Any] | None, now: dict[str, Any]) -> dict[str, Any]:
    """``now`` with the rows of ``earlier`` for the engines ``now`` did not run (each run dated)."""
    if not earlier:
        return now
    kept = [r for r in earlier["results"] if r.get("engine", "duckdb") not in now["engines"]]
    return {**now, "results": kept + now["results"]}


def _growth(results: list[dict[str, Any]]) -> list[str]:
    """Time at each size over the time at a tenth of it (10x rows), per engine and query."""
    times = {
        (r.get("engine", "duckdb"), r["query"], round(r["rows"], -5)): r["s"]
        for r in results
        if r["plan"] in ("parts", "dpkit")
    }
    lines = [
        "| engine | query | rows | time ÷ time at a tenth of the rows |",
        "|---|---|---:|---:|",
    ]
    for (engine, query, rows), seconds in sorted(times.items()):
        smaller = times.get((engine, query, round(rows / 10, -5)))
        if smaller:
            lines.append(f"| {engine} | {query} | {rows:,.0f} | {seconds / smaller:.1f}× |")
    return lines


def report(section: dict[str, Any]) -> str:
    """The section as Markdown."""
    lines = [
        HEADING,
        "",
        "`benchmarks/queries.py --bounding`: "
        + (__doc__ or "").split("\n\n", 1)[1].replace("\n", " "),
        "",
        "| engine | rows | plan | query | time (s) | RSS before (MB) | peak growth (MB) "
        "| after − before (MB) | run |",
        "|---|---:|---|---|---:|---:|---:|---:|---|",
    ]
    for r in section["results"]:
        lines.append(
            f"| {r.get('engine', 'duckdb')} | {r['rows']:,} | {r['plan']} | {r['query']} "
            f"| {r['s']:.2f} | {r['rss_mb']:.0f} | {r['peak_mb']:.0f} | {r['after_mb']:.0f} "
            f"| {r.get('date', '')} |"
        )
    lines += ["", *_growth(section["results"])]
    lines += [
        "",
        f"dpkit's times are the median of {section.get('reps', 1)} run(s) of each query "
        "(`--bounding-reps`; peak: the largest, after: the last); plain ones one run. "
        "`one part` runs today's engine with one part, so it also hands memory back after the "
        "query; e3bef4d kept it (the issue: 14 GB at 10⁸ rows). Times on a shared 2-core "
        "machine vary by up to 2× between runs.",
    ]
    return "\n".join(lines)
