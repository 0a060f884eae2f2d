"""Step 2: a validated query's cost (a privacy event) and its ledger label, from public input only."""

from __future__ import annotations

from dpkit.accounting import Budget
from dpkit.tables.validation import ValidatedQuery

__all__ = ["cost", "label"]


def cost(query: ValidatedQuery) -> Budget:
    """What the query spends: (ε, δ) as declared; δ only for private keys."""
    return Budget(query.epsilon, query.delta)


def label(query: ValidatedQuery) -> str:
    """A ledger label made of public parameters only (kind, column, filter literals, keys)."""
    spec = query.spec
    column = spec.column
    text = f"{spec.kind}({column or '*'})"
    if spec.kind == "quantile":
        text = f"quantile({column}, q={query.q})"
    if spec.kind == "histogram2d":
        text = f"histogram2d({column}, {spec.y_column}, {query.method})"
    where = query.rows.where
    if where:
        text += " where " + " and ".join(
            f"{c.column} {c.op}" + ("" if c.value is None else f" {c.value!r}") for c in where
        )
    grouping = query.grouping
    if grouping is not None:
        text += f" by {', '.join(grouping.columns)}"
        text += (
            " (private keys)"
            if grouping.private
            else f" ({len(grouping.keys or ())} groups, parallel)"
        )
    return text
