"""Rounding real-valued queries onto a 2^-k grid before adding integer noise.

A real query f(x) is released as g * (rint(f(x)/g) + Y) with Y integer noise
and g = 2**j a power of two. Rounding is exact in floating point (division by a
power of two), and so is the final product up to one correctly rounded addition,
which is a deterministic function of the integer rint(f(x)/g) + Y: post-
processing. The set of reachable outputs is the grid, whatever the input, so
the "holes" that break naive floating-point Laplace (Mironov 2012) do not exist.

Rounding can move two neighbouring answers apart by up to one grid step per
coordinate that differs, so the sensitivity used for calibration is inflated:
    l1:  |rint(u/g) - rint(v/g)|_1 <= floor(D1/g) + d
    l2:  |rint(u/g) - rint(v/g)|_2 <= D2/g + sqrt(d)
The default grid keeps this inflation below 2^-10 of the sensitivity.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from dpkit.errors import DataError, InvalidParameterError

INFLATION_BITS = 10


def default_granularity(sensitivity: float, size: int, norm: int) -> float:
    """A power of two g with d*g (l1) or sqrt(d)*g (l2) <= sensitivity * 2**-10."""
    spread = size if norm == 1 else math.sqrt(size)
    exponent = math.floor(math.log2(sensitivity / spread)) - INFLATION_BITS
    if exponent < -1022:  # the grid step must be a normal double (no subnormal steps)
        raise InvalidParameterError(
            "the sensitivity is too small for dpkit's grid (below about 2**-1012 per value); "
            "rescale the values (e.g. change units) so that it is larger."
        )
    return math.ldexp(1.0, exponent)


def check_granularity(granularity: float) -> float:
    """Check that a user-given granularity is a positive power of two."""
    mantissa, _ = math.frexp(granularity)
    if not (granularity > 0 and math.isfinite(granularity) and mantissa == 0.5):
        raise ValueError("granularity must be a positive power of two, e.g. 2**-20")
    return granularity


def l1_grid_sensitivity(sensitivity: float, granularity: float, size: int) -> int:
    """Integer l1 sensitivity, in grid steps, of the rounded query (see module doc)."""
    return math.floor(Fraction(sensitivity) / Fraction(granularity)) + size


def l2_grid_sensitivity(sensitivity: float, granularity: float, size: int) -> float:
    """An upper bound on the l2 sensitivity, in grid steps, of the rounded query."""
    bound = sensitivity / granularity + math.sqrt(size)
    return math.nextafter(bound, math.inf)


def to_grid(value: NDArray[np.float64], granularity: float) -> NDArray[np.float64]:
    """rint(value / g) as exact float64 integers."""
    scaled = np.rint(value / granularity)
    if not np.all(np.isfinite(scaled)):
        raise DataError(
            "value is too large for the chosen granularity; pass a coarser granularity."
        )
    return scaled


def from_grid(
    rounded: NDArray[np.float64], noise: NDArray[np.int64], granularity: float
) -> NDArray[np.float64]:
    """g * (rounded + noise), each product exact, one correctly rounded sum."""
    return rounded * granularity + noise.astype(np.float64) * granularity


def rational_scale(scale: Fraction, bits: int = 52) -> tuple[int, int]:
    """A pair (t, s) with t/s >= scale and t < 2**bits (rounds towards more noise)."""
    if scale <= 0:
        raise ValueError("scale must be positive")
    if scale.numerator < (1 << bits):
        return scale.numerator, scale.denominator
    shift = bits - 1 - math.ceil(math.log2(scale))
    if shift >= 0:
        s = 1 << shift
        t = math.ceil(scale * s)
    else:
        s = 1
        t = math.ceil(scale)
    return t, s
