"""How far counts are from taking a few values: the exact L1 distance to K levels.

:func:`level_deviation` is the ties probe's statistic (:mod:`dpkit.histograms.select`):
the least total |x_i - c_i| over vectors c with at most K distinct values. It is
1-Lipschitz in the l1 norm (a minimum of 1-Lipschitz functions), so adding or
removing one row moves it by at most 1. In one dimension the best K levels cut
the sorted counts into K contiguous runs, each at its median, so it is the
optimal 1-D K-median cost, found exactly by dynamic programming; the segment
cost satisfies the quadrangle (Monge) inequality, so each layer's leftmost
optimal cut is non-decreasing and divide and conquer finds it in O(n log n)
(Grønlund, Larsen, Mathiasen, Nielsen, Schneider, Song, "Fast exact k-means,
k-medians and Bregman divergence clustering in 1D", 2017).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray


def segment_costs(
    y: NDArray[np.float64], prefix: NDArray[np.float64], i: NDArray[np.int64], j: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Σ |y_t - median| over the sorted run y[i:j] (i < j), from prefix sums: O(1) each.

    With m = (i + j) // 2 (a median's index) the cost is
    (P[j] - P[m] - (j - m)·y[m]) + ((m - i)·y[m] - (P[m] - P[i])).
    For whole counts with total below 2⁵³ every term is an exact integer.
    """
    m = (i + j) // 2
    ym = y[m]
    out: NDArray[np.float64] = (prefix[j] - prefix[m] - (j - m) * ym) + (
        (m - i) * ym - (prefix[m] - prefix[i])
    )
    return out


def _layer(
    previous: NDArray[np.float64], y: NDArray[np.float64], prefix: NDArray[np.float64]
) -> NDArray[np.float64]:
    """F(j) = min over 0 <= i < j of previous[i] + cost(i, j), for j = 1 .. n (F(0) = 0).

    Divide and conquer on j with the leftmost optimal i (monotone in j), one
    vectorised step per depth of the recursion: every node of a depth at once.
    The j-ranges split the same way whatever the counts; the i-ranges of a
    depth overlap only at their ends, so they hold at most n + (nodes) - 1
    candidates, and each depth evaluates exactly n + (nodes) costs (the rest
    padding), so the work done does not depend on the counts.
    """
    n = y.size
    out = np.zeros(n + 1)
    # Nodes: the j-range [jlo, jhi] and the i-range [ilo, ihi] its optima lie in.
    jlo = np.array([1], dtype=np.int64)
    jhi = np.array([n], dtype=np.int64)
    ilo = np.array([0], dtype=np.int64)
    ihi = np.array([n - 1], dtype=np.int64)
    while jlo.size:
        mid = (jlo + jhi) // 2
        top = np.minimum(ihi, mid - 1)
        sizes = top - ilo + 1
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        node = np.repeat(np.arange(jlo.size), sizes)
        i = ilo[node] + (np.arange(node.size) - starts[node])
        pad = n + jlo.size - node.size  # >= 1: a fixed amount of work per depth
        i_all = np.concatenate((i, np.zeros(pad, dtype=np.int64)))
        j_all = np.concatenate((mid[node], np.ones(pad, dtype=np.int64)))
        values = (previous[i_all] + segment_costs(y, prefix, i_all, j_all))[: node.size]
        best = np.minimum.reduceat(values, starts)
        hits = np.flatnonzero(values == best[node])
        first = hits[np.concatenate(([True], node[hits][1:] != node[hits][:-1]))]
        cut = i[first]
        out[mid] = best
        left = jlo <= mid - 1
        right = mid + 1 <= jhi
        jlo, jhi, ilo, ihi = (
            np.concatenate((jlo[left], mid[right] + 1)),
            np.concatenate((mid[left] - 1, jhi[right])),
            np.concatenate((ilo[left], cut[right])),
            np.concatenate((cut[left], ihi[right])),
        )
    return out


def level_deviation(counts: ArrayLike, levels: int) -> float:
    """min over c with at most ``levels`` distinct values of Σ |x_i - c_i| (exact).

    Sensitivity under add/remove one row: at most 1. For any fixed c,
    Σ |x_i - c_i| moves by at most |x'_i - x_i| = 1; the minimum over a fixed
    family of such functions (all c with <= K values, K public) moves by at
    most as much. The computation is exact for whole counts totalling below
    2⁵³ (integer arithmetic in float64), so the value returned is that minimum.
    """
    y = np.sort(np.asarray(counts, dtype=np.float64).ravel())
    n = y.size
    if n == 0:
        return 0.0
    prefix = np.concatenate(([0.0], np.cumsum(y)))
    j = np.arange(n + 1, dtype=np.int64)
    best = np.zeros(n + 1)
    best[1:] = segment_costs(y, prefix, np.zeros(n, dtype=np.int64), j[1:])
    for _ in range(min(levels, n) - 1):
        best = np.minimum(best, _layer(best, y, prefix))
    return float(best[n])
