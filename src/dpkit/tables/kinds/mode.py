"""The most frequent value of a column, by the exponential mechanism over a public domain.

Privacy (add/remove one row; ``k`` per person): the candidates are the
declared domain's values, never values read from the data (a rare value's
mere presence would leak). A candidate's utility is its count; one row
raises or lowers counts in one direction only (monotonic utilities), by at
most ``k``, so selecting with probability ∝ exp(ε·count/k) is ε-DP.
``details["count_error"]``: with probability at least the level, the chosen
value's count is within ``(k/ε)·ln(|domain|/(1 - level))`` of the largest.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpkit.tables import groups as G
from dpkit.tables.engines.base import Engine
from dpkit.tables.validation import ValidatedQuery
from dpkit.tables.values import from_engine

__all__ = ["domain_slots", "release"]


def domain_slots(values: Any, domain: tuple[Any, ...], temporal: bool = False) -> np.ndarray:
    """Index of each engine value in the (canonical) domain; -1 if it is not in it."""
    lookup = {d: i for i, d in enumerate(domain)}
    read = from_engine if temporal else G.plain
    return np.array([lookup.get(read(x), -1) for x in values], dtype=np.int64)


def release(v: ValidatedQuery, engine: Engine, rng: Any) -> Any:
    from dpkit.mechanisms import exponential

    assert v.domain is not None and v.domain_labels is not None and v.value is not None
    grouping, k = v.grouping, v.max_contributions
    eps_sel, eps_em = G.selection_split(v, v.epsilon)
    frame = engine.value_counts(
        G.pushed_down(v.rows, grouping), v.value, grouping.values if grouping else (), v.domain
    )
    keys, matrix = G.dense_matrix(
        frame, grouping, domain_slots(frame["value"], v.domain, v.value.temporal), len(v.domain)
    )
    details: dict[str, Any] = {
        "domain": v.domain_labels,
        "count_error": k / eps_em * math.log(len(v.domain) / (1 - v.level)),
    }
    keys, matrix = G.keep_selected(v, keys, matrix, eps_sel, rng, details)
    if matrix.shape[0] == 0:
        return G.finish(v, [], [], [], "exponential", details)
    chosen = np.atleast_1d(
        exponential(matrix, epsilon=eps_em, sensitivity=k, monotonic=True, integral=True, rng=rng)
    )
    labels = [v.domain_labels[i] for i in chosen]
    return G.finish(v, keys, labels, [None] * len(keys), "exponential", details)
