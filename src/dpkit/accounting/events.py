"""Privacy events: *what* a release did (its mechanism and noise), not only what it was charged.

A :class:`~dpkit.accounting.Budget` says how much privacy a release is charged
under basic composition. An event says which mechanism produced it, so that a
tighter accountant (privacy loss distributions, Rényi DP, zCDP) can compose many
releases better than by adding their (ε, δ). Every event knows three things:

* ``to_json()``: a plain dict with a ``"type"`` key, stored in the ledger
  (:func:`event_from_json` reads it back, refusing anything it does not know);
* ``dp_accounting()``: the equivalent event of Google's ``dp_accounting``
  library (imported lazily), for its PLD and RDP accountants;
* ``budget()``: the :class:`Budget` this event alone is charged as by dpkit's
  accountant today (basic composition adds these up).

Events are public: they hold noise scales, sensitivities and budgets, never data.
Budgets (ε, δ, ρ) are exact :class:`~fractions.Fraction` values, like
:class:`Budget`'s; scales and sensitivities are finite positive floats.

For an additive mechanism the charged ε may exceed what its noise alone proves
(dpkit rounds scales up, towards privacy), so Laplace, geometric and Gaussian
events carry the charge (``epsilon``, and ``delta`` / ``rho`` for Gaussians) as
well as the noise; a charge below what the noise proves is refused. A Gaussian's
(ε, δ) is a choice on its privacy curve, so Gaussian events only have a
``budget()`` when that choice is recorded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from dpkit._checks import exact
from dpkit.accounting.budget import Budget, _exact_amount
from dpkit.errors import InvalidParameterError

if TYPE_CHECKING:
    import dp_accounting

__all__ = [
    "ComposedEvent",
    "DiscreteGaussianEvent",
    "EpsilonDeltaEvent",
    "GaussianEvent",
    "GeometricEvent",
    "LaplaceEvent",
    "PrivacyEvent",
    "RepeatedEvent",
    "ZCDPEvent",
    "as_event",
    "event_from_json",
    "is_event",
]

#: How deeply composed/repeated events may nest (bounds the work of reading one back).
MAX_DEPTH = 32

# Slack allowed when a charge is compared with what the noise proves: the charge
# and the noise are computed in floating point by the mechanisms.
_REL_TOL = Fraction(1, 10**9)


@runtime_checkable
class PrivacyEvent(Protocol):
    """What every privacy event offers (see the module docstring)."""

    def to_json(self) -> dict[str, Any]: ...

    def dp_accounting(self) -> dp_accounting.DpEvent: ...

    def budget(self) -> Budget: ...


def _positive(value: object, name: str, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise InvalidParameterError(
            f"{name} must be a number, got an object of type {type(value).__name__}."
        )
    out = float(value)
    if not (math.isfinite(out) and out > 0):
        raise InvalidParameterError(f"{name} must be finite and > 0, got {out!r}.")
    if integer and out != math.floor(out):
        raise InvalidParameterError(f"{name} must be a whole number, got {out!r}.")
    return out


def _amount(value: object, name: str, *, delta: bool = False) -> Fraction:
    if isinstance(value, str):  # JSON form of a Fraction, "n/d"
        text = value
        try:
            value = Fraction(text)
        except (ValueError, ZeroDivisionError):
            raise InvalidParameterError(f"{name} is not a number: {text[:40]!r}.") from None
    return _exact_amount(value, name, delta=delta)


def _optional_amount(value: object, name: str, *, delta: bool = False) -> Fraction | None:
    return None if value is None else _amount(value, name, delta=delta)


def _json_amount(q: Fraction | None) -> str | None:
    return None if q is None else str(q)


def _covers(charged: Fraction, proven: Fraction, what: str) -> None:
    if charged < proven * (1 - _REL_TOL):
        raise InvalidParameterError(
            f"the charged {what} ({float(charged)!r}) is below the {float(proven)!r} the noise "
            "proves; charge at least what the mechanism spends."
        )


class _Event:
    """Shared JSON plumbing: fields in declaration order, amounts as "n/d" strings."""

    type_name: ClassVar[str]
    _amount_fields: ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type_name}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name in self._amount_fields:
                out[f.name] = _json_amount(value)
            else:
                out[f.name] = value
        return out

    @classmethod
    def _from_json(cls, data: Mapping[str, Any], depth: int) -> PrivacyEvent:
        return cls(**{k: v for k, v in data.items() if k != "type"})  # type: ignore[return-value]


@dataclass(frozen=True)
class _LaplaceLike(_Event):
    """Laplace-shaped noise: proves ε = sensitivity / scale; ``epsilon`` is the charge if larger."""

    _amount_fields: ClassVar[tuple[str, ...]] = ("epsilon",)
    _whole_sensitivity: ClassVar[bool] = False

    scale: float
    sensitivity: float
    epsilon: Fraction | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _positive(self.scale, "scale"))
        sensitivity = _positive(self.sensitivity, "sensitivity", integer=self._whole_sensitivity)
        object.__setattr__(self, "sensitivity", sensitivity)
        object.__setattr__(self, "epsilon", _optional_amount(self.epsilon, "epsilon"))
        if self.epsilon is not None:
            _covers(self.epsilon, self.proven_epsilon(), "epsilon")

    def proven_epsilon(self) -> Fraction:
        """ε = sensitivity / scale, exactly from the float fields."""
        return exact(self.sensitivity) / exact(self.scale)

    def budget(self) -> Budget:
        return Budget(self.proven_epsilon() if self.epsilon is None else self.epsilon)


@dataclass(frozen=True)
class LaplaceEvent(_LaplaceLike):
    """Laplace noise of scale ``scale`` on a query of l1 sensitivity ``sensitivity``.

    Proves ε = sensitivity / scale (pure DP); ``epsilon`` is the charge if it
    differs (it must not be smaller). ``dp_accounting``: ``LaplaceDpEvent``.
    """

    type_name: ClassVar[str] = "laplace"

    def dp_accounting(self) -> dp_accounting.DpEvent:
        from dp_accounting import dp_event

        return dp_event.LaplaceDpEvent(noise_multiplier=self.scale / self.sensitivity)


@dataclass(frozen=True)
class GeometricEvent(_LaplaceLike):
    """Two-sided geometric (discrete Laplace) noise, P(y) ∝ exp(-|y|/scale), on integers.

    ``sensitivity`` is the query's l1 sensitivity in integer units (a whole
    number). Proves ε = sensitivity / scale; ``epsilon`` is the charge if it
    differs. ``dp_accounting``: ``DiscreteLaplaceDpEvent(1/scale, sensitivity)``.
    """

    type_name: ClassVar[str] = "geometric"
    _whole_sensitivity: ClassVar[bool] = True

    def dp_accounting(self) -> dp_accounting.DpEvent:
        from dp_accounting import dp_event

        return dp_event.DiscreteLaplaceDpEvent(
            noise_parameter=1.0 / self.scale, sensitivity=int(self.sensitivity)
        )


@dataclass(frozen=True)
class _GaussianLike(_Event):
    """Gaussian noise: ρ = sensitivity²/(2 sigma²)-zCDP, plus the (ε, δ) it was charged as."""

    _amount_fields: ClassVar[tuple[str, ...]] = ("epsilon", "delta", "rho")

    sigma: float
    sensitivity: float
    epsilon: Fraction | None = None
    delta: Fraction | None = None
    rho: Fraction | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", _positive(self.sigma, "sigma"))
        object.__setattr__(self, "sensitivity", _positive(self.sensitivity, "sensitivity"))
        object.__setattr__(self, "epsilon", _optional_amount(self.epsilon, "epsilon"))
        object.__setattr__(self, "delta", _optional_amount(self.delta, "delta", delta=True))
        object.__setattr__(self, "rho", _optional_amount(self.rho, "rho"))
        if (self.epsilon is None) != (self.delta is None):
            raise InvalidParameterError(
                "give both epsilon and delta (the (epsilon, delta) this Gaussian release is "
                "charged as) or neither."
            )
        if self.rho is not None:
            _covers(self.rho, self.proven_rho(), "rho")

    def proven_rho(self) -> Fraction:
        """ρ = sensitivity² / (2 sigma²), exactly from the float fields."""
        sens, sigma = exact(self.sensitivity), exact(self.sigma)
        return sens * sens / (2 * sigma * sigma)

    def budget(self) -> Budget:
        if self.epsilon is None or self.delta is None:
            raise InvalidParameterError(
                "this Gaussian event has no (epsilon, delta) charge recorded: a Gaussian "
                "release is (epsilon, delta)-DP for a whole curve of pairs; build the event "
                "with epsilon= and delta= (the pair it is charged as)."
            )
        rho = self.proven_rho() if self.rho is None else self.rho
        return Budget(self.epsilon, self.delta, rho=rho)


@dataclass(frozen=True)
class GaussianEvent(_GaussianLike):
    """Continuous Gaussian noise N(0, sigma²) on a query of l2 sensitivity ``sensitivity``.

    ``dp_accounting``: ``GaussianDpEvent(sigma / sensitivity)``. ``epsilon``,
    ``delta`` (and ``rho``, if the charge's ρ differs from sensitivity²/(2σ²))
    record the charge; ``budget()`` needs them.
    """

    type_name: ClassVar[str] = "gaussian"

    def dp_accounting(self) -> dp_accounting.DpEvent:
        from dp_accounting import dp_event

        return dp_event.GaussianDpEvent(noise_multiplier=self.sigma / self.sensitivity)


@dataclass(frozen=True)
class DiscreteGaussianEvent(_GaussianLike):
    """Discrete Gaussian noise N_Z(0, sigma²) on the integers (Canonne, Kamath & Steinke 2020).

    ``sigma`` and ``sensitivity`` (l2) are in lattice units: for dpkit's real
    Gaussian mechanism, which adds integer noise on a 2^-k grid, in grid steps.
    ``dp_accounting`` has no discrete Gaussian event: the conversion is its
    zCDP guarantee ``ZCDpEvent(rho)`` (ρ = the recorded ``rho``, else
    sensitivity²/(2σ²)), which RDP accountants compose.

    ``scalar=True`` records that neighbouring answers differ along one lattice
    axis only (one released value), by at most ``ceil(sensitivity)`` steps:
    the release then has the one-dimensional discrete Gaussian privacy loss
    distribution, which the PLD accountant composes exactly
    (:mod:`dpkit.accounting.pld`). It is public (the number of values released).
    """

    type_name: ClassVar[str] = "discrete_gaussian"
    # written only when True (ledgers written before the field existed lack it)
    _optional_json: ClassVar[tuple[str, ...]] = ("scalar",)

    scalar: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.scalar, bool):
            raise InvalidParameterError("scalar must be True or False.")

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if not self.scalar:  # the form recorded before the field existed
            del out["scalar"]
        return out

    @property
    def one_axis_shift(self) -> int | None:
        """The integer shift of a one-axis neighbour (None: the shift may span several axes).

        Scalar releases shift by at most ``ceil(sensitivity)`` steps on their
        axis; an integer vector of l2 norm below √2 has one non-zero entry of
        ±1, so any release with ``sensitivity < √2`` shifts one axis by 1.
        """
        if self.scalar:
            return math.ceil(self.sensitivity)
        if self.sensitivity * self.sensitivity < 2:
            return 1
        return None

    def dp_accounting(self) -> dp_accounting.DpEvent:
        from dp_accounting import dp_event

        rho = self.proven_rho() if self.rho is None else self.rho
        return dp_event.ZCDpEvent(rho=float(rho))


@dataclass(frozen=True)
class ZCDPEvent(_Event):
    """A release known by its ρ-zCDP guarantee (Bun & Steinke 2016).

    ``epsilon`` and ``delta``, if given, are the (ε, δ) it is charged as
    (``budget()`` needs them). ``dp_accounting``: ``ZCDpEvent(rho)``.
    """

    type_name: ClassVar[str] = "zcdp"
    _amount_fields: ClassVar[tuple[str, ...]] = ("rho", "epsilon", "delta")

    rho: Fraction
    epsilon: Fraction | None = None
    delta: Fraction | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", _amount(self.rho, "rho"))
        object.__setattr__(self, "epsilon", _optional_amount(self.epsilon, "epsilon"))
        object.__setattr__(self, "delta", _optional_amount(self.delta, "delta", delta=True))
        if self.epsilon is None and self.delta is not None:
            raise InvalidParameterError("a zCDP event with delta needs its epsilon too.")

    def budget(self) -> Budget:
        if self.epsilon is None:
            raise InvalidParameterError(
                "this zCDP event has no (epsilon, delta) charge recorded; build it with "
                "epsilon= and delta= (e.g. from dpkit.accounting.zcdp_to_dp)."
            )
        return Budget(self.epsilon, self.delta or 0, rho=self.rho)

    def dp_accounting(self) -> dp_accounting.DpEvent:
        from dp_accounting import dp_event

        return dp_event.ZCDpEvent(rho=float(self.rho))


@dataclass(frozen=True)
class EpsilonDeltaEvent(_Event):
    """A release known only by its (ε, δ) guarantee: exponential mechanism, partition selection...

    ``dp_accounting`` has no event for "some (ε, δ)-DP release" under the
    add/remove-one relation (its randomized-response event, the worst case of
    ε-DP, is refused by its accountants for that relation), so the conversion
    is ``UnsupportedDpEvent`` (``NoOpDpEvent`` for ε = δ = 0). A PLD
    accountant composes such a release through the privacy loss distribution
    of its dominating pair,
    ``pld.privacy_loss_distribution.from_privacy_parameters(PrivacyParameters(ε, δ))``
    (valid for every (ε, δ)-DP mechanism).
    """

    type_name: ClassVar[str] = "epsilon_delta"
    _amount_fields: ClassVar[tuple[str, ...]] = ("epsilon", "delta")

    epsilon: Fraction
    delta: Fraction = Fraction(0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _amount(self.epsilon, "epsilon"))
        object.__setattr__(self, "delta", _amount(self.delta, "delta", delta=True))

    def budget(self) -> Budget:
        return Budget(self.epsilon, self.delta)

    def dp_accounting(self) -> dp_accounting.DpEvent:
        from dp_accounting import dp_event

        if not self.epsilon and not self.delta:
            return dp_event.NoOpDpEvent()
        return dp_event.UnsupportedDpEvent()


def _check_event(value: object, name: str) -> PrivacyEvent:
    if not isinstance(value, _Event):
        raise InvalidParameterError(
            f"{name} must be a dpkit privacy event, got an object of type {type(value).__name__}."
        )
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class ComposedEvent(_Event):
    """Several releases in sequence (adaptively chosen): basic composition sums their budgets.

    ``dp_accounting``: ``ComposedDpEvent``.
    """

    type_name: ClassVar[str] = "composed"

    events: tuple[PrivacyEvent, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.events, list | tuple):
            raise InvalidParameterError(
                "events must be a tuple of privacy events, got an object of type "
                f"{type(self.events).__name__}."
            )
        items = tuple(_check_event(e, "each composed event") for e in self.events)
        object.__setattr__(self, "events", items)

    def budget(self) -> Budget:
        return sum((e.budget() for e in self.events), Budget.zero())

    def dp_accounting(self) -> dp_accounting.DpEvent:
        from dp_accounting import dp_event

        return dp_event.ComposedDpEvent(events=[e.dp_accounting() for e in self.events])

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type_name, "events": [e.to_json() for e in self.events]}

    @classmethod
    def _from_json(cls, data: Mapping[str, Any], depth: int) -> PrivacyEvent:
        events = data.get("events")
        if not isinstance(events, list):
            raise InvalidParameterError("a composed event's 'events' must be a list.")
        return cls(tuple(_read(e, depth + 1) for e in events))


@dataclass(frozen=True)
class RepeatedEvent(_Event):
    """The same release ``count`` times (adaptively). ``dp_accounting``: ``SelfComposedDpEvent``."""

    type_name: ClassVar[str] = "repeated"

    event: PrivacyEvent
    count: int

    def __post_init__(self) -> None:
        _check_event(self.event, "event")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise InvalidParameterError(
                f"count must be a whole number >= 0, got {self.count!r}."[:200]
            )

    def budget(self) -> Budget:
        return self.event.budget() * self.count

    def dp_accounting(self) -> dp_accounting.DpEvent:
        from dp_accounting import dp_event

        return dp_event.SelfComposedDpEvent(event=self.event.dp_accounting(), count=self.count)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type_name, "event": self.event.to_json(), "count": self.count}

    @classmethod
    def _from_json(cls, data: Mapping[str, Any], depth: int) -> PrivacyEvent:
        return cls(_read(data.get("event"), depth + 1), data.get("count"))  # type: ignore[arg-type]


_TYPES: dict[str, type[_Event]] = {
    cls.type_name: cls
    for cls in (
        LaplaceEvent,
        GeometricEvent,
        GaussianEvent,
        DiscreteGaussianEvent,
        ZCDPEvent,
        EpsilonDeltaEvent,
        ComposedEvent,
        RepeatedEvent,
    )
}


def _read(data: object, depth: int) -> PrivacyEvent:
    if depth > MAX_DEPTH:
        raise InvalidParameterError(f"privacy events nest at most {MAX_DEPTH} levels deep.")
    if not isinstance(data, Mapping):
        raise InvalidParameterError(
            f"a privacy event must be a JSON object, got {type(data).__name__}."
        )
    kind = data.get("type")
    cls = _TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        shown = kind[:40] if isinstance(kind, str) else type(kind).__name__
        raise InvalidParameterError(
            f"unknown privacy event type {shown!r}; known types: {', '.join(sorted(_TYPES))}. "
            "It may come from a newer dpkit: upgrade dpkit to read it."
        )
    expected = {"type"} | {f.name for f in fields(cls)}  # type: ignore[arg-type]
    optional = set(getattr(cls, "_optional_json", ()))
    if not expected - optional <= set(data) <= expected:
        raise InvalidParameterError(
            f"a {kind!r} privacy event has the fields {sorted(expected)}, got "
            f"{sorted(str(k)[:40] for k in data)[:20]}."
        )
    try:
        return cls._from_json(data, depth)
    except TypeError:
        raise InvalidParameterError(
            f"a {kind!r} privacy event has fields of the wrong type."
        ) from None


def event_from_json(data: object) -> PrivacyEvent:
    """The event ``data`` (a dict from ``to_json()``) describes; validates everything.

    Raises :class:`InvalidParameterError` naming what is wrong for an unknown
    type, a missing or extra field, a value out of range, or nesting deeper
    than ``MAX_DEPTH``. The ledger reports these as a corrupt ledger.
    """
    return _read(data, 0)


def is_event(value: object) -> bool:
    """True for an event of this module (the only kind a ledger stores and reads back)."""
    return isinstance(value, _Event)


def as_event(value: Budget | PrivacyEvent) -> PrivacyEvent:
    """``value`` if it is an event, else the event a bare :class:`Budget` stands for.

    A budget with a declared ρ becomes ``ZCDPEvent(rho, epsilon, delta)``, any
    other ``EpsilonDeltaEvent(epsilon, delta)``; either way
    ``as_event(b).budget() == b``.
    """
    if isinstance(value, _Event):
        return value  # type: ignore[return-value]
    if isinstance(value, Budget):
        if value.rho_declared is not None:
            return ZCDPEvent(value.rho_declared, value.epsilon_exact, value.delta_exact)
        return EpsilonDeltaEvent(value.epsilon_exact, value.delta_exact)
    raise InvalidParameterError(
        f"expected a Budget or a privacy event, got an object of type {type(value).__name__}."
    )
