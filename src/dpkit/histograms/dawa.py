"""DAWA: a private data-aware partition, then a workload-aware measurement of its buckets.

Li, Hay, Miklau, Wang, "A data- and workload-aware algorithm for range queries
under differential privacy", PVLDB 2014. Stage 1 finds, with part of the
budget, a partition of the domain into buckets whose counts are nearly
uniform (few buckets where the data are flat, many where they change);
stage 2 measures the bucket totals with a strategy suited to the workload and
spreads each total evenly over its bucket.

What differs from the paper, and why:

* Stage 1's candidate buckets and noise. The paper (and its reference
  implementation) adds Laplace noise of scale about 2/epsilon_1 to the
  deviation cost of every run of power-of-two length, clips each noisy cost
  at a floor, and takes the partition of least noisy total cost. dpkit did
  the same with twice that noise, and it was not epsilon_1-DP: one row
  changes the cost of *every* candidate holding its bin (up to 2n of them),
  and the clipping made some partitions impossible on one dataset and
  possible on its neighbour (issue 26: on 32 zero counts the event "bin 13 is
  a bucket of its own" had probability 0, with one row in bin 13 about 5%,
  at epsilon = 8 and share 0.5). dpkit's stage 1 is now a
  Laplace release of the *vector* of the deviations of the aligned dyadic
  buckets (the nodes of a binary tree over the bins: one per level holds any
  bin), with noise calibrated to that vector's l1 sensitivity, followed by a
  least-cost partition that reads only the noisy vector (post-processing).
  Partitions are unions of tree nodes rather than any runs of dyadic length.
* Stage 2. The paper's GreedyH chooses per-level budgets of a binary tree for
  an explicit workload matrix. Here the buckets are measured by
  :func:`dpkit.histograms.hb` (a consistent b-ary tree with its branching
  chosen for the workload, or flat), which has an exact error formula.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import ArrayLike, NDArray

from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.errors import InvalidParameterError
from dpkit.histograms._common import (
    check_counts,
    check_edges,
    check_fraction,
    epsilon_of,
    source_for,
)
from dpkit.histograms._published import PublishedHistogram
from dpkit.histograms._workload import WORKLOADS, tree_weighted_variance
from dpkit.histograms.structure_first import split_budget

#: Share of epsilon spent on the partition (epsilon_1 / epsilon), the paper's 0.25.
DEFAULT_PARTITION_SHARE = 0.25
#: Bound on how much one row changes one bucket's L1 deviation: 2(1 - 1/|B|) < 2.
DEVIATION_SENSITIVITY = 2.0


def partition_levels(n: int) -> int:
    """K = ceil(log2 n): the levels 1 .. K of aligned dyadic buckets over n bins (public)."""
    return max(0, int(n - 1).bit_length())


def partition_sensitivity(n: int) -> float:
    """l1 sensitivity of the vector of all candidate buckets' deviations (public).

    One row changes one bin; the bin lies in one bucket per level k = 1 .. K,
    of length at most 2^k, whose deviation moves by at most 2(1 - 2^-k); so
    the vector moves by at most sum_k 2(1 - 2^-k) = 2K - 2 + 2^(1-K) in l1
    (0 for one bin), rounded up to a float. Tight: x = 0 and a row in bin 0
    reach it when n is a power of two.
    """
    levels = partition_levels(n)
    bound = Fraction(2 * levels - 2) + Fraction(2, 2**levels) if levels else Fraction(0)
    out = float(bound)
    return out if Fraction(out) >= bound else math.nextafter(out, math.inf)


@functools.lru_cache(maxsize=64)
def bucket_offsets(n: int) -> NDArray[np.int64]:
    """Where each level starts in the flat vector of candidate buckets (public).

    Level k (1 .. K) holds the ceil(n / 2^k) buckets [j 2^k, min((j + 1) 2^k, n))
    (the last one may be shorter) at positions ``offsets[k-1] .. offsets[k]``.
    """
    counts = [-(-int(n) // (1 << k)) for k in range(1, partition_levels(n) + 1)]
    offsets = np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).astype(np.int64)
    offsets.flags.writeable = False  # cached: shared by every call
    return offsets


@njit(cache=True, nogil=True)
def _deviations(
    x: NDArray[np.float64], offsets: NDArray[np.int64]
) -> NDArray[np.float64]:  # pragma: no cover - compiled
    n = x.size
    out = np.zeros(offsets[-1])
    for k in range(1, offsets.size):
        width = 1 << k
        for j in range(offsets[k] - offsets[k - 1]):
            lo = j * width
            hi = min(lo + width, n)
            length = hi - lo
            total = 0.0
            for t in range(lo, hi):
                total += x[t]
            spread = 0.0
            for t in range(lo, hi):
                spread += abs(x[t] * length - total)
            out[offsets[k - 1] + j] = spread / length
    return out


def bucket_deviations(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """dev(I) = sum_{j in I} |x_j - mean(I)| of every candidate bucket (see :func:`bucket_offsets`).

    Computed as sum |len · x_j - S| / len (S the bucket's sum): exact for
    integer counts below 2^53 / n, up to the rounding of the final division.
    """
    values = np.ascontiguousarray(x, dtype=np.float64)
    return np.asarray(_deviations(values, bucket_offsets(values.size)))


@njit(cache=True, nogil=True)
def _least_cost(
    noisy: NDArray[np.float64], offsets: NDArray[np.int64], n: int, bucket_cost: float
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    levels = offsets.size - 1
    merge = np.zeros(offsets[-1], dtype=np.bool_)
    below = np.full(n, bucket_cost)  # level 0: singletons, deviation 0 on every input
    for k in range(1, levels + 1):
        m = offsets[k] - offsets[k - 1]
        best = np.empty(m)
        for j in range(m):
            split = below[2 * j]
            if 2 * j + 1 < below.size:  # a lone last child spans the node: split = the child
                split += below[2 * j + 1]
            whole = max(noisy[offsets[k - 1] + j], 0.0) + bucket_cost
            merge[offsets[k - 1] + j] = whole <= split
            best[j] = min(whole, split)
        below = best
    starts = np.zeros(n + 1, dtype=np.bool_)
    starts[n] = True
    stack_level = np.empty(2 * levels + 2, dtype=np.int64)
    stack_node = np.empty(2 * levels + 2, dtype=np.int64)
    stack_level[0], stack_node[0], top = levels, 0, 1
    while top > 0:
        top -= 1
        k, j = stack_level[top], stack_node[top]
        if k == 0 or merge[offsets[k - 1] + j]:
            starts[j << k] = True
            continue
        count = (n + (1 << (k - 1)) - 1) >> (k - 1)
        for child in (2 * j + 1, 2 * j):
            if child < count:
                stack_level[top], stack_node[top] = k - 1, child
                top += 1
    return np.flatnonzero(starts).astype(np.int64)


def least_cost_partition(
    noisy: NDArray[np.float64], n: int, bucket_cost: float
) -> NDArray[np.int64]:
    """Boundaries ``[0, ..., n]`` of the least-cost partition into candidate buckets.

    A fixed function of the noisy deviations ``noisy`` (laid out as
    :func:`bucket_offsets`) and the public ``bucket_cost``: post-processing.
    A bucket costs max(noisy dev, 0) + ``bucket_cost`` (a singleton
    ``bucket_cost``: its deviation is 0 on every input); the tree's dynamic
    programme keeps, at each node, the bucket itself or the best split of its
    two halves, whichever costs less (the bucket on ties). O(n) time.
    """
    offsets = bucket_offsets(n)
    values = np.ascontiguousarray(noisy, dtype=np.float64).ravel()
    if values.size != offsets[-1]:
        raise ValueError(f"expected {offsets[-1]} noisy deviations, got {values.size}")
    return np.asarray(_least_cost(values, offsets, int(n), float(bucket_cost)))


def partition_noise(n: int, epsilon_partition: float) -> Any:
    """Stage 1's mechanism: one Laplace release of all ``n`` bins' candidate deviations.

    Calibrated to :func:`partition_sensitivity` (the l1 change of the whole
    vector) with at most :func:`partition_levels` entries changed; ``None``
    for one bin (no candidate bucket has a deviation that can change).
    """
    from dpkit.mechanisms import Laplace

    levels = partition_levels(n)
    if levels == 0:
        return None
    return Laplace(
        epsilon=epsilon_partition,
        sensitivity=partition_sensitivity(n),
        size=int(bucket_offsets(n)[-1]),
        changed=levels,
    )


def private_partition(
    x: NDArray[np.float64], noise: Any, bucket_cost: float, source: Any
) -> NDArray[np.int64]:
    """Stage 1: boundaries of the least noisy-cost partition (see :func:`dawa`'s proof).

    ``noise`` is the Laplace mechanism calibrated to the whole vector of
    bucket deviations (:func:`partition_sensitivity`; ``None`` for one bin,
    where there is nothing to release); the partition is a fixed function of
    that noisy vector and the public ``bucket_cost`` (1/epsilon_2).
    """
    deviations = bucket_deviations(x)
    if noise is None and deviations.size:
        raise ValueError("the partition of more than one bin needs its noise")
    noisy = deviations if noise is None else noise.randomise(deviations, rng=source)
    return least_cost_partition(np.asarray(noisy, dtype=np.float64), x.size, bucket_cost)


def dawa(
    counts: ArrayLike,
    epsilon: float,
    *,
    partition_share: float = DEFAULT_PARTITION_SHARE,
    workload: str = "ranges",
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
) -> PublishedHistogram:
    """Publish a DAWA histogram: private partition (epsilon_1), then bucket totals (epsilon_2).

    Privacy: epsilon-DP for add/remove one row (one unit count changes by 1);
    epsilon = epsilon_1 + epsilon_2, both rounded down (sequential composition).

    Stage 1 (epsilon_1 = ``partition_share`` · epsilon). Neighbouring
    relation: x' = x ± e_i (one row added to or removed from bin i). The
    candidate buckets are the aligned dyadic intervals
    I_{k,j} = [j·2^k, min((j+1)·2^k, n)) for levels k = 1 .. K = ceil(log2 n),
    the nodes of a binary tree over the bins (singletons are buckets too, but
    their deviation is 0 on every input: nothing to release). Released: the
    vector D(x) = (dev(I_{k,j}))_{k,j}, dev(I) = sum_{j in I} |x_j - mean(I)|,
    plus independent Laplace noise calibrated to its l1 sensitivity.
    Sensitivity: adding 1 to x_i moves mean(I) by 1/|I| for each I holding i,
    so |x_i - mean| moves by at most 1 - 1/|I| and each of the |I| - 1 other
    terms by at most 1/|I|: |dev_I(x') - dev_I(x)| <= 2(1 - 1/|I|) (attained
    e.g. by x = 0, i in I). Exactly one bucket per level holds i, of length at
    most 2^k, and buckets not holding i do not change; so
    ||D(x') - D(x)||_1 <= sum_{k=1..K} 2(1 - 2^-k) = 2K - 2 + 2^(1-K)
    (:func:`partition_sensitivity`; about 2 log2 n), with at most K entries
    changed. dpkit's exact grid Laplace (:class:`dpkit.mechanisms.Laplace`,
    ``sensitivity`` that bound, ``changed=K``, the grid's rounding counted) is
    then epsilon_1-DP for the whole vector. The partition is a fixed function
    of the noisy vector and the public 1/epsilon_2 (:func:`least_cost_partition`:
    a bucket costs max(noisy dev, 0) + 1/epsilon_2, and the tree's dynamic
    programme keeps at each node the bucket or its halves' best split), so
    it is epsilon_1-DP by post-processing: no shift argument, no
    data-dependent clipping, no event possible on one input only.

    Stage 2 (epsilon_2, the rest). The partition is public now; the vector of
    bucket totals of the true counts has l1 sensitivity 1, measured by
    :func:`dpkit.histograms.hb` for ``workload`` (a consistent tree, or flat
    Laplace), then spread evenly over each bucket.

    Accuracy: ``errors`` and ``answer_error`` are the exact noise standard
    deviations given the partition (Hb's covariance, weighted by the share of
    each bucket a range covers); the spread within a bucket is not included.

    Args:
        counts, epsilon, rng, accountant, edges: as for :func:`dpkit.histograms.laplace`.
        partition_share: epsilon_1 / epsilon in (0, 1); default 0.25 (the paper's;
            also the best of 0.15, 0.25 and 0.35 on ``benchmarks/histograms_dpbench.py``).
        workload: ``"ranges"``, ``"prefixes"`` or ``"units"`` (public), for stage 2.
    """
    from dpkit.histograms.hb import hb

    x = check_counts(counts)
    eps = epsilon_of(epsilon)
    unit_edges = check_edges(edges, x.size)
    share = check_fraction(partition_share, "partition_share")
    if workload not in WORKLOADS:
        raise InvalidParameterError(f"workload must be one of {', '.join(WORKLOADS)}.")
    n = x.size
    eps_partition, eps_values = split_budget(eps, share)
    partition_mechanism = partition_noise(n, eps_partition)
    payer = as_accountant(accountant)

    def release() -> PublishedHistogram:
        remaining = None if payer is None else payer.remaining
        source = source_for(rng)
        boundaries = private_partition(x, partition_mechanism, 1.0 / eps_values, source)
        widths = np.diff(boundaries)
        totals = np.add.reduceat(x, boundaries[:-1])
        m = widths.size
        measured = hb(totals, eps_values, workload=workload, rng=source)
        branching = measured.details["hb_branching"]  # Hb's own choice for m buckets
        bucket_of = np.repeat(np.arange(m), widths)
        estimates = np.repeat(measured.estimates / widths, widths)
        node_variance = 2.0 * measured.details["scale"] ** 2
        levels = int(measured.details.get("levels") or 1)

        def variance(lo: NDArray[np.int64], hi: NDArray[np.int64]) -> NDArray[np.float64]:
            first, last = bucket_of[lo], bucket_of[hi]
            same = first == last
            first_w = np.where(
                same,
                (hi - lo + 1) / widths[first],
                (boundaries[first + 1] - lo) / widths[first],
            ).astype(np.float64)
            last_w = ((hi - boundaries[last] + 1) / widths[last]).astype(np.float64)
            if branching is None:
                inner = np.maximum(last - first - 1, 0).astype(np.float64)
                weights2 = first_w**2 + np.where(same, 0.0, last_w**2) + inner
                return weights2 * node_variance
            return tree_weighted_variance(
                first, last, first_w, last_w, branching, levels, node_variance
            )

        units = np.arange(n, dtype=np.int64)
        return PublishedHistogram(
            estimates=estimates,
            bins=boundaries,
            epsilon=eps,
            method="dawa",
            errors=np.sqrt(variance(units, units)),
            edges=unit_edges,
            details={
                "n_bins": m,
                "epsilon_partition": eps_partition,
                "epsilon_values": eps_values,
                "partition_scale": 0.0
                if partition_mechanism is None
                else partition_mechanism.scale,
                "hb_branching": branching,
                "workload": workload,
                "scale": measured.details["scale"],
                "remaining": remaining,
            },
            range_variance=variance,
        )

    return charge_and_run(payer, Budget(eps), "histogram: dawa", release)
