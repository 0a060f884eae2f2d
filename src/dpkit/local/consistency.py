"""Consistency post-processing of frequency estimates (Wang et al., NDSS 2020).

Unbiased counts from a frequency oracle can be negative and need not sum to
the number of reports n. These functions map them to consistent ones; they
read only the estimates, so they are post-processing of ε-LDP reports and cost
no privacy.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.errors import InvalidParameterError


def norm_sub(estimates: ArrayLike, *, n: float) -> NDArray[np.float64]:
    """Norm-Sub: counts that are non-negative and sum to n.

    Subtracts one common shift δ from every estimate and clips the results at
    zero, with δ chosen so that the clipped values sum to n (δ < 0, an
    addition, when the positive estimates sum to less than n). That is the
    Euclidean projection of the estimates onto {x >= 0, sum x = n}, computed
    exactly by sorting. Post-processing: no privacy cost.
    """
    x = np.asarray(estimates, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise InvalidParameterError("estimates must be a non-empty 1-D array of counts.")
    if not np.all(np.isfinite(x)):
        raise InvalidParameterError("estimates must be finite numbers.")
    if isinstance(n, bool) or not isinstance(n, int | float | np.integer | np.floating):
        raise InvalidParameterError("n must be a number (the number of reports).")
    total = float(n)
    if not math.isfinite(total) or total < 0:
        raise InvalidParameterError("n must be finite and >= 0 (the number of reports).")
    if total == 0:
        return np.zeros_like(x)
    ordered = np.sort(x)[::-1]
    cumulative = np.cumsum(ordered)
    ranks = np.arange(1, x.size + 1)
    shifts = (cumulative - total) / ranks
    # The support is the largest prefix whose smallest member stays above its shift (the
    # first always does, exactly: x_max - (x_max - n) = n > 0; rounding can hide it).
    above = np.flatnonzero(ordered - shifts > 0)
    keep = int(above[-1]) if above.size else 0
    return np.maximum(x - shifts[keep], 0.0)
