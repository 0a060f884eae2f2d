"""Histograms over public bins (numeric edges) or a public domain (categories).

Privacy (add/remove one row; ``k`` per person): each row falls in one bin of
one group, so the matrix of counts has ℓ1 sensitivity ``k``. Without
``method``, two-sided geometric noise of scale ``k/ε`` per count is ε-DP; the
CI per bin is public (``± half_width``). With ``method=`` the count vector of
each group goes to :mod:`dpkit.histograms` with ε/k (group privacy: the
methods are ε-DP for a one-row change, so ε/k covers ``k`` rows); the
division is rounded *down* so the parts never spend more than was charged.
Values are clipped to the outer edges (documented in ``details["clipped"]``),
so the first and last bins also hold everything beyond them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkit._checks import exact, float_at_most
from dpkit.histograms._labels import bin_labels
from dpkit.tables import groups as G
from dpkit.tables.engines.base import Engine
from dpkit.tables.kinds.mode import domain_slots
from dpkit.tables.validation import ValidatedQuery

__all__ = ["release", "unit_epsilon"]


def unit_epsilon(epsilon: float, k: int) -> float:
    """The largest float whose exact value is at most ε/k (what a one-row method may spend)."""
    return float_at_most(exact(epsilon) / k)


def release(v: ValidatedQuery, engine: Engine, rng: Any) -> Any:
    from dpkit.mechanisms import Geometric

    assert v.value is not None
    grouping, k = v.grouping, v.max_contributions
    eps_sel, eps_hist = G.selection_split(v, v.epsilon)
    rows = G.pushed_down(v.rows, grouping)
    g_values = grouping.values if grouping else ()
    if v.domain is not None:
        assert v.domain_labels is not None
        frame = engine.value_counts(rows, v.value, g_values, v.domain)
        slots = domain_slots(frame["value"], v.domain, v.value.temporal)
        width = len(v.domain)
        details: dict[str, Any] = {"labels": list(v.domain_labels)}
    else:
        assert v.edges is not None
        frame = engine.bin_counts(rows, v.value, g_values, v.edges)
        width = len(v.edges) - 1
        bins = frame["bin"].to_numpy(dtype=np.int64)
        slots = np.where((bins >= 0) & (bins < width), bins, -1)
        details = {
            "edges": list(v.edges),
            "labels": bin_labels(v.edges),
            "clipped": "values below the first edge count in the first bin, above the last "
            "edge in the last bin",
        }
    keys, matrix = G.dense_matrix(frame, grouping, slots, width)
    keys, matrix = G.keep_selected(v, keys, matrix, eps_sel, rng, details)
    counts = matrix.astype(np.int64)
    values: list[Any] = []
    cis: list[Any] = []
    if v.method is not None:
        import importlib

        publish = getattr(importlib.import_module("dpkit.histograms"), v.method)
        eps_unit = unit_epsilon(eps_hist, k)
        published = None
        for row in counts:
            kwargs: dict[str, Any] = {"rng": rng}
            if v.edges is not None:
                kwargs["edges"] = np.asarray(v.edges)
            if v.max_count is not None:
                # auto's scale bound is on rows, StructureFirst's on any one bin.
                key = "max_records" if v.method == "auto" else "max_count"
                kwargs[key] = v.max_count
            published = publish(row, eps_unit, **kwargs)
            values.append(np.asarray(published.estimates))
            cis.append(None)
        details.update(
            method=v.method,
            epsilon_per_row=eps_unit,
            published=published if grouping is None else None,
        )
        mechanism = v.method
    else:
        mech = Geometric(epsilon=eps_hist, sensitivity=k, size=max(counts.size, 1))
        h = mech.half_width(v.level)
        if counts.shape[0]:
            noisy = np.asarray(mech.randomise(counts.reshape(-1), rng=rng), dtype=np.int64).reshape(
                counts.shape
            )
            for row in noisy:
                values.append(row)
                cis.append((np.maximum(row - h, 0.0), row + h))
        details.update(half_width=h, scale=mech.scale)
        mechanism = "geometric"
    return G.finish(v, keys, values, cis, mechanism, details)
