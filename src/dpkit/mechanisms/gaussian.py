"""Gaussian mechanisms: classical, analytic (Balle & Wang 2018), discrete (CKS 2020).

Every variant samples the *discrete* Gaussian exactly (on a 2^-k grid for real
values), so none has a floating-point leak. The variants differ in how the
noise level sigma is calibrated to (epsilon, delta):

* ``classic``: sigma = D * sqrt(2 ln(1.25/delta)) / epsilon, valid only for
  epsilon < 1 (Dwork & Roth, Thm A.1); refused otherwise.
* ``analytic``: the smallest sigma with
  Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) - eps sigma/D) <= delta
  (Balle & Wang, ICML 2018), valid for every epsilon.

The calibrated sigma is then *checked* for the distribution actually sampled:
for one value, the exact (epsilon, delta) curve of the discrete Gaussian (CKS
Thm 7: delta = P[Y > eps s2/D - D/2] - e^eps P[Y > eps s2/D + D/2], Y ~ N_Z(0, s2)),
evaluated with rigorous sum-integral bounds; for several values, the
multivariate discrete Gaussian's rho-zCDP guarantee rho = D^2/(2 s2) (CKS) with
the accountant's zCDP-to-(eps, delta) conversion (CKS 2020, never looser than
Bun & Steinke's eps = rho + 2 sqrt(rho ln(1/delta))). sigma
is raised until the check passes, so the stated (epsilon, delta) always holds.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, special

from dpkit._checks import check_delta, check_epsilon, check_sensitivity, exact, finite_array
from dpkit.errors import InvalidParameterError
from dpkit.mechanisms import _grid
from dpkit.mechanisms._base import AdditiveMechanism, as_output, smallest_true
from dpkit.mechanisms._exact import discrete_gaussian as _sample_discrete_gaussian
from dpkit.mechanisms._random import as_source
from dpkit.mechanisms.laplace import _check_size, _integer_array

METHODS = ("analytic", "classic")
#: ``method`` of a mechanism made by ``from_rho`` (calibrated to ρ-zCDP, not to (ε, δ))
ZCDP_METHOD = "zcdp"


def classic_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """sigma = D sqrt(2 ln(1.25/delta)) / epsilon (Dwork & Roth Thm A.1; epsilon < 1 only)."""
    if epsilon >= 1:
        raise InvalidParameterError(
            "the classical Gaussian mechanism is only proven for epsilon < 1; "
            "use method='analytic', which is valid (and tighter) for every epsilon."
        )
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def analytic_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """delta(epsilon) of the continuous Gaussian mechanism (Balle & Wang 2018, Thm 8)."""
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    first = special.ndtr(a - b)
    second = math.exp(epsilon + special.log_ndtr(-a - b))
    return float(first - second)


_MAX_DOUBLINGS = 1100  # 2**1100 overflows a double: every reachable sigma is bracketed by then


def analytic_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """The smallest sigma for which the Gaussian mechanism is (epsilon, delta)-DP (Balle & Wang).

    Inputs are checked first (finite positive sensitivity and epsilon, delta in
    (0, 1)), and the bracketing search is bounded: a delta so small that no
    double-precision sigma reaches it is an error, never an endless loop.
    """
    sensitivity = check_sensitivity(sensitivity)
    epsilon = check_epsilon(epsilon, share=True)
    delta = check_delta(delta, allow_zero=False)
    hi = sensitivity
    for _ in range(_MAX_DOUBLINGS):
        if analytic_delta(hi, sensitivity, epsilon) <= delta:
            break
        hi *= 2.0
    else:
        raise InvalidParameterError(
            f"delta={delta!r} is too small for the Gaussian mechanism in double precision; "
            "use delta >= 1e-100 (or a pure-epsilon mechanism)."
        )
    lo = hi / 2.0
    for _ in range(_MAX_DOUBLINGS):
        if not (analytic_delta(lo, sensitivity, epsilon) <= delta and lo > 1e-12 * sensitivity):
            break
        lo /= 2.0
    sigma = optimize.brentq(
        lambda s: analytic_delta(s, sensitivity, epsilon) - delta, lo, hi, xtol=1e-14 * hi
    )
    return float(sigma) * (1 + 1e-9)


def _tail_sum_bounds(m: int, sigma2: float) -> tuple[float, float]:
    """Bounds on sum_{k >= m} exp(-k^2 / (2 sigma2)) for m >= 1 (f decreasing on [m, inf))."""
    sigma = math.sqrt(sigma2)
    integral = sigma * math.sqrt(math.pi / 2.0) * float(special.erfc(m / (sigma * math.sqrt(2.0))))
    return integral, integral + math.exp(-(m * m) / (2.0 * sigma2))


def _normaliser_bounds(sigma2: float) -> tuple[float, float]:
    low, high = _tail_sum_bounds(1, sigma2)
    return 1.0 + 2.0 * low, 1.0 + 2.0 * high


def discrete_gaussian_tail(m: int, sigma2: float) -> tuple[float, float]:
    """Lower and upper bounds on P[Y >= m] for Y ~ N_Z(0, sigma2), any integer m."""
    if m <= 0:
        low, high = discrete_gaussian_tail(1 - m, sigma2)
        return 1.0 - high, 1.0 - low
    z_low, z_high = _normaliser_bounds(sigma2)
    s_low, s_high = _tail_sum_bounds(m, sigma2)
    return s_low / z_high, min(1.0, s_high / z_low)


def discrete_gaussian_delta(sigma2: float, sensitivity: int, epsilon: float) -> float:
    """An upper bound on delta(epsilon) of the scalar discrete Gaussian mechanism (CKS Thm 7)."""
    centre = epsilon * sigma2 / sensitivity
    m1 = math.floor(centre - sensitivity / 2.0) + 1
    m2 = math.floor(centre + sensitivity / 2.0) + 1
    upper_first = discrete_gaussian_tail(m1, sigma2)[1]
    lower_second = discrete_gaussian_tail(m2, sigma2)[0]
    # e^ε capped at e^700 (no overflow): a smaller subtrahend only raises the bound.
    return upper_first * (1 + 1e-12) - math.exp(min(epsilon, 700.0)) * lower_second * (1 - 1e-12)


def calibrate_sigma2(
    grid_sensitivity: float, size: int, epsilon: float, delta: float, method: str
) -> int:
    """Integer variance (grid units) of discrete Gaussian noise that is (epsilon, delta)-DP."""
    if method == "classic":
        sigma = classic_sigma(grid_sensitivity, epsilon, delta)
    elif method == "analytic":
        sigma = analytic_sigma(grid_sensitivity, epsilon, delta)
    else:
        raise InvalidParameterError(f"method must be one of {METHODS}, got {method!r}.")
    if not math.isfinite(sigma * sigma * 4096.0):
        raise InvalidParameterError(
            f"epsilon={epsilon!r} is too small for this sensitivity and delta: the noise level "
            "overflows a double (the answer would be pure noise). Use a larger epsilon or "
            "delta, or a smaller sensitivity."
        )
    sigma2 = max(1, math.ceil(sigma * sigma))
    if size == 1:
        sens = math.ceil(grid_sensitivity)
        # The continuous sigma is within a factor of a few of the discrete one: 2**15
        # steps of 0.1% (a factor above 10**14) are never all needed.
        for _ in range(1 << 15):
            if discrete_gaussian_delta(sigma2, sens, epsilon) <= delta:
                break
            sigma2 = math.ceil(sigma2 * 1.001) + 1
        else:
            raise InvalidParameterError(
                f"no noise level reaches delta={delta!r} at epsilon={epsilon!r} in double "
                "precision; use a larger delta or epsilon."
            )
    else:
        from dpkit.accounting.composition import largest_rho

        rho = float(largest_rho(epsilon, delta))
        sigma2 = max(sigma2, math.ceil(grid_sensitivity**2 / (2.0 * rho)))
    return sigma2


def discrete_gaussian_half_width(sigma2: int, alpha: float) -> int:
    """Smallest k with P(|Y| > k) <= alpha for Y ~ N_Z(0, sigma2) (from rigorous bounds)."""
    guess = max(0, math.floor(math.sqrt(sigma2) * special.ndtri(1.0 - alpha / 2.0)) - 2)
    return smallest_true(lambda k: 2.0 * discrete_gaussian_tail(k + 1, sigma2)[1] <= alpha, guess)


def zcdp_sigma2(grid_sensitivity: float, rho: float | Fraction) -> int:
    """Integer variance (grid units) of discrete Gaussian noise that is ``rho``-zCDP.

    The multivariate discrete Gaussian of variance s2 is D²/(2 s2)-zCDP for
    integer shifts of l2 norm at most D (Canonne, Kamath & Steinke 2020, Thm 14),
    so s2 = ceil(D²/(2ρ)) is rho-zCDP (ceil: never less noise than asked).
    """
    sigma2 = grid_sensitivity**2 / (2.0 * float(rho))
    if not math.isfinite(sigma2 * 4096.0):
        raise InvalidParameterError(
            f"rho={rho!r} is too small for this sensitivity: the noise level overflows a double "
            "(the answer would be pure noise). Use a larger budget or a smaller sensitivity."
        )
    return max(1, math.ceil(sigma2))


def _zcdp_charge(rho: float | Fraction, delta: float) -> tuple[Fraction, float]:
    """(rho exactly, the ε at ``delta`` that ρ-zCDP implies: the CKS conversion, rounded up)."""
    if (
        isinstance(rho, bool)
        or not isinstance(rho, int | float | Fraction)
        or not 0 < rho < math.inf
    ):
        raise InvalidParameterError(f"rho must be a finite number > 0, got {rho!r}.")
    r = rho if isinstance(rho, Fraction) else exact(rho)
    return r, _converted(r, exact(delta))


@functools.lru_cache(maxsize=1024)
def _converted(rho: Fraction, delta: Fraction) -> float:
    """zCDP → ε at δ (a numerical minimisation; sessions repeat a few (ρ, δ) pairs)."""
    from dpkit.accounting.composition import zcdp_to_dp

    return zcdp_to_dp(rho, delta).epsilon


class Gaussian(AdditiveMechanism):
    """(epsilon, delta)-DP Gaussian mechanism for real values (exact discrete sampling).

    Guarantee: (epsilon, delta)-DP, and rho-zCDP with rho reported in
    ``cost.rho``, for queries whose l2 sensitivity (neighbouring relation of
    the caller; add/remove one row for dpkit's queries) is at most
    ``sensitivity``. The answer is rounded to a 2^-k grid (l2 sensitivity of the
    rounded answer <= D/g + sqrt(size) grid steps), then exact discrete Gaussian
    noise is added with a variance calibrated and verified as described in the
    module docstring. ``method``: ``"analytic"`` (default, any epsilon) or
    ``"classic"`` (epsilon < 1 only).
    """

    name = "gaussian"

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        sensitivity: float,
        method: str = "analytic",
        size: int = 1,
        granularity: float | None = None,
    ) -> None:
        self._setup(epsilon, delta, sensitivity, method, size, granularity)
        self._sigma2 = calibrate_sigma2(
            self.grid_sensitivity, self.size, self.epsilon, self.delta, method
        )
        self._finish(epsilon)

    def _setup(
        self,
        epsilon: float,
        delta: float,
        sensitivity: float,
        method: str,
        size: int,
        granularity: float | None,
    ) -> None:
        self.epsilon = check_epsilon(epsilon, share=True)
        self.delta = check_delta(delta, allow_zero=False)
        self.sensitivity = check_sensitivity(sensitivity)
        self.size = _check_size(size)
        self.method = method
        if granularity is None:
            granularity = _grid.default_granularity(self.sensitivity, self.size, norm=2)
        else:
            try:
                _grid.check_granularity(granularity)
            except ValueError as err:
                raise InvalidParameterError(str(err)) from None
        self.granularity = float(granularity)
        grid_sens = _grid.l2_grid_sensitivity(self.sensitivity, self.granularity, self.size)
        if self.size == 1:
            grid_sens = float(_grid.l1_grid_sensitivity(self.sensitivity, self.granularity, 1))
        self.grid_sensitivity = grid_sens

    def _finish(self, epsilon: float, charged_rho: Fraction | None = None) -> None:
        self.rho = self.grid_sensitivity**2 / (2.0 * self._sigma2)
        # the ρ charged: the calibration target when there is one (>= what the noise proves)
        self.charged_rho: float | Fraction = self.rho if charged_rho is None else charged_rho
        if not math.isfinite(self.sigma * 64.0):
            raise InvalidParameterError(
                f"epsilon={epsilon!r} is too small for this sensitivity: the noise level "
                "overflows a double (the answer would be pure noise). Use a larger epsilon or "
                "a smaller sensitivity."
            )

    @classmethod
    def from_rho(
        cls,
        rho: float | Fraction,
        *,
        delta: float,
        sensitivity: float,
        size: int = 1,
        granularity: float | None = None,
    ) -> Gaussian:
        """Gaussian noise calibrated to ``rho``-zCDP (σ = sensitivity/√(2ρ)), not to (ε, δ).

        Guarantee: rho-zCDP for queries of l2 sensitivity at most ``sensitivity``
        (the rounded answer's grid sensitivity, as for the (ε, δ) calibration;
        :func:`zcdp_sigma2`), hence (ε, ``delta``)-DP with ε the CKS conversion
        (:func:`dpkit.accounting.composition.zcdp_to_dp`), which is what ``cost``
        states. A zCDP accountant charges ``rho``. Same sampling and rounding as
        the (ε, δ) calibration.
        """
        rho, epsilon = _zcdp_charge(rho, check_delta(delta, allow_zero=False))
        mech = cls.__new__(cls)
        mech._setup(epsilon, delta, sensitivity, ZCDP_METHOD, size, granularity)
        mech._sigma2 = zcdp_sigma2(mech.grid_sensitivity, rho)
        mech._finish(epsilon, charged_rho=rho)
        return mech

    @property
    def sigma(self) -> float:
        """Standard deviation scale of the noise in the value's units."""
        return self.granularity * math.sqrt(self._sigma2)

    @property
    def cost(self) -> Any:
        from dpkit.accounting import Budget

        return Budget(self.epsilon, self.delta, rho=self.charged_rho)

    @property
    def event(self) -> Any:
        """Discrete Gaussian noise in grid units (variance sigma2, l2 sensitivity D_g) and its charge."""
        from dpkit.accounting.events import DiscreteGaussianEvent

        return DiscreteGaussianEvent(
            math.sqrt(self._sigma2),
            self.grid_sensitivity,
            epsilon=exact(self.epsilon),
            delta=exact(self.delta),
            rho=exact(self.charged_rho),
            scalar=self.size == 1,
        )

    def randomise(self, value: ArrayLike, rng: object = None) -> Any:
        arr = finite_array(value)
        if arr.size != self.size:
            raise InvalidParameterError(
                f"this mechanism was calibrated for {self.size} value(s) but got {arr.size}; "
                "create it with size=<number of values>."
            )
        rounded = _grid.to_grid(arr.ravel(), self.granularity)
        noise = _sample_discrete_gaussian(as_source(rng), self._sigma2, 1, arr.size)
        return as_output(_grid.from_grid(rounded, noise, self.granularity), value)

    def half_width(self, level: float = 0.95) -> float:
        """|noisy - exact| <= this with probability >= level (per coordinate)."""
        k = discrete_gaussian_half_width(self._sigma2, 1.0 - level)
        return self.granularity * (k + 0.5)

    def details(self) -> dict[str, Any]:
        return {
            "sigma": self.sigma,
            "granularity": self.granularity,
            "rho": self.rho,
            "method": self.method,
        }


class DiscreteGaussian(AdditiveMechanism):
    """(epsilon, delta)-DP discrete Gaussian mechanism for integer values (CKS 2020).

    Guarantee: (epsilon, delta)-DP and rho-zCDP (rho = D^2/(2 sigma^2), in
    ``cost.rho``) for integer queries of l2 sensitivity at most ``sensitivity``.
    No rounding: noise is added in integer units, sampled exactly.
    """

    name = "discrete_gaussian"

    def __init__(
        self,
        *,
        epsilon: float,
        delta: float,
        sensitivity: float = 1,
        method: str = "analytic",
        size: int = 1,
    ) -> None:
        self.epsilon = check_epsilon(epsilon, share=True)
        self.delta = check_delta(delta, allow_zero=False)
        self.sensitivity = check_sensitivity(sensitivity)
        self.size = _check_size(size)
        self.method = method
        self._sigma2 = calibrate_sigma2(
            self.sensitivity, self.size, self.epsilon, self.delta, method
        )
        self.rho = self.sensitivity**2 / (2.0 * self._sigma2)
        self.charged_rho: float | Fraction = self.rho

    @classmethod
    def from_rho(
        cls, rho: float | Fraction, *, delta: float, sensitivity: float = 1, size: int = 1
    ) -> DiscreteGaussian:
        """Discrete Gaussian noise calibrated to ``rho``-zCDP (σ² = ⌈sensitivity²/(2ρ)⌉).

        Guarantee: rho-zCDP for integer queries of l2 sensitivity at most
        ``sensitivity`` (:func:`zcdp_sigma2`), hence (ε, ``delta``)-DP with ε the
        CKS conversion, which ``cost`` states; a zCDP accountant charges ``rho``.
        """
        rho, epsilon = _zcdp_charge(rho, check_delta(delta, allow_zero=False))
        mech = cls.__new__(cls)
        mech.epsilon = check_epsilon(epsilon, share=True)
        mech.delta = float(delta)
        mech.sensitivity = check_sensitivity(sensitivity)
        mech.size = _check_size(size)
        mech.method = ZCDP_METHOD
        mech._sigma2 = zcdp_sigma2(mech.sensitivity, rho)
        mech.rho = mech.sensitivity**2 / (2.0 * mech._sigma2)
        mech.charged_rho = rho
        return mech

    @property
    def sigma(self) -> float:
        return math.sqrt(self._sigma2)

    @property
    def cost(self) -> Any:
        from dpkit.accounting import Budget

        return Budget(self.epsilon, self.delta, rho=self.charged_rho)

    @property
    def event(self) -> Any:
        """Discrete Gaussian noise of variance sigma2 on l2 sensitivity ``sensitivity``, and its charge."""
        from dpkit.accounting.events import DiscreteGaussianEvent

        return DiscreteGaussianEvent(
            self.sigma,
            self.sensitivity,
            epsilon=exact(self.epsilon),
            delta=exact(self.delta),
            rho=exact(self.charged_rho),
            scalar=self.size == 1,
        )

    def randomise(self, value: ArrayLike, rng: object = None) -> Any:
        arr = _integer_array(value)
        if arr.size != self.size:
            raise InvalidParameterError(
                f"this mechanism was calibrated for {self.size} value(s) but got {arr.size}; "
                "create it with size=<number of values>."
            )
        noise = _sample_discrete_gaussian(as_source(rng), self._sigma2, 1, arr.size)
        return as_output(arr.ravel() + noise, value)

    def half_width(self, level: float = 0.95) -> float:
        return float(discrete_gaussian_half_width(self._sigma2, 1.0 - level))

    def details(self) -> dict[str, Any]:
        return {"sigma": self.sigma, "rho": self.rho, "method": self.method}


def gaussian(
    value: ArrayLike,
    *,
    sensitivity: float,
    epsilon: float,
    delta: float,
    method: str = "analytic",
    rng: object = None,
    granularity: float | None = None,
    accountant: Any = None,
) -> Any:
    """Add Gaussian noise: (epsilon, delta)-DP for l2 sensitivity ``sensitivity``.

    Returns a float or an array of ``value``'s shape. See :class:`Gaussian`.
    ``accountant``: an Accountant, ledger path or Session charged the cost first.
    """
    mechanism = Gaussian(
        epsilon=epsilon,
        delta=delta,
        sensitivity=sensitivity,
        method=method,
        size=max(1, int(np.size(value))),
        granularity=granularity,
    )
    return mechanism.paid(value, rng, accountant)


def discrete_gaussian(
    value: ArrayLike,
    *,
    sensitivity: float = 1,
    epsilon: float,
    delta: float,
    method: str = "analytic",
    rng: object = None,
    accountant: Any = None,
) -> Any:
    """Add discrete Gaussian noise to integers: (epsilon, delta)-DP, l2 sensitivity ``sensitivity``.

    ``accountant``: an Accountant, ledger path or Session charged the cost first.
    """
    mechanism = DiscreteGaussian(
        epsilon=epsilon,
        delta=delta,
        sensitivity=sensitivity,
        method=method,
        size=max(1, int(np.size(value))),
    )
    return mechanism.paid(value, rng, accountant)
