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
from dpkit.mechanisms._random import as_source
from dpkit.mechanisms.randomized_response import RandomizedResponse

__all__ = ["DuchiMean", "MeanEstimate"]


@dataclass(frozen=True)
class MeanEstimate:
    """An unbiased mean from local-DP reports, with its variance and interval.

    ``variance`` is the variance of ``mean`` from the mechanism's formula
    with the estimate plugged in (clipped to the bounds); ``ci_low`` /
    ``ci_high`` are ``mean -/+ z·sqrt(variance)`` at ``level`` (normal
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
    ci_low: float
    ci_high: float
    level: float


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
        z = float(stats.norm.ppf(0.5 + lv / 2.0))
        spread = z * math.sqrt(variance)
        return MeanEstimate(
            mechanism=self.name,
            epsilon=self.epsilon,
            n=n,
            bounds=self.bounds,
            mean=mean,
            variance=variance,
            ci_low=mean - spread,
            ci_high=mean + spread,
            level=lv,
        )

    def variance(self, values: ArrayLike) -> float:
        """The exact variance of the mean of the reports of ``values`` (for planning and tests)."""
        x = self._scaled(values)
        return float(self._half**2 * np.mean(self.c**2 - x * x) / x.size)

    def _scaled(self, values: ArrayLike) -> NDArray[np.float64]:
        try:
            arr = np.asarray(values, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            raise DataError("values must be numbers.") from None
        if not np.all(np.isfinite(arr)):
            raise DataError(
                "values must be finite numbers; a missing value cannot be reported (decide on "
                "the device what to send instead, e.g. the middle of the bounds)."
            )
        return np.clip((arr - self._centre) / self._half, -1.0, 1.0)

    def __repr__(self) -> str:
        return f"DuchiMean(epsilon={self.epsilon}, bounds={self.bounds})"
