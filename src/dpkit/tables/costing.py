"""Step 2: a validated query's cost (a privacy event) and its ledger label, from public input only.

Both come from the query's kind (:data:`dpkit.tables.kinds.REGISTRY`).
"""

from __future__ import annotations

from dpkit.accounting import Budget
from dpkit.tables.kinds import REGISTRY
from dpkit.tables.validation import ValidatedQuery

__all__ = ["cost", "label"]


def cost(query: ValidatedQuery) -> Budget:
    """What the query spends: (ε, δ) as declared; δ only for private keys."""
    return REGISTRY[query.spec.kind].cost(query)


def label(query: ValidatedQuery) -> str:
    """A ledger label made of public parameters only (kind, column, filter literals, keys)."""
    return REGISTRY[query.spec.kind].label(query)
