"""Validation of public parameters shared by every module.

These functions look only at public parameters (epsilon, delta, bounds,
sensitivities), never at private data, so their errors reveal nothing.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction
from numbers import Real

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.errors import DataError, InvalidParameterError, PrivacyWarning


def is_real_scalar(x: object) -> bool:
    return isinstance(x, Real | np.integer | np.floating) and not isinstance(x, bool | np.bool_)


def _as_float(value: object, name: str, what: str) -> float:
    """``float(value)``; a number too large for a double is refused, not an OverflowError."""
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:
        raise InvalidParameterError(
            f"{name} is too large to represent as a double; it must be {what}."
        ) from None


def check_epsilon(
    epsilon: object, name: str = "epsilon", *, share: bool = False, warn: bool = True
) -> float:
    """Return epsilon as a float after checking ``MIN_EPSILON <= epsilon < inf``.

    The floor keeps every computation representable and bounded (see
    :data:`MIN_EPSILON`): below it a noise scale no longer fits the exact
    samplers, so such a query is refused here, before anything is charged,
    instead of failing (or running without end) afterwards. ``share=True`` is
    for the building blocks (mechanisms, histogram publishers) that spend a
    part of a caller's epsilon: their floor is :data:`MIN_SHARE_EPSILON`.
    ``warn=False`` skips the weak-guarantee warning, for a second check of an
    epsilon the caller has already checked (one warning per query, not two).
    """
    if not is_real_scalar(epsilon):
        raise InvalidParameterError(
            f"{name} must be a positive number, got an object of type {type(epsilon).__name__}."
        )
    value = _as_float(epsilon, name, "a finite number > 0 such as 1.0")
    if not math.isfinite(value) or value <= 0:
        raise InvalidParameterError(
            f"{name} must be a finite number > 0, got {value!r}. "
            "Smaller epsilon means more privacy and more noise; typical values are 0.01 to 10."
        )
    floor = MIN_SHARE_EPSILON if share else MIN_EPSILON
    if value < floor:
        raise InvalidParameterError(
            f"{name}={value!r} is below dpkit's floor of {floor:.3g}: its noise would be more "
            f"than {1 / floor:.0e} times the sensitivity (the answer is pure noise) and too wide "
            f"for the exact samplers. Use {name} >= {MIN_EPSILON:g} (typical values are 0.01 "
            "to 10)."
        )
    if warn and value > WEAK_EPSILON and not _EPSILON_CHECKED.get():
        warnings.warn(
            f"{name}={value:g} is above {WEAK_EPSILON:g}: the guarantee is weak (one person can "
            f"change the odds of an outcome by a factor up to e^{value:g}). Use a smaller "
            f"{name} for anything you publish.",
            PrivacyWarning,
            stacklevel=3,
        )
    return value


#: The smallest epsilon a caller may spend (every epsilon goes through
#: :func:`check_epsilon`; a session query's epsilon per contributed row too). Why
#: 1e-9: the exact samplers hold a noise scale of at most 2**52 grid steps
#: (``mechanisms._exact``), and the finest grid (the Laplace mechanism's, 2**10 to
#: 2**11 steps per unit of sensitivity) leaves 2**41 for sensitivity / epsilon, so a
#: mechanism can spend down to :data:`MIN_SHARE_EPSILON` = 2**-40; 1e-9 keeps a factor
#: of 2**10 for the shares composite queries split epsilon into (the smallest,
#: variance's 0.293 of a private-keys half of a private-bounds 3/4, is above 1/16).
#: The confidence-interval searches and rejection samplers are bounded whatever the
#: scale; these floors keep the scale representable.
MIN_EPSILON = 1e-9

#: The smallest part of an epsilon a mechanism or publisher accepts (``share=True``).
MIN_SHARE_EPSILON = 2.0**-40


#: Above this epsilon dpkit warns that the guarantee is weak (e^10 ≈ 22,000).
WEAK_EPSILON = 10.0

#: Set while a query whose epsilon was checked (and warned about) spends its parts.
_EPSILON_CHECKED: ContextVar[bool] = ContextVar("dpkit_epsilon_checked", default=False)


@contextmanager
def epsilon_checked() -> Iterator[None]:
    """Inside this block no weak-epsilon warning is repeated: the caller already warned.

    A query's mechanisms check the shares of its epsilon again; the user has
    already been told once about the query's own epsilon (one warning per query).
    """
    token = _EPSILON_CHECKED.set(True)
    try:
        yield
    finally:
        _EPSILON_CHECKED.reset(token)


#: Bytes one release may allocate for arrays whose size the analyst chooses (bins, grids,
#: keys); checked before anything is charged, so no request runs out of memory after it.
MEMORY_CEILING = 2 * 2**30


def check_delta(delta: object, name: str = "delta", *, allow_zero: bool = True) -> float:
    """Return delta as a float after checking 0 <= delta < 1 (or 0 < delta < 1)."""
    if not is_real_scalar(delta):
        raise InvalidParameterError(
            f"{name} must be a number in [0, 1), got an object of type {type(delta).__name__}."
        )
    value = _as_float(delta, name, "in [0, 1)")
    low_ok = value >= 0 if allow_zero else value > 0
    if not math.isfinite(value) or not low_ok or value >= 1:
        interval = "[0, 1)" if allow_zero else "(0, 1)"
        raise InvalidParameterError(
            f"{name} must be in {interval}, got {value!r}. "
            "delta is the probability that the epsilon guarantee fails; "
            "choose it well below 1/n, e.g. 1e-6."
        )
    return value


def check_sensitivity(sensitivity: object, name: str = "sensitivity") -> float:
    """Return the sensitivity as a float after checking 0 < sensitivity < inf."""
    if not is_real_scalar(sensitivity):
        raise InvalidParameterError(
            f"{name} must be a positive number, got an object of type {type(sensitivity).__name__}."
        )
    value = _as_float(sensitivity, name, "a finite number > 0")
    if not math.isfinite(value) or value <= 0:
        raise InvalidParameterError(
            f"{name} must be a finite number > 0, got {value!r}. It is the most one person's "
            "row can change the query's answer (for a count, 1; for a sum clipped to "
            "[lo, hi], max(|lo|, |hi|))."
        )
    return value


def check_bounds(bounds: object, name: str = "bounds") -> tuple[float, float]:
    """Return (lo, hi) as floats after checking both are finite and lo < hi."""
    lo: object
    hi: object
    try:
        lo, hi = bounds  # type: ignore[misc]
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"{name} must be a pair (lo, hi) of finite numbers, e.g. bounds=(0, 120)."
        ) from None
    if not (is_real_scalar(lo) and is_real_scalar(hi)):
        raise InvalidParameterError(f"{name} must be a pair (lo, hi) of numbers.")
    lo_f = _as_float(lo, name, "a pair of finite numbers")
    hi_f = _as_float(hi, name, "a pair of finite numbers")
    if not (math.isfinite(lo_f) and math.isfinite(hi_f)):
        raise InvalidParameterError(f"{name} must be finite, got ({lo_f!r}, {hi_f!r}).")
    if lo_f >= hi_f:
        raise InvalidParameterError(
            f"{name} must satisfy lo < hi, got ({lo_f!r}, {hi_f!r}); did you reverse them?"
        )
    if not math.isfinite(hi_f - lo_f):
        # Widths (sensitivities of sums and means) must be doubles too.
        raise InvalidParameterError(
            f"{name} is too wide: hi - lo overflows a double; use bounds whose width is "
            "below 1e308 (the values' plausible range)."
        )
    return lo_f, hi_f


def check_level(level: object) -> float:
    """Check a confidence level in (0, 1) and return it as a float."""
    message = "level must be in (0, 1), e.g. 0.95."
    if not is_real_scalar(level):
        raise InvalidParameterError(message)
    value = _as_float(level, "level", "in (0, 1)")
    if not 0 < value < 1:
        raise InvalidParameterError(f"{message[:-1]}; got {value!r}.")
    return value


def finite_array(value: ArrayLike, name: str = "value") -> NDArray[np.float64]:
    """Convert to a float64 array and refuse NaN/inf.

    The message does not say which element or what it was: the caller's data may
    be private. Public callers (mechanisms) document that inputs must be finite.
    """
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(
            f"{name} must be numeric (a number or an array of numbers); "
            "convert or drop non-numeric entries first."
        ) from None
    if not np.all(np.isfinite(arr)):
        raise DataError(
            f"{name} contains NaN or infinite entries; clip or impute them before "
            "releasing (a session's null policy does this for you)."
        )
    return arr


def exact(x: float | int | Fraction) -> Fraction:
    """The rational a user meant by a float: its shortest decimal repr.

    ``exact(0.1) == Fraction(1, 10)``, so ten charges of 0.1 sum to exactly 1.
    Mechanisms calibrate their noise with this same rational (rounding any
    derived scale in the private direction), so the accountant charges at least
    what is actually spent.
    """
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int | np.integer):
        return Fraction(int(x))
    return Fraction(repr(float(x)))


def float_at_most(value: Fraction) -> float:
    """The largest float f with ``exact(f) <= value`` (a share never spends more than value).

    ``float(value)`` is the nearest double, so at most one step down is needed:
    no search loop.
    """
    out = float(value)
    if exact(out) > value:
        out = math.nextafter(out, -math.inf)
    return out
