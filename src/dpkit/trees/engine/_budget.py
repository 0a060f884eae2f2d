"""Exact budget splits and the randomness plumbing of the tree estimators.

Budgets are split as Fractions (``dpkit._checks.exact``) so the parts add up
to the user's epsilon exactly. Each part is handed to a mechanism as the
largest float whose exact value does not exceed it, so the mechanisms never
spend more than the split promised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._checks import float_at_most
from dpkit.errors import InvalidParameterError


def as_float_at_most(x: Fraction) -> float:
    """The largest float f with ``exact(f) <= x`` (never spends more than x)."""
    return float_at_most(x)


@dataclass
class BudgetPlan:
    """The per-row privacy budget of one tree, as exact fractions of epsilon.

    ``parts`` maps a query kind ("count", "split", "leaf", ...) to the epsilon
    of *one* such query on a row's path; ``uses`` says how many such queries a
    row's path can meet. ``total`` = sum(parts[k] * uses[k]) is the tree's
    epsilon under add/remove-one-row (sequential along a path, parallel
    across the disjoint nodes of a level).
    """

    parts: dict[str, Fraction] = field(default_factory=dict)
    uses: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, epsilon: Fraction, uses: int = 1) -> None:
        self.parts[name] = epsilon
        self.uses[name] = uses

    @property
    def total(self) -> Fraction:
        return sum((self.parts[k] * self.uses[k] for k in self.parts), Fraction(0))

    def as_dict(self) -> dict[str, Any]:
        return {k: {"epsilon": float(v), "uses": self.uses[k]} for k, v in self.parts.items()}


@dataclass(frozen=True)
class Randomness:
    """Randomness for one fit.

    ``mechanism`` goes to every ``dpkit.mechanisms`` call: None (the secure
    default) or a seeded numpy Generator (reproducible, for tests). ``numpy``
    drives data-independent choices (row partitions, random split structure):
    a Generator seeded from the OS when ``random_state`` is None.
    """

    mechanism: np.random.Generator | None
    numpy: np.random.Generator


def randomness(random_state: object) -> Randomness:
    """Resolve a scikit-learn style ``random_state`` (None, int, Generator, RandomState)."""
    if random_state is None:
        return Randomness(None, np.random.default_rng())
    if isinstance(random_state, np.random.Generator):
        return Randomness(random_state, random_state)
    if isinstance(random_state, np.random.RandomState):
        gen = np.random.default_rng(random_state.randint(0, 2**31 - 1))
        return Randomness(gen, gen)
    if isinstance(random_state, int | np.integer) and not isinstance(random_state, bool):
        gen = np.random.default_rng(int(random_state))
        return Randomness(gen, gen)
    raise InvalidParameterError(
        "random_state must be None (secure noise, the default), an int seed or a "
        f"numpy Generator; got {type(random_state).__name__}. Seeded noise is for tests only."
    )
