"""Mean estimation under local DP: Duchi, Jordan and Wainwright's one-bit mechanism.

Duchi, Jordan, Wainwright, "Local privacy and statistical minimax rates"
(FOCS 2013); its one-dimensional form as analysed by Wang et al., "Collecting
and analyzing multidimensional data with local differential privacy" (ICDE
2019). Each respondent holds a number in public bounds ``[lo, hi]`` and sends
one of two values, ``lo_report`` or ``hi_report``; their average over the
respondents is an unbiased estimate of the mean.

How a report is made (on the respondent's device): the value, scaled to
x in [-1, 1], becomes a *truthful bit* b = 1 with probability (1 + x)/2;
the bit goes through binary randomized response with ε
(:class:`dpkit.mechanisms.RandomizedResponse`, exact: keep it with
probability e^ε/(e^ε + 1)); the report is +C or -C by the result, with
C = (e^ε + 1)/(e^ε - 1), mapped back to the value's units. Then
P(+C | x) = 1/2 + x/(2C), so E[report] = x: unbiased.

Privacy: ε-LDP for any change of one respondent's value. For any report o,
P(o | x) = sum_b P(b | x) P(o | b) lies between min_b P(o | b) and
max_b P(o | b), whose ratio is e^ε (randomized response on one bit). This
holds whatever the distribution of the bit, so the bit may be drawn with
floating-point arithmetic: only randomized response must be exact, and it is
(ε rounded down to a rational; the estimator uses the C of that rational).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from dpkit._checks import check_bounds, check_epsilon, check_level
from dpkit.errors import DataError
from dpkit.local._estimate import LocalRelease
from dpkit.mechanisms.randomized_response import RandomizedResponse
from dpkit.mechanisms.sampling import as_source

__all__ = ["DuchiMean", "MeanEstimate", "PiecewiseMean", "best_mean_mechanism"]

#: Output cells of the piecewise mechanism's grid (fine enough that the grid costs < 0.1%).
PIECEWISE_CELLS = 1 << 16


@dataclass(frozen=True)
class MeanEstimate(LocalRelease):
    """An unbiased mean from local-DP reports, with its variance and interval.

    ``variance`` is the variance of ``mean`` from the mechanism's formula
    with the estimate plugged in (clipped to the bounds); ``ci`` is
    ``(mean - z·sqrt(variance), mean + z·sqrt(variance))`` at ``level``
    (``ci_low``/``ci_high`` are its deprecated aliases; normal
    approximation; the reports are bounded, so it is accurate from a few
    dozen reports on). The estimate itself is not clipped: it can fall
    outside the bounds when n is small, which keeps it unbiased.
    """

    mechanism: str
    epsilon: float
    n: int
    bounds: tuple[float, float]
    mean: float
    variance: float
    ci: tuple[float, float]
    level: float

    def _mechanism_name(self) -> str:
        return self.mechanism


class DuchiMean:
    """Duchi et al.'s mechanism for a number in public ``bounds`` (ε-LDP per respondent).

    ``perturb`` runs on respondents' devices (vectorised for simulation;
    ``perturb_one`` for a single report); ``estimate`` runs at the collector
    on all reports. Values outside the bounds are clipped to them first
    (declare bounds that hold the values); a missing or non-numeric value is
    refused on the device, before anything is sent.

    Per report, Var = (w/2)²·(C² - x²) with w = hi - lo and x the scaled
    value; the variance of the mean of n reports is the average of those
    over n. Compared with adding Laplace noise of scale 2/ε to x (also
    ε-LDP), C² < 8/ε² at every ε, and much smaller at small ε.

    Privacy: ε-LDP for any change of one respondent's value: each report's
    probability lies between those of randomized response on one bit, whose
    ratio is e^ε (the argument is in this module's docstring).
    """

    name = "duchi"

    def __init__(self, *, epsilon: float, bounds: tuple[float, float]) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.bounds = check_bounds(bounds)
        self._rr = RandomizedResponse(epsilon=self.epsilon, categories=(0, 1))
        keep = self._rr.p_keep  # e^ε'/(e^ε' + 1) for the rational ε' <= ε actually used
        self.c = 1.0 / (2.0 * keep - 1.0)  # (e^ε' + 1)/(e^ε' - 1)
        lo, hi = self.bounds
        half = (hi - lo) / 2.0
        self._centre, self._half = lo + half, half
        #: the two report values, in the value's units
        self.reports = (self._centre - self.c * half, self._centre + self.c * half)

    def perturb(self, values: ArrayLike, rng: object = None) -> NDArray[np.float64]:
        """The reports of ``values`` (one per value), each ε-LDP for its respondent."""
        x = self._scaled(values)
        source = as_source(rng)
        # The truthful bit: any distribution is private (see the module docstring).
        generator = source.generator()
        truthful = (generator.random(x.size) < (1.0 + x) / 2.0).astype(np.int64)
        sent = self._rr.randomise_codes(truthful, rng=source)
        return np.where(sent == 1, self.reports[1], self.reports[0]).reshape(np.shape(values))

    def perturb_one(self, value: float, rng: object = None) -> float:
        """The report of one respondent's value (what runs on a device)."""
        return float(self.perturb(np.array([value], dtype=np.float64), rng=rng)[0])

    def estimate(self, reports: ArrayLike, *, level: float = 0.95) -> MeanEstimate:
        """The unbiased mean of the respondents' values, from their reports.

        Post-processing of ε-LDP reports: no further privacy cost.
        """
        lv = check_level(level)
        r = np.asarray(reports, dtype=np.float64).ravel()
        if r.size == 0:
            raise DataError("no reports to estimate from; collect at least one report.")
        high = np.isclose(r, self.reports[1], rtol=1e-12, atol=0.0)
        low = np.isclose(r, self.reports[0], rtol=1e-12, atol=0.0)
        if not np.all(high | low):
            raise DataError(
                "some reports are not one of this mechanism's two report values; were they "
                "made with the same epsilon and bounds?"
            )
        n = int(r.size)
        x_mean = self.c * (2.0 * float(high.mean()) - 1.0)
        plug = min(x_mean * x_mean, 1.0)
        variance = self._half**2 * (self.c**2 - plug) / n
        mean = self._centre + self._half * x_mean
        return _estimate(self, n, mean, variance, lv)

    def variance(self, values: ArrayLike) -> float:
        """The exact variance of the mean of the reports of ``values`` (for planning and tests)."""
        x = self._scaled(values)
        return float(self._half**2 * np.mean(self.c**2 - x * x) / x.size)

    def _scaled(self, values: ArrayLike) -> NDArray[np.float64]:
        return _scaled(values, self._centre, self._half)

    def __repr__(self) -> str:
        return f"DuchiMean(epsilon={self.epsilon}, bounds={self.bounds})"


class PiecewiseMean:
    """Wang et al.'s piecewise mechanism (ICDE 2019) on a finite output grid (ε-LDP).

    The paper's mechanism reports a real number in [-C, C], C = (e^{ε/2} + 1)/
    (e^{ε/2} - 1): uniform on a window of length C - 1 placed by the value
    with probability e^{ε/2}/(e^{ε/2} + 1), else uniform on the rest.
    Sampling a real interval whose ends depend on the value leaks through
    floating point, so dpkit samples it on a grid:

    * the output range is cut into M equal cells (M = 2^16); a report is a
      cell's centre, one of M fixed public numbers;
    * a window is W consecutive cells, W the smallest integer with
      (M - W)/W <= e^{ε/2}; the value, scaled to the range of window
      centres, picks one of the M - W + 1 windows by unbiased randomised
      rounding between the two nearest;
    * "inside the window" is binary randomized response with ε/2 (exact);
      the cell inside (or outside) is an exact uniform integer.

    Privacy: for a fixed window, each cell has probability P_in/W inside and
    (1 - P_in)/(M - W) outside, a ratio of e^{ε₁}·(M - W)/W <= e^{ε/2}·e^{ε/2}
    = e^ε (ε₁ <= ε/2 the rational randomized response uses); between any
    two windows every cell's probability is one of those two numbers, so
    every report's likelihood ratio is at most e^ε. The rounding of the
    value to a window mixes such distributions, which keeps the bound
    (as for :class:`DuchiMean`'s bit), so it may use floating point.

    Unbiased: E[report | window] = κ·centre(window) with
    κ = P_in - (1 - P_in)·W/(M - W) (the cell centres are symmetric around 0),
    so report/κ, mapped back to the value's units, is unbiased.

    Variance per report grows with x² (the paper's x²/(e^{ε/2} - 1) +
    (e^{ε/2} + 3)/(3(e^{ε/2} - 1)²), here computed exactly on the grid);
    ``estimate`` states the worst case over values with the estimated mean,
    which is the |x| = 1 variance — a conservative bound, so intervals cover
    at least their level (asymptotically). Better than Duchi's for ε above
    about 1.3 (:func:`best_mean_mechanism`).
    """

    name = "piecewise"

    def __init__(self, *, epsilon: float, bounds: tuple[float, float]) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.bounds = check_bounds(bounds)
        half_eps = self.epsilon / 2.0
        self._rr = RandomizedResponse(epsilon=half_eps, categories=(0, 1))
        e_half = math.exp(half_eps)
        m = PIECEWISE_CELLS
        # Smallest W with (M - W)/W <= e^{ε/2}, with a margin for the float exp.
        w = math.ceil(m / (1.0 + e_half * (1.0 - 1e-12)))
        for _ in range(m):  # w <= m always satisfies it: at most m steps (one in practice)
            if (m - w) <= w * e_half * (1.0 - 1e-12):
                break
            w += 1
        self._cells, self._window = m, w
        c = (e_half + 1.0) / (e_half - 1.0)
        self._centres = -c + (np.arange(m) + 0.5) * (2.0 * c / m)
        p_in = self._rr.p_keep
        self._kappa = p_in - (1.0 - p_in) * w / (m - w)
        # Window j covers cells j .. j + W - 1; its centre is linear in j.
        self._first = -c + (w / 2.0) * (2.0 * c / m)
        self._step = 2.0 * c / m
        self._reach = -self._first  # window centres span [-reach, reach]
        lo, hi = self.bounds
        self._centre, self._half = (lo + hi) / 2.0, (hi - lo) / 2.0
        #: every possible report, in the value's units (M fixed public numbers)
        self.reports = self._centre + self._half * self._centres / (self._kappa * self._reach)
        second = self._centres**2
        total2 = float(second.sum())
        prefix2 = np.concatenate(([0.0], np.cumsum(second)))
        inside2 = (prefix2[w:] - prefix2[: m - w + 1]) / w
        outside2 = (total2 - inside2 * w) / (m - w)
        window_mean = self._first + self._step * np.arange(m - w + 1)
        moment2 = p_in * inside2 + (1.0 - p_in) * outside2
        # Variance of one report on the unit scale of x, per window position.
        self._unit_variance = (moment2 - (self._kappa * window_mean) ** 2) / (
            self._kappa * self._reach
        ) ** 2

    def perturb(self, values: ArrayLike, rng: object = None) -> NDArray[np.float64]:
        """The reports of ``values`` (one per value), each ε-LDP for its respondent."""
        x = _scaled(values, self._centre, self._half)
        source = as_source(rng)
        m, w = self._cells, self._window
        position = (x * self._reach - self._first) / self._step  # in [0, M - W]
        below = np.clip(np.floor(position), 0, m - w).astype(np.int64)
        frac = np.clip(position - below, 0.0, 1.0)
        window = np.minimum(below + (source.generator().random(x.size) < frac), m - w)
        inside = self._rr.randomise_codes(np.ones(x.size, dtype=np.int64), rng=source) == 1
        offset_in = source.uniform_below(np.full(x.size, w, dtype=np.int64))
        offset_out = source.uniform_below(np.full(x.size, m - w, dtype=np.int64))
        outside_cell = np.where(offset_out < window, offset_out, offset_out + w)
        cell = np.where(inside, window + offset_in, outside_cell)
        return np.asarray(self.reports[cell], dtype=np.float64).reshape(np.shape(values))

    def perturb_one(self, value: float, rng: object = None) -> float:
        """The report of one respondent's value (what runs on a device)."""
        return float(self.perturb(np.array([value], dtype=np.float64), rng=rng)[0])

    def estimate(self, reports: ArrayLike, *, level: float = 0.95) -> MeanEstimate:
        """The unbiased mean of the values, with the worst-case variance (post-processing)."""
        lv = check_level(level)
        r = np.asarray(reports, dtype=np.float64).ravel()
        if r.size == 0:
            raise DataError("no reports to estimate from; collect at least one report.")
        # The nearest report value (a report read back from text may be off by an ulp).
        right = np.clip(np.searchsorted(self.reports, r), 1, self._cells - 1)
        gap = np.minimum(np.abs(self.reports[right] - r), np.abs(self.reports[right - 1] - r))
        if not np.all(gap <= 1e-12 * (self._half + np.abs(r))):
            raise DataError(
                "some reports are not this mechanism's report values; were they made with "
                "the same epsilon and bounds?"
            )
        n = int(r.size)
        mean = float(r.mean())
        variance = self._half**2 * float(self._unit_variance.max()) / n
        return _estimate(self, n, mean, variance, lv)

    def variance(self, values: ArrayLike) -> float:
        """The exact variance of the mean of the reports of ``values`` (planning and tests)."""
        x = _scaled(values, self._centre, self._half)
        position = (x * self._reach - self._first) / self._step
        below = np.clip(np.floor(position), 0, self._cells - self._window).astype(np.int64)
        above = np.minimum(below + 1, self._cells - self._window)
        frac = np.clip(position - below, 0.0, 1.0)
        # Mixture of two windows: second moment mixes, plus the spread of the two means.
        v = self._unit_variance
        mean_b = (self._first + self._step * below) / self._reach
        mean_a = (self._first + self._step * above) / self._reach
        second = (1 - frac) * (v[below] + mean_b**2) + frac * (v[above] + mean_a**2)
        per_report = second - x * x
        return float(self._half**2 * per_report.mean() / x.size)

    def worst_variance(self) -> float:
        """Largest variance of one report on the [-1, 1] scale (public: for choosing)."""
        return float(self._unit_variance.max())

    def __repr__(self) -> str:
        return f"PiecewiseMean(epsilon={self.epsilon}, bounds={self.bounds})"


def _estimate(
    mechanism: DuchiMean | PiecewiseMean, n: int, mean: float, variance: float, level: float
) -> MeanEstimate:
    """The estimate with its normal-approximation interval at ``level``."""
    spread = float(stats.norm.ppf(0.5 + level / 2.0)) * math.sqrt(variance)
    return MeanEstimate(
        mechanism=mechanism.name,
        epsilon=mechanism.epsilon,
        n=n,
        bounds=mechanism.bounds,
        mean=mean,
        variance=variance,
        ci=(mean - spread, mean + spread),
        level=level,
    )


def _scaled(values: ArrayLike, centre: float, half: float) -> NDArray[np.float64]:
    """Values as numbers in [-1, 1] (clipped); refuses missing or non-numeric ones."""
    try:
        arr = np.asarray(values, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise DataError("values must be numbers.") from None
    if not np.all(np.isfinite(arr)):
        raise DataError(
            "values must be finite numbers; a missing value cannot be reported (decide on "
            "the device what to send instead, e.g. the middle of the bounds)."
        )
    return np.clip((arr - centre) / half, -1.0, 1.0)


def best_mean_mechanism(epsilon: float) -> str:
    """``"duchi"`` or ``"piecewise"``: the smaller worst-case variance per report at ε (public)."""
    duchi = DuchiMean(epsilon=epsilon, bounds=(-1.0, 1.0))
    piecewise = PiecewiseMean(epsilon=epsilon, bounds=(-1.0, 1.0))
    return "duchi" if duchi.c**2 <= piecewise.worst_variance() else "piecewise"
