"""Batches of queries: cost them without touching the data, then run them as one.

    plan = session.plan([
        Query("count", epsilon=0.1),
        Parallel(
            Query("mean", "age", epsilon=0.2, bounds=(0, 120), where={"district": "A"}),
            Query("mean", "age", epsilon=0.2, bounds=(0, 120), where={"district": "B"}),
        ),
    ])
    print(plan)              # each query's cost and the total (ε = 0.3 here)
    answers = session.run(plan)

``plan`` validates every query (columns, bounds, domains) and adds up the
costs: sequential composition across items, the maximum inside a
:class:`Parallel` group (its members read disjoint rows). ``run`` charges the
total once — refused before any read if it does not fit — and then runs the
queries in order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

__all__ = ["Parallel", "Plan", "Query"]


@dataclass(frozen=True)
class Query:
    """A query to cost and run later: ``Query("mean", "age", epsilon=0.1, bounds=(0, 120))``.

    ``kind`` is a session method name; ``params`` are its keyword arguments.
    """

    kind: str
    column: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def __init__(self, kind: str, column: str | None = None, **params: Any) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "column", column)
        object.__setattr__(self, "params", dict(params))


@dataclass(frozen=True)
class Parallel:
    """Queries on disjoint rows, charged as one (the max of their costs).

    Disjointness is checked from the filters: every member must filter the
    same column by equality or membership, with no value shared between two
    members. Only for row-level sessions: with a privacy unit, one person's
    rows can fall on both sides (use ``group_by`` instead, which bounds a
    person's rows across all groups at once).
    """

    queries: tuple[Query, ...]

    def __init__(self, *queries: Query) -> None:
        if len(queries) == 1 and isinstance(queries[0], list | tuple):
            queries = tuple(queries[0])
        object.__setattr__(self, "queries", tuple(queries))


@dataclass
class _Prepared:
    """A validated query: its label and cost, and how to run it (no charge)."""

    label: str
    epsilon: float
    delta: float
    run: Callable[[Any], Any]


@dataclass(frozen=True)
class Plan:
    """A costed batch of queries; ``session.run(plan)`` charges ``cost`` once and runs them.

    Built by :meth:`Session.plan` without touching the data.
    """

    items: tuple[tuple[_Prepared, ...], ...]
    epsilon: float
    delta: float
    cost: Any

    @property
    def labels(self) -> list[str]:
        return [p.label for group in self.items for p in group]

    def to_frame(self) -> pd.DataFrame:
        """One row per query: label, its epsilon and delta, and its parallel group."""
        records = [
            (p.label, p.epsilon, p.delta, gi if len(group) > 1 else None)
            for gi, group in enumerate(self.items)
            for p in group
        ]
        return pd.DataFrame(records, columns=["query", "epsilon", "delta", "parallel_group"])

    def __str__(self) -> str:
        lines = [f"plan costing ε={self.epsilon:g}, δ={self.delta:g}:"]
        for gi, group in enumerate(self.items):
            for p in group:
                tag = f"  [parallel {gi}]" if len(group) > 1 else ""
                lines.append(f"  {p.label}  (ε={p.epsilon:g}, δ={p.delta:g}){tag}")
        return "\n".join(lines)
