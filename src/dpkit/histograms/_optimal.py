"""The v-optimal histogram: interval costs and the O(n²k) dynamic programme.

Pure functions on arrays, no privacy here. Positions are 0-based and
half-open: the interval ``(a, b)`` is ``counts[a:b]``; a k-bin structure is the
boundary array ``[0, r_1, ..., r_{k-1}, n]``.

``interval_costs`` builds the (n+1)×(n+1) table ``C[a, b]`` (``+inf`` when
``a >= b``) with NumPy prefix sums (SSE) or prefix rank tables and a vectorised
binary search (SAE). ``optimal_rows`` runs the recurrence of Xu et al. (2013),
``T[j, i] = min_{j-1 <= a < i} T[j-1, a] + C[a, i]``, one row of bins at a time,
each row as a block of NumPy operations.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

Objective = Literal["sse", "sae"]

# Columns per block in the DP: keeps the temporary block near the CPU cache.
_BLOCK_ELEMENTS = 1 << 18


def interval_costs(counts: ArrayLike, objective: Objective = "sse") -> NDArray[np.float64]:
    """Return ``C`` with ``C[a, b]`` = error of merging ``counts[a:b]`` into one bin.

    ``objective="sse"``: sum of squared deviations from the interval's mean.
    ``objective="sae"``: sum of absolute deviations from the interval's median.
    Entries with ``a >= b`` are ``+inf``. Time and memory O(n²) (SAE: O(n² log n)).
    """
    x = np.asarray(counts, dtype=np.float64)
    if objective == "sse":
        return _sse_costs(x)
    if objective == "sae":
        return _sae_costs(x)
    raise ValueError(f"objective must be 'sse' or 'sae', got {objective!r}")


def _sse_costs(x: NDArray[np.float64]) -> NDArray[np.float64]:
    n = x.size
    # SSE is shift-invariant; centring keeps the prefix sums small (less cancellation).
    centred = x - (x.mean() if n else 0.0)
    p1 = np.concatenate(([0.0], np.cumsum(centred)))
    p2 = np.concatenate(([0.0], np.cumsum(centred * centred)))
    width = np.arange(n + 1, dtype=np.float64)
    length = width[None, :] - width[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        s1 = p1[None, :] - p1[:, None]
        cost = (p2[None, :] - p2[:, None]) - s1 * s1 / length
    np.maximum(cost, 0.0, out=cost)
    cost[length <= 0] = np.inf
    return cost


def _sae_costs(x: NDArray[np.float64]) -> NDArray[np.float64]:
    n = x.size
    cost = np.full((n + 1, n + 1), np.inf)
    if n == 0:
        return cost
    order = np.argsort(x, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    sorted_values = x[order]
    # below[p, v] = #{i < p : rank_i < v}; below_sum[p, v] = sum of those x_i.
    below_step = rank[:, None] < np.arange(n + 1)[None, :]
    below = np.zeros((n + 1, n + 1), dtype=np.int32)
    np.cumsum(below_step, axis=0, out=below[1:])
    below_sum = np.zeros((n + 1, n + 1), dtype=np.float64)
    np.cumsum(below_step * x[:, None], axis=0, out=below_sum[1:])
    del below_step
    prefix = np.concatenate(([0.0], np.cumsum(x)))

    a, b = np.triu_indices(n + 1, k=1)
    length = b - a
    half = length // 2  # t: elements in each half, the median excluded when odd
    stride = n + 1
    # Smallest v with #{rank < v in a:b} >= t+1: the element of rank v-1 is the
    # (t+1)-th smallest, i.e. the (upper) median.
    lo = np.zeros(a.size, dtype=np.int64)
    hi = np.full(a.size, n, dtype=np.int64)
    flat_below = below.ravel()
    for _ in range(n.bit_length() + 1):  # bisection on [0, n]: bounded by its bits
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi) // 2
        inside = flat_below[b * stride + mid] - flat_below[a * stride + mid]
        enough = inside >= half + 1
        hi = np.where(active & enough, mid, hi)
        lo = np.where(active & ~enough, mid + 1, lo)
    median_rank = lo - 1
    median = sorted_values[median_rank]
    flat_sum = below_sum.ravel()
    lower_half = flat_sum[b * stride + median_rank] - flat_sum[a * stride + median_rank]
    total = prefix[b] - prefix[a]
    odd = (length % 2).astype(np.float64)
    values = total - 2.0 * lower_half - odd * median
    cost[a, b] = np.maximum(values, 0.0)
    return cost


def optimal_rows(
    costs: NDArray[np.float64], max_bins: int
) -> Iterator[tuple[int, NDArray[np.float64], NDArray[np.int64]]]:
    """Yield ``(j, T_j, start_j)`` for j = 1 .. max_bins.

    ``T_j[i]`` is the least total cost of a j-bin histogram of ``counts[:i]``
    (``+inf`` when ``i < j``); ``start_j[i]`` is where its last bin starts.
    Each row costs O(n²) vectorised work; stop iterating early to save time.
    """
    n = costs.shape[0] - 1
    if not 1 <= max_bins <= max(n, 1):
        raise ValueError(f"max_bins must be in [1, {n}], got {max_bins}")
    previous = np.full(n + 1, np.inf)
    previous[0] = 0.0
    for j in range(1, max_bins + 1):
        row = np.full(n + 1, np.inf)
        start = np.zeros(n + 1, dtype=np.int64)
        # Last bin [a, i) with a in [j-1, i-1], i in [j, n].
        candidates = previous[j - 1 : n, None]
        block_cols = max(1, _BLOCK_ELEMENTS // max(1, n - j + 1))
        for c0 in range(j, n + 1, block_cols):
            c1 = min(n + 1, c0 + block_cols)
            block = candidates + costs[j - 1 : n, c0:c1]
            best = np.argmin(block, axis=0)
            row[c0:c1] = block[best, np.arange(c1 - c0)]
            start[c0:c1] = best + (j - 1)
        yield j, row, start
        previous = row


def optimal_table(
    costs: NDArray[np.float64], max_bins: int
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Full tables ``T`` and ``start`` of shape (max_bins + 1, n + 1).

    Row 0 is the empty histogram (``T[0, 0] = 0``, else ``+inf``).
    """
    n = costs.shape[0] - 1
    table = np.full((max_bins + 1, n + 1), np.inf)
    table[0, 0] = 0.0
    starts = np.zeros((max_bins + 1, n + 1), dtype=np.int64)
    for j, row, start in optimal_rows(costs, max_bins):
        table[j] = row
        starts[j] = start
    return table, starts


def backtrack(starts: NDArray[np.int64], n_bins: int) -> NDArray[np.int64]:
    """Boundaries ``[0, r_1, ..., n]`` of the optimal ``n_bins``-bin histogram."""
    n = starts.shape[1] - 1
    boundaries = np.empty(n_bins + 1, dtype=np.int64)
    boundaries[n_bins] = n
    end = n
    for j in range(n_bins, 0, -1):
        end = int(starts[j, end])
        boundaries[j - 1] = end
    return boundaries


def optimal_histogram(
    counts: ArrayLike, n_bins: int, objective: Objective = "sse"
) -> tuple[NDArray[np.int64], float]:
    """The optimal ``n_bins``-bin structure of ``counts`` and its total error."""
    costs = interval_costs(counts, objective)
    table, starts = optimal_table(costs, n_bins)
    return backtrack(starts, n_bins), float(table[n_bins, -1])


def bin_statistic(
    values: NDArray[np.float64], boundaries: NDArray[np.int64], statistic: str
) -> NDArray[np.float64]:
    """Mean or median of ``values`` over every bin of ``boundaries``."""
    if statistic == "mean":
        sums = np.add.reduceat(values, boundaries[:-1])
        return sums / np.diff(boundaries)
    return np.array(
        [np.median(values[lo:hi]) for lo, hi in itertools.pairwise(boundaries)],
        dtype=np.float64,
    )
