"""An amount of privacy, (ε, δ) with an optional zCDP parameter ρ, in exact arithmetic.

Budgets are public: they may appear in messages, logs and ledgers.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Real
from typing import Any, TypeAlias

import numpy as np

from dpkit._checks import exact
from dpkit.errors import InvalidParameterError

#: What a user may pass wherever an amount of privacy is expected.
Amount: TypeAlias = "float | int | Fraction | np.floating[Any] | np.integer[Any]"


def _exact_amount(value: object, name: str, *, delta: bool = False) -> Fraction:
    """Validate a public privacy parameter and return the rational it denotes."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, Real | np.integer | np.floating):
        raise InvalidParameterError(
            f"{name} must be a number, got an object of type {type(value).__name__}."
        )
    if isinstance(value, float | np.floating) and not math.isfinite(float(value)):
        raise InvalidParameterError(f"{name} must be finite, got {float(value)!r}.")
    q = exact(value)  # type: ignore[arg-type]
    if q < 0:
        raise InvalidParameterError(
            f"{name} must be >= 0, got {float(q)!r}. Privacy amounts are never negative."
        )
    if delta and q >= 1:
        raise InvalidParameterError(
            f"{name} must be in [0, 1), got {float(q)!r}. delta is the probability that the "
            "epsilon guarantee fails; choose it well below 1/n, e.g. 1e-6."
        )
    return q


def _fmt(q: Fraction) -> str:
    """Short human form of an exact amount: integers as such, the rest (and huge ones) as a float."""
    if q.denominator == 1 and abs(q.numerator) < 10**15:
        return str(q.numerator)
    return repr(float(q))


class Budget:
    """An amount of differential privacy: a guarantee a release satisfies or a total allowed.

    ``Budget(epsilon, delta=0, *, rho=None)`` stands for (ε, δ)-differential privacy
    under the add/remove-one-row neighbouring relation. ``rho``, if given, states
    that the release *also* satisfies ρ-zero-concentrated DP (Bun & Steinke 2016);
    Gaussian releases carry it. A pure ε release (δ = 0) satisfies ρ = ε²/2-zCDP
    (Bun & Steinke 2016, Prop. 1.4), so its ``rho`` is ε²/2 when none is given.

    Arithmetic is exact: every amount is stored as a :class:`fractions.Fraction`
    obtained with :func:`dpkit._checks.exact`, which reads a float as its shortest
    decimal repr, so ``Budget(0.1)`` is exactly 1/10 and ten of them add up to
    exactly ``Budget(1.0)``. Instances are immutable and hashable.

    ``epsilon`` may be 0 (``Budget.zero()`` is "nothing spent"); ``delta`` is in
    [0, 1); ``rho`` is >= 0.
    """

    __slots__ = ("_delta", "_epsilon", "_rho")

    _epsilon: Fraction
    _delta: Fraction
    _rho: Fraction | None

    def __init__(self, epsilon: Amount, delta: Amount = 0, *, rho: Amount | None = None) -> None:
        eps = _exact_amount(epsilon, "epsilon")
        dlt = _exact_amount(delta, "delta", delta=True)
        r = None if rho is None else _exact_amount(rho, "rho")
        object.__setattr__(self, "_epsilon", eps)
        object.__setattr__(self, "_delta", dlt)
        object.__setattr__(self, "_rho", r)

    @classmethod
    def _of(cls, epsilon: Fraction, delta: Fraction, rho: Fraction | None = None) -> Budget:
        """Build from already-validated exact values (internal, skips validation)."""
        b = object.__new__(cls)
        object.__setattr__(b, "_epsilon", epsilon)
        object.__setattr__(b, "_delta", delta)
        object.__setattr__(b, "_rho", rho)
        return b

    @classmethod
    def zero(cls) -> Budget:
        """The empty amount: ε = 0, δ = 0 (ρ = 0)."""
        return cls._of(Fraction(0), Fraction(0))

    @classmethod
    def coerce(cls, value: Budget | Amount, name: str = "cost") -> Budget:
        """Return ``value`` if it is a Budget, else ``Budget(value)`` (a pure ε amount)."""
        if isinstance(value, Budget):
            return value
        try:
            return cls(value)
        except InvalidParameterError as err:
            raise InvalidParameterError(
                f"{name} must be a Budget or a number (its epsilon): {err}"
            ) from None

    # --- immutability -------------------------------------------------------------
    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Budget is immutable; build a new one instead.")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Budget is immutable.")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Budget._of, (self._epsilon, self._delta, self._rho))

    # --- values -------------------------------------------------------------------
    @property
    def epsilon(self) -> float:
        """ε as the nearest float (see ``epsilon_exact`` for the exact value)."""
        return float(self._epsilon)

    @property
    def delta(self) -> float:
        """δ as the nearest float (see ``delta_exact``)."""
        return float(self._delta)

    @property
    def rho(self) -> float | None:
        """The zCDP parameter ρ this amount satisfies, or None if unknown.

        The declared ρ if one was given, else ε²/2 for a pure amount (δ = 0),
        else None (an (ε, δ) amount with δ > 0 says nothing about zCDP).
        """
        r = self.rho_exact
        return None if r is None else float(r)

    @property
    def epsilon_exact(self) -> Fraction:
        """ε exactly."""
        return self._epsilon

    @property
    def delta_exact(self) -> Fraction:
        """δ exactly."""
        return self._delta

    @property
    def rho_exact(self) -> Fraction | None:
        """ρ exactly (declared, or ε²/2 for a pure amount), or None."""
        if self._rho is not None:
            return self._rho
        if self._delta == 0:
            return self._epsilon * self._epsilon / 2
        return None

    @property
    def rho_declared(self) -> Fraction | None:
        """The ρ given explicitly at construction (None if it was left implicit)."""
        return self._rho

    @property
    def is_pure(self) -> bool:
        """True when δ = 0."""
        return self._delta == 0

    @property
    def is_zero(self) -> bool:
        """True when ε = δ = 0 (nothing spent)."""
        return self._epsilon == 0 and self._delta == 0

    # --- arithmetic ---------------------------------------------------------------
    def __add__(self, other: object) -> Budget:
        """Basic sequential composition: ε and δ add exactly.

        ρ adds too when both operands have one and at least one declared it;
        two pure amounts keep ρ implicit (ε²/2 of the sum, valid and looser), so
        that ``Budget(0.1) + Budget(0.1) == Budget(0.2)``. The accountant tracks
        Σ εᵢ²/2 itself.
        """
        if not isinstance(other, Budget):
            return NotImplemented
        rho: Fraction | None = None
        if self._rho is not None or other._rho is not None:
            a, b = self.rho_exact, other.rho_exact
            if a is not None and b is not None:
                rho = a + b
        delta = self._delta + other._delta
        if delta >= 1:
            raise InvalidParameterError(
                "the composed delta would reach 1, which is no guarantee at all; "
                "use smaller deltas."
            )
        return Budget._of(self._epsilon + other._epsilon, delta, rho)

    def __radd__(self, other: object) -> Budget:
        # lets sum() start from the int 0
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        if isinstance(other, Budget):
            return other.__add__(self)
        return NotImplemented

    def __mul__(self, k: object) -> Budget:
        """k-fold basic composition of this amount with itself (k a non-negative int)."""
        if isinstance(k, bool) or not isinstance(k, int | np.integer):
            return NotImplemented
        k = int(k)
        if k < 0:
            raise InvalidParameterError(f"a budget can be repeated k >= 0 times, got k={k}.")
        delta = self._delta * k
        if delta >= 1:
            raise InvalidParameterError(
                "the composed delta would reach 1, which is no guarantee at all; "
                "use a smaller delta."
            )
        rho = None if self._rho is None else self._rho * k
        return Budget._of(self._epsilon * k, delta, rho)

    __rmul__ = __mul__

    def __sub__(self, other: object) -> Budget:
        """Component-wise difference of ε and δ (ρ is dropped).

        Raises InvalidParameterError if ``other`` does not fit within ``self``.
        """
        if not isinstance(other, Budget):
            return NotImplemented
        if not other.is_within(self):
            raise InvalidParameterError(
                f"cannot subtract {other} from {self}: the result would be negative."
            )
        return Budget._of(self._epsilon - other._epsilon, self._delta - other._delta)

    def is_within(self, other: Budget) -> bool:
        """True when ε ≤ other.ε and δ ≤ other.δ (ρ is not compared)."""
        return self._epsilon <= other._epsilon and self._delta <= other._delta

    def __le__(self, other: object) -> bool:
        """Component-wise partial order on (ε, δ): ``a <= b`` is ``a.is_within(b)``."""
        if not isinstance(other, Budget):
            return NotImplemented
        return self.is_within(other)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Budget):
            return NotImplemented
        return other.is_within(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Budget):
            return NotImplemented
        return (
            self._epsilon == other._epsilon
            and self._delta == other._delta
            and self.rho_exact == other.rho_exact
        )

    def __hash__(self) -> int:
        return hash((self._epsilon, self._delta, self.rho_exact))

    # --- text ---------------------------------------------------------------------
    def __str__(self) -> str:
        text = f"ε={_fmt(self._epsilon)}, δ={_fmt(self._delta)}"
        if self._rho is not None:
            text += f", ρ={_fmt(self._rho)}"
        return text

    def __repr__(self) -> str:
        def arg(q: Fraction) -> str:
            if q.denominator == 1 or exact(float(q)) == q:
                return _fmt(q)
            return f"Fraction({q.numerator}, {q.denominator})"

        text = f"Budget(epsilon={arg(self._epsilon)}"
        if self._delta:
            text += f", delta={arg(self._delta)}"
        if self._rho is not None:
            text += f", rho={arg(self._rho)}"
        return text + ")"
