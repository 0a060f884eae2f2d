"""Quantiles (median, min and max too) by permute-and-flip over a public grid.

Privacy (add/remove one row; ``k`` per person): the candidates are the
``grid_size`` points of a public grid over the declared bounds. A candidate's
utility is minus its distance, in rows, from the target rank
(:func:`~dpkit.tables.queries.quantile_utilities`), which one row moves by at
most ``max(q, 1 - q)``; permute-and-flip with that sensitivity (times ``k``)
is ε-DP (McKenna & Sheldon 2020) and never worse in expected utility than the
exponential mechanism. Min and max are the 0.01 and 0.99 quantiles: a raw
extreme plus noise is not DP on bounded data. ``details["rank_error"]`` bounds
the rank error at the release's level (a function of ε, the grid and the
level only). Groups: one selection per group (parallel composition); private
keys first pay half of ε for partition selection.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkit.tables import groups as G
from dpkit.tables import queries as Q
from dpkit.tables.engines.base import Engine
from dpkit.tables.validation import ValidatedQuery

__all__ = ["release"]

_PF = "permute-and-flip"


def release(v: ValidatedQuery, engine: Engine, rng: Any) -> Any:
    from dpkit.mechanisms import permute_and_flip

    assert v.bounds is not None and v.grid_size is not None and v.q is not None
    assert v.value is not None
    grouping, k, q = v.grouping, v.max_contributions, v.q
    sensitivity = k * max(q, 1.0 - q)
    lo, hi = v.bounds
    grid = Q.uniform_grid((lo, hi), v.grid_size)
    step = (hi - lo) / (grid.size - 1)
    eps_sel, eps_em = G.selection_split(v, v.epsilon)
    frame = engine.grid_counts(
        G.pushed_down(v.rows, grouping),
        v.value,
        grouping.values if grouping else (),
        lo,
        step,
        grid.size,
    )
    n_codes = 2 * grid.size - 1
    codes = frame["code"].to_numpy(dtype=np.int64)
    codes = np.where((codes >= 0) & (codes < n_codes), codes, -1)
    keys, matrix = G.dense_matrix(frame, grouping, codes, n_codes)
    details: dict[str, Any] = {
        "q": q,
        "bounds": (lo, hi),
        "resolution": step,
        "rank_error": Q.em_rank_error(eps_em, sensitivity, grid.size, v.level),
    }
    keys, matrix = G.keep_selected(v, keys, matrix, eps_sel, rng, details)
    if matrix.shape[0] == 0:
        return G.finish(v, [], [], [], _PF, details)
    utilities = Q.quantile_utilities(matrix, q)
    chosen = np.atleast_1d(
        permute_and_flip(utilities, epsilon=eps_em, sensitivity=sensitivity, rng=rng)
    )
    values = [float(x) for x in grid[chosen]]
    return G.finish(v, keys, values, [None] * len(keys), _PF, details)
