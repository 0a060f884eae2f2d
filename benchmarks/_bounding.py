"""Section 5 of ``benchmarks/queries.py`` (issue 34): per-person bounding at 10⁶–10⁸ rows.

A synthetic table of persons with 1–20 rows each (``pid``, ``region`` in 0..9,
``x`` in [0, 100)) is written as Parquet into a temporary directory (never
the repository) and loaded into a DuckDB table. dpkit's noisy count, sum and
grouped mean (10 public regions) with ``privacy_unit="pid"`` and
``max_contributions=5`` are timed against the plain DuckDB aggregation of the
same shape, with the process's RSS sampled every 10 ms: its level before the
query, the peak growth over it, and the level after (relative to before).
Plans: ``parts`` is the engine's default (``DuckDBEngine(rows_per_part=2²⁴)``:
persons split into parts by a hash of the id, one window per part, memory
handed back after the query); ``one part`` is the single window over the whole
table (the plan of e3bef4d), run only up to ``--bounding-one-part-max`` rows.
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


def measured(fn: Callable[[], Any]) -> dict[str, float]:
    """Run ``fn`` once: seconds, RSS before (MB), peak growth over it, and RSS after minus before."""
    before = rss_mb()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb())
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
    after = rss_mb()
    peak[0] = max(peak[0], after)
    return {"s": seconds, "rss_mb": before, "peak_mb": peak[0] - before, "after_mb": after - before}


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


def run(sizes: list[int], directory: Path | None, one_part_max: int) -> dict[str, Any]:
    """The section's results: one entry per size and plan."""
    from dpkit.tables import Session
    from dpkit.tables.engines import DuckDBEngine
    from dpkit.tables.engines.duckdb_engine import connect

    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        for rows in sizes:
            con = connect()
            path = write_table(con, rows, Path(tmp))
            base = rss_mb()
            con.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{path}')")
            n = int(con.execute("SELECT count(*) FROM t").fetchone()[0])
            loaded = rss_mb() - base
            plain = {
                "count": "SELECT count(*) FROM t",
                "sum": "SELECT sum(least(greatest(x, 0), 100)) FROM t",
                "grouped mean": "SELECT region, avg(x) FROM t GROUP BY region",
            }
            for q in QUERIES:
                entry = measured(lambda sql=plain[q], c=con: c.execute(sql).fetchall())
                out.append(
                    {"rows": n, "plan": "plain GROUP BY", "query": q, "loaded_mb": loaded, **entry}
                )
                print(f"      {n:,} plain {q}: {entry}", flush=True)
            plans = {"parts": None, "one part": 1 << 62}
            for plan, per_part in plans.items():
                if per_part is not None and n > one_part_max:
                    continue
                session = Session(
                    DuckDBEngine(con, "t", rows_per_part=per_part),
                    epsilon=100.0,
                    privacy_unit="pid",
                    max_contributions=5,
                    rng=1,
                )
                calls: dict[str, Callable[[], Any]] = {
                    "count": lambda s=session: s.count(epsilon=1.0),
                    "sum": lambda s=session: s.sum("x", epsilon=1.0, bounds=(0.0, 100.0)),
                    "grouped mean": lambda s=session: s.mean(
                        "x",
                        epsilon=1.0,
                        bounds=(0.0, 100.0),
                        group_by="region",
                        keys=list(range(10)),
                    ),
                }
                for q in QUERIES:
                    entry = measured(calls[q])
                    out.append({"rows": n, "plan": plan, "query": q, "loaded_mb": loaded, **entry})
                    print(f"      {n:,} {plan} {q}: {entry}", flush=True)
            con.close()
    return {"sizes": sizes, "one_part_max": one_part_max, "results": out}


def report(section: dict[str, Any]) -> str:
    """The section as Markdown."""
    lines = [
        HEADING,
        "",
        "`benchmarks/queries.py --bounding`: "
        + (__doc__ or "").split("\n\n", 1)[1].replace("\n", " "),
        "",
        "| rows | plan | query | time (s) | RSS before (MB) | peak growth (MB) | after − before (MB) |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in section["results"]:
        lines.append(
            f"| {r['rows']:,} | {r['plan']} | {r['query']} | {r['s']:.2f} | {r['rss_mb']:.0f} | "
            f"{r['peak_mb']:.0f} | {r['after_mb']:.0f} |"
        )
    lines += [
        "",
        "`one part` runs today's engine with one part, so it also hands memory back after the "
        "query; e3bef4d kept it (the issue: 14 GB at 10⁸ rows). Times on a shared 2-core "
        "machine vary by up to 2× between runs.",
    ]
    return "\n".join(lines)
