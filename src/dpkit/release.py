"""The value type every dpkit release returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Release:
    """A differentially private answer with what it cost and how wrong it may be.

    Attributes:
        value: the noisy answer (a float, int, array, label, ...).
        epsilon, delta: the privacy cost of this release alone.
        ci: a ``(low, high)`` interval that contains the exact (non-private)
            answer with probability at least ``level`` over the mechanism's
            randomness. Computed from the noise distribution only, so it is
            post-processing and costs no budget. ``None`` for non-numeric
            releases (a selected label).
        level: the confidence level of ``ci``.
        mechanism: a short name of the mechanism that produced it.
        remaining: the budget left after this release, when an accountant paid.
        details: mechanism parameters (noise scale, granularity, ...), public.
    """

    value: Any
    epsilon: float
    delta: float = 0.0
    ci: tuple[Any, Any] | None = None
    level: float = 0.95
    mechanism: str = ""
    remaining: Any = None
    details: dict[str, Any] = field(default_factory=dict)

    def __float__(self) -> float:
        return float(self.value)
