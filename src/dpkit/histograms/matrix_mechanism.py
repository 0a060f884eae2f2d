"""The matrix mechanism with optimised range strategies (epsilon-DP, Laplace).

Li, Miklau, Hay, McGregor, Rastogi, "The matrix mechanism", VLDB Journal 2015;
McKenna, Miklau, Hay, Machanavajjhala, "Optimizing error of high-dimensional
statistical queries under differential privacy", VLDB 2018. A public strategy A,
optimised for the workload (HDMM's p-Identity, :mod:`dpkit.histograms._strategy_l1`,
or a tree with optimised level weights, :mod:`dpkit.histograms._strategy_tree`), is measured
with Laplace noise and the unit counts are estimated by least squares, so every
range sum's error is known exactly before the release. ``noise="gaussian"``
(:func:`gaussian_matrix_mechanism`) measures an ℓ2-optimal design
(:mod:`dpkit.histograms._strategy_exact`) with discrete Gaussian noise instead:
(epsilon, delta)-DP and rho-zCDP.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.errors import DataError
from dpkit.histograms._common import check_counts, check_edges, epsilon_of, source_for
from dpkit.histograms._published import PublishedHistogram

#: A x is computed without rounding for whole-number counts totalling below this
#: (every entry of A is a multiple of 2⁻²⁰ at most 1: partial sums stay below 2⁵³·2⁻²⁰).
EXACT_TOTAL = 2.0**33
#: The largest number of unit bins (the strategy's optimisation is bounded work from n).
MAX_BINS = 1 << 16


def check_bins(n: int, rows: int | None = None) -> None:
    """Refuse more than :data:`MAX_BINS` unit bins, or a strategy beyond the memory ceiling (public)."""
    from dpkit.errors import InvalidParameterError
    from dpkit.histograms.memory import check_memory, memory_needed

    if n > MAX_BINS:
        raise InvalidParameterError(
            f"the matrix mechanism takes at most {MAX_BINS:,} unit bins (got {n:,}); "
            "use hb or dawa for larger domains."
        )
    check_memory(
        memory_needed("matrix_mechanism", n, rows=rows),
        f"the matrix mechanism over {n:,} bins",
        "use fewer bins or fewer rows.",
    )


def matrix_mechanism(
    counts: ArrayLike,
    epsilon: float | None = None,
    *,
    workload: Any = "ranges",
    rows: int | None = None,
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
    noise: str = "laplace",
    delta: float | None = None,
    rho: float | None = None,
) -> PublishedHistogram:
    """Publish unit counts through a workload-optimised strategy A and least squares.

    The strategy (:func:`laplace_strategy`) is the one of two optimised kinds
    with the smaller exact workload error: HDMM's p-Identity A = [I; Θ] D, or
    a b-ary tree of block sums with optimised level weights
    (:mod:`dpkit.histograms._strategy_tree`; it wins beyond a few thousand bins).

    Privacy: epsilon-DP for add/remove one row. Adding or removing a row
    changes one unit count x_i by 1, so the measurement A x moves by ±A e_i,
    the i-th column of A. For p-Identity each column is d_i (e_i; θ_i) with
    θ_i >= 0 and d_i = 1 / (1 + Σ_k θ_ki), so its l1 norm is 1; for the tree,
    bin i lies in one block per level, so its column holds w_l once per
    measured level and its l1 norm is Σ w_l. The stored entries are
    rounded down onto multiples of 2⁻²⁰ and the sensitivity used is the exact
    maximum column l1 norm Δ of the stored A (about 1). The values of
    A x get noise from :class:`dpkit.mechanisms.Laplace` with sensitivity Δ and
    ``changed`` the number of non-zero entries of a column (p + 1: the i-th unit
    row and the p aggregate rows; for the tree, one block per measured level):
    it rounds each value to its grid and counts that
    rounding in its integer sensitivity, then adds exact discrete Laplace noise,
    epsilon-DP for any input whose l1 change is at most Δ. The values fed in are
    A x exactly (no floating-point rounding) for integer counts with total below
    2³³ (other counts are refused before the charge): every entry of A is a multiple of 2⁻²⁰ at most 1, so every product and
    partial sum is a multiple of 2⁻²⁰ below 2⁵³. A is a deterministic
    function of n, the workload and ``rows``, all public, and the estimate
    (AᵀA)⁻¹ Aᵀ y is post-processing.

    Accuracy: unbiased. The noise covariance of the estimates is
    2 b² (AᵀA)⁻¹ (b the Laplace scale, about Δ/epsilon), so ``errors`` (unit
    standard deviations) and ``answer_error`` (any range) are exact, and the
    mean squared error over the workload's queries is 2 b² E/Δ² with
    E = Δ² tr(M (AᵀA)⁻¹)/m the strategy's unit error (``details["unit_error"]``).
    ``details`` also gives the SVD lower bound on E for any strategy
    (Li & Miklau 2013) and the ratio of the root errors, and Hb's expected error.

    Args:
        counts: the true count of each of the n unit bins (finite, >= 0).
        epsilon: the privacy budget (> 0).
        workload: ``"ranges"`` (all ranges, default), ``"prefixes"`` or
            explicit public ranges ``(lo, hi)`` (two integer arrays, 0-based,
            inclusive); the strategy is optimised for it.
        rows: the number p of aggregate rows (default: a public function of n,
            :func:`dpkit.histograms._strategy_l1.rows_for`; at most
            :func:`~dpkit.histograms._strategy_l1.max_rows`, n·p² <= 2³²). The
            strategy is optimised once per (n, workload, p) and cached. Given,
            it asks for p-Identity; unset, :func:`laplace_strategy` chooses.
        rng: ``None`` (secure randomness), an int seed or a NumPy Generator
            (reproducible; for tests and experiments only).
        accountant: optional :class:`dpkit.accounting.Accountant`; epsilon is
            charged before the counts are read.
        edges: public value-space edges of the unit bins (n + 1), for labels.
        noise: ``"laplace"`` (default: epsilon-DP, as above) or ``"gaussian"``
            ((epsilon, delta)-DP and rho-zCDP through an ℓ2-optimal strategy,
            :func:`gaussian_matrix_mechanism`; needs ``delta`` and either
            ``epsilon`` or ``rho``).
        delta, rho: the Gaussian release's budget (``noise="gaussian"`` only).

    Returns:
        A :class:`PublishedHistogram` with unit bins and exact ``range_variance``.
    """
    from dpkit.errors import InvalidParameterError

    if noise == "gaussian":
        if rows is not None:
            raise InvalidParameterError(
                "rows sets the Laplace strategy's aggregate rows; the Gaussian release "
                "chooses its strategy itself: leave rows unset with noise='gaussian'."
            )
        return gaussian_matrix_mechanism(
            counts,
            epsilon,
            delta=delta,
            rho=rho,
            workload=workload,
            rng=rng,
            accountant=accountant,
            edges=edges,
        )
    if noise != "laplace":
        raise InvalidParameterError("noise must be 'laplace' or 'gaussian'.")
    if delta is not None or rho is not None:
        raise InvalidParameterError(
            "delta and rho apply to noise='gaussian'; the Laplace release is epsilon-DP "
            "(pass epsilon only, or noise='gaussian')."
        )
    from dpkit.histograms._range_grams import gram_for, svd_bound
    from dpkit.histograms._strategy_l1 import checked_rows
    from dpkit.mechanisms import Laplace

    x = exact_counts(counts)
    eps = epsilon_of(epsilon)
    unit_edges = check_edges(edges, x.size)
    if rows is not None:
        checked_rows(x.size, rows)
    check_bins(x.size, rows)
    gram = gram_for(x.size, workload)
    strategy = laplace_strategy(gram, rows)
    mechanism = Laplace(
        epsilon=eps, sensitivity=strategy.sensitivity, size=strategy.size,
        changed=strategy.changed,
    )  # fmt: skip
    noise_variance = 2.0 * mechanism.scale**2
    unit_error = strategy.unit_error(gram)
    bound = svd_bound(gram)
    details: dict[str, Any] = {
        **strategy_details(strategy),
        "workload": gram.kind,
        "scale": mechanism.scale,
        "sensitivity": strategy.sensitivity,
        "unit_error": unit_error,
        "expected_rmse": math.sqrt(noise_variance * unit_error) / strategy.sensitivity,
        "svd_bound_rmse": math.sqrt(2.0 * bound) / eps,
        "ratio_to_bound": math.sqrt(unit_error / bound),
        "hb_expected_rmse": _hb_rmse(x.size, eps, gram.kind),
    }
    return _publish(
        strategy, mechanism, noise_variance, x, details=details, edges=unit_edges,
        accountant=accountant, rng=rng, cost=Budget(eps), epsilon=eps,
    )  # fmt: skip


def exact_counts(counts: ArrayLike) -> NDArray[np.float64]:
    """Checked counts: whole numbers totalling below 2³³, so that A x is computed exactly.

    Called before any charge: here, and by :func:`dpkit.histograms.auto` on its
    ties-probe path, where the matrix mechanism may run after auto's own charge.
    """
    x = check_counts(counts)
    if not np.array_equal(x, np.floor(x)) or float(x.sum()) >= EXACT_TOTAL:
        # The sensitivity argument needs A x computed exactly (see the docstrings).
        raise DataError(
            "the matrix mechanism takes whole-number counts (one row moves one count by 1) "
            "totalling fewer than 2**33 rows; round weighted counts, or use hb for larger tables."
        )
    return x


def gaussian_matrix_mechanism(
    counts: ArrayLike,
    epsilon: float | None = None,
    *,
    delta: float | None = None,
    rho: float | None = None,
    workload: Any = "ranges",
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
) -> PublishedHistogram:
    """Publish unit counts through an ℓ2-optimal strategy with discrete Gaussian noise.

    ``matrix_mechanism(..., noise="gaussian")`` calls this. The strategy A
    (:func:`dpkit.histograms._strategy_exact.exact_strategy`, public) is the
    stored form of the best ℓ2 design of :mod:`dpkit.histograms._strategy_l2`:
    for prefixes and all ranges up to 4,096 bins the Cholesky factor R of the
    weighted eigen-design's AᵀA (upper triangular, same error), beyond that and
    for explicit ranges the square-root factorisation of the prefix matrix
    (lower-triangular Toeplitz), whichever has the lower exact error. Every
    stored entry is a whole multiple of 2⁻²⁰ of magnitude at most 1.

    Privacy: (epsilon, delta)-DP and rho-zCDP for add/remove one row. Adding or
    removing a row changes one unit count x_i by 1, so A x moves by ±A e_i, of
    2-norm at most Δ₂, the exact maximum column 2-norm of the stored A (integer
    sums of squares of the numerators, the root rounded up onto 2⁻²⁰; about 1).
    The values fed to the mechanism are A x *exactly*: for whole counts with
    total below 2³³ (others are refused before the charge) every product
    q·x_j (q the integer numerator, |q| <= 2²⁰) and every partial sum of them
    is an integer below 2²⁰·2³³ = 2⁵³ in magnitude, so each floating-point
    operation is exact in any order (BLAS blocking, FMA), and the final
    division by 2²⁰ is exact. They go to :class:`dpkit.mechanisms.Gaussian`
    with sensitivity Δ₂, ``size`` = n and the 2⁻²⁰ grid, on which A x lies
    (the rounding is the identity, and the grid's ℓ2 sensitivity Δ₂·2²⁰ + √n
    steps still counts it): exact discrete Gaussian noise, calibrated either to
    (``epsilon``, ``delta``) by the multivariate zCDP check
    (σ² >= D²/(2ρ) with ρ the largest zCDP that implies (epsilon, delta)) or
    to ``rho`` (``Gaussian.from_rho``; epsilon is then the CKS conversion at
    ``delta``). The charge is ``Budget(epsilon, delta, rho=ρ)``, so a zCDP
    accountant composes ρ. A is a deterministic function of n and the
    workload, both public; the estimate A⁻¹y is post-processing.

    Accuracy: unbiased; the estimates' noise covariance is σ²(AᵀA)⁻¹ for the
    stored A (the discrete Gaussian's variance is at most σ², and equal to it
    within e^(-2π²σ²/g²) at this grid), so ``errors``, ``answer_error`` and
    ``details["expected_rmse"]`` (the per-query RMSE over the workload,
    σ·sqrt(tr(M (AᵀA)⁻¹)/m)) are exact; ``svd_bound_rmse`` is the ℓ2 SVD lower
    bound for any strategy with the same noise per unit sensitivity (σ/Δ₂),
    and ``ratio_to_bound`` their ratio.

    Args:
        counts: the true count of each of the n <= 65,536 unit bins (whole, >= 0).
        epsilon: the ε of an (epsilon, delta) budget; or None with ``rho``.
        delta: δ (in (0, 1)); required.
        rho: a ρ-zCDP budget instead of epsilon.
        workload, rng, accountant, edges: as for :func:`matrix_mechanism`.

    Returns:
        A :class:`PublishedHistogram` with ``delta`` and ``rho`` set.
    """
    from dpkit.errors import InvalidParameterError
    from dpkit.histograms._range_grams import gram_for
    from dpkit.histograms._strategy_exact import QUANTUM, exact_strategy
    from dpkit.histograms._strategy_exact import memory_needed as exact_memory
    from dpkit.histograms.memory import check_memory
    from dpkit.mechanisms import Gaussian

    x = exact_counts(counts)
    if delta is None:
        raise InvalidParameterError(
            "noise='gaussian' needs delta (e.g. delta=1e-6, well below 1/rows)."
        )
    if (epsilon is None) == (rho is None):
        raise InvalidParameterError(
            "noise='gaussian' takes either epsilon (an (epsilon, delta) budget) or rho "
            "(a zCDP budget), not both and not neither."
        )
    unit_edges = check_edges(edges, x.size)
    if x.size > MAX_BINS:
        raise InvalidParameterError(
            f"the matrix mechanism takes at most {MAX_BINS:,} unit bins (got {x.size:,}); "
            "use hb or dawa for larger domains."
        )
    check_memory(
        exact_memory(x.size), f"the matrix mechanism over {x.size:,} bins", "use fewer bins."
    )
    gram = gram_for(x.size, workload)
    strategy = exact_strategy(gram)
    if rho is None:
        mechanism = Gaussian(
            epsilon=epsilon_of(epsilon),
            delta=delta,
            sensitivity=strategy.sensitivity,
            size=x.size,
            granularity=QUANTUM,
        )
    else:
        mechanism = Gaussian.from_rho(
            rho, delta=delta, sensitivity=strategy.sensitivity, size=x.size, granularity=QUANTUM
        )
    noise_variance = mechanism.sigma**2
    unit_sigma = mechanism.sigma / strategy.sensitivity
    details: dict[str, Any] = {
        "strategy": strategy.name,
        "noise": "gaussian",
        "workload": gram.kind,
        "sigma": mechanism.sigma,
        "sensitivity": strategy.sensitivity,
        "unit_error": strategy.unit_error,
        "expected_rmse": math.sqrt(noise_variance * strategy.trace),
        "svd_bound_rmse": unit_sigma * math.sqrt(strategy.svd_bound),
        "ratio_to_bound": math.sqrt(strategy.unit_error / strategy.svd_bound),
        "hb_expected_rmse": None,  # Hb's figure is for Laplace noise
    }
    return _publish(
        strategy, mechanism, noise_variance, x, details=details, edges=unit_edges,
        accountant=accountant, rng=rng, cost=mechanism.cost, epsilon=mechanism.epsilon,
        delta=mechanism.delta, rho=float(mechanism.charged_rho), event=mechanism.event,
    )  # fmt: skip


def expected_variance(n: int, epsilon: float, workload: str = "ranges") -> float:
    """The mean noise variance of :func:`matrix_mechanism` over the workload's ranges (public).

    Over the same public sample of ranges as Hb's
    (:func:`dpkit.histograms._workload.workload_ranges`), with the nominal Laplace
    variance 2 (Δ/epsilon)² per measured value (the sampler's grid adds at most
    2⁻¹⁰ to the scale), so it compares with :func:`dpkit.histograms.hb.expected_variance`.
    ``workload`` is ``"prefixes"`` or ``"ranges"``.
    """
    from dpkit.histograms._range_grams import gram_for
    from dpkit.histograms._workload import workload_ranges

    eps = epsilon_of(epsilon)
    strategy = laplace_strategy(gram_for(n, workload))
    lo, hi = workload_ranges(n, workload)
    noise = 2.0 * (strategy.sensitivity / eps) ** 2
    return float(np.mean(strategy.range_variances(lo, hi))) * noise


#: Largest n for which the p-Identity strategy is optimised by default: beyond it its
#: aggregate rows cannot cover the domain at an affordable cost (n·p² per step) and the
#: weighted tree is better (``benchmarks/histograms_strategies.py``).
P_IDENTITY_MAX_BINS = 8192


def laplace_strategy(gram: Any, rows: int | None = None) -> Any:
    """The Laplace release's strategy: the smaller exact workload error of two optimised kinds (public).

    HDMM's p-Identity (:func:`dpkit.histograms._strategy_l1.p_identity`; up to
    :data:`P_IDENTITY_MAX_BINS` bins, or whenever ``rows`` is given) and the
    hierarchical strategy with optimised level weights
    (:func:`dpkit.histograms._strategy_tree.weighted_tree`). Both are functions
    of n and the workload only, and both errors are exact, so the choice is too.
    """
    from dpkit.histograms._strategy_l1 import p_identity
    from dpkit.histograms._strategy_tree import weighted_tree

    if rows is not None:
        return p_identity(gram, rows)
    tree = weighted_tree(gram)
    if gram.n > P_IDENTITY_MAX_BINS:
        return tree
    flat = p_identity(gram)
    return flat if flat.unit_error(gram) <= tree.unit_error(gram) else tree


def strategy_details(strategy: Any) -> dict[str, Any]:
    """The public description of a Laplace strategy for ``details``."""
    from dpkit.histograms._strategy_tree import WeightedTree

    if isinstance(strategy, WeightedTree):
        return {
            "strategy": "weighted_tree",
            "branching": strategy.branching,
            "level_weights": strategy.weights.tolist(),
        }
    return {"strategy": "p_identity", "p": strategy.p}


def _hb_rmse(n: int, epsilon: float, kind: str) -> float | None:
    """Hb's expected per-query RMSE on the same workload kind (its sampled convention)."""
    from dpkit.histograms.hb import expected_variance as hb_variance

    if kind == "explicit":  # Hb is chosen for "prefixes" or "ranges" only
        return None
    return math.sqrt(hb_variance(n, epsilon, kind))


def _publish(
    strategy: Any,
    mechanism: Any,
    noise_variance: float,
    x: NDArray[np.float64],
    *,
    details: dict[str, Any],
    edges: Any,
    accountant: Any,
    rng: object,
    cost: Budget,
    epsilon: float,
    delta: float = 0.0,
    rho: float | None = None,
    event: Any = None,
) -> PublishedHistogram:
    """Charge ``cost``, then measure A x with ``mechanism`` and reconstruct (both publishers).

    The errors come from public parameters only; the counts are read only
    inside the release, after the charge.
    """
    errors = np.sqrt(noise_variance * np.maximum(strategy.unit_variances(), 0.0))
    payer = as_accountant(accountant)

    def range_variance(lo: NDArray[np.int64], hi: NDArray[np.int64]) -> NDArray[np.float64]:
        return noise_variance * strategy.range_variances(lo, hi)

    def release() -> PublishedHistogram:
        remaining = None if payer is None else payer.remaining
        noisy = np.asarray(
            mechanism.randomise(strategy.measure(x), rng=source_for(rng)), dtype=np.float64
        )
        return PublishedHistogram(
            estimates=strategy.reconstruct(noisy),
            bins=np.arange(x.size + 1, dtype=np.int64),
            epsilon=epsilon,
            method="matrix_mechanism",
            errors=errors,
            edges=edges,
            details={**details, "remaining": remaining},
            range_variance=range_variance,
            delta=delta,
            rho=rho,
        )

    return charge_and_run(payer, cost, "histogram: matrix_mechanism", release, event=event)
