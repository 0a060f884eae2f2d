"""DAWA in two dimensions: the unit cells in Hilbert-curve order, then 1-D DAWA.

Li, Hay, Miklau, Wang (PVLDB 2014) run their algorithm on 2-D data by laying
the cells along a Hilbert curve, which keeps cells that are close on the map
mostly close in the sequence; DAWA's data-aware partition then merges runs of
similar cells (large empty or flat regions become one bucket) and measures the
bucket totals. See :func:`dpkit.histograms.dawa` for the 1-D algorithm and
what dpkit does differently from the paper: its candidate buckets are the
nodes of a binary tree over the sequence, which on a power-of-two square grid
are the quadtree's squares and their halves along the curve.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.histograms._common import check_fraction, source_for
from dpkit.histograms._grid import Index, PublishedGrid, check_inputs, unit_cells
from dpkit.histograms.dawa import DEFAULT_PARTITION_SHARE

__all__ = ["dawa2d", "hilbert_order"]


def hilbert_index(x: NDArray[np.int64], y: NDArray[np.int64], bits: int) -> NDArray[np.int64]:
    """Position of cell ``(x, y)`` along the Hilbert curve over a ``2^bits × 2^bits`` square."""
    x, y = x.astype(np.int64).copy(), y.astype(np.int64).copy()
    side = np.int64(1) << bits
    d = np.zeros_like(x)
    s = side >> 1
    while s > 0:
        rx = ((x & s) > 0).astype(np.int64)
        ry = ((y & s) > 0).astype(np.int64)
        d += s * s * ((3 * rx) ^ ry)
        # Rotate the quadrant so that the curve inside it starts where the parent expects.
        turn = ry == 0
        flip = turn & (rx == 1)
        x = np.where(flip, side - 1 - x, x)
        y = np.where(flip, side - 1 - y, y)
        x, y = np.where(turn, y, x), np.where(turn, x, y)
        s >>= 1
    return d


def hilbert_order(nx: int, ny: int) -> NDArray[np.int64]:
    """Flat indices (row-major, ``i * ny + j``) of an ``nx × ny`` grid in Hilbert-curve order.

    The curve runs over the smallest power-of-two square holding the grid;
    cells outside the grid are skipped. A public function of the shape.
    """
    bits = max(1, int(np.ceil(np.log2(max(nx, ny, 2)))))
    i, j = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
    return np.argsort(hilbert_index(i.ravel(), j.ravel(), bits), kind="stable").astype(np.int64)


def _pieces(
    covered: NDArray[np.int64], widths: NDArray[np.int64], boundaries: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """1-D ranges with the same noise as the covered parts of the buckets, piece by piece.

    The noise in a sum over any cells depends only on how many cells of each
    bucket it covers. Consecutive covered buckets form one piece as long as
    only its first and last buckets are partly covered; a piece's noise equals
    that of the 1-D range starting ``covered`` cells before the end of its
    first bucket and ending ``covered`` cells into its last (a piece inside
    one bucket: any range of that length in it), whose s.d. 1-D DAWA gives
    exactly.
    """
    partial = (covered > 0) & (covered < widths)
    starts: list[int] = []
    ends: list[int] = []
    b, m = 0, widths.size
    while b < m:
        if covered[b] == 0:
            b += 1
            continue
        first = b
        b += 1
        # Bucket b joins if the one before it is the piece's first or fully covered.
        while b < m and covered[b] > 0 and (b - 1 == first or not partial[b - 1]):
            b += 1
        last = b - 1
        if first == last:  # a part of one bucket: any range of that many of its cells
            starts.append(int(boundaries[first]))
            ends.append(int(boundaries[first] + covered[first] - 1))
            continue
        starts.append(int(boundaries[first + 1] - covered[first]))
        ends.append(int(boundaries[last] + covered[last] - 1))
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


def dawa2d(
    counts: ArrayLike,
    epsilon: float,
    *,
    partition_share: float = DEFAULT_PARTITION_SHARE,
    rng: object = None,
    accountant: Any = None,
    x_edges: ArrayLike | None = None,
    y_edges: ArrayLike | None = None,
) -> PublishedGrid:
    """Publish a 2-D histogram with DAWA over the Hilbert-ordered unit cells.

    Privacy: epsilon-DP for add/remove one row. The Hilbert order is a public
    function of the grid's shape, so reordering the unit counts is a fixed
    bijection: one row still changes exactly one entry of the sequence by 1,
    and :func:`dpkit.histograms.dawa` (epsilon-DP under that relation: its
    partition is post-processing of one Laplace release of all candidate
    buckets' deviations, calibrated to their joint l1 sensitivity, then the
    bucket totals are measured) is applied as is.
    Mapping the estimates back to the grid is post-processing.

    Accuracy: ``answer_error`` of a rectangle is an *upper bound* on the noise
    s.d.: the rectangle is a union of runs along the curve, each run's noise
    s.d. is exact (1-D DAWA's), and the s.d. of a sum is at most the sum of the
    s.d.s (the runs' noises are correlated through the measurement tree). The
    even spread inside a bucket is not included.

    Args:
        counts, epsilon, rng, accountant, x_edges, y_edges: as for
            :func:`dpkit.histograms.laplace2d`.
        partition_share: DAWA's epsilon_1 / epsilon (default 0.25).
    """
    from dpkit.histograms.dawa import dawa

    x, eps, ex, ey = check_inputs(counts, epsilon, x_edges, y_edges)
    nx, ny = x.shape
    share = check_fraction(partition_share, "partition_share")
    order = hilbert_order(nx, ny)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    payer = as_accountant(accountant)

    def release() -> PublishedGrid:
        remaining = None if payer is None else payer.remaining
        line = dawa(x.ravel()[order], eps, partition_share=share, rng=source_for(rng))
        estimates = np.empty(x.size)
        estimates[order] = line.estimates
        positions = rank.reshape(nx, ny)

        boundaries = line.bins
        widths = np.diff(boundaries)
        bucket_of = np.repeat(np.arange(widths.size), widths)

        def variance(x0: Index, x1: Index, y0: Index, y1: Index) -> NDArray[np.float64]:
            out = np.empty(x0.size)
            for q in range(x0.size):
                inside = positions[x0[q] : x1[q], y0[q] : y1[q]].ravel()
                covered = np.bincount(bucket_of[inside], minlength=widths.size)
                lo, hi = _pieces(covered, widths, boundaries)
                out[q] = float(np.sum(line.answer_error(lo, hi))) ** 2
            return out

        return PublishedGrid(
            estimates=estimates.reshape(nx, ny),
            x_edges=ex,
            y_edges=ey,
            epsilon=eps,
            method="dawa2d",
            cells=unit_cells(nx, ny),
            details={
                "n_buckets": int(line.details["n_bins"]),
                "epsilon_partition": line.details["epsilon_partition"],
                "epsilon_values": line.details["epsilon_values"],
                "partition_scale": line.details["partition_scale"],
                "scale": line.details["scale"],
                "remaining": remaining,
            },
            rectangle_variance=variance,
        )

    return charge_and_run(payer, Budget(eps), "histogram2d: dawa2d", release)
