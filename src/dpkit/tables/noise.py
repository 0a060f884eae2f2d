"""Which noise a query's additive steps use: Laplace/geometric or (discrete) Gaussian.

A session chooses ``noise="laplace" | "gaussian" | "auto"``; the paying
accountant's composition rule and budget δ complete the public setting
(:class:`Noise`). A query's ``epsilon`` keeps its meaning, its share of the
budget, whichever noise is used:

* **Laplace** (today's behaviour): a step spending ε adds Laplace noise of
  scale Δ₁/ε (geometric for integers): ε-DP, which a zCDP accountant charges
  as ρ = ε²/2 (Bun & Steinke 2016, Prop. 1.4).
* **Gaussian**: a step spending ε adds discrete Gaussian noise calibrated to
  ρ = ε²/2 zCDP — the same ρ — so σ = Δ₂/ε with Δ₂ the step's ℓ2 sensitivity
  (:meth:`~dpkit.mechanisms.Gaussian.from_rho`, exact sampling). Its charge
  is ``Budget(ε', δ_n, rho=ε²/2)``: ε' the CKS conversion of ρ at δ_n, the
  paying accountant's budget δ, a true (ε', δ_n) statement of the step alone.
  Only accountants that compose ρ or better gain from it, so Gaussian noise
  needs composition ``zcdp``, ``rdp``, ``pld`` or ``tightest``
  (:data:`GAUSSIAN_RULES`); under ``basic`` every Gaussian step would be
  charged its converted (ε', δ_n) and it is refused before the charge.
* **auto** (a public rule, per step): Laplace under ``basic``; otherwise the
  noise whose half-width at the query's confidence level is smaller, the two
  being calibrated to the same ρ = ε²/2 (exactly the same cost under ``zcdp``;
  under ``rdp``/``pld`` the Laplace step is charged its own, slightly smaller,
  curve). Ties go to Laplace.

Everything here reads public parameters only (ε, sensitivities, level, the
accountant's rule and δ): the choice of noise is the same on neighbouring
datasets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpkit._checks import exact
from dpkit.errors import InvalidParameterError

__all__ = [
    "GAUSSIAN_RULES",
    "LAPLACE",
    "NOISES",
    "Noise",
    "additive",
    "check_noise",
    "choose",
    "for_payer",
    "rho_of",
]

#: The session's choices of noise.
NOISES = ("laplace", "gaussian", "auto")

#: Composition rules under which Gaussian noise is allowed (they compose its ρ or its curve).
GAUSSIAN_RULES = ("zcdp", "rdp", "pld", "tightest")


@dataclass(frozen=True)
class Noise:
    """The public noise setting a query is validated and released with.

    ``kind``: the session's choice (:data:`NOISES`); ``composition``: the
    paying accountant's rule; ``delta``: its budget δ, at which a Gaussian
    step's (ε, δ) charge is stated.
    """

    kind: str = "laplace"
    composition: str = "basic"
    delta: float = 0.0

    @property
    def laplace_only(self) -> bool:
        """True when every step is Laplace/geometric whatever its sensitivities."""
        return self.kind == "laplace" or (
            self.kind == "auto" and self.composition not in GAUSSIAN_RULES
        )


#: Today's behaviour: Laplace / geometric noise for every step.
LAPLACE = Noise()


def check_noise(noise: object) -> str:
    """``noise`` if it is one of :data:`NOISES`; a clear error otherwise."""
    if not isinstance(noise, str) or noise not in NOISES:
        raise InvalidParameterError(
            f"noise must be one of {', '.join(map(repr, NOISES))}; got "
            + (
                repr(noise)
                if isinstance(noise, str)
                else f"an object of type {type(noise).__name__}"
            )
            + "."
        )
    return noise


def for_payer(kind: str, accountant: Any) -> Noise:
    """The noise setting for queries paid by ``accountant`` (its rule and budget δ).

    Gaussian noise under a rule that does not compose it is refused here,
    before anything is charged.
    """
    composition = str(accountant.composition)
    delta = float(accountant.budget.delta)
    if kind == "gaussian" and composition not in GAUSSIAN_RULES:
        raise InvalidParameterError(
            f"noise='gaussian' needs an accountant that composes Gaussian noise tightly "
            f"({', '.join(map(repr, GAUSSIAN_RULES))}); this budget uses composition="
            f"{composition!r}, which would charge every Gaussian release its full (ε, δ). "
            "Open the session with accountant='rdp' (or 'zcdp') and a delta > 0, or use "
            "noise='laplace' / 'auto'."
        )
    return Noise(kind, composition, delta)


def rho_of(epsilon: float) -> Fraction:
    """ρ = ε²/2 exactly: the zCDP cost of a step spending ``epsilon``."""
    e = exact(epsilon)
    return e * e / 2


def _laplace(epsilon: float, l1: float, size: int, integer: bool) -> Any:
    from dpkit.mechanisms import Geometric, Laplace

    if integer:  # an integer step's sensitivity is a whole number of rows
        return Geometric(epsilon=epsilon, sensitivity=math.ceil(l1), size=size)
    return Laplace(epsilon=epsilon, sensitivity=l1, size=size)


def _gaussian(epsilon: float, l2: float, size: int, integer: bool, delta: float) -> Any:
    from dpkit.mechanisms import DiscreteGaussian, Gaussian

    if integer:
        return DiscreteGaussian.from_rho(rho_of(epsilon), delta=delta, sensitivity=l2, size=size)
    return Gaussian.from_rho(rho_of(epsilon), delta=delta, sensitivity=l2, size=size)


def choose(
    noise: Noise, laplace: Callable[[], Any], gaussian: Callable[[], Any], level: float
) -> Any:
    """One step's mechanism by the public rule of the module docstring (built once each).

    ``laplace``/``gaussian`` build the step's two candidates (same ε, their
    own sensitivities); ``"auto"`` keeps the one whose half-width at ``level``
    is smaller (ties: Laplace). Reads public parameters only.
    """
    if noise.laplace_only:
        return laplace()
    if noise.kind == "gaussian":
        return gaussian()
    lap, gau = laplace(), gaussian()
    return gau if gau.half_width(level) < lap.half_width(level) else lap


def additive(
    noise: Noise,
    *,
    epsilon: float,
    l1: float,
    l2: float,
    level: float,
    size: int = 1,
    integer: bool = False,
) -> Any:
    """The mechanism of one additive step spending ``epsilon``.

    ``l1``/``l2``: the step's ℓ1 and ℓ2 sensitivities (``l2 <= l1``);
    ``size``: how many values it releases; ``integer``: integer answers
    (geometric / discrete Gaussian, no rounding). The mechanism has
    ``randomise``, ``half_width``, ``cost``, ``event``, ``details`` and
    ``name``; its guarantee is in its class's docstring.
    """
    return choose(
        noise,
        lambda: _laplace(epsilon, l1, size, integer),
        lambda: _gaussian(epsilon, l2, size, integer, noise.delta),
        level,
    )
