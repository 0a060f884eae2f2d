"""DP boosting through DuckDB at scale: time per fit, per engine pass, and the process's peak memory.

Run: ``.venv/bin/python benchmarks/trees_scale.py [--rows 1000000] [--features 14] [--rounds 2]``

The table is generated inside DuckDB (never in Python): ``--features`` numeric
columns (uniform, declared bounds [0, 1]) and a binary label from a noisy
additive rule. One fit of ``DPGradientBoostingClassifier(max_iter=--rounds,
max_leaf_nodes=8)`` through ``fit(session, y=, features=)`` makes
``rounds x features`` engine passes; each pass is timed against a plain
``GROUP BY`` of the same shape (the same table, one bin column, sums of two
columns). Peak RSS (``ru_maxrss``) is read before and after the fit, DuckDB
included (it runs in this process). Results are printed as a Markdown table
and written to ``benchmarks/results/trees_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
import warnings
from pathlib import Path
from typing import Any

import duckdb


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def make_table(rows: int, features: int) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    columns = ", ".join(f"random() AS x{j}" for j in range(features))
    con.execute(f"CREATE TABLE t AS SELECT {columns} FROM range({int(rows)})")
    rule = " + ".join(f"{(-1) ** j * (j % 3 + 1)} * x{j}" for j in range(features))
    con.execute(
        f"CREATE TABLE data AS SELECT *, CAST(({rule}) + 0.5 * random() > {features / 4.0} "
        "AS BIGINT) AS label FROM t"
    )
    con.execute("DROP TABLE t")
    return con


def run(rows: int, features: int, rounds: int) -> dict[str, Any]:
    from dpkit import Session
    from dpkit.tables.engines.duckdb_engine import DuckDBEngine
    from dpkit.trees import DPGradientBoostingClassifier

    con = make_table(rows, features)
    names = [f"x{j}" for j in range(features)]
    types = {**dict.fromkeys(names, "DOUBLE"), "label": "BIGINT"}
    schema = {"columns": {**{n: {"bounds": [0, 1]} for n in names}, "label": {"domain": [0, 1]}}}
    session = Session.from_duckdb(
        "data",
        connection=con,
        types=types,
        schema=schema,
        epsilon=10.0,
        delta=1e-5,
        accountant="zcdp",
    )
    rss_before = peak_rss_mb()
    passes: list[float] = []
    original = DuckDBEngine.boosting_sums

    def timed(engine: DuckDBEngine, spec: Any) -> Any:
        start = time.perf_counter()
        out = original(engine, spec)
        passes.append(time.perf_counter() - start)
        return out

    DuckDBEngine.boosting_sums = timed  # type: ignore[method-assign]
    try:
        model = DPGradientBoostingClassifier(epsilon=1.0, max_iter=rounds, max_leaf_nodes=8)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(session, y="label", features=names)
        fit_seconds = time.perf_counter() - start
    finally:
        DuckDBEngine.boosting_sums = original  # type: ignore[method-assign]
    plain = []
    sums = "sum(CAST(x0 * 1048576 AS BIGINT)), sum(CAST(x1 * 1048576 AS BIGINT)), count(*)"
    for _ in range(3):
        start = time.perf_counter()
        con.execute(f"SELECT CAST(floor(x2 * 8) AS BIGINT) AS s, {sums} FROM data GROUP BY s").df()
        plain.append(time.perf_counter() - start)
    passes.sort()
    return {
        "rows": rows,
        "features": features,
        "rounds": rounds,
        "passes": len(passes),
        "fit_seconds": round(fit_seconds, 2),
        "median_pass_seconds": round(passes[len(passes) // 2], 3),
        "plain_group_by_seconds": round(sorted(plain)[1], 3),
        "peak_rss_mb_before_fit": round(rss_before, 1),
        "peak_rss_mb_after_fit": round(peak_rss_mb(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=14)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    result = run(args.rows, args.features, args.rounds)
    print("| " + " | ".join(result) + " |")
    print("|" + "---|" * len(result))
    print("| " + " | ".join(str(v) for v in result.values()) + " |")
    out = Path(__file__).parent / "results" / "trees_scale.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
