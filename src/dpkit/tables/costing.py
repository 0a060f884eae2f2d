"""Step 2: a validated query's cost, its privacy event and its ledger label, from public input only.

All three come from the query's kind (:data:`dpkit.tables.kinds.REGISTRY`);
``event(query).budget() == cost(query)`` exactly.
"""

from __future__ import annotations

from dpkit._checks import epsilon_checked
from dpkit.accounting import Budget
from dpkit.accounting.events import PrivacyEvent
from dpkit.tables.kinds import REGISTRY
from dpkit.tables.validation import ValidatedQuery

__all__ = ["cost", "event", "label"]


def cost(query: ValidatedQuery) -> Budget:
    """What the query spends: (ε, δ) as declared; δ only for private keys (with Gaussian steps, their charges)."""
    with (
        epsilon_checked()
    ):  # validation warned about a weak epsilon once; the steps' mechanisms don't
        return REGISTRY[query.spec.kind].cost(query)


def event(query: ValidatedQuery) -> PrivacyEvent:
    """What the query's release does (its mechanisms and noise), charged as ``cost(query)``."""
    with epsilon_checked():
        return REGISTRY[query.spec.kind].event(query)


def label(query: ValidatedQuery) -> str:
    """A ledger label made of public parameters only (kind, column, filter literals, keys)."""
    return REGISTRY[query.spec.kind].label(query)
