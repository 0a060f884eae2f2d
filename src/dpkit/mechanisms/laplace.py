"""The Laplace mechanism (real values) and the geometric mechanism (integers)."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit._checks import check_epsilon, check_sensitivity, exact, finite_array
from dpkit.errors import DataError, InvalidParameterError
from dpkit.mechanisms import _grid
from dpkit.mechanisms._base import AdditiveMechanism, as_output, discrete_laplace_tail_index
from dpkit.mechanisms._exact import discrete_laplace
from dpkit.mechanisms._random import as_source

#: Largest noise scale, in grid steps, the exact discrete Laplace sampler takes (t < 2**54).
MAX_GRID_SCALE = 1 << 52


def _checked_scale(sensitivity: Fraction, epsilon: float, step: float) -> tuple[int, int]:
    """The sampler's rational scale (t, s) >= sensitivity / epsilon, refused when out of range.

    Checked when the mechanism is built, from public parameters only, so a scale
    the sampler cannot draw (or whose interval overflows a double) is refused
    before anything is charged.
    """
    scale = sensitivity / exact(epsilon)
    t, s = _grid.rational_scale(scale)
    if s > MAX_GRID_SCALE:  # a tiny scale: round it up onto 2**-52 (more noise, int64-safe)
        t, s = math.ceil(scale * MAX_GRID_SCALE), MAX_GRID_SCALE
    # 64 scales cover any interval half-width (level < 1 - 2**-53: k <= 38 scales).
    if t >= MAX_GRID_SCALE * s or not math.isfinite(step * (t / s) * 64.0):
        raise InvalidParameterError(
            f"epsilon={epsilon!r} is too small for this sensitivity: the noise scale "
            "(sensitivity / epsilon) is beyond the exact sampler's range (2**52 grid steps) "
            "or a double's, and the answer would be pure noise. Use a larger epsilon or a "
            "smaller sensitivity (narrower bounds)."
        )
    return t, s


def _check_size(size: object) -> int:
    if not isinstance(size, int | np.integer) or isinstance(size, bool) or int(size) < 1:
        raise InvalidParameterError(
            "size must be a positive integer (the number of values released)."
        )
    return int(size)


class Laplace(AdditiveMechanism):
    """epsilon-DP Laplace mechanism for real values, sampled exactly on a grid.

    Guarantee: epsilon-differential privacy for any query whose l1 sensitivity
    (over the neighbouring relation the caller uses; add/remove one row for
    dpkit's queries) is at most ``sensitivity``. For an array of ``size``
    values, ``sensitivity`` bounds the l1 norm of the change of the whole
    array (e.g. a histogram under add/remove: 1).

    How: the answer is rounded to a grid of step g = 2**j (default: fine enough
    that rounding adds at most 2^-10 of the sensitivity), the integer l1
    sensitivity of the rounded answer is D_g = floor(D/g) + size, and exact
    discrete Laplace noise of scale t/s >= D_g/epsilon (rational, rounded up)
    is added in grid units. With ``changed=m``, the caller states that
    neighbours differ in at most ``m`` coordinates (e.g. the one group a row
    belongs to); only those round differently, so D_g = floor(D/g) + m and
    the grid and scale do not depend on ``size`` (which may then be a
    private number, such as how many groups were observed). The privacy loss of one coordinate step is s/t <=
    epsilon/D_g, so the release is epsilon-DP. The noise is the discrete
    analogue of Lap(D/epsilon) up to the 2^-10 inflation.
    """

    name = "laplace"

    def __init__(
        self,
        *,
        epsilon: float,
        sensitivity: float,
        size: int = 1,
        granularity: float | None = None,
        changed: int | None = None,
    ) -> None:
        self.epsilon = check_epsilon(epsilon, share=True)
        self.sensitivity = check_sensitivity(sensitivity)
        self.size = _check_size(size)
        self.changed = self.size if changed is None else _check_size(changed)
        if granularity is None:
            granularity = _grid.default_granularity(self.sensitivity, self.changed, norm=1)
        else:
            try:
                _grid.check_granularity(granularity)
            except ValueError as err:
                raise InvalidParameterError(str(err)) from None
        self.granularity = float(granularity)
        self.grid_sensitivity = _grid.l1_grid_sensitivity(
            self.sensitivity, self.granularity, self.changed
        )
        self._t, self._s = _checked_scale(
            Fraction(self.grid_sensitivity), self.epsilon, self.granularity
        )

    @property
    def scale(self) -> float:
        """The noise scale b in the value's units (the noise is ~ Lap(b))."""
        return self.granularity * self._t / self._s

    @property
    def event(self) -> Any:
        """Discrete Laplace noise in grid units: scale t/s, l1 sensitivity D_g, charged epsilon."""
        from dpkit.accounting.events import GeometricEvent

        return GeometricEvent(self._t / self._s, self.grid_sensitivity, epsilon=exact(self.epsilon))

    def randomise(self, value: ArrayLike, rng: object = None) -> Any:
        arr = finite_array(value)
        if arr.size != self.size:
            raise InvalidParameterError(
                f"this mechanism was calibrated for {self.size} value(s) but got {arr.size}; "
                "create it with size=<number of values>."
            )
        source = as_source(rng)
        rounded = _grid.to_grid(arr.ravel(), self.granularity)
        noise = discrete_laplace(source, self._t, self._s, arr.size)
        return as_output(_grid.from_grid(rounded, noise, self.granularity), value)

    def half_width(self, level: float = 0.95) -> float:
        """|noisy - exact| <= this with probability >= level (per coordinate).

        Exact for the discrete Laplace noise actually used, plus half a grid
        step for the rounding of the exact value.
        """
        k = discrete_laplace_tail_index(self._t / self._s, 1.0 - level)
        return self.granularity * (k + 0.5)

    def details(self) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "granularity": self.granularity,
            "sensitivity": self.sensitivity,
        }


def _integer_array(value: ArrayLike) -> NDArray[np.int64]:
    arr = np.asarray(value)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "b":
        return arr.astype(np.int64)
    floats = finite_array(arr)
    if not np.all(floats == np.round(floats)):
        raise DataError(
            "the geometric mechanism needs integer values; use laplace() for real values."
        )
    return floats.astype(np.int64)


class Geometric(AdditiveMechanism):
    """epsilon-DP geometric (discrete Laplace) mechanism for integer values.

    Guarantee: epsilon-DP for integer-valued queries with l1 sensitivity at most
    ``sensitivity`` (an integer; 1 for a count under add/remove one row).
    Noise Y with P(Y = y) proportional to exp(-epsilon |y| / sensitivity), sampled
    exactly (Canonne, Kamath & Steinke 2020) with scale sensitivity/epsilon as
    an exact rational: the privacy loss of a unit change is exactly
    epsilon/sensitivity, so no rounding is needed and no epsilon is lost.
    Output: integers (a count stays an integer, possibly negative).
    """

    name = "geometric"

    def __init__(self, *, epsilon: float, sensitivity: int = 1, size: int = 1) -> None:
        self.epsilon = check_epsilon(epsilon, share=True)
        check_sensitivity(sensitivity)
        if not float(sensitivity).is_integer():
            raise InvalidParameterError(
                "the geometric mechanism needs an integer sensitivity; use laplace() otherwise."
            )
        self.sensitivity = int(sensitivity)
        self.size = _check_size(size)
        self._t, self._s = _checked_scale(Fraction(self.sensitivity), self.epsilon, 1.0)

    @property
    def scale(self) -> float:
        return self._t / self._s

    @property
    def event(self) -> Any:
        """Discrete Laplace noise of scale t/s on l1 sensitivity ``sensitivity``, charged epsilon."""
        from dpkit.accounting.events import GeometricEvent

        return GeometricEvent(self.scale, self.sensitivity, epsilon=exact(self.epsilon))

    def randomise(self, value: ArrayLike, rng: object = None) -> Any:
        arr = _integer_array(value)
        if arr.size != self.size:
            raise InvalidParameterError(
                f"this mechanism was calibrated for {self.size} value(s) but got {arr.size}; "
                "create it with size=<number of values>."
            )
        noise = discrete_laplace(as_source(rng), self._t, self._s, arr.size)
        return as_output(arr.ravel() + noise, value)

    def half_width(self, level: float = 0.95) -> float:
        """|noisy - exact| <= this with probability >= level (exact, per coordinate)."""
        return float(discrete_laplace_tail_index(self.scale, 1.0 - level))

    def details(self) -> dict[str, Any]:
        return {"scale": self.scale, "sensitivity": self.sensitivity}


def laplace(
    value: ArrayLike,
    *,
    sensitivity: float,
    epsilon: float,
    rng: object = None,
    granularity: float | None = None,
    accountant: Any = None,
) -> Any:
    """Add Laplace noise to ``value``: epsilon-DP for l1 sensitivity ``sensitivity``.

    ``value`` is a number or an array (``sensitivity`` then bounds the l1 change
    of the whole array). Returns a float or an array of the same shape. Sampled
    exactly on a fine grid (see :class:`Laplace`), so it is immune to the
    floating-point attack on naive Laplace. ``rng``: ``None`` (secure), an int
    seed or a ``numpy.random.Generator`` (reproducible, tests only).
    ``accountant``: an Accountant, ledger path or Session charged ε first.
    """
    mechanism = Laplace(
        epsilon=epsilon,
        sensitivity=sensitivity,
        size=max(1, int(np.size(value))),
        granularity=granularity,
    )
    return mechanism.paid(value, rng, accountant)


def geometric(
    value: ArrayLike,
    *,
    sensitivity: int = 1,
    epsilon: float,
    rng: object = None,
    accountant: Any = None,
) -> Any:
    """Add two-sided geometric noise to integer ``value``: epsilon-DP, l1 sensitivity ``sensitivity``.

    Returns an int or an int64 array of the same shape. See :class:`Geometric`.
    ``accountant``: an Accountant, ledger path or Session charged ε first.
    """
    mechanism = Geometric(
        epsilon=epsilon, sensitivity=sensitivity, size=max(1, int(np.size(value)))
    )
    return mechanism.paid(value, rng, accountant)


def laplace_scale(sensitivity: float, epsilon: float) -> float:
    """b = sensitivity / epsilon: the scale of continuous Lap(b) the mechanisms approximate."""
    return check_sensitivity(sensitivity) / check_epsilon(epsilon)


__all__ = ["Geometric", "Laplace", "geometric", "laplace", "laplace_scale"]
