"""Pure math behind the table queries: budget splits, error bounds, utilities.

Nothing here touches data or randomness. Every function takes public
parameters (epsilon, delta, bounds, levels) or already-noisy releases, so its
output is either public or post-processing of a differentially private
release. The session (``session.py``) combines these with the engines (which
compute exact aggregates) and :mod:`dpkit.mechanisms` (which adds the noise).

The privacy arguments are collected in ``docs/queries.md``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit._checks import check_bounds, check_delta, check_epsilon, exact, float_at_most
from dpkit.errors import InvalidParameterError

__all__ = [
    "GROUPED_QUANTILE_GRID",
    "MAX_QUANTILE",
    "MIN_QUANTILE",
    "PRIVATE_BOUNDS_FAILURE",
    "PRIVATE_BOUNDS_FRACTION",
    "QUANTILE_GRID",
    "SELECTION_FRACTION",
    "SUM_GRID_BITS",
    "VALID_SPAN",
    "aligned_grid",
    "coarse_grid",
    "em_rank_error",
    "mean_estimate",
    "mean_interval",
    "mean_split",
    "optimal_split",
    "paired_mean_estimate",
    "paired_mean_interval",
    "paired_radius",
    "paired_sensitivity",
    "paired_sums",
    "partition_release_probability",
    "partition_threshold",
    "private_bounds",
    "private_bounds_threshold",
    "quantile_utilities",
    "split_epsilon",
    "sum_grid",
    "uniform_grid",
    "valid_range",
    "variance_estimate",
    "variance_interval",
    "variance_split",
]

#: ``min`` and ``max`` release these quantiles, never the raw extremes (see docs).
MIN_QUANTILE = 0.01
MAX_QUANTILE = 0.99

#: ``bounds="private"`` spends this part of a query's epsilon on the bounds.
PRIVATE_BOUNDS_FRACTION = 0.25
#: Probability that some empty coarse bin passes the bounds threshold.
PRIVATE_BOUNDS_FAILURE = 0.01

#: Sums are computed exactly as integers on a grid of about radius · 2**-SUM_GRID_BITS.
SUM_GRID_BITS = 20
# Default quantile candidates: 2**20 + 1 points for one release (resolution
# width / 1,048,576), 10,001 per group under group_by (work grows as groups × grid).
# 2**17 + 1 until issue 33: on a million rows its step was most of a median's error.
QUANTILE_GRID = 2**20 + 1
GROUPED_QUANTILE_GRID = 10_001
# A finite value more than VALID_SPAN bound-widths from the middle of its
# bounds counts as missing, like NaN (see valid_range).
VALID_SPAN = 2**29

#: Part of epsilon spent on choosing groups when group keys are not public and
#: the query cannot reuse a noisy count (sum, quantiles, mode, histogram).
SELECTION_FRACTION = 0.5


# ---------------------------------------------------------------- budget splits


def optimal_split(weights: ArrayLike) -> NDArray[np.float64]:
    """Fractions ``f_i`` (summing to 1) minimising ``sum_i w_i / f_i``.

    An error bound that is a sum of noise scales ``w_i / epsilon_i`` (each
    component's noise scale is its sensitivity over its share of epsilon) is
    minimised, under ``sum epsilon_i = epsilon``, by ``epsilon_i ∝ sqrt(w_i)``
    (Lagrange: ``w_i / epsilon_i**2`` is equal across i; the objective is
    convex on the simplex, so this is the global minimum).
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise InvalidParameterError("weights must be a non-empty 1-D array of finite numbers > 0.")
    root = np.sqrt(w)
    out: NDArray[np.float64] = root / root.sum()
    return out


def split_epsilon(epsilon: float, fractions: Sequence[float]) -> list[float]:
    """Split ``epsilon`` into floats whose exact rational sum never exceeds it.

    Mechanisms calibrate noise with :func:`dpkit._checks.exact` of the epsilon
    they are given, and the accountant charges ``exact(epsilon)``; this makes
    sure ``sum(exact(part)) <= exact(epsilon)`` so the parts never spend more
    than was charged. The last part absorbs the rounding.
    """
    eps = check_epsilon(epsilon, share=True)
    fr = np.asarray(fractions, dtype=np.float64)
    if fr.ndim != 1 or fr.size == 0 or np.any(fr <= 0) or not math.isclose(fr.sum(), 1.0):
        raise InvalidParameterError("fractions must be positive and sum to 1.")
    total = exact(eps)
    parts: list[float] = []
    used = Fraction(0)
    for f in fr[:-1]:
        # 12 significant digits keep exact() of the part a short rational.
        part = float(f"{eps * float(f):.12g}")
        parts.append(part)
        used += exact(part)
    last = float_at_most(total - used)
    if last <= 0:
        raise InvalidParameterError("epsilon is too small to split into positive parts.")
    parts.append(last)
    return parts


def mean_split(epsilon: float) -> tuple[float, float]:
    """Split epsilon between the centred sum and the count of a mean.

    With values clipped to ``[lo, hi]`` and centred at the midpoint, the sum
    has sensitivity ``r = (hi - lo) / 2`` and the count 1. To first order the
    mean's error is ``(|e_sum| + |mean - mid| * |e_count|) / n`` and
    ``|mean - mid| <= r``, so the worst-case bound is proportional to
    ``r / eps_sum + r / eps_count``: weights (1, 1), i.e. an even split
    (:func:`optimal_split`). Returns ``(eps_sum, eps_count)``.
    """
    fr = optimal_split([1.0, 1.0])
    a, b = split_epsilon(epsilon, list(fr))
    return a, b


def variance_split(epsilon: float) -> tuple[float, float, float]:
    """Split epsilon between sum of squares, sum and count of a variance.

    ``var = Q/n - (S/n)**2`` with centred values (``|x - mid| <= r``):
    sensitivities ``r**2``, ``r`` and 1. The linearised error is
    ``[e_Q - 2m e_S + (2m**2 - q) e_n] / n`` with ``m = S/n``, ``q = Q/n``,
    and over the data ``|m| <= r``, ``|2m**2 - q| <= r**2``, so the worst-case
    bound is proportional to ``r**2 (1/eps_Q + 2/eps_S + 1/eps_n)``: weights
    (1, 2, 1), fractions ``(0.293, 0.414, 0.293)`` — not thirds.
    Returns ``(eps_squares, eps_sum, eps_count)``.
    """
    fr = optimal_split([1.0, 2.0, 1.0])
    a, b, c = split_epsilon(epsilon, list(fr))
    return a, b, c


def sum_grid(radius: float) -> float:
    """The power of two ``g`` on which per-row terms of magnitude ≤ ``radius`` are summed.

    Engines sum ``round(term / g)`` as integers, so a sum is exact and does
    not depend on the order of addition: the sensitivity argument (one row
    moves the sum by at most ``radius + g/2``) holds for the computed number,
    which a floating-point sum does not guarantee (Casacuberta et al., CCS
    2022). ``g = 2**(floor(log2(radius)) - SUM_GRID_BITS)``: a row's term
    fits in 21 bits, so the sum of up to ``2**32`` rows is exact in a
    double. Rounding moves each term by at most ``g/2 ≈ 5e-7 · radius``.
    """
    if not (math.isfinite(radius) and radius > 0):
        raise InvalidParameterError("radius must be a finite number > 0.")
    return math.ldexp(1.0, math.floor(math.log2(radius)) - SUM_GRID_BITS)


def valid_range(bounds: tuple[float, float]) -> tuple[float, float]:
    """The finite values a bounded numeric column may take before clipping.

    ``mid ± VALID_SPAN · (hi - lo)``; a value outside it (only a data error
    puts one there: it is 2**29 bound-widths away) is treated like NaN by the
    column's null policy. A row-wise rule fixed by the public bounds, so the
    privacy analysis is unchanged. It keeps the engines' clipped sums exact:
    a value's offset from either sum centre, in units of :func:`sum_grid`, is
    then below 2**52 and all integer arithmetic on it is exact in a double.
    """
    lo, hi = check_bounds(bounds)
    mid = lo / 2 + hi / 2
    span = VALID_SPAN * (hi / 2 - lo / 2) * 2
    top = sys.float_info.max
    return max(mid - span, -top), min(mid + span, top)


# ------------------------------------------------------- mean / variance bounds


def _as_arrays(*xs: ArrayLike) -> list[NDArray[np.float64]]:
    arrays = np.broadcast_arrays(*[np.asarray(x, dtype=np.float64) for x in xs])
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def mean_estimate(
    noisy_sum: ArrayLike, noisy_count: ArrayLike, bounds: tuple[float, float]
) -> NDArray[np.float64]:
    """Post-process a noisy centred sum and noisy count into a mean in bounds.

    ``noisy_sum`` is the noisy sum of ``clip(x) - mid``. The ratio is clipped
    to the bounds, and a noisy count below 1 gives the midpoint: all
    post-processing, so the estimate is as private as its inputs.
    """
    lo, hi = check_bounds(bounds)
    mid, r = (lo + hi) / 2, (hi - lo) / 2
    s, n = _as_arrays(noisy_sum, noisy_count)
    # A noisy count below 1 says the group is (nearly) empty: the midpoint is
    # then the estimate with the smallest worst-case error.
    ratio = np.where(n >= 1.0, s / np.maximum(n, 1.0), 0.0)
    out: NDArray[np.float64] = mid + np.clip(ratio, -r, r)
    return out


def mean_interval(
    noisy_sum: ArrayLike,
    noisy_count: ArrayLike,
    sum_half_width: float,
    count_half_width: float,
    bounds: tuple[float, float],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Interval containing the clipped mean whenever both noises are within bounds.

    If ``|S̃ - S| <= h_S`` and ``|ñ - n| <= h_n`` (each holds with its stated
    probability; the caller splits ``1 - level`` between them, a union bound),
    then the true ``S/n`` lies in ``{s/m : s in [S̃ ± h_S], m in [ñ ± h_n]}``
    (with ``m >= 1``), clipped to ``[-r, r]``. The extremes of ``s/m`` are at
    the corners, which is what this computes. When ``ñ - h_n < 1`` the group
    may be empty and the interval is the whole ``[lo, hi]``.
    """
    lo, hi = check_bounds(bounds)
    mid, r = (lo + hi) / 2, (hi - lo) / 2
    s, n = _as_arrays(noisy_sum, noisy_count)
    s_lo, s_hi = s - sum_half_width, s + sum_half_width
    n_lo, n_hi = n - count_half_width, n + count_half_width
    informative = n_lo >= 1.0
    safe_lo = np.where(informative, n_lo, 1.0)
    safe_hi = np.where(informative, n_hi, 1.0)
    upper = np.where(s_hi >= 0, s_hi / safe_lo, s_hi / safe_hi)
    lower = np.where(s_lo >= 0, s_lo / safe_hi, s_lo / safe_lo)
    upper = np.where(informative, np.clip(upper, -r, r), r)
    lower = np.where(informative, np.clip(lower, -r, r), -r)
    return mid + lower, mid + upper


def paired_radius(radius: float) -> tuple[float, float]:
    """``(r_g, g)``: a mean's radius rounded up to its sum grid ``g`` (:func:`sum_grid`).

    An engine sums ``t = round((clip(x) - mid) / g)·g`` with ``|clip(x) - mid| <= radius``
    as computed, so ``-r_g <= t <= r_g`` for ``r_g = ceil(radius / g)·g`` (any
    rounding lies between floor and ceiling): the two terms ``r_g + t`` and
    ``r_g - t`` of :func:`paired_sensitivity` are never negative.
    """
    g = sum_grid(radius)
    return math.ceil(radius / g) * g, g


def paired_sensitivity(radius: float, k: int, changed: int) -> float:
    """ℓ1 sensitivity of the vector of a mean's two-sided sums, per group ``(A, B)``.

    ``A = Σ (r_g + t)`` and ``B = Σ (r_g - t)`` over a group's rows
    (:func:`paired_radius`). One row adds ``(r_g + t, r_g - t)``: two
    non-negative terms whose ℓ1 norm is exactly ``2 r_g``; a person's ``k``
    rows move the whole vector by at most ``2 k r_g``. The computed values are
    exact multiples of ``g`` (integers in ``g`` units, from the engine's exact
    sums) converted to doubles, which rounds each by at most half an ulp of the
    largest value below ``2**33`` rows (:data:`MAX_ROWS_PER_GROUP` and the
    exactness premise of :func:`sum_grid`); between neighbours that moves each
    of the ``2·changed`` changed coordinates by at most one ulp more, which is
    added.
    """
    r_g, _ = paired_radius(radius)
    largest = 2.0**33 * 2 * r_g
    return 2 * k * r_g + 2 * changed * math.ulp(largest)


def paired_sums(
    centred_sum: ArrayLike, count: ArrayLike, radius: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``(A, B) = (S + n r_g, n r_g - S)`` from an engine's exact centred sum ``S`` and count ``n``.

    ``S`` is a whole number of grid steps ``g`` and ``r_g`` is too, so both
    are computed as integers in ``g`` units (int64: below ``2**33 · 2**22``)
    and converted to doubles once, correctly rounded.
    """
    r_g, g = paired_radius(radius)
    units = np.rint(np.asarray(centred_sum, dtype=np.float64) / g).astype(np.int64)
    n = np.asarray(count, dtype=np.int64)
    step = n * np.int64(round(r_g / g))
    low = (step + units).astype(np.float64) * g
    high = (step - units).astype(np.float64) * g
    return low, high


def paired_mean_estimate(
    noisy_low: ArrayLike, noisy_high: ArrayLike, bounds: tuple[float, float], radius: float
) -> NDArray[np.float64]:
    """The mean ``(mid - r_g) + 2 r_g Ã / (Ã + B̃)`` from noisy two-sided sums, in bounds.

    Post-processing: negative noisy sums are read as 0 (the true ones are
    not negative), and a total below ``2 r_g`` (less than one row's worth:
    the group may be empty) gives the midpoint, as :func:`mean_estimate` does.
    """
    lo, hi = check_bounds(bounds)
    r_g, _ = paired_radius(radius)
    a, b = (np.maximum(x, 0.0) for x in _as_arrays(noisy_low, noisy_high))
    mean = _paired_mean_at(a, b, a + b >= 2 * r_g, (lo + hi) / 2, r_g)
    out: NDArray[np.float64] = np.clip(mean, lo, hi)
    return out


def _paired_mean_at(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    informative: NDArray[np.bool_],
    mid: float,
    r_g: float,
) -> NDArray[np.float64]:
    """``(mid - r_g) + 2 r_g a / (a + b)`` where ``informative``, else the midpoint."""
    share = np.where(informative, a / np.where(informative, a + b, 1.0), 0.5)
    return np.asarray(mid - r_g + 2 * r_g * share)


def paired_mean_interval(
    noisy_low: ArrayLike,
    noisy_high: ArrayLike,
    half_width: float,
    bounds: tuple[float, float],
    radius: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Interval holding the (rounded) clipped mean whenever both noises are within ``half_width``.

    The mean ``(mid - r_g) + 2 r_g A / (A + B)`` grows with ``A`` and falls
    with ``B`` (both >= 0), so over ``A in [Ã ± h]``, ``B in [B̃ ± h]`` (each
    floored at 0) its least value is at ``(A_low, B_high)`` and its largest
    at ``(A_high, B_low)``. When ``A_low + B_low < 2 r_g`` the group may hold
    no row and the interval is the whole ``[lo, hi]``. The caller splits
    ``1 - level`` between the two noises (a union bound).
    """
    lo, hi = check_bounds(bounds)
    mid = (lo + hi) / 2
    r_g, _ = paired_radius(radius)
    a, b = _as_arrays(noisy_low, noisy_high)
    a_lo, a_hi = np.maximum(a - half_width, 0.0), np.maximum(a + half_width, 0.0)
    b_lo, b_hi = np.maximum(b - half_width, 0.0), np.maximum(b + half_width, 0.0)
    informative = a_lo + b_lo >= 2 * r_g
    least = _paired_mean_at(a_lo, b_hi, informative, mid, r_g)
    most = _paired_mean_at(a_hi, b_lo, informative, mid, r_g)
    lower = np.where(informative, np.clip(least, lo, hi), lo)
    upper = np.where(informative, np.clip(most, lo, hi), hi)
    return lower, upper


def variance_estimate(
    noisy_squares: ArrayLike,
    noisy_sum: ArrayLike,
    noisy_count: ArrayLike,
    bounds: tuple[float, float],
) -> NDArray[np.float64]:
    """``Q̃/ñ - (S̃/ñ)**2`` from centred noisy sums, clipped to ``[0, r**2]``.

    Post-processing only. ``r**2 = ((hi - lo) / 2)**2`` is the largest
    variance any data in ``[lo, hi]`` can have.
    """
    lo, hi = check_bounds(bounds)
    r = (hi - lo) / 2
    q, s, n = _as_arrays(noisy_squares, noisy_sum, noisy_count)
    m = np.maximum(n, 1.0)
    out: NDArray[np.float64] = np.clip(q / m - (s / m) ** 2, 0.0, r * r)
    return out


def variance_interval(
    noisy_squares: ArrayLike,
    noisy_sum: ArrayLike,
    noisy_count: ArrayLike,
    squares_half_width: float,
    sum_half_width: float,
    count_half_width: float,
    bounds: tuple[float, float],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Interval containing the clipped (population) variance when all three noises are in bounds.

    Writes ``var = Q u - S**2 u**2`` with ``u = 1/n``. For the upper end, take
    ``Q`` at its top, ``S**2`` at its smallest in ``[S̃ ± h_S]``, and maximise
    the concave quadratic in ``u`` over ``[1/(ñ + h_n), 1/(ñ - h_n)]``
    (endpoints and clamped vertex). For the lower end, ``Q`` at its bottom,
    ``S**2`` at its largest, minimum at an endpoint (concave). The result is
    clipped to ``[0, r**2]``; when ``ñ - h_n < 1`` it is ``[0, r**2]``.
    """
    lo, hi = check_bounds(bounds)
    r2 = ((hi - lo) / 2) ** 2
    q, s, n = _as_arrays(noisy_squares, noisy_sum, noisy_count)
    q_lo, q_hi = q - squares_half_width, q + squares_half_width
    s_lo, s_hi = s - sum_half_width, s + sum_half_width
    n_lo, n_hi = n - count_half_width, n + count_half_width
    informative = n_lo >= 1.0
    u_hi = 1.0 / np.where(informative, n_lo, 1.0)
    u_lo = 1.0 / np.where(informative, n_hi, 1.0)
    s2_min = np.where((s_lo <= 0) & (s_hi >= 0), 0.0, np.minimum(s_lo**2, s_hi**2))
    s2_max = np.maximum(s_lo**2, s_hi**2)

    def f(
        qv: NDArray[np.float64], s2: NDArray[np.float64], u: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        out: NDArray[np.float64] = qv * u - s2 * u * u
        return out

    with np.errstate(divide="ignore", invalid="ignore"):
        vertex = np.where(s2_min > 0, q_hi / (2 * np.where(s2_min > 0, s2_min, 1.0)), u_hi)
    vertex = np.clip(vertex, u_lo, u_hi)
    upper = np.maximum.reduce(
        [f(q_hi, s2_min, u_lo), f(q_hi, s2_min, u_hi), f(q_hi, s2_min, vertex)]
    )
    lower = np.minimum(f(q_lo, s2_max, u_lo), f(q_lo, s2_max, u_hi))
    upper = np.where(informative, np.clip(upper, 0.0, r2), r2)
    lower = np.where(informative, np.clip(lower, 0.0, r2), 0.0)
    return lower, upper


# ------------------------------------------------------------------- quantiles


def uniform_grid(bounds: tuple[float, float], size: int) -> NDArray[np.float64]:
    """The public candidate grid of a quantile: ``size`` evenly spaced points.

    Candidate ``j`` is ``lo + j * (hi - lo) / (size - 1)``, computed exactly as
    the engines compute a value's grid position, so both agree.
    """
    lo, hi = check_bounds(bounds)
    if not isinstance(size, int | np.integer) or isinstance(size, bool) or size < 2:
        raise InvalidParameterError(f"grid_size must be an integer >= 2, got {size!r}.")
    step = (hi - lo) / (int(size) - 1)
    out: NDArray[np.float64] = lo + np.arange(int(size), dtype=np.float64) * step
    return out


def aligned_grid(
    bounds: tuple[float, float], max_size: int
) -> tuple[tuple[float, float], float, int] | None:
    """A quantile grid for a column whose values are integers: ``(clip, step, size)``.

    A uniform grid over ``[0, 100]`` with 2**20 + 1 points holds only the
    integers 0, 25, 50, 75 and 100, so on integer data (ages, counts) the
    answer is off by up to half an integer however much data there is. For a
    column whose declared storage type holds only integers, clipping to
    ``clip = (ceil(lo), floor(hi))`` changes no value that clipping to
    ``[lo, hi]`` would not (the data are integers), and the grid
    ``ceil(lo) + j * step``, ``step`` the smallest power of two from 1/2 up
    with at most ``max_size`` points, holds every integer and every
    half-integer when the range allows (step 1/2), else the multiples of
    ``step`` (step >= 1). With step 1/2 every distinct utility of
    :func:`quantile_utilities` has exactly one candidate (an integer, or the
    midpoint of the gap between two), so no gap outweighs an integer by
    having more points in it. Powers of two keep ``(x - lo) / step`` exact in
    the engine, so a value equal to a candidate is coded as equal. The grid
    may end up to ``step - 1`` past ``floor(hi)``, so that it covers the
    clipped values. ``None`` (use the uniform grid) when no integer lies in
    the bounds or the grid would leave the exactly representable integers.
    Public: a function of the declared bounds and type only.
    """
    lo, hi = check_bounds(bounds)
    first, last = math.ceil(lo), math.floor(hi)
    if first >= last or max(abs(first), abs(last)) > 2**52 or max_size < 3:
        return None
    span = last - first
    step = 0.5
    while span / step > max_size - 1:
        step *= 2.0
    size = math.ceil(span / step) + 1
    if first + (size - 1) * step > 2**52:
        return None
    return (float(first), float(last)), step, size


def coarse_grid(coarse_range: tuple[float, float] | None = None) -> NDArray[np.float64]:
    """The public, data-independent bin edges ``bounds="private"`` counts over.

    Without a declared range: 0 and ``±2**j`` for ``j = -20 .. 60`` (163
    points covering magnitudes from 1e-6 to 1e18 within a factor of two).
    With a declared public range ``(lo, hi)``: the points of that default grid
    strictly inside it plus ``lo`` and ``hi`` themselves.
    """
    powers = 2.0 ** np.arange(-20, 61, dtype=np.float64)
    grid = np.concatenate([-powers[::-1], [0.0], powers])
    if coarse_range is None:
        return grid
    lo, hi = check_bounds(coarse_range, "coarse_range")
    inner = grid[(grid > lo) & (grid < hi)]
    out: NDArray[np.float64] = np.concatenate([[lo], inner, [hi]])
    return out


def private_bounds_threshold(
    epsilon: float, bins: int, max_contributions: int = 1, failure: float = PRIVATE_BOUNDS_FAILURE
) -> int:
    """Noisy-count threshold above which a coarse bin is taken to hold data.

    Counts get two-sided geometric noise ``P[Z = z] ∝ a**|z|``, ``a =
    exp(-ε/k)``; an empty bin passes ``Z >= τ`` with probability
    ``a**τ / (1 + a)``. Requiring ``bins · a**τ / (1 + a) <= failure`` (union
    bound over the bins) gives ``τ = ceil((k/ε) ln(bins / (failure (1 + a))))``.
    """
    eps = check_epsilon(epsilon, share=True)
    k = int(max_contributions)
    a = math.exp(-eps / k)
    return max(1, math.ceil((k / eps) * math.log(bins / (failure * (1.0 + a)))))


def private_bounds(
    noisy_counts: ArrayLike, grid: ArrayLike, threshold: float
) -> tuple[float, float]:
    """Clipping bounds from noisy counts of the coarse bins ``[grid[i], grid[i+1])``.

    ``lo`` is the left edge of the lowest bin whose noisy count reaches
    ``threshold``, ``hi`` the right edge of the highest one (the
    "approximate bounds" method of Google's differential-privacy library).
    Post-processing of an ε-DP histogram, so the bounds are ε-DP. Bins beyond
    the data are empty and pass only with the small probability fixed by
    :func:`private_bounds_threshold`, which is why this is preferred to
    exponential-mechanism extreme quantiles: above the largest value every
    candidate has the same quantile utility, and over a wide public range
    those many equally good candidates soak up most of the probability.
    If no bin passes, the whole coarse range is returned.
    """
    counts = np.asarray(noisy_counts, dtype=np.float64)
    points = np.asarray(grid, dtype=np.float64)
    if counts.ndim != 1 or points.shape != (counts.size + 1,):
        raise InvalidParameterError("grid must have one more point than there are bins.")
    hits = np.flatnonzero(counts >= threshold)
    if hits.size == 0:
        return float(points[0]), float(points[-1])
    return float(points[hits[0]]), float(points[hits[-1] + 1])


def quantile_utilities(codes: ArrayLike, q: float) -> NDArray[np.float64]:
    """Exponential-mechanism utilities of grid candidates for the q-quantile.

    ``codes[..., i]`` counts values by their position relative to a grid of
    ``m = (K + 1) / 2`` candidates: even code ``2j`` is "equal to candidate j",
    odd code ``2j + 1`` is "strictly between candidates j and j + 1". Values are
    clipped to the grid's range first, so nothing lies outside.

    The utility of candidate ``c`` is
    ``-max(#{x < c} - q n, #{x > c} - (1 - q) n, 0)``: zero exactly when ``c``
    is a q-quantile of the data, and minus the number of rows that would have
    to move otherwise. Adding or removing one row below ``c`` changes the first
    term by ``1 - q`` and the second by ``-(1 - q)``; above ``c``, by ``-q`` and
    ``q``; at ``c``, by ``-q`` and ``-(1 - q)``. So the sensitivity is
    ``max(q, 1 - q)`` (1/2 for the median; ``k`` times that
    when a person may contribute ``k`` rows).
    """
    if not 0 <= q <= 1:
        raise InvalidParameterError(f"q must be in [0, 1], got {q!r}.")
    c = np.asarray(codes, dtype=np.float64)
    k = c.shape[-1]
    if k % 2 != 1:
        raise InvalidParameterError("codes must have an odd length 2m - 1.")
    csum = np.cumsum(c, axis=-1)
    n = csum[..., -1:]
    # candidate j is code 2j: rows below it are codes < 2j, rows above it codes > 2j
    # (in place: the same operations as -max(below - q n, above - (1 - q) n, 0), fewer copies)
    out: NDArray[np.float64] = np.empty((*c.shape[:-1], (k + 1) // 2), dtype=np.float64)
    out[..., :1] = 0.0
    out[..., 1:] = csum[..., 1::2]
    out -= q * n  # below - q n
    above = np.subtract(n, csum[..., 0::2])
    above -= (1 - q) * n
    np.maximum(out, above, out=out)
    np.maximum(out, 0.0, out=out)
    np.negative(out, out=out)
    return out


def em_rank_error(epsilon: float, sensitivity: float, candidates: int, level: float) -> float:
    """How many rows away from optimal an exponential-mechanism pick may be.

    For the exponential mechanism with ``P ∝ exp(eps u / (2 Δ))`` over ``C``
    candidates, ``P[u(pick) <= OPT - (2Δ/eps)(ln C + t)] <= e**-t``
    (McSherry & Talwar 2007; Dwork & Roth, Thm 3.11). Permute-and-flip obeys
    the same bound: it returns a candidate only after accepting it, which
    happens with probability ``exp(-eps (OPT - u) / (2 Δ))``, so a union bound
    over the ``C`` candidates gives it. With ``e**-t = 1 -
    level`` this returns ``(2Δ/eps) ln(C / (1 - level))``: with probability at
    least ``level`` the released quantile's utility is within this many rows
    of the best grid candidate's.
    """
    eps = check_epsilon(epsilon, share=True)
    if not 0 < level < 1:
        raise InvalidParameterError(f"level must be in (0, 1), got {level!r}.")
    return 2.0 * sensitivity / eps * math.log(candidates / (1.0 - level))


# ---------------------------------------------------------- partition selection


def partition_threshold(epsilon: float, delta: float, max_contributions: int = 1) -> int:
    """Smallest integer threshold making noisy-count partition selection (ε, δ)-DP.

    Each observed key's row count gets two-sided geometric noise
    ``P[Z = z] ∝ a**|z|``, ``a = exp(-ε/k)`` (ℓ1 sensitivity ``k``, the
    contribution bound), and the key is released iff the noisy count is at
    least ``τ``. Keys present in both neighbours are covered by the noise
    (ε-DP). The ones only a single person creates number at most ``k`` and
    each holds at most ``k`` of that person's rows, and
    ``P[c + Z >= τ] = a**(τ - c) / (1 + a)`` for ``c <= τ``; requiring
    ``k · a**(τ - k) / (1 + a) <= δ`` gives

        ``τ = k + ceil((k / ε) · ln(k / (δ (1 + a))))``.

    For ``k = 1``: ``τ = 1 + ceil(ln(1 / (δ (1 + e**-ε))) / ε)``, the
    geometric analogue of ``1 + ln(1/(2δ))/ε`` for Laplace noise (Korolova et
    al. 2009; Wilson et al. 2020).
    """
    eps = check_epsilon(epsilon, share=True)
    dlt = check_delta(delta, allow_zero=False)
    k = int(max_contributions)
    if k < 1:
        raise InvalidParameterError("max_contributions must be an integer >= 1.")
    a = math.exp(-eps / k)
    steps = math.ceil((k / eps) * math.log(k / (dlt * (1.0 + a))))
    return k + max(steps, 0)


def partition_release_probability(
    count: int, epsilon: float, threshold: int, max_contributions: int = 1
) -> float:
    """Exact probability that a key with ``count`` rows passes the threshold.

    ``P[count + Z >= threshold]`` for the two-sided geometric noise of
    :func:`partition_threshold`. Used by tests and docs to check the formula.
    """
    eps = check_epsilon(epsilon, share=True)
    a = math.exp(-eps / int(max_contributions))
    gap = int(threshold) - int(count)
    if gap <= 0:
        # P[Z >= -g] = 1 - P[Z <= -g - 1] = 1 - a**(g + 1) / (1 + a)
        return 1.0 - a ** (1 - gap) / (1.0 + a)
    return a**gap / (1.0 + a)
