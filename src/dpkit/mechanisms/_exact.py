"""Exact samplers for the discrete Laplace and discrete Gaussian distributions.

These follow Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential
Privacy" (NeurIPS 2020), Algorithms 2-3, and the only randomness used is
uniform integers below a bound, so the samples follow the stated distributions
*exactly*: no floating-point rounding shapes the output (Mironov, CCS 2012).

The building block is Bernoulli(exp(-γ)) for rational γ. CKS's Algorithm 1
draws several uniforms per trial; here a trial draws one uniform 62-bit word
``W``, the first base-2**62 digit of a uniform ``U`` in [0, 1), and returns
``U < exp(-γ)``, deciding it digit by digit. A double-precision ``exp(-γ)``
with a rigorous error margin (2**-40 relative, ~10**3 times NumPy's
worst-case error) settles almost every comparison from ``W`` alone; when
``W`` falls inside the margin (probability about 2**-40) the digits of
``exp(-γ)`` are computed exactly (``decimal``, correctly rounded, with
growing precision until the digit is certain) and compared with ``W`` and,
while they tie, with further fresh words. The outcome is exactly
``U < exp(-γ)``: the floats only say early what the exact comparison would.
For γ >= 45 the first digit of exp(-γ) is 0, so only ``W = 0`` can win; ``W``
is then drawn as a byte (its top 8 bits) and, when that byte is 0, its low 54
bits: the same law from one byte per draw (a selection's many far losers).

Everything is vectorised over NumPy arrays: each loop iteration processes all
still-undecided samples at once, and the set shrinks geometrically. Every loop
has a public cap (``_random.rejection_rounds``; each loop states the per-round
acceptance it relies on): reaching it has probability below 2^-164 and raises
``SamplingLimitError`` with nothing released, so every call ends.
"""

from __future__ import annotations

import decimal
from functools import lru_cache
from math import isqrt
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit.mechanisms._random import RandomSource, rejection_rounds, sampling_limit

# Parameters below this keep products in int64 (discrete Laplace's t, Gaussian's terms).
_FAST_DEN = 1 << 54
_WORD_BITS = 62  # one uniform digit: uniform_below(2**62) never rejects
_WORD = 1 << _WORD_BITS
# Relative error margin of the float exp(-γ), per unit of (γ + 2); see module doc.
_MARGIN = 2.0**-40
_TINY = 2.0**-1000  # absolute margin: covers underflow (exp(-γ) < 2**-1000 for γ > 694)
# From here on exp(-γ) + margin < 2**-62 (e**-45 < 2**-64): the first digit is surely 0.
_FAR = 45.0
# Precision doublings of the exact digits: each one squares the (already ~1e-9) chance
# that the floors disagree, so ten are never all needed.
_MAX_DOUBLINGS = 10


@lru_cache(maxsize=1024)
def _exp_neg_digits(num: int, den: int, words: int) -> int:
    """floor(exp(-num/den) * 2**(62 * words)), exactly.

    With ``prec`` digits, ``u = 10**(1 - prec)``: the division is off by a
    relative ``u/2`` at most, which moves exp(-γ) by a factor within
    ``exp(±γu/2)``, and ``decimal``'s ``exp`` is correctly rounded (another
    ``u/2``). So exp(-γ) lies within a relative ``rel = exp(γu) - 1 + u`` of
    the computed value (generous: the bounds' own rounding is far smaller).
    The floors of both ends agree unless exp(-γ) times the power of two is
    within ``rel`` of an integer; exp(-γ) is irrational for γ > 0, so raising
    the precision always ends the loop.
    """
    if num == 0:
        return 1 << (_WORD_BITS * words)
    bits = _WORD_BITS * words
    prec = bits * 31 // 100 + 40
    scale = decimal.Decimal(1 << bits)  # exact
    for _ in range(_MAX_DOUBLINGS):
        # Every operation below runs in these contexts (operators use the local one).
        with decimal.localcontext(_decimal_context(prec)):
            gamma = decimal.Decimal(num) / decimal.Decimal(den)
            value = (-gamma).exp()
            if value == 0:  # below 10**(MIN_EMIN - prec): every digit is 0
                return 0
            unit = decimal.Decimal(10) ** (1 - prec)
            rel = (gamma * unit).exp() - 1 + unit
        with decimal.localcontext(_decimal_context(prec + 60)):
            lo = (value * (1 - rel) * scale).to_integral_value(rounding=decimal.ROUND_FLOOR)
            hi = (value * (1 + rel) * scale).to_integral_value(rounding=decimal.ROUND_FLOOR)
        if lo == hi:
            return int(lo)
        prec *= 2
    raise sampling_limit("the exact exp(-gamma) digits")


def _decimal_context(prec: int) -> decimal.Context:
    return decimal.Context(prec=prec, Emin=decimal.MIN_EMIN, Emax=decimal.MAX_EMAX)


def _digit(num: int, den: int, k: int) -> int:
    """The k-th base-2**62 digit (k = 1, 2, ...) of exp(-num/den)."""
    return _exp_neg_digits(num, den, k) & (_WORD - 1)


def _bernoulli_exact_tail(source: RandomSource, num: int, den: int, first_word: int) -> bool:
    """``U < exp(-num/den)`` for ``U`` whose first digit is ``first_word``, exactly."""
    if num == 0:
        return True
    word = first_word
    # A fresh word ties with the digit (and the loop goes on) with probability 2**-62.
    for k in rejection_rounds():
        digit = _digit(num, den, k + 1)
        if word != digit:
            return word < digit
        word = int(source.uniform_below(np.full(1, _WORD, dtype=np.int64))[0])
    raise sampling_limit("the exact Bernoulli(exp(-gamma)) sampler")


def _ratio(num: NDArray[Any], den: NDArray[Any]) -> NDArray[np.float64]:
    """num/den as doubles (Python-int division is correctly rounded; inf when too large)."""
    if num.dtype != object and den.dtype != object:
        return num.astype(np.float64) / den.astype(np.float64)

    def one(n: Any, d: Any) -> float:
        try:
            return int(n) / int(d)
        except OverflowError:
            return float("inf")

    return np.array([one(n, d) for n, d in zip(num, den)], dtype=np.float64)


def bernoulli_exp(source: RandomSource, num: NDArray[Any], den: NDArray[Any]) -> NDArray[np.bool_]:
    """Independent Bernoulli(exp(-num/den)) draws for integers num >= 0, den >= 1.

    One uniform 62-bit word per draw decides almost always; see the module
    docstring for why the result is exact. Far draws (γ >= ``_FAR``, the many
    losers of a selection over a fine grid) are decided by :func:`_far_draws`
    with one byte each, by the same law.
    """
    num = np.asarray(num).ravel()
    den = np.asarray(den).ravel()
    gamma = _ratio(num, den)
    far = gamma >= _FAR  # NaN stays near: the exact path decides it
    result = _far_draws(source, far, num, den) if far.any() else np.zeros(num.size, dtype=bool)
    near = np.flatnonzero(~far)
    if near.size:
        result[near] = _near_draws(source, num[near], den[near], gamma[near])
    return result


def _near_draws(
    source: RandomSource, num: NDArray[Any], den: NDArray[Any], gamma: NDArray[np.float64]
) -> NDArray[np.bool_]:
    """Bernoulli(exp(-γ)): one word against the float bounds of exp(-γ)'s first digit."""
    result = np.asarray(num == 0, dtype=bool).copy()  # exp(0) = 1: no draw needed
    todo = np.flatnonzero(~result)
    if not todo.size:
        return result
    num, den, g = num[todo], den[todo], gamma[todo]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        p = np.exp(-g)
        margin = p * (np.minimum(g, 1e300) + 2.0) * _MARGIN + _TINY
        # The first digit of exp(-γ) is certainly >= lo and certainly <= hi
        # (anything not finite leaves the whole word range to the exact path).
        lo = np.nan_to_num(np.floor(np.clip(p - margin, 0.0, 1.0) * _WORD), nan=0.0)
        hi = np.nan_to_num(np.floor(np.clip(p + margin, 0.0, 1.0) * _WORD), nan=float(_WORD))
    words = source.uniform_below(np.full(todo.size, _WORD, dtype=np.int64))
    lo_i = np.minimum(lo, _WORD - 1).astype(np.int64)
    hi_i = np.minimum(hi, _WORD - 1).astype(np.int64)
    decided = words < lo_i
    for i in np.flatnonzero(~decided & (words <= hi_i)):  # probability ~2**-40 each
        decided[i] = _bernoulli_exact_tail(source, int(num[i]), int(den[i]), int(words[i]))
    result[todo] = decided
    return result


def _far_draws(
    source: RandomSource, far: NDArray[np.bool_], num: NDArray[Any], den: NDArray[Any]
) -> NDArray[np.bool_]:
    """Bernoulli(exp(-γ)) where ``far`` (γ >= ``_FAR``: exp(-γ)'s first digit is 0), else False.

    ``U < exp(-γ)`` then needs the first word ``W`` of ``U`` to be 0, and the
    exact tail decides the rest. ``W`` is drawn in two independent uniform
    parts: its top 8 bits (one byte of ``source.words``), and only when those
    are 0 (probability 1/256) its low 54 bits. ``W = 0`` exactly when both
    are 0, so the law is the one-word comparison's, with 1 byte of randomness
    per draw instead of 8. Entries not ``far`` draw an unused byte too (one
    vectorised draw for the whole array costs less than selecting the far ones).
    """
    size = far.size
    result = np.zeros(size, dtype=bool)
    top = source.words((size + 7) // 8).view(np.uint8)[:size]
    maybe = np.flatnonzero(top == 0)
    maybe = maybe[far[maybe]]
    if maybe.size:
        low = source.uniform_below(np.full(maybe.size, 1 << (_WORD_BITS - 8), dtype=np.int64))
        for i in maybe[low == 0]:  # W = 0: probability 2**-62 each
            result[i] = _bernoulli_exact_tail(source, int(num[i]), int(den[i]), 0)
    return result


def _bernoulli_exp_minus_one(source: RandomSource, size: int) -> NDArray[np.bool_]:
    """Bernoulli(exp(-1)) draws: the word against exp(-1)'s exact first digit."""
    first = _digit(1, 1, 1)
    words = source.uniform_below(np.full(size, _WORD, dtype=np.int64))
    result = words < first
    for i in np.flatnonzero(words == first):  # probability 2**-62 each
        result[i] = _bernoulli_exact_tail(source, 1, 1, first)
    return result


def _geometric_exp_minus_one(source: RandomSource, size: int) -> NDArray[np.int64]:
    """Number of Bernoulli(exp(-1)) successes before the first failure."""
    count = np.zeros(size, dtype=np.int64)
    active = np.arange(size)
    for _ in rejection_rounds(1.0 - 0.368):  # each draw stops w.p. 1 - exp(-1) per round
        if not active.size:
            return count
        ok = _bernoulli_exp_minus_one(source, active.size)
        count[active[ok]] += 1
        active = active[ok]
    if not active.size:
        return count
    raise sampling_limit("the geometric sampler")


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
    # A round accepts w.p. >= (1 - exp(-1)) / 2 > 1/4: E[exp(-U/t)] >= 1 - exp(-1) for
    # U uniform below t, and the "negative zero" rejection removes at most half.
    for _ in rejection_rounds():
        if not pending.size:
            return out
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
    if not pending.size:
        return out
    raise sampling_limit("the discrete Laplace sampler")


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
    # CKS Algorithm 3 accepts w.p. above 0.44 for every sigma^2 (0.46 as sigma -> 0,
    # 0.76 as sigma -> inf; checked numerically in tests/mechanisms/test_bounded_loops.py).
    for _ in rejection_rounds():
        if not pending.size:
            return out
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
    if not pending.size:
        return out
    raise sampling_limit("the discrete Gaussian sampler")
