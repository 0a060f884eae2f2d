"""NoiseFirst (Xu, Zhang, Xiao, Yang, Yu, Winslett, VLDB Journal 2013, Algorithms 1-2).

Noisy unit counts first (the Laplace baseline), then the optimal k-bin
structure of the *noisy* counts by dynamic programming, each unit estimate
replaced by its bin's mean (or median). Everything after the noise is
post-processing, so choosing k from the noisy counts is free.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.errors import InvalidParameterError
from dpkit.histograms._common import (
    check_counts,
    check_edges,
    check_n_bins,
    epsilon_of,
    source_for,
)
from dpkit.histograms._noise import laplace_median_stds
from dpkit.histograms._optimal import backtrack, bin_statistic, interval_costs, optimal_table
from dpkit.histograms._published import PublishedHistogram
from dpkit.histograms._segmentation import sse_optimal, sse_penalised, sse_rows
from dpkit.histograms.memory import check_memory, memory_needed

Statistic = Literal["mean", "median"]
Selection = Literal["paper", "penalised"]


def select_n_bins(
    noisy: NDArray[np.float64], noise_variance: float, selection: Selection = "paper"
) -> tuple[int, NDArray[np.int64], float]:
    """Choose k from the noisy counts (post-processing) and return its optimal structure.

    ``"paper"`` (Algorithm 2 of Xu et al.): minimise T̂[n, k] - (n - 2k)·v, v the
    noise variance of one count (2/epsilon², so the term is the paper's
    (2n - 4k)/epsilon²). By the paper's Theorem 1 this estimates the SSE of the
    k-bin histogram against the true counts *for a fixed structure*; for the
    structure optimised on the same noise it is optimistic, so it tends to
    choose too many bins (see ``docs/histograms.md``).

    ``"penalised"``: minimise T̂[n, k] + v·k·(2 log(n/k) + 5), the penalty of
    Lebarbier (2005) for least-squares change-point models, which accounts for
    that optimism.

    Returns ``(k, boundaries, score)``. ``"paper"`` is a penalty linear in k,
    so the minimiser over every k = 1..n is one penalised segmentation
    (:func:`dpkit.histograms._segmentation.sse_penalised`, about O(n log n)).
    ``"penalised"`` computes the rows T̂[., k] one k at a time and stops as soon
    as a lower bound on the score of every larger k (the penalty alone, which
    increases with k) reaches the best score: exactly the minimiser over all k.
    """
    n = noisy.size
    if selection == "paper":
        # min_k T̂[n, k] + 2kv is the penalised problem with penalty 2v per bin.
        boundaries, sse = sse_penalised(noisy, 2.0 * noise_variance)
        k = boundaries.size - 1
        return k, boundaries, sse - (n - 2 * k) * noise_variance

    def penalty(k: int) -> float:
        return noise_variance * k * (2.0 * math.log(n / k) + 5.0)

    best_k, best_score = 1, np.inf
    for j, row, _start in sse_rows(noisy, n):
        score = float(row[n]) + penalty(j)
        if score < best_score:
            best_k, best_score = j, score
        if j == n or penalty(j + 1) >= best_score:
            break
    return best_k, sse_optimal(noisy, best_k), best_score


def noise_first(
    counts: ArrayLike,
    epsilon: float,
    *,
    n_bins: int | None = None,
    statistic: Statistic = "mean",
    selection: Selection = "paper",
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
) -> PublishedHistogram:
    """Publish a NoiseFirst histogram: Laplace unit counts, then the optimal merge.

    Privacy: epsilon-DP. Adding or removing one row changes one unit count by
    1 (l1 sensitivity 1), so the noisy counts x̂_i = x_i + Lap(1/epsilon) are
    epsilon-DP (:func:`dpkit.mechanisms.laplace`). The structure, the choice of
    k and the bin means/medians are computed from x̂ alone: post-processing,
    no further cost.

    Algorithm (Xu et al. 2013): ``statistic="mean"`` builds the k-bin
    structure minimising the SSE of the noisy counts and publishes bin means
    (Algorithm 1); ``"median"`` minimises the SAE and publishes bin medians
    (the median of Laplace-noisy counts has about half the variance of their
    mean on a flat bin). With ``n_bins=None``, k minimises
    T̂_SSE[n, k] - (2n - 4k)/epsilon² (Algorithm 2; for the median variant
    too, since the paper's closed form exists only for SSE), or the penalised
    criterion with ``selection="penalised"``.

    Args:
        counts: the true count of each of the n unit bins (finite, >= 0).
        epsilon: the privacy budget (> 0).
        n_bins: k, the number of published bins (1..n), or ``None`` to choose it.
        selection: how k is chosen when ``n_bins=None``: ``"paper"``
            (Algorithm 2, the default) or ``"penalised"`` (a change-point
            penalty that does not chase noise; see :func:`select_n_bins`).
        statistic: ``"mean"`` (SSE) or ``"median"`` (SAE).
        rng, accountant, edges: as for :func:`dpkit.histograms.laplace`.

    Returns:
        A :class:`PublishedHistogram`. ``errors`` is the noise standard
        deviation of each unit estimate for the published structure (mean:
        sqrt(2)·b/sqrt(w) for a bin of width w; median: the exact standard
        deviation of the median of w Laplace draws), treating the structure as
        fixed. ``details["noisy_counts"]`` holds x̂ (itself epsilon-DP) and
        ``details["estimated_structure_sse"]`` the estimate
        max(0, SSE(x̂ | bins) - 2(n - k)·b²) of the merge's SSE against the
        true counts (unbiased for a fixed structure; optimistic for one chosen
        on the same noise).
    """
    from dpkit.mechanisms import Laplace

    x = check_counts(counts)
    eps = epsilon_of(epsilon)
    unit_edges = check_edges(edges, x.size)
    if statistic not in ("mean", "median"):
        raise InvalidParameterError("statistic must be 'mean' (SSE) or 'median' (SAE).")
    if selection not in ("paper", "penalised"):
        raise InvalidParameterError("selection must be 'paper' (Algorithm 2) or 'penalised'.")
    k_fixed = None if n_bins is None else check_n_bins(n_bins, x.size)
    n = x.size
    check_memory(
        memory_needed("noise_first", n, k_fixed, statistic=statistic, selection=selection),
        f"noise_first over {n:,} unit bins",
        "use fewer unit bins, a fixed n_bins, or statistic='mean'.",
    )
    mechanism = Laplace(epsilon=eps, sensitivity=1.0, size=n)
    payer = as_accountant(accountant)

    def release() -> PublishedHistogram:
        remaining = None if payer is None else payer.remaining
        noisy = np.asarray(mechanism.randomise(x, rng=source_for(rng)), dtype=np.float64)
        noise_variance = 2.0 * mechanism.scale**2

        score: float | None = None
        if k_fixed is None:
            k, boundaries, score = select_n_bins(noisy, noise_variance, selection)
        else:
            k = k_fixed
        if statistic == "median":
            _table, starts = optimal_table(interval_costs(noisy, "sae"), k)
            boundaries = backtrack(starts, k)
        elif k_fixed is not None:
            boundaries = sse_optimal(noisy, k)
        sse_of_structure = _structure_sse(noisy, boundaries)

        widths = np.diff(boundaries)
        values = bin_statistic(noisy, boundaries, statistic)
        if statistic == "mean":
            bin_std = np.sqrt(noise_variance / widths)
        else:
            bin_std = laplace_median_stds(widths, mechanism.scale)
        return PublishedHistogram(
            estimates=np.repeat(values, widths),
            bins=boundaries,
            epsilon=eps,
            method=f"noise_first_{statistic}",
            errors=np.repeat(bin_std, widths),
            edges=unit_edges,
            details={
                "n_bins": k,
                "statistic": statistic,
                "selection": selection if k_fixed is None else "fixed",
                "scale": mechanism.scale,
                "noisy_counts": noisy,
                "selection_score": score,
                "estimated_structure_sse": max(0.0, sse_of_structure - (n - k) * noise_variance),
                "remaining": remaining,
            },
        )

    return charge_and_run(payer, Budget(eps), f"histogram: noise_first ({statistic})", release)


def _structure_sse(values: NDArray[np.float64], boundaries: NDArray[np.int64]) -> float:
    """SSE of ``values`` around their bin means (bins centred first for precision)."""
    widths = np.diff(boundaries)
    means = np.add.reduceat(values, boundaries[:-1]) / widths
    return float(np.sum((values - np.repeat(means, widths)) ** 2))
