"""Scoring a boosted model inside DuckDB at scale: ``predict_sql`` against a plain scan.

Run: ``.venv/bin/python benchmarks/trees_score_scale.py [--rows 2000000] [--features 14]``

The table is ``trees_scale.py``'s (generated inside DuckDB, never in Python).
A ``DPGradientBoostingClassifier`` (default 64 bins, 20 rounds) is fitted on a
small generated array (its accuracy does not matter here: the model's shape
does), then ``predict_sql(session)`` scores every row and DuckDB averages
``proba_1`` (one pass; no row reaches Python). Timed against a plain average
of the features' sum over the same table, and against ``predict_proba`` on
10⁵ rows in memory (per row). Peak RSS before and after scoring. Results as
a Markdown table and ``benchmarks/results/trees_score_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trees_scale import make_table, peak_rss_mb


def run(rows: int, features: int) -> dict[str, Any]:
    from dpkit import Session
    from dpkit.trees import DPGradientBoostingClassifier

    names = [f"x{j}" for j in range(features)]
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.uniform(0, 1, (20_000, features)), columns=names)
    y = (X.sum(axis=1) + rng.normal(size=len(X)) > features / 2).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = DPGradientBoostingClassifier(
            epsilon=1.0, max_iter=20, bounds=(0, 1), classes=[0, 1], random_state=0
        ).fit(X, y)
    con = make_table(rows, features)
    types = {**dict.fromkeys(names, "DOUBLE"), "label": "BIGINT"}
    schema = {"columns": {**{n: {"bounds": [0, 1]} for n in names}, "label": {"domain": [0, 1]}}}
    session = Session.from_duckdb("data", connection=con, types=types, schema=schema, epsilon=1.0)
    rss_before = peak_rss_mb()
    scored, plain = [], []
    for _ in range(3):
        start = time.perf_counter()
        model.predict_sql(session, keep=[]).aggregate("avg(proba_1)").fetchall()
        scored.append(time.perf_counter() - start)
        start = time.perf_counter()
        con.execute(f"SELECT avg({' + '.join(names)}) FROM data").fetchall()
        plain.append(time.perf_counter() - start)
    sample = con.execute("SELECT * FROM data LIMIT 100000").df()[names]
    start = time.perf_counter()
    model.predict_proba(sample)
    in_memory = (time.perf_counter() - start) / len(sample)
    median = sorted(scored)[1]
    return {
        "rows": rows,
        "features": features,
        "bins": int(model.grid_.n_bins[0]),
        "predict_sql_seconds": round(median, 3),
        "plain_scan_seconds": round(sorted(plain)[1], 3),
        "predict_sql_us_per_row": round(median / rows * 1e6, 3),
        "predict_proba_us_per_row": round(in_memory * 1e6, 3),
        "peak_rss_mb_before": round(rss_before, 1),
        "peak_rss_mb_after": round(peak_rss_mb(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--features", type=int, default=14)
    args = parser.parse_args()
    result = run(args.rows, args.features)
    print("| " + " | ".join(result) + " |")
    print("|" + "---|" * len(result))
    print("| " + " | ".join(str(v) for v in result.values()) + " |")
    out = Path(__file__).parent / "results" / "trees_score_scale.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
