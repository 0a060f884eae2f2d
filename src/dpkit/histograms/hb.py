"""Hb: the hierarchical method with its branching chosen for the workload.

Qardaji, Yang, Li, "Understanding hierarchical methods for differentially
private histograms", VLDB 2013: the branching factor b of a noisy tree with
constrained inference should be chosen by the error it gives the workload,
not fixed; for small domains a flat histogram (Laplace) is best. Here the
choice minimises dpkit's *exact* average noise variance over the workload
(:func:`dpkit.histograms._workload.average_tree_variance`, the
least-squares covariance of :func:`dpkit.histograms.hierarchical`), a
function of n, epsilon and the workload only.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from dpkit.errors import InvalidParameterError
from dpkit.histograms._common import check_counts, epsilon_of
from dpkit.histograms._published import PublishedHistogram
from dpkit.histograms._workload import (
    WORKLOADS,
    average_tree_variance,
    best_branching,
    workload_ranges,
)


def hb_choice(n: int, epsilon: float, workload: str = "ranges") -> int | None:
    """The branching Hb uses for n unit bins, or ``None`` for a flat (Laplace) histogram."""
    if workload not in WORKLOADS:
        raise InvalidParameterError(f"workload must be one of {', '.join(WORKLOADS)}.")
    return _hb_choice(int(n), float(epsilon), workload)


def expected_variance(n: int, epsilon: float, workload: str = "ranges") -> float:
    """Hb's mean noise variance over the workload's ranges (:func:`workload_ranges`; public).

    Exact for the method Hb runs (the tree of :func:`hb_choice`'s branching, or
    the flat histogram), up to the Laplace sampler's 2⁻¹⁰ grid inflation.
    """
    branching = hb_choice(n, epsilon, workload)
    if branching is None:
        lo, hi = workload_ranges(n, workload)
        return float(np.mean((hi - lo + 1) * 2.0 / epsilon**2))
    return average_tree_variance(n, branching, epsilon, workload)


@functools.lru_cache(maxsize=256)
def _hb_choice(n: int, epsilon: float, workload: str) -> int | None:
    """Cached: a pure function of public parameters, costly for large n (variance sums)."""
    if n < 2:
        return None
    b = best_branching(n, epsilon, workload)
    lo, hi = workload_ranges(n, workload)
    flat = float(np.mean((hi - lo + 1) * 2.0 / epsilon**2))
    return None if flat <= average_tree_variance(n, b, epsilon, workload) else b


def hb(
    counts: ArrayLike,
    epsilon: float,
    *,
    workload: str = "ranges",
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
) -> PublishedHistogram:
    """Publish with Hb: a consistent noisy tree whose branching suits the workload.

    Privacy: epsilon-DP for add/remove one row. The branching (or the flat
    choice) is a function of the public n, epsilon and workload; the release
    is then :func:`dpkit.histograms.hierarchical` (node counts with l1
    sensitivity h under Lap(h/epsilon)) or :func:`dpkit.histograms.laplace`
    (sensitivity 1), both epsilon-DP, with that proof.

    Accuracy: unbiased; ``errors``/``answer_error`` are exact (as for the
    method run). The choice minimises the average noise variance of the
    workload's queries: ``"units"`` (single bins: usually flat),
    ``"prefixes"`` or ``"ranges"`` (all ranges; trees win from a few dozen
    bins on).

    Args:
        counts, epsilon, rng, accountant, edges: as for :func:`dpkit.histograms.laplace`.
        workload: ``"ranges"`` (default), ``"prefixes"`` or ``"units"``; public.
    """
    from dpkit.histograms.hierarchical import hierarchical
    from dpkit.histograms.laplace import laplace

    x = check_counts(counts)
    eps = epsilon_of(epsilon)
    branching = hb_choice(x.size, eps, workload)
    common: dict[str, Any] = {"rng": rng, "accountant": accountant, "edges": edges}
    if branching is None:
        published = laplace(x, eps, **common)
    else:
        published = hierarchical(x, eps, branching=branching, **common)
    details = dict(published.details, hb_branching=branching, workload=workload)
    return dataclasses.replace(published, method="hb", details=details)
