"""The value type every dpkit release returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dpkit.privacy import UNSET, PrivacyReport, Reported, build

__all__ = ["PrivacyReport", "Release"]


@dataclass(frozen=True, init=False)
class Release(Reported):
    """A differentially private answer with what it cost and how wrong it may be.

    Attributes:
        value: the noisy answer (a float, int, array, label, ...).
        privacy: what this release cost, as a :class:`dpkit.PrivacyReport`
            (ε, δ, ρ, the neighbouring relation, the mechanisms, the budget left
            when an accountant paid). Built from public input only.
        ci: a ``(low, high)`` interval that contains the exact (non-private)
            answer with probability at least ``level`` over the mechanism's
            randomness. Computed from the noise distribution only, so it is
            post-processing and costs no budget. ``None`` for non-numeric
            releases (a selected label).
        level: the confidence level of ``ci``.
        mechanism: a short name of the mechanism that produced it.
        details: kind-specific public facts (noise scale, granularity, ...).

    ``epsilon``, ``delta`` and ``remaining`` are read-only shortcuts to
    ``privacy``. The constructor still takes them (``Release(value, epsilon,
    delta=...)``), and ``dataclasses.replace(release, remaining=...)`` works.
    """

    value: Any
    ci: tuple[Any, Any] | None
    level: float
    mechanism: str
    details: dict[str, Any]
    privacy: PrivacyReport = field(repr=True)

    def __init__(
        self,
        value: Any,
        epsilon: float | None = None,
        delta: float | None = None,
        ci: tuple[Any, Any] | None = None,
        level: float = 0.95,
        mechanism: str = "",
        remaining: Any = UNSET,
        details: dict[str, Any] | None = None,
        *,
        privacy: PrivacyReport | None = None,
    ) -> None:
        report = build(privacy, epsilon, delta, mechanism, remaining)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "ci", ci)
        object.__setattr__(self, "level", level)
        object.__setattr__(self, "mechanism", mechanism)
        object.__setattr__(self, "details", {} if details is None else details)
        object.__setattr__(self, "privacy", report)

    def __float__(self) -> float:
        return float(self.value)
