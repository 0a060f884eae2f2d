"""Gaussian differential privacy (Dong, Roth & Su 2022): μ-GDP to (ε, δ) and back.

Used by the Gaussian-DP filter (:class:`dpkit.accounting.filters.GaussianDPFilter`)
and the Gaussian branch of the ``"rdp"`` rule. Pure functions of public numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from dpkit._checks import exact
from dpkit.errors import InvalidParameterError

__all__ = ["gdp_delta", "gdp_epsilon", "largest_mu"]


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su 2022, Cor. 2.13)."""
    from scipy.stats import norm

    # e^ε Φ(x) computed as exp(ε + log Φ(x)): no overflow for large ε.
    return float(
        norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon + norm.logcdf(-epsilon / mu - mu / 2))
    )


def largest_mu(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The largest μ (found by bisection, then rounded down) such that μ-GDP is (ε, δ)-DP.

    δ(ε) of μ-GDP increases with μ, so bisection finds the boundary; the result
    is checked again and lowered by a relative 10⁻⁹ against float error in
    δ(ε) (towards privacy).
    """
    if delta <= 0:
        raise InvalidParameterError(
            "a Gaussian-DP filter needs a budget with delta > 0 (Gaussian noise is not "
            "pure-epsilon DP); give e.g. Budget(1.0, 1e-6)."
        )
    e, d = float(epsilon), float(delta)
    low, _ = _flip(lambda mu: gdp_delta(mu, e) <= d, True)  # δ(ε) → 1 as μ grows
    return exact(low * (1 - 1e-9))


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest ε (bisection, rounded up) with δ(ε) of μ-GDP at most ``delta`` (0 < δ < 1)."""
    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    _, high = _flip(lambda eps: gdp_delta(mu, eps) <= delta, False)  # δ(ε) → 0 as ε grows
    return high * (1 + 1e-9)


def _flip(pred: Callable[[float], bool], first: bool) -> tuple[float, float]:
    """(low, high) around where a monotone ``pred`` on [0, ∞) leaves ``first`` (its value at 0).

    ``pred(low) == first`` (or low = 0) and ``pred(high) != first``, 10⁻¹²
    apart (relative): doubling finds a bracket, bisection narrows it; both
    loops are bounded (200 steps each).
    """
    low, high = 0.0, 1.0
    for _ in range(200):
        if pred(high) != first:
            break
        low, high = high, 2 * high
    for _ in range(200):
        mid = (low + high) / 2
        if pred(mid) == first:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * high:
            break
    return low, high
