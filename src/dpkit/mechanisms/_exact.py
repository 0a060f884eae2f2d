"""Exact samplers for the discrete Laplace and discrete Gaussian distributions.

These follow Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential
Privacy" (NeurIPS 2020), Algorithms 1-3. Every probability is a rational number
evaluated with integer arithmetic, and the only randomness used is uniform
integers below a bound, so the samples follow the stated distributions
*exactly*: there is no floating-point step whose rounding could leak (Mironov,
CCS 2012).

Everything is vectorised over NumPy arrays: each loop iteration processes all
still-undecided samples at once, and the set shrinks geometrically. Arrays of
``int64`` are used while every intermediate product fits below 2**62; larger
parameters fall back to object arrays of Python integers (same algorithm, exact,
slower).
"""

from __future__ import annotations

from math import isqrt
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit.mechanisms._random import MAX_BOUND, RandomSource

# Denominators below this take the int64 path: the Bernoulli(gamma/K) loop needs
# den*K < 2**62 and K > 128 has probability below 1/128!.
_FAST_DEN = 1 << 54
_CHUNK_BITS = 62


def _uniform_below_big(source: RandomSource, bound: NDArray[np.object_]) -> NDArray[np.object_]:
    """Uniform integers below arbitrary Python-int bounds, by rejection on 62-bit chunks."""
    bound = np.asarray(bound, dtype=object)
    out = np.empty(bound.shape, dtype=object)
    pending = np.arange(bound.size)
    chunks = max(1, -(-max(int(b).bit_length() for b in bound.ravel()) // _CHUNK_BITS))
    span = 1 << (_CHUNK_BITS * chunks)
    while pending.size:
        word = np.zeros(pending.size, dtype=object)
        for _ in range(chunks):
            part = source.uniform_below(np.full(pending.size, MAX_BOUND, dtype=np.int64))
            word = word * MAX_BOUND + part.astype(object)
        b = bound[pending]
        limit = (span // b) * b
        ok = np.asarray(word < limit).astype(bool)
        out[pending[ok]] = word[ok] % b[ok]
        pending = pending[~ok]
    return out


def _bernoulli_exp_unit(
    source: RandomSource, num: NDArray[Any], den: NDArray[Any]
) -> NDArray[np.bool_]:
    """Bernoulli(exp(-num/den)) for 0 <= num <= den (CKS Algorithm 1, gamma <= 1).

    Draw A_K ~ Bernoulli(gamma/K) for K = 1, 2, ... until the first failure; the
    result is 1 iff that K is odd. P(K odd) = sum_j (-gamma)^j / j! = exp(-gamma).
    """
    n = num.size
    k = np.ones(n, dtype=np.int64)
    active = np.arange(n)
    fast = num.dtype != object and bool(np.all(den < _FAST_DEN))
    while active.size:
        bound = den[active] * k[active]
        draw: NDArray[Any]
        if fast:
            draw = source.uniform_below(bound.astype(np.int64))
        else:
            draw = _uniform_below_big(source, bound.astype(object))
        success = np.asarray(draw < num[active]).astype(bool)
        k[active[success]] += 1
        active = active[success]
    return (k % 2) == 1


def bernoulli_exp(source: RandomSource, num: NDArray[Any], den: NDArray[Any]) -> NDArray[np.bool_]:
    """Independent Bernoulli(exp(-num/den)) draws for integers num >= 0, den >= 1.

    exp(-gamma) = exp(-1)^floor(gamma) * exp(-frac(gamma)): the integer part is
    floor(gamma) consecutive Bernoulli(exp(-1)) successes, stopping at the first
    failure (so the expected work is O(1) however large gamma is).
    """
    num = np.asarray(num).ravel()
    den = np.asarray(den).ravel()
    quotient = num // den
    remainder = num - quotient * den
    result = np.ones(num.size, dtype=bool)
    # Capping the count at 2**62 changes only events of probability < exp(-2**62).
    remaining = np.minimum(quotient, MAX_BOUND).astype(np.int64)
    active = np.flatnonzero(remaining > 0)
    while active.size:
        ones = np.ones(active.size, dtype=np.int64)
        ok = _bernoulli_exp_unit(source, ones, ones)
        result[active[~ok]] = False
        remaining[active] -= 1
        active = active[ok & (remaining[active] > 0)]
    frac = np.flatnonzero(result & np.asarray(remainder > 0).astype(bool))
    if frac.size:
        r, d = remainder[frac], den[frac]
        if r.dtype == object and all(int(x) < _FAST_DEN for x in d):
            r, d = r.astype(np.int64), d.astype(np.int64)
        result[frac] = _bernoulli_exp_unit(source, r, d)
    return result


def _geometric_exp_minus_one(source: RandomSource, size: int) -> NDArray[np.int64]:
    """Number of Bernoulli(exp(-1)) successes before the first failure."""
    count = np.zeros(size, dtype=np.int64)
    active = np.arange(size)
    while active.size:
        ones = np.ones(active.size, dtype=np.int64)
        ok = _bernoulli_exp_unit(source, ones, ones)
        count[active[ok]] += 1
        active = active[ok]
    return count


def discrete_laplace(source: RandomSource, t: int, s: int, size: int) -> NDArray[np.int64]:
    """Exact draws from the discrete Laplace distribution with scale t/s.

    P(Y = y) is proportional to exp(-|y| * s / t) on the integers (CKS
    Algorithm 2). Requires 1 <= t < 2**54 and s >= 1.
    """
    if not (1 <= t < _FAST_DEN and s >= 1):
        raise ValueError("discrete_laplace needs 1 <= t < 2**54 and s >= 1")
    out = np.empty(size, dtype=np.int64)
    pending = np.arange(size)
    t_arr_cache: dict[int, NDArray[np.int64]] = {}
    while pending.size:
        m = pending.size
        t_arr = t_arr_cache.setdefault(m, np.full(m, t, dtype=np.int64))
        u = source.uniform_below(t_arr) if t > 1 else np.zeros(m, dtype=np.int64)
        keep = bernoulli_exp(source, u, t_arr) if t > 1 else np.ones(m, dtype=bool)
        v = _geometric_exp_minus_one(source, m)
        # X = U + t*V is geometric with parameter exp(-1/t); Y = X // s has exp(-s/t).
        y = (u + t * v) // s
        negative = source.bits(m)
        accept = keep & ~(negative & (y == 0))
        signed = np.where(negative, -y, y)
        out[pending[accept]] = signed[accept]
        pending = pending[~accept]
    return out


def discrete_gaussian(
    source: RandomSource, sigma2_num: int, sigma2_den: int, size: int
) -> NDArray[np.int64]:
    """Exact draws from the discrete Gaussian N_Z(0, sigma^2), sigma^2 = num/den.

    P(Y = y) is proportional to exp(-y^2 / (2 sigma^2)) on the integers (CKS
    Algorithm 3): propose Y ~ DLap(t) with t = floor(sigma) + 1 and accept with
    probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)).
    """
    a, b = int(sigma2_num), int(sigma2_den)
    if a <= 0 or b <= 0:
        raise ValueError("sigma^2 must be positive")
    t = isqrt(a // b) + 1
    out = np.empty(size, dtype=np.int64)
    pending = np.arange(size)
    while pending.size:
        m = pending.size
        y = discrete_laplace(source, t, 1, m)
        magnitude = np.abs(y)
        # gamma = (|Y| t b - a)^2 / (2 a b t^2), computed exactly.
        if int(magnitude.max(initial=0)) * t * b + a < (1 << 31) and 2 * a * b * t * t < _FAST_DEN:
            w = magnitude * (t * b) - a
            num: NDArray[Any] = w * w
            den: NDArray[Any] = np.full(m, 2 * a * b * t * t, dtype=np.int64)
        else:
            w_obj = magnitude.astype(object) * (t * b) - a
            num = w_obj * w_obj
            den = np.full(m, 2 * a * b * t * t, dtype=object)
        accept = bernoulli_exp(source, num, den)
        out[pending[accept]] = y[accept]
        pending = pending[~accept]
    return out
