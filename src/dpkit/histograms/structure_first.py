"""StructureFirst (Xu, Zhang, Xiao, Yang, Yu, Winslett, VLDB Journal 2013, Algorithm 3).

The optimal k-bin structure of the *true* counts is computed first, then
protected: the k - 1 inner boundaries are redrawn right to left by the
exponential mechanism (budget epsilon_1), and only then are the bin
representatives published with Laplace noise (budget epsilon_2).

Sensitivity of E_SSE (checked here, stated in the docs). Let every unit count
lie in [0, F] and let one count x_m change by 1. For a bin of width w holding
x_m with sum S, SSE = sum x² - S²/w changes by
2(x_m - S/w) + 1 - 1/w = (1 - 1/w)(2(x_m - mean of the others) + 1),
and |x_m - mean of the others| <= F, so |ΔSSE| <= (1 - 1/w)(2F + 1) < 2F + 1.
Bins not holding x_m do not change. A k-bin error T(q, j) is a minimum over
structures, each of which changes by < 2F + 1, so T changes by < 2F + 1 too.
E_SSE(q, j, r) = T(q, j) + SSE(q + 1, r) (the paper's 1-based form) has x_m in
at most one of its two terms, so Δ(E_SSE) <= 2F + 1: the paper's constant is
right (and slightly loose). For the median variant, SAE(l, r) = min_c sum |x_i - c|
changes by at most 1 (each |x_i - c| does), so E_SAE has sensitivity 1 and
needs no F.
"""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import combinations, pairwise
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit._checks import exact, float_at_most
from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.errors import InvalidParameterError
from dpkit.histograms._common import (
    check_counts,
    check_edges,
    check_fraction,
    check_n_bins,
    check_positive,
    epsilon_of,
    source_for,
)
from dpkit.histograms._optimal import bin_statistic, interval_costs, optimal_table
from dpkit.histograms._published import PublishedHistogram
from dpkit.histograms._segmentation import prefix_sums, segment_costs, sse_rows_backwards
from dpkit.histograms.memory import check_memory, memory_needed

Statistic = Literal["mean", "median"]
Sampler = Literal["paper", "joint"]

#: Default share of epsilon spent on the structure (epsilon_1 / epsilon); see docs.
DEFAULT_STRUCTURE_SHARE = 0.05
#: The constant c of the default k = c · sqrt(n · epsilon · F); see :func:`default_n_bins`.
DEFAULT_BINS_FACTOR = 1.2
#: Default boundary sampler; see :func:`sample_structure` and :func:`sample_structure_joint`.
DEFAULT_SAMPLER: Sampler = "paper"


def default_n_bins(n: int, epsilon: float, max_count: float | None) -> int:
    """Default k: round(1.2 · sqrt(n · epsilon · F)) clipped to [1, n] (n/4 without F).

    A function of public parameters only (a data-dependent k would need
    budget). Why this shape: for counts varying on the scale F over n bins, a
    bin of width w has merge error ~ (F w / n)² per unit and noise ~ 1/(epsilon w)²,
    so the best width grows like sqrt(n / (epsilon F)) and k = n / w like
    sqrt(n epsilon F). The constant 1.2 was chosen on four real sequences
    (``benchmarks/histograms.py --tune``, ``docs/histograms.md``). When the
    noise is small next to F the rule gives k = n, where StructureFirst
    degrades gracefully to the Laplace baseline (all of epsilon on the values).
    """
    if max_count is None:
        return max(1, min(n, round(n / 4)))
    return max(1, min(n, round(DEFAULT_BINS_FACTOR * math.sqrt(n * epsilon * max_count))))


def split_budget(epsilon: float, share: float) -> tuple[float, float]:
    """(epsilon_1, epsilon_2) as floats whose exact rationals sum to at most epsilon.

    dpkit's mechanisms spend the rational a float denotes (its shortest
    decimal), so both parts are rounded down in that sense.
    """
    total = exact(epsilon)
    first = _float_at_most(exact(share) * total)
    second = _float_at_most(total - exact(first))
    return first, second


def _float_at_most(value: Fraction) -> float:
    return float_at_most(value)


def boundary_utilities(
    table: NDArray[np.float64], costs: NDArray[np.float64], j: int, right: int
) -> NDArray[np.float64]:
    """Utilities -E(q, j, right) of every position q for the j-th inner boundary.

    E(q, j, r) = T[j, q] + C[q, r]: the best j-bin error of the first q counts
    plus the cost of one bin over [q, r). Positions outside [j, r - 1] are -inf
    (a public rule: it depends only on j and the already published r).
    """
    n = costs.shape[0] - 1
    utilities = np.full(n + 1, -np.inf)
    q = np.arange(j, right)
    utilities[q] = -(table[j, q] + costs[q, right])
    return utilities


def structure_probabilities(
    counts: ArrayLike,
    n_bins: int,
    epsilon_structure: float,
    sensitivity: float,
    objective: Literal["sse", "sae"] = "sse",
    sampler: Sampler = "paper",
) -> dict[tuple[int, ...], float]:
    """Exact probability of every structure under a boundary sampler (for audits; small n).

    ``"paper"``: the product of the k - 1 conditional exponential-mechanism
    probabilities (each draw uses epsilon_structure / (k - 1)). ``"joint"``:
    P(H) proportional to exp(-epsilon_structure · cost(H) / (2Δ)), computed by
    enumeration (independently of the sampler's forward-backward code).
    ``sensitivity`` is Δ (2F + 1 or 1). Floating point; enumerates every structure.
    """
    x = np.asarray(counts, dtype=np.float64)
    n = x.size
    costs = interval_costs(x, objective)
    if sampler == "joint":
        structures = [(0, *inner, n) for inner in combinations(range(1, n), n_bins - 1)]
        total = np.array([sum(costs[a, b] for a, b in pairwise(h)) for h in structures])
        logits = -epsilon_structure * total / (2.0 * sensitivity)
        weights = np.exp(logits - logits.max())
        return dict(zip(structures, (weights / weights.sum()).tolist()))
    table, _ = optimal_table(costs, max(1, n_bins - 1))
    scale = epsilon_structure / (2.0 * (n_bins - 1) * sensitivity)
    out: dict[tuple[int, ...], float] = {}
    for inner in combinations(range(1, n), n_bins - 1):
        structure = (0, *inner, n)
        probability = 1.0
        for j in range(n_bins - 1, 0, -1):
            logits = scale * boundary_utilities(table, costs, j, structure[j + 1])
            finite = np.isfinite(logits)
            weights = np.zeros_like(logits)
            weights[finite] = np.exp(logits[finite] - logits[finite].max())
            probability *= weights[structure[j]] / weights.sum()
        out[structure] = probability
    return out


def sample_structure(
    structure_counts: NDArray[np.float64],
    n_bins: int,
    epsilon_structure: float,
    sensitivity: float,
    objective: Literal["sse", "sae"],
    source: Any,
) -> NDArray[np.int64]:
    """Draw the boundaries right to left with the exponential mechanism.

    Each of the k - 1 draws selects q with probability proportional to
    exp(-epsilon_1 E(q, j, r_(j+1)) / (2 (k - 1) Δ)) — exactly
    :func:`dpkit.mechanisms.exponential` with epsilon = epsilon_1 and utility
    sensitivity (k - 1)Δ, i.e. each draw is (epsilon_1 / (k - 1))-DP and the k - 1
    adaptive draws compose to epsilon_1.
    """
    from dpkit.mechanisms import exponential

    n = structure_counts.size
    boundaries = np.empty(n_bins + 1, dtype=np.int64)
    boundaries[0], boundaries[n_bins] = 0, n
    if objective == "sse":
        # T rows from the pruned programme, newest first: the draws go right to left.
        # Draw j reads row j below r_(j+1) <= n - (k - 1 - j): the rows' other ends
        # are never read, so they are not computed (a public cut: n and k only).
        rows = sse_rows_backwards(structure_counts, n_bins - 1, "values", rest=n - n_bins)
        sums = prefix_sums(structure_counts)
        costs = None
    else:
        sums = None
        costs = interval_costs(structure_counts, objective)
        table, _ = optimal_table(costs, n_bins - 1)
        rows = ((j, table[j]) for j in range(n_bins - 1, 0, -1))
    right = n
    for j, row in rows:
        q = np.arange(j, right)
        utilities = np.full(n + 1, -np.inf)
        if sums is not None:
            last = segment_costs(sums, q, right)
        else:
            assert costs is not None
            last = costs[q, right]
        utilities[q] = -(row[q] + last)
        right = int(
            exponential(
                utilities,
                epsilon=epsilon_structure,
                sensitivity=(n_bins - 1) * sensitivity,
                rng=source,
            )
        )
        boundaries[j] = right
    return boundaries


def sample_structure_joint(
    structure_counts: NDArray[np.float64],
    n_bins: int,
    epsilon_structure: float,
    sensitivity: float,
    objective: Literal["sse", "sae"],
    source: Any,
) -> NDArray[np.int64]:
    """One exponential mechanism over whole k-bin structures, sampled right to left.

    P(H) is proportional to exp(-epsilon_1 cost(H) / (2Δ)), cost(H) the total SSE
    (or SAE) of structure H. One count moving by 1 changes one bin of H, so
    cost(H) has sensitivity Δ (2F + 1, or 1 for SAE) and this is epsilon_1-DP:
    the exponential mechanism over the public set of all k-bin structures.

    Sampled exactly by forward filtering, backward sampling: with
    c = epsilon_1/(2Δ) and L[j, a] = log of the sum of exp(-c cost) over all
    j-bin structures of counts[:a] (a log-sum-exp recurrence, O(n²) per row),
    P(r_j = a | r_(j+1) = r) is proportional to exp(L[j, a] - c C[a, r]), drawn with
    :func:`dpkit.mechanisms.exponential` on utilities L[j, a]/c - C[a, r]
    (epsilon = epsilon_1, sensitivity = Δ, which makes its exponent exactly that). The
    draws' product is P(H); only the joint law is claimed as epsilon_1-DP.
    Compared with the paper's sampler, the exponent is k - 1 times sharper.
    """
    from scipy.special import logsumexp

    from dpkit.mechanisms import exponential

    n = structure_counts.size
    costs = interval_costs(structure_counts, objective)
    c = epsilon_structure / (2.0 * sensitivity)
    scaled = -c * costs  # -inf where a >= b
    log_partition = np.full((n_bins, n + 1), -np.inf)
    log_partition[0, 0] = 0.0
    for j in range(1, n_bins):
        log_partition[j] = logsumexp(log_partition[j - 1][:, None] + scaled, axis=0)
    boundaries = np.empty(n_bins + 1, dtype=np.int64)
    boundaries[0], boundaries[n_bins] = 0, n
    right = n
    for j in range(n_bins - 1, 0, -1):
        utilities = np.full(n + 1, -np.inf)
        q = np.arange(j, right)
        utilities[q] = log_partition[j, q] / c - costs[q, right]
        right = int(
            exponential(utilities, epsilon=epsilon_structure, sensitivity=sensitivity, rng=source)
        )
        boundaries[j] = right
    return boundaries


def structure_first(
    counts: ArrayLike,
    epsilon: float,
    *,
    n_bins: int | None = None,
    max_count: float | None = None,
    structure_share: float = DEFAULT_STRUCTURE_SHARE,
    statistic: Statistic = "mean",
    sampler: Sampler = DEFAULT_SAMPLER,
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
) -> PublishedHistogram:
    """Publish a StructureFirst histogram: private optimal structure, then noisy bins.

    Privacy: epsilon-DP, epsilon = epsilon_1 + epsilon_2 (sequential composition).
    Neighbours differ by one row, i.e. one unit count by 1.

    * Structure (epsilon_1 = ``structure_share`` · epsilon): the optimal k-bin
      table is built on the counts clipped to [0, F] (``max_count``; clipping is
      a per-count map, so neighbours still differ by at most 1 in one count).
      ``sampler="paper"`` (Algorithm 3): the k - 1 inner boundaries are drawn
      right to left by the exponential mechanism with weight
      exp(-epsilon_1 E(q, j, r) / (2 (k - 1) Δ)), Δ = 2F + 1 for the mean (SSE)
      variant and Δ = 1 for the median (SAE) variant (proof in this module's
      docstring and ``docs/histograms.md``); each draw is
      (epsilon_1 / (k - 1))-DP and the k - 1 draws compose to epsilon_1.
      ``sampler="joint"``: one exponential mechanism over all k-bin structures,
      P(H) ∝ exp(-epsilon_1 cost(H) / (2Δ)), epsilon_1-DP because cost(H) has
      sensitivity Δ; its exponent is k - 1 times sharper
      (:func:`sample_structure_joint`).
    * Values (epsilon_2 = the rest): mean variant: each bin's sum of the true
      counts has sensitivity 1 and bins are disjoint, so the vector of bin sums
      has l1 sensitivity 1; Lap(1/epsilon_2) on each sum, divided by the width
      w, is the paper's mean + Lap(1/(epsilon_2 w)). Median variant: one count
      moving by 1 moves its bin's median by at most 1; Lap(1/epsilon_2) on the
      medians. Noise from :func:`dpkit.mechanisms.laplace`.

    When k = 1 or k = n the structure is public (only one exists), so the whole
    epsilon goes to the values.

    Args:
        counts: the true count of each of the n unit bins (finite, >= 0).
        epsilon: the privacy budget (> 0).
        n_bins: k (1..n); default :func:`default_n_bins`,
            round(1.2 · sqrt(n · epsilon · F)) clipped to [1, n] — public, chosen by
            experiment (``docs/histograms.md``).
        max_count: F, a public upper bound on any unit count (> 0); required
            for ``statistic="mean"``. For ``"median"`` it only sets the default
            k (n/4 without it). Counts above F are clipped for the structure
            step only (the published values use the true counts). Too large an F
            flattens the boundary distribution towards uniform; too small clips
            real structure away. Choose it from domain knowledge, never from
            the data.
        structure_share: epsilon_1 / epsilon in (0, 1); default 0.05 (benchmark).
        statistic: ``"mean"`` (SSE structure, bin means) or ``"median"`` (SAE
            structure, bin medians).
        sampler: ``"paper"`` (default, Algorithm 3) or ``"joint"``.
        rng, accountant, edges: as for :func:`dpkit.histograms.laplace`.

    Returns:
        A :class:`PublishedHistogram`; ``errors`` is the exact noise standard
        deviation of every unit estimate (sqrt(2)·b/w for the mean, sqrt(2)·b
        for the median, b the Laplace scale on bin sums/medians). The
        approximation error of the bins is not included.
    """
    from dpkit.mechanisms import Laplace

    x = check_counts(counts)
    eps = epsilon_of(epsilon)
    unit_edges = check_edges(edges, x.size)
    n = x.size
    if statistic not in ("mean", "median"):
        raise InvalidParameterError("statistic must be 'mean' (SSE) or 'median' (SAE).")
    if sampler not in ("paper", "joint"):
        raise InvalidParameterError("sampler must be 'paper' (Algorithm 3) or 'joint'.")
    share = check_fraction(structure_share, "structure_share")
    if statistic == "mean":
        if max_count is None:
            raise InvalidParameterError(
                "max_count (F, a public upper bound on any unit count) is required for the "
                "mean variant of StructureFirst; choose it from domain knowledge, never from "
                "the data, or use statistic='median', which needs no bound."
            )
        bound = check_positive(
            max_count, "max_count", " It is F, a public bound on any unit count."
        )
        utility_sensitivity = 2.0 * bound + 1.0
    else:
        bound = math.inf
        utility_sensitivity = 1.0
        if max_count is not None:
            check_positive(max_count, "max_count")
    k = default_n_bins(n, eps, max_count) if n_bins is None else check_n_bins(n_bins, n)
    structure_is_public = k in (1, n)
    check_memory(
        memory_needed("structure_first", n, k, statistic=statistic, sampler=sampler),
        f"structure_first over {n:,} unit bins with k = {k:,}",
        "use fewer unit bins, a smaller n_bins, statistic='mean' or sampler='paper'.",
    )
    if structure_is_public:
        eps_structure, eps_values = 0.0, eps
    else:
        eps_structure, eps_values = split_budget(eps, share)
    size = k
    value_mechanism = Laplace(epsilon=eps_values, sensitivity=1.0, size=size)

    payer = as_accountant(accountant)

    def release() -> PublishedHistogram:
        remaining = None if payer is None else payer.remaining
        source = source_for(rng)
        if structure_is_public:
            boundaries = np.linspace(0, n, k + 1).astype(np.int64) if k == 1 else np.arange(n + 1)
        else:
            objective: Literal["sse", "sae"] = "sse" if statistic == "mean" else "sae"
            clipped = np.minimum(x, bound) if statistic == "mean" else x
            draw = sample_structure if sampler == "paper" else sample_structure_joint
            boundaries = draw(clipped, k, eps_structure, utility_sensitivity, objective, source)
        widths = np.diff(boundaries)
        if statistic == "mean":
            sums = np.add.reduceat(x, boundaries[:-1])
            noisy_sums = np.asarray(value_mechanism.randomise(sums, rng=source), dtype=np.float64)
            values = noisy_sums / widths
            bin_std = math.sqrt(2.0) * value_mechanism.scale / widths
        else:
            medians = bin_statistic(x, boundaries, "median")
            values = np.asarray(value_mechanism.randomise(medians, rng=source), dtype=np.float64)
            bin_std = np.full(k, math.sqrt(2.0) * value_mechanism.scale)
        return PublishedHistogram(
            estimates=np.repeat(values, widths),
            bins=boundaries.astype(np.int64),
            epsilon=eps,
            method=f"structure_first_{statistic}",
            errors=np.repeat(bin_std, widths),
            edges=unit_edges,
            details={
                "n_bins": k,
                "statistic": statistic,
                "epsilon_structure": eps_structure,
                "epsilon_values": eps_values,
                "max_count": None if statistic == "median" else bound,
                "utility_sensitivity": utility_sensitivity,
                "sampler": sampler,
                "scale": value_mechanism.scale,
                "remaining": remaining,
            },
        )

    return charge_and_run(payer, Budget(eps), f"histogram: structure_first ({statistic})", release)
