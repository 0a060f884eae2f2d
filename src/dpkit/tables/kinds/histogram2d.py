"""2-D histograms over two numeric columns with public bins on each axis.

Privacy (add/remove one row; ``k`` rows per person): a row lies in exactly
one cell (both values clipped into the end bins; rows missing either value
are dropped or replaced by the columns' null policies, decided per row), so
the grid of counts has ℓ1 sensitivity ``k``. The grid goes to the chosen
:mod:`dpkit.histograms` 2-D publisher with ε/k (group privacy: the publishers
are ε-DP for a one-row change), rounded down so the release never spends
more than was charged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkit.release import Release
from dpkit.tables.engines.base import Engine
from dpkit.tables.kinds.histogram import unit_epsilon
from dpkit.tables.validation import ValidatedQuery

__all__ = ["release"]


def release(v: ValidatedQuery, engine: Engine, rng: Any) -> Release:
    from dpkit import histograms

    assert v.value is not None and v.value2 is not None
    assert v.edges is not None and v.edges2 is not None and v.method is not None
    nx, ny = len(v.edges) - 1, len(v.edges2) - 1
    frame = engine.bin_counts_2d(v.rows, v.value, v.value2, v.edges, v.edges2)
    counts = np.zeros((nx, ny))
    if len(frame):
        i = np.clip(frame["bin_x"].to_numpy(dtype=np.int64), 0, nx - 1)
        j = np.clip(frame["bin_y"].to_numpy(dtype=np.int64), 0, ny - 1)
        np.add.at(counts, (i, j), frame["n"].to_numpy(dtype=np.float64))
    eps = unit_epsilon(v.epsilon, v.max_contributions)
    common: dict[str, Any] = {
        "rng": rng,
        "x_edges": np.asarray(v.edges),
        "y_edges": np.asarray(v.edges2),
    }
    if v.method in ("auto2d", "ugrid", "agrid"):
        common["n_records"] = v.n_records
    published = getattr(histograms, v.method)(counts, eps, **common)
    return Release(
        value=published.estimates,
        epsilon=v.epsilon,
        delta=0.0,
        ci=None,
        level=v.level,
        mechanism=v.method,
        details={
            "x_edges": list(v.edges),
            "y_edges": list(v.edges2),
            "columns": (v.value.column, v.value2.column),
            "epsilon_per_row": eps,
            "published": published,
            "clipped": "values beyond the outer edges count in the end cells of their axis",
        },
    )
