"""DP boosting through an engine at scale: time per fit, per engine pass, and peak memory.

Run: ``.venv/bin/python benchmarks/trees_scale.py [--rows 1000000] [--features 14]
[--rounds 2] [--engine duckdb|parquet|spark] [--update round|cyclic]``
(``--rounds 0``: the estimator's defaults, a noisy row count and 150 rounds).

The table is generated inside the engine (never in Python): ``--features``
numeric columns (uniform, declared bounds [0, 1]) and a binary label from a
noisy additive rule. ``parquet`` writes it to a Parquet file in a temporary
folder first and fits through ``Session.from_parquet`` (DuckDB scans the file
on every pass); ``spark`` generates it in a local Spark session
(``spark.range``) and fits through ``Session.from_spark``.

One fit of ``DPGradientBoostingClassifier(max_iter=--rounds, max_leaf_nodes=8,
update=--update)`` through ``fit(session, y=, features=)``: with
``update="round"`` one engine pass per round, summing every feature's codes
(one grouping set per feature); with ``"cyclic"`` one pass per feature and
round. Each pass is timed against a plain aggregation of the same shape on
the same table: grouping sets over every feature's bin ``floor(x * 64)`` (one
``GROUP BY`` of one bin for a cyclic pass) with sums of two columns and a
count. Peak RSS (``ru_maxrss``) of this process is read before and after the
fit, and its resident memory after every pass: the growth over the fit is
what the fit holds (DuckDB runs in-process, so its coded rows count; Spark
runs in its JVM, not counted). Results are
printed as a Markdown table and appended to
``benchmarks/results/trees_scale.json`` (one entry per configuration).
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import duckdb


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rss_mb() -> float:
    """The process's resident memory now (Linux ``/proc``; DuckDB's buffers included)."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _rule(features: int) -> str:
    return " + ".join(f"{(-1) ** j * (j % 3 + 1)} * x{j}" for j in range(features))


def generated(rows: int, features: int) -> str:
    """The generated table as one streaming query (nothing held in memory)."""
    columns = ", ".join(f"random() AS x{j}" for j in range(features))
    return (
        f"SELECT *, CAST(({_rule(features)}) + 0.5 * random() > {features / 4.0} AS BIGINT) "
        f"AS label FROM (SELECT {columns} FROM range({int(rows)}))"
    )


def make_table(rows: int, features: int) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    con.execute(f"CREATE TABLE data AS {generated(rows, features)}")
    return con


def plain_sql(features: int, update: str, table: str) -> str:
    """The plain aggregation of a pass's shape (see the module docstring)."""
    sums = "sum(CAST(x0 * 1048576 AS BIGINT)), sum(CAST(x1 * 1048576 AS BIGINT)), count(*)"
    if update == "cyclic":
        return f"SELECT CAST(floor(x2 * 64) AS BIGINT) AS b, {sums} FROM {table} GROUP BY b"
    bins = ", ".join(f"CAST(floor(x{j} * 64) AS BIGINT) AS b{j}" for j in range(features))
    sets = ", ".join(f"(b{j})" for j in range(features))
    return (
        f"SELECT {sums} FROM (SELECT {bins}, x0, x1 FROM {table}) GROUP BY GROUPING SETS ({sets})"
    )


def duckdb_session(rows: int, features: int, parquet: Path | None, common: dict[str, Any]) -> Any:
    from dpkit import Session

    names = [f"x{j}" for j in range(features)]
    types = {**dict.fromkeys(names, "DOUBLE"), "label": "BIGINT"}
    if parquet is None:
        con = make_table(rows, features)
        session = Session.from_duckdb("data", connection=con, types=types, **common)
        return session, lambda sql: con.execute(sql.format(table="data")).fetchall()
    writer = duckdb.connect()
    writer.execute(f"COPY ({generated(rows, features)}) TO '{parquet}' (FORMAT parquet)")
    writer.close()
    session = Session.from_parquet(parquet, types=types, **common)
    reader = duckdb.connect()
    return session, lambda sql: reader.execute(
        sql.format(table=f"read_parquet('{parquet}')")
    ).fetchall()


def spark_session(rows: int, features: int, common: dict[str, Any]) -> Any:
    from pyspark.sql import SparkSession

    from dpkit import Session

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "6g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    columns = ", ".join(f"rand({j}) AS x{j}" for j in range(features))
    frame = spark.sql(f"SELECT {columns} FROM range({int(rows)})")
    frame = frame.selectExpr(
        "*", f"CAST(({_rule(features)}) + 0.5 * rand(99) > {features / 4.0} AS BIGINT) AS label"
    ).cache()
    frame.count()
    frame.createOrReplaceTempView("data")
    names = [f"x{j}" for j in range(features)]
    types = {**dict.fromkeys(names, "DOUBLE"), "label": "BIGINT"}
    session = Session.from_spark(frame, types=types, **common)
    return session, lambda sql: spark.sql(sql.format(table="data")).collect()


def run(
    rows: int, features: int, rounds: int, engine: str, update: str, folder: Path | None = None
) -> dict[str, Any]:
    from dpkit.trees import DPGradientBoostingClassifier

    names = [f"x{j}" for j in range(features)]
    schema = {"columns": {**{n: {"bounds": [0, 1]} for n in names}, "label": {"domain": [0, 1]}}}
    common = {"schema": schema, "epsilon": 10.0, "delta": 1e-5, "accountant": "zcdp"}
    with tempfile.TemporaryDirectory(dir=folder) as work:
        if engine == "spark":
            session, plain = spark_session(rows, features, common)
        else:
            parquet = Path(work) / "data.parquet" if engine == "parquet" else None
            session, plain = duckdb_session(rows, features, parquet, common)
        rss_before, rss_now = peak_rss_mb(), rss_mb()
        during: list[float] = [rss_now]
        passes: list[float] = []
        inner = session.engine
        original = inner.boosting_sums

        def timed(spec: Any) -> Any:
            start = time.perf_counter()
            out = original(spec)
            passes.append(time.perf_counter() - start)
            during.append(rss_mb())
            return out

        inner.boosting_sums = timed
        try:
            shape: dict[str, Any] = (
                {} if rounds == 0 else {"max_iter": rounds, "max_leaf_nodes": 8}
            )  # --rounds 0: the defaults ("auto": a noisy row count, then 150 rounds of 8)
            model = DPGradientBoostingClassifier(epsilon=1.0, update=update, **shape)
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(session, y="label", features=names)
            fit_seconds = time.perf_counter() - start
        finally:
            del inner.boosting_sums
        rss_after = peak_rss_mb()
        sql = plain_sql(features, update, "{table}")
        plain_times = []
        for _ in range(3):
            start = time.perf_counter()
            plain(sql)
            plain_times.append(time.perf_counter() - start)
    passes.sort()
    pass_s, plain_s = passes[len(passes) // 2], sorted(plain_times)[1]
    return {
        "engine": engine,
        "update": update,
        "rows": rows,
        "features": features,
        "rounds": rounds or int(model.n_iter_),
        "passes": len(passes),
        "fit_seconds": round(fit_seconds, 2),
        "median_pass_seconds": round(pass_s, 3),
        "plain_same_shape_seconds": round(plain_s, 3),
        "pass_over_plain": round(pass_s / plain_s, 2),
        "peak_rss_mb_before_fit": round(rss_before, 1),
        "peak_rss_mb_after_fit": round(rss_after, 1),
        "rss_growth_during_fit_mb": round(max(during) - rss_now, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=14)
    parser.add_argument("--rounds", type=int, default=2, help="0: the estimator's defaults")
    parser.add_argument(
        "--folder", type=Path, default=None, help="where the Parquet file goes (default: /tmp)"
    )
    parser.add_argument("--engine", choices=("duckdb", "parquet", "spark"), default="duckdb")
    parser.add_argument("--update", choices=("round", "cyclic"), default="round")
    args = parser.parse_args()
    result = run(args.rows, args.features, args.rounds, args.engine, args.update, args.folder)
    print("| " + " | ".join(result) + " |")
    print("|" + "---|" * len(result))
    print("| " + " | ".join(str(v) for v in result.values()) + " |")
    out = Path(__file__).parent / "results" / "trees_scale.json"
    saved = json.loads(out.read_text()) if out.exists() else []
    saved = saved if isinstance(saved, list) else [saved]
    out.write_text(json.dumps([*saved, result], indent=2) + "\n")


if __name__ == "__main__":
    main()
