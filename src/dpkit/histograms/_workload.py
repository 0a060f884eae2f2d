"""Range workloads (public) and the exact noise variance of weighted bucket sums.

Pure functions, no privacy here. A workload is a set of inclusive unit-bin
ranges ``[lo, hi]``; the selector and Hb's branching use it to compare
algorithms by their exact error, which depends on public parameters only.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

Workload = Literal["units", "prefixes", "ranges"]
WORKLOADS: tuple[str, ...] = ("units", "prefixes", "ranges")


def workload_ranges(
    n: int, workload: str, count: int = 2000
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """A public sample of the workload's ranges (deterministic: seeded by n only).

    ``"units"``: every unit bin; ``"prefixes"``: ``[0, hi]`` for every hi (or an
    even subsample of ``count`` of them); ``"ranges"``: ``count`` ranges with
    both ends uniform (the all-range workload's average, sampled).
    """
    if workload == "units":
        idx = np.arange(n, dtype=np.int64)
        return idx, idx.copy()
    if workload == "prefixes":
        hi = np.unique(np.linspace(0, n - 1, min(n, count)).round().astype(np.int64))
        return np.zeros_like(hi), hi
    if workload == "ranges":
        rng = np.random.default_rng(n)
        ends = np.sort(rng.integers(0, n, size=(count, 2)), axis=1)
        return ends[:, 0].astype(np.int64), ends[:, 1].astype(np.int64)
    raise ValueError(f"workload must be one of {WORKLOADS}")


def tree_weighted_variance(
    first: NDArray[np.int64],
    last: NDArray[np.int64],
    first_weight: NDArray[np.float64],
    last_weight: NDArray[np.float64],
    branching: int,
    levels: int,
    node_variance: float,
) -> NDArray[np.float64]:
    """Variance of ``sum_b w_b T̂_b`` for the consistent b-ary tree estimates T̂.

    ``w`` is 1 on leaves ``first+1 .. last-1``, ``first_weight`` on ``first``
    and ``last_weight`` on ``last`` (one weight, ``first_weight``, when
    ``first == last``). As in :func:`dpkit.histograms.hierarchical.range_variance`:
    Var = sigma² sum_m (q_m - q_(m+1)) / lambda_m with q_m = sum over blocks of
    size b^m of (block sum of w)² / b^m; only the two end blocks differ from
    an indicator's.
    """
    b = branching
    same = first == last
    q = []
    for m in range(levels):
        block = b**m
        fb, lb = first // block, last // block
        one_block = fb == lb
        # Block sums of the indicator of [first, last], then the end corrections.
        head = np.where(one_block, last - first + 1, (fb + 1) * block - first).astype(np.float64)
        tail = np.where(one_block, 0, last - lb * block + 1).astype(np.float64)
        head += first_weight - 1.0
        head = np.where(one_block & ~same, head + last_weight - 1.0, head)
        tail = np.where(one_block, 0.0, tail + last_weight - 1.0)
        head = np.where(same, first_weight, head)
        full = np.maximum(lb - fb - 1, 0).astype(np.float64)
        q.append((head * head + tail * tail) / block + full * block)
    total = np.zeros(first.shape, dtype=np.float64)
    for m in range(levels):
        lam = (b ** (m + 1) - 1) / (b - 1)
        total += (q[m] - (q[m + 1] if m + 1 < levels else 0.0)) / lam
    return node_variance * total


def average_tree_variance(n: int, branching: int, epsilon: float, workload: str) -> float:
    """Mean exact noise variance of the consistent b-ary tree over the workload (public)."""
    from dpkit.histograms.hierarchical import range_variance, tree_levels

    levels = tree_levels(n, branching)
    lo, hi = workload_ranges(n, workload)
    node_variance = 2.0 * (levels / epsilon) ** 2
    return float(np.mean(range_variance(lo, hi, branching, levels, node_variance)))


def best_branching(n: int, epsilon: float, workload: str, candidates: range | None = None) -> int:
    """The branching b minimising :func:`average_tree_variance` (Hb's choice; public)."""
    options = candidates if candidates is not None else range(2, 65)
    best_b, best_v = 2, np.inf
    for b in options:
        if b > max(2, n) and b != options[0]:
            break
        v = average_tree_variance(n, b, epsilon, workload)
        if best_v == np.inf or v < best_v * (1.0 - 1e-12):
            best_b, best_v = b, v
    return best_b
