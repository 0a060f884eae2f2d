"""DAWA: a private data-aware partition, then a workload-aware measurement of its buckets.

Li, Hay, Miklau, Wang, "A data- and workload-aware algorithm for range queries
under differential privacy", PVLDB 2014. Stage 1 finds, with part of the
budget, a partition of the domain into buckets whose counts are nearly
uniform (few buckets where the data are flat, many where they change);
stage 2 measures the bucket totals with a strategy suited to the workload and
spreads each total evenly over its bucket.

What differs from the paper, and why:

* Stage 1's noise. The paper adds Laplace noise to the cost of every
  candidate bucket and takes the partition of least noisy total cost. One
  row changes the cost of *every* candidate bucket containing its bin, so the
  plain report-noisy-min argument does not apply; the proof below gives
  epsilon_1-DP with per-bucket noise of scale 2Δ/epsilon_1 (Δ = 2, the
  sensitivity of one bucket's L1 deviation), twice the scale of the
  reference implementation.
* Stage 2. The paper's GreedyH chooses per-level budgets of a binary tree for
  an explicit workload matrix. Here the buckets are measured by
  :func:`dpkit.histograms.hb` (a consistent b-ary tree with its branching
  chosen for the workload, or flat), which has an exact error formula.
"""

from __future__ import annotations

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


@njit(cache=True, nogil=True)
def _dyadic_deviations(
    x: NDArray[np.float64], lengths: NDArray[np.int64]
) -> NDArray[np.float64]:  # pragma: no cover - compiled
    """dev[k, i] = sum |x_j - mean| over the bucket of length lengths[k] ending at i (else -1)."""
    n = x.size
    prefix = np.zeros(n + 1)
    for i in range(n):
        prefix[i + 1] = prefix[i] + x[i]
    out = np.full((lengths.size, n), -1.0)
    for k in range(lengths.size):
        length = lengths[k]
        for i in range(length - 1, n):
            start = i - length + 1
            mean = (prefix[i + 1] - prefix[start]) / length
            total = 0.0
            for j in range(start, i + 1):
                total += abs(x[j] - mean)
            out[k, i] = total
    return out


@njit(cache=True, nogil=True)
def _least_cost_partition(
    costs: NDArray[np.float64], lengths: NDArray[np.int64]
) -> NDArray[np.int64]:  # pragma: no cover - compiled
    """start[i+1] of the last bucket of the least-cost partition of [0, i] (dyadic lengths)."""
    n = costs.shape[1]
    best = np.full(n + 1, np.inf)
    start = np.zeros(n + 1, dtype=np.int64)
    best[0] = 0.0
    for i in range(n):
        for k in range(lengths.size):
            length = lengths[k]
            if length > i + 1:
                break
            value = best[i + 1 - length] + costs[k, i]
            if value < best[i + 1]:
                best[i + 1] = value
                start[i + 1] = i + 1 - length
    return start


def dyadic_lengths(n: int) -> NDArray[np.int64]:
    """Bucket lengths DAWA considers: 1, 2, 4, ... up to n (public)."""
    return 2 ** np.arange(int(n).bit_length(), dtype=np.int64)


def private_partition(
    x: NDArray[np.float64],
    lengths: NDArray[np.int64],
    noise: Any,
    bucket_cost: float,
    source: Any,
) -> NDArray[np.int64]:
    """Stage 1: boundaries of the least noisy-cost partition (see :func:`dawa`'s proof).

    ``noise`` is the Laplace mechanism over every candidate bucket's
    deviation; ``bucket_cost`` the public cost of measuring one bucket
    (1/epsilon_2), added to each noisy cost, which is clipped below at it.
    """
    n = x.size
    deviations = _dyadic_deviations(x, lengths)
    valid = deviations >= 0.0
    noisy = np.asarray(
        noise.randomise(np.where(valid, deviations, 0.0).ravel(), rng=source), dtype=np.float64
    ).reshape(deviations.shape)
    costs = np.where(valid, np.maximum(noisy + bucket_cost, bucket_cost), np.inf)
    start = _least_cost_partition(costs, lengths)
    bounds = [n]
    while bounds[-1] > 0:
        bounds.append(int(start[bounds[-1]]))
    return np.asarray(bounds[::-1], dtype=np.int64)


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

    Stage 1 (epsilon_1 = ``partition_share`` · epsilon). Every candidate bucket I
    (length a power of two) has cost dev(I) = sum_{j in I} |x_j - mean(I)|; each
    gets independent Laplace noise η_I of scale 2Δ/epsilon_1 with Δ = 2 (one
    count moving by 1 moves dev(I) by at most 2(1 - 1/|I|)), plus the public
    constant 1/epsilon_2, clipped below at 1/epsilon_2; the partition P of least
    total noisy cost is kept. Proof: fix an output P and let i be the changed
    bin, I_P the bucket of P holding i. Shifting η_{I_P} down by 2Δ changes
    the density by at most e^{epsilon_1} and maps every noise vector for which
    P wins on x to one for which P wins on the neighbour: P's cost moves by at
    most +Δ before the shift, any rival's by at most -Δ (one of its buckets
    holds i), and partitions sharing I_P share the shift. So
    P(P | x) <= e^{epsilon_1} P(P | x'). (On dpkit's exact grid noise the
    shift is a whole number of grid steps, with the grid's rounding counted.)

    Stage 2 (epsilon_2, the rest). The partition is public now; the vector of
    bucket totals of the true counts has l1 sensitivity 1, measured by
    :func:`dpkit.histograms.hb` for ``workload`` (a consistent tree, or flat
    Laplace), then spread evenly over each bucket.

    Accuracy: ``errors`` and ``answer_error`` are the exact noise standard
    deviations given the partition (Hb's covariance, weighted by the share of
    each bucket a range covers); the spread within a bucket is not included.

    Args:
        counts, epsilon, rng, accountant, edges: as for :func:`dpkit.histograms.laplace`.
        partition_share: epsilon_1 / epsilon in (0, 1); default 0.25 (the paper's).
        workload: ``"ranges"``, ``"prefixes"`` or ``"units"`` (public), for stage 2.
    """
    from dpkit.histograms.hb import hb
    from dpkit.mechanisms import Laplace

    x = check_counts(counts)
    eps = epsilon_of(epsilon)
    unit_edges = check_edges(edges, x.size)
    share = check_fraction(partition_share, "partition_share")
    if workload not in WORKLOADS:
        raise InvalidParameterError(f"workload must be one of {', '.join(WORKLOADS)}.")
    n = x.size
    lengths = dyadic_lengths(n)
    eps_partition, eps_values = split_budget(eps, share)
    # Grid noise: a cost moves by <= floor(Δ/g) + 1 grid steps; the shift of
    # the proof is twice that plus one step (strict win): floor(2Δ/g) + 3.
    partition_noise = Laplace(
        epsilon=eps_partition,
        sensitivity=2.0 * DEVIATION_SENSITIVITY,
        size=int(lengths.size * n),
        changed=3,
    )
    payer = as_accountant(accountant)

    def release() -> PublishedHistogram:
        remaining = None if payer is None else payer.remaining
        source = source_for(rng)
        boundaries = private_partition(x, lengths, partition_noise, 1.0 / eps_values, source)
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
                "partition_scale": partition_noise.scale,
                "hb_branching": branching,
                "workload": workload,
                "scale": measured.details["scale"],
                "remaining": remaining,
            },
            range_variance=variance,
        )

    return charge_and_run(payer, Budget(eps), "histogram: dawa", release)
