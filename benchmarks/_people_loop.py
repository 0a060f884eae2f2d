"""The release loop shared by every library of ``benchmarks/queries.py --people``.

Imported by ``_people.py`` (dpkit's environment) and by the peer modules run in
the isolated benchmark environments, so it needs nothing beyond the standard
library. Each library hands over one function per query; the loop makes
``reps`` releases of every query, interleaved (release r of every query before
release r + 1 of any), and times each one.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

#: the seven queries, in the issue's order, with their labels in the report
QUERIES = {
    "median_age": "median(age)",
    "mean_income_by_region": "mean(income) by region",
    "count_bounded": "count, ≤ 5 rows per person",
    "count": "count",
    "sum_income": "sum(income)",
    "count_by_region": "count by region",
    "mean_income": "mean(income)",
}
#: releases timed per query: the median of these, after one untimed warm-up round
TIMED_ROUNDS = 5


def run(
    releasers: dict[str, Callable[[], Any]], reps: int, only: list[str] | None = None
) -> dict[str, Any]:
    """``reps`` interleaved releases of every query: values, and the median time of 5.

    A releaser returns a number, a list (one value per public region, in the
    regions' order) or a dict (then its ``"value"`` is the release and its
    ``"ci"`` the library's confidence interval, kept for coverage). The first
    round is a warm-up (planning, JIT, Spark's first job) and is not timed;
    the time per release is the median over the next ``TIMED_ROUNDS`` rounds
    (all rounds if there are fewer). ``only``: the queries to run (default all).
    With ``PEOPLE_PROGRESS`` set to a file name, each round's start is appended to it.
    """
    if only is not None:  # a rerun of some queries (more releases where ratios are close)
        releasers = {q: r for q, r in releasers.items() if q in only}
    values: dict[str, list[Any]] = {q: [] for q in releasers}
    cis: dict[str, list[Any]] = {q: [] for q in releasers}
    times: dict[str, list[float]] = {q: [] for q in releasers}
    progress = os.environ.get("PEOPLE_PROGRESS")  # a file to follow a long run by
    for rep in range(reps):
        if progress:
            with open(progress, "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%H:%M:%S')} release round {rep + 1} of {reps}\n")
        for query, release in releasers.items():
            start = time.perf_counter()
            out = release()
            seconds = time.perf_counter() - start
            if isinstance(out, dict):
                if out.get("ci") is not None:
                    cis[query].append(out["ci"])
                out = out["value"]
            values[query].append(out)
            if rep >= 1 or reps == 1:
                times[query].append(seconds)
    return {
        "values": values,
        "cis": {q: c for q, c in cis.items() if c},
        "time_s": {q: statistics.median(t[:TIMED_ROUNDS]) for q, t in times.items()},
    }


def spec_from_argv(argv: list[str]) -> dict[str, Any]:
    """The JSON spec a peer module is given as its one argument."""
    with open(argv[1], encoding="utf-8") as f:
        spec: dict[str, Any] = json.load(f)
    return spec
