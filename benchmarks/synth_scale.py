"""Engine cost of DP synthesis (issue 30's time floors), on tables the benchmark generates.

1. **Marginals at scale.** A Parquet file of ``--rows`` rows (default 10⁷: two
   numeric columns with declared bounds, two categorical ones with declared
   domains) in a temporary directory. For every pair of columns, the time of
   dpkit's marginal (:func:`dpkit.synth.marginals.marginal` through a
   ``Session.from_parquet`` engine: the declared casts, the public binning in
   SQL, one GROUP BY) against a plain DuckDB GROUP BY of the same shape over
   the same file (``floor((x - lo)/width)`` and the raw category). Median of
   ``--repeats`` interleaved runs each; the ratio is dpkit's over the plain one.
2. **The default on a table of Adult's size.** 50,000 rows × 15 columns (8
   categorical with 2–12 categories, 7 numeric with declared bounds, all
   depending on a hidden class), ``Session.synthesize()`` with its defaults
   (MST) at ε = 1, δ = 10⁻⁹: wall time of the release (``--aim`` times AIM too).

Usage::

    python benchmarks/synth_scale.py                  # 10^7 rows, 5 repeats
    python benchmarks/synth_scale.py --rows 1000000 --repeats 3 --no-default
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from dpkit.errors import PrivacyWarning
from dpkit.synth.domain import discretise
from dpkit.synth.marginals import marginal
from dpkit.tables import Session

NUMERIC = {"x": (0.0, 100.0), "y": (0.0, 1.0)}
CATEGORIES = {"c": [f"k{i}" for i in range(10)], "d": ["0", "1", "2", "3", "4"]}
BINS = 16


def write_large(path: Path, rows: int) -> None:
    """``rows`` rows generated inside DuckDB (seeded), written as Parquet."""
    con = duckdb.connect()
    con.execute("SELECT setseed(0.5)")
    con.execute(
        f"""COPY (SELECT 100 * random() AS x, random() * random() AS y,
                   'k' || CAST(floor(10 * random()) AS INT) AS c,
                   CAST(CAST(floor(5 * random()) AS INT) AS VARCHAR) AS d
            FROM range({rows})) TO '{path}' (FORMAT parquet)"""
    )
    con.close()


def _plain_sql(path: Path, pair: tuple[str, str]) -> str:
    keys = []
    for name in pair:
        if name in NUMERIC:
            lo, hi = NUMERIC[name]
            keys.append(f"CAST(floor(({name} - {lo}) / {(hi - lo) / BINS}) AS INT)")
        else:
            keys.append(name)
    return (
        f"SELECT {keys[0]} AS a, {keys[1]} AS b, count(*) AS n "
        f"FROM read_parquet('{path}') GROUP BY ALL"
    )


def marginals_at_scale(rows: int, repeats: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "large.parquet"
        start = time.perf_counter()
        write_large(path, rows)
        print(f"wrote {rows:,} rows in {time.perf_counter() - start:.1f} s", flush=True)
        schema = {
            "columns": {
                **{c: {"bounds": list(b)} for c, b in NUMERIC.items()},
                **{c: {"domain": v} for c, v in CATEGORIES.items()},
            }
        }
        types = {"x": "DOUBLE", "y": "DOUBLE", "c": "VARCHAR", "d": "VARCHAR"}
        session = Session.from_parquet(path, types=types, schema=schema, epsilon=1.0)
        engine = session.guarded_engine
        names = [*NUMERIC, *CATEGORIES]
        attributes = dict(
            zip(names, discretise(session.schema, engine.column_kinds(), names, BINS), strict=True)
        )
        plain = duckdb.connect()
        out = []
        for pair in itertools.combinations(names, 2):
            ours, theirs = [], []
            for _ in range(repeats):  # interleaved
                t0 = time.perf_counter()
                counts = marginal(engine, [attributes[pair[0]], attributes[pair[1]]])
                ours.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                plain.execute(_plain_sql(path, pair)).fetchall()
                theirs.append(time.perf_counter() - t0)
            assert int(counts.sum()) == rows  # every row in one cell
            row = {
                "pair": pair,
                "dpkit_s": statistics.median(ours),
                "plain_s": statistics.median(theirs),
            }
            row["ratio"] = row["dpkit_s"] / row["plain_s"]
            out.append(row)
            print(
                f"{pair}: dpkit {row['dpkit_s']:.3f} s, plain GROUP BY {row['plain_s']:.3f} s, "
                f"ratio {row['ratio']:.2f}",
                flush=True,
            )
        return out


def adult_like(rows: int = 50_000, seed: int = 0) -> tuple[pd.DataFrame, dict[str, Any]]:
    """15 columns depending on a hidden class of 4 values; the schema declares every domain."""
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 4, rows)
    frame: dict[str, Any] = {}
    schema: dict[str, Any] = {}
    for i, k in enumerate((2, 3, 4, 5, 6, 8, 10, 12)):
        tilt = rng.dirichlet(np.ones(k), size=4)
        cum = tilt[z].cumsum(axis=1)
        codes = (rng.random(rows)[:, None] > cum).sum(axis=1).clip(0, k - 1)
        frame[f"cat{i}"] = [f"v{c}" for c in codes]
        schema[f"cat{i}"] = {"domain": [f"v{c}" for c in range(k)]}
    for i in range(7):
        centre = rng.uniform(20, 80, size=4)
        frame[f"num{i}"] = np.clip(rng.normal(centre[z], 12.0), -50, 150)
        schema[f"num{i}"] = {"bounds": [0.0, 100.0]}
    return pd.DataFrame(frame), {"columns": schema}


def default_on_adult_size(aim: bool) -> list[dict[str, Any]]:
    frame, schema = adult_like()
    out = []
    for method in ["mst", *(["aim"] if aim else [])]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            types = {c: ("VARCHAR" if c.startswith("cat") else "DOUBLE") for c in frame.columns}
            session = Session.from_pandas(
                frame, types=types, schema=schema, epsilon=10.0, delta=1e-6
            )
            start = time.perf_counter()
            kwargs = {} if method == "mst" else {"method": "aim"}
            result = session.synthesize(
                **kwargs, rows=len(frame), epsilon=1.0, delta=1e-9, rng=np.random.default_rng(1)
            )
            seconds = time.perf_counter() - start
        out.append({"method": method, "seconds": seconds, "rows": len(result.table)})
        print(f"{method} on 50,000 x 15: {seconds:.1f} s", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-default", action="store_true", help="skip part 2")
    parser.add_argument("--aim", action="store_true", help="part 2 also times AIM")
    args = parser.parse_args()
    pairs = marginals_at_scale(args.rows, args.repeats)
    print(f"marginals: worst ratio {max(p['ratio'] for p in pairs):.2f} (floor: 2)")
    if not args.no_default:
        default_on_adult_size(args.aim)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
