"""AHP: noisy counts, sorted and clustered, then one noisy total per cluster.

Zhang, Chen, Xu, Meng, Xie, "Towards accurate histogram publication under
differential privacy", SDM 2014. Bins with similar counts — wherever they are
in the domain — are grouped, and each group's total is measured once and
spread evenly: on sparse or skewed data many bins share one noise draw.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.histograms._common import (
    check_counts,
    check_edges,
    check_fraction,
    check_positive,
    epsilon_of,
    source_for,
)
from dpkit.histograms._published import PublishedHistogram
from dpkit.histograms.structure_first import split_budget

#: Share of epsilon spent on the clustering (epsilon_1 / epsilon), as in DPBench's AHP.
DEFAULT_CLUSTER_SHARE = 0.85
#: eta of the zeroing threshold eta · log(n) / epsilon_1, as in DPBench's AHP.
DEFAULT_ETA = 0.35


def cluster_sorted(values: NDArray[np.float64], noise_variance: float) -> NDArray[np.int64]:
    """Greedy clusters of the values in sorted order: a label per value (post-processing).

    Walk the values from largest to smallest; add the next one to the current
    cluster when the estimated error of the merged cluster — its squared
    deviations plus the noise of one total spread over |C| bins,
    ``noise_variance / |C|`` — is no larger than keeping the value apart.
    """
    order = np.argsort(-values, kind="stable")
    labels = np.empty(values.size, dtype=np.int64)
    label = -1
    count, total, squares = 0, 0.0, 0.0
    for idx in order:
        v = float(values[idx])
        if count:
            merged_n = count + 1
            merged_sse = squares + v * v - (total + v) ** 2 / merged_n
            current_sse = squares - total * total / count
            merged = merged_sse + noise_variance / merged_n
            apart = current_sse + noise_variance / count + noise_variance
            if merged <= apart:
                count, total, squares = merged_n, total + v, squares + v * v
                labels[idx] = label
                continue
        label += 1
        count, total, squares = 1, v, v * v
        labels[idx] = label
    return labels


def ahp(
    counts: ArrayLike,
    epsilon: float,
    *,
    cluster_share: float = DEFAULT_CLUSTER_SHARE,
    eta: float = DEFAULT_ETA,
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
) -> PublishedHistogram:
    """Publish an AHP histogram: cluster noisy counts, then one noisy total per cluster.

    Privacy: epsilon-DP for add/remove one row (one unit count changes by 1),
    epsilon = epsilon_1 + epsilon_2 (sequential composition, the two parts
    rounded down so they never exceed epsilon).

    1. epsilon_1 = ``cluster_share`` · epsilon: x̂ = x + Lap(1/epsilon_1) on every
       unit count (l1 sensitivity 1).
    2. Post-processing of x̂ only: counts below eta·log(n)/epsilon_1 are set to
       0, the rest sorted and grouped greedily (:func:`cluster_sorted`); a
       cluster is any set of bins, not necessarily contiguous.
    3. epsilon_2 = the rest: the clusters are a public partition now, so the
       vector of cluster totals of the *true* counts has l1 sensitivity 1
       (one count lies in one cluster); Lap(1/epsilon_2) on each total, spread
       evenly over the cluster's bins.

    Accuracy: ``errors`` is the noise standard deviation of each unit estimate
    given the clusters, sqrt(2)·b/|C|; the estimates are biased by the spread
    within a cluster (not included, as for the other merging methods).

    Args:
        counts, epsilon, rng, accountant, edges: as for :func:`dpkit.histograms.laplace`.
        cluster_share: epsilon_1 / epsilon in (0, 1); default 0.85.
        eta: the zeroing threshold's factor (> 0); default 0.35.
    """
    from dpkit.mechanisms import Laplace

    x = check_counts(counts)
    eps = epsilon_of(epsilon)
    unit_edges = check_edges(edges, x.size)
    share = check_fraction(cluster_share, "cluster_share")
    eta_value = check_positive(eta, "eta")
    n = x.size
    eps_cluster, eps_values = split_budget(eps, share)
    first = Laplace(epsilon=eps_cluster, sensitivity=1.0, size=n)
    payer = as_accountant(accountant)

    def release() -> PublishedHistogram:
        remaining = None if payer is None else payer.remaining
        source = source_for(rng)
        noisy = np.asarray(first.randomise(x, rng=source), dtype=np.float64)
        threshold = eta_value * math.log(max(n, 2)) / eps_cluster
        cleaned = np.where(noisy < threshold, 0.0, noisy)
        # The clustering weighs deviations against the second stage's noise, 2/epsilon_2².
        labels = cluster_sorted(cleaned, 2.0 / eps_values**2)
        m = int(labels.max()) + 1
        sizes = np.bincount(labels, minlength=m)
        totals = np.bincount(labels, weights=x, minlength=m)
        second = Laplace(epsilon=eps_values, sensitivity=1.0, size=m, changed=1)
        noisy_totals = np.asarray(second.randomise(totals, rng=source), dtype=np.float64)
        estimates = (noisy_totals / sizes)[labels]
        unit_std = (math.sqrt(2.0) * second.scale / sizes)[labels]
        label_of = labels

        def variance(lo: NDArray[np.int64], hi: NDArray[np.int64]) -> NDArray[np.float64]:
            # A range holds c_j bins of cluster j: Var = sum_j (c_j/|C_j|)² · 2b².
            out = np.empty(lo.size, dtype=np.float64)
            for q in range(lo.size):
                inside = np.bincount(label_of[lo[q] : hi[q] + 1], minlength=m)
                out[q] = float(np.sum((inside / sizes) ** 2)) * 2.0 * second.scale**2
            return out

        return PublishedHistogram(
            estimates=estimates,
            bins=np.arange(n + 1, dtype=np.int64),
            epsilon=eps,
            method="ahp",
            errors=unit_std,
            edges=unit_edges,
            details={
                "clusters": m,
                "labels": labels,
                "epsilon_cluster": eps_cluster,
                "epsilon_values": eps_values,
                "threshold": threshold,
                "scale": second.scale,
                "remaining": remaining,
            },
            range_variance=variance,
        )

    return charge_and_run(payer, Budget(eps), "histogram: ahp", release)
