"""Noise statistics used for error estimates (public functions of public parameters)."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import integrate, special


@lru_cache(maxsize=4096)
def _order_statistic_moments(size: int, rank: int) -> tuple[float, float]:
    """Mean and second moment of the rank-th smallest of ``size`` iid Lap(1) draws."""
    log_coef = special.gammaln(size + 1) - special.gammaln(rank) - special.gammaln(size - rank + 1)

    def density(x: float) -> float:
        cdf = 0.5 * math.exp(x) if x < 0 else 1.0 - 0.5 * math.exp(-x)
        log_pdf = math.log(0.5) - abs(x)
        if cdf <= 0.0 or cdf >= 1.0:
            return 0.0
        return math.exp(
            log_coef + (rank - 1) * math.log(cdf) + (size - rank) * math.log1p(-cdf) + log_pdf
        )

    # The median concentrates at rate 1/sqrt(size): beyond this its density is < e^-40.
    limit = min(40.0 + math.log(size + 1.0), 6.0 + 40.0 / math.sqrt(size))
    mean = integrate.quad(lambda x: x * density(x), -limit, limit, limit=200, points=[0.0])[0]
    second = integrate.quad(lambda x: x * x * density(x), -limit, limit, limit=200, points=[0.0])[0]
    return mean, second


def laplace_median_std(width: int, scale: float) -> float:
    """Standard deviation of the median of ``width`` iid Lap(scale) draws.

    Odd width: the middle order statistic, by numerical integration of its
    density. Even width (NumPy's median averages the two middle draws): the
    bound sqrt(Var X_(m)) (Cauchy-Schwarz: Var((A+B)/2) <= (Var A + Var B)/2 and
    the two middle draws have equal variance by symmetry), so never too small.
    """
    if width == 1:
        return math.sqrt(2.0) * scale
    rank = (width + 1) // 2
    mean, second = _order_statistic_moments(width, rank)
    return scale * math.sqrt(max(second - mean * mean, 0.0))


def laplace_median_stds(widths: np.ndarray, scale: float) -> np.ndarray:
    """:func:`laplace_median_std` for an array of widths."""
    return np.array([laplace_median_std(int(w), scale) for w in widths], dtype=np.float64)
