"""Batches of queries: validated and costed without touching the data, then run as one.

    plan = session.plan([
        Query("count", epsilon=0.1),
        Parallel(
            Query("mean", "age", epsilon=0.2, bounds=(0, 120), where={"district": "A"}),
            Query("mean", "age", epsilon=0.2, bounds=(0, 120), where={"district": "B"}),
        ),
    ])
    print(plan)              # each query's cost and the total (ε = 0.3 here)
    answers = session.run(plan)

A :class:`Plan` is bound to the session (and dataset) that prepared it:
running it on another session is refused before anything is charged, since
it was validated against that session's schema and would otherwise answer
from one table while charging another's budget.

Costs: sequential composition across items; a :class:`~dpkit.tables.Parallel`
item costs the maximum of its members when their filters are *provably*
disjoint — the same column restricted by equality or membership to value
sets with no common value of the column's declared type (literals are
compared after :mod:`dpkit.tables.values` reads them as that type). Anything
not provably disjoint is charged as the sum, and the plan says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dpkit._checks import exact
from dpkit.accounting import Budget
from dpkit.accounting.events import ComposedEvent, PrivacyEvent, as_event
from dpkit.errors import InvalidParameterError
from dpkit.tables.engines.base import Condition
from dpkit.tables.specs import Parallel, QuerySpec
from dpkit.tables.validation import ValidatedQuery

__all__ = ["Plan", "PlannedQuery", "provably_disjoint", "same_costs"]


@dataclass(frozen=True)
class PlannedQuery:
    """A validated query with its ledger label and cost.

    ``epsilon``/``delta`` are what it is charged (with Gaussian noise, the sum
    of its steps' (ε', δ) statements, :mod:`dpkit.tables.noise`); ``cost`` the
    exact :class:`Budget` (with ρ) and ``event`` its privacy event.
    """

    query: ValidatedQuery
    label: str
    epsilon: float
    delta: float
    cost: Budget | None = None
    event: PrivacyEvent | None = None

    @property
    def charge(self) -> Budget:
        """The exact cost (``Budget(epsilon, delta)`` when none was recorded)."""
        return self.cost if self.cost is not None else Budget(self.epsilon, self.delta)


@dataclass(frozen=True)
class Plan:
    """A costed batch of queries; ``session.run(plan)`` charges ``cost`` once and runs them.

    ``items`` holds one tuple per batch item (several queries for a
    :class:`~dpkit.tables.Parallel` item); ``parallel[i]`` says whether item
    ``i`` was proved disjoint (charged as the max) or not (charged as the sum).
    """

    session: str
    dataset: str | None
    items: tuple[tuple[PlannedQuery, ...], ...]
    parallel: tuple[bool, ...]
    epsilon: float
    delta: float
    cost: Budget

    @property
    def labels(self) -> list[str]:
        return [p.label for group in self.items for p in group]

    def specs(self) -> list[QuerySpec | Parallel]:
        """The batch as it was given to ``plan()``: what ``run`` validates and costs again.

        Raises :class:`~dpkit.errors.InvalidParameterError` when the plan's
        structure was altered into something ``plan()`` never makes.
        """
        out: list[QuerySpec | Parallel] = []
        try:
            for group in self.items:
                specs = [p.query.spec for p in group]
                if not specs or not all(isinstance(q, QuerySpec) for q in specs):
                    raise TypeError
                out.append(specs[0] if len(specs) == 1 else Parallel(*specs))
        except (TypeError, AttributeError):
            raise InvalidParameterError(
                "this plan was altered after plan() made it; prepare it again with plan()."
            ) from None
        return out

    def to_frame(self) -> pd.DataFrame:
        """One row per query: label, its epsilon and delta, and its parallel group."""
        records = [
            (p.label, p.epsilon, p.delta, gi if len(group) > 1 and self.parallel[gi] else None)
            for gi, group in enumerate(self.items)
            for p in group
        ]
        return pd.DataFrame(records, columns=["query", "epsilon", "delta", "parallel_group"])

    def __str__(self) -> str:
        lines = [f"plan costing ε={self.epsilon:g}, δ={self.delta:g}:"]
        for gi, group in enumerate(self.items):
            for p in group:
                tag = ""
                if len(group) > 1:
                    tag = (
                        f"  [parallel {gi}]"
                        if self.parallel[gi]
                        else f"  [group {gi}: not provably disjoint, charged in sequence]"
                    )
                lines.append(f"  {p.label}  (ε={p.epsilon:g}, δ={p.delta:g}){tag}")
        return "\n".join(lines)


def total_cost(
    items: Sequence[tuple[PlannedQuery, ...]], parallel: Sequence[bool]
) -> tuple[Budget, PrivacyEvent]:
    """The plan's exact charge and its event: the max inside proved-parallel items, sums elsewhere.

    A proved-parallel item (members on disjoint rows) is charged the
    component-wise max of its members' costs (ε, δ, and ρ when every member
    declares one): parallel composition. Its event is the members' common
    event when they all have the same one (the same mechanism on disjoint
    rows), else the bare max (known by its (ε, δ[, ρ]) only). Items compose in
    sequence; the total is the composed event's ``budget()``, exactly.
    """
    events: list[PrivacyEvent] = []
    for group, par in zip(items, parallel):
        if not par:
            events.extend(_event_of(p) for p in group)
            continue
        member_events = [_event_of(p) for p in group]
        if all(e == member_events[0] for e in member_events):
            events.append(member_events[0])
            continue
        costs = [p.charge for p in group]
        rhos = [c.rho_declared for c in costs]
        most = Budget._of(
            max(c.epsilon_exact for c in costs),
            max(c.delta_exact for c in costs),
            None if any(r is None for r in rhos) else max(r for r in rhos if r is not None),
        )
        events.append(as_event(most))
    event = events[0] if len(events) == 1 else ComposedEvent(tuple(events))
    return event.budget(), event


def _event_of(p: PlannedQuery) -> PrivacyEvent:
    return p.event if p.event is not None else as_event(p.charge)


def same_costs(recorded: Plan, fresh: Plan) -> bool:
    """Whether a plan's recorded costs, per query and in total, are those of ``fresh``.

    ``fresh`` is the same batch validated and costed again; any difference
    means the recorded plan was edited after costing (tamper evidence).
    """
    try:
        cost = recorded.cost
        if not isinstance(cost, Budget):
            return False
        same_total = (
            cost.epsilon_exact == fresh.cost.epsilon_exact
            and cost.delta_exact == fresh.cost.delta_exact
            and cost.rho_exact == fresh.cost.rho_exact
            and exact(recorded.epsilon) == exact(fresh.epsilon)
            and exact(recorded.delta) == exact(fresh.delta)
            and tuple(recorded.parallel) == fresh.parallel
            and recorded.dataset == fresh.dataset
        )
        per_query = [(p.label, exact(p.epsilon), exact(p.delta)) for g in recorded.items for p in g]
        fresh_per_query = [
            (p.label, exact(p.epsilon), exact(p.delta)) for g in fresh.items for p in g
        ]
        inner = [(exact(p.query.epsilon), exact(p.query.delta)) for g in recorded.items for p in g]
        fresh_inner = [
            (exact(p.query.epsilon), exact(p.query.delta)) for g in fresh.items for p in g
        ]
    except Exception:  # a field replaced by something that is not a number
        return False
    return same_total and per_query == fresh_per_query and inner == fresh_inner


def _value_sets(conditions: Sequence[Condition]) -> dict[str, set[Any]]:
    """Per column, the values an equality/membership filter allows (intersected)."""
    out: dict[str, set[Any]] = {}
    for c in conditions:
        vals = {c.value} if c.op == "==" else set(c.value) if c.op == "in" else None
        if vals is not None:
            out[c.column] = out[c.column] & vals if c.column in out else vals
    return out


def provably_disjoint(members: Sequence[ValidatedQuery]) -> bool:
    """True if some column is restricted by every member to pairwise disjoint value sets.

    The conditions hold canonical values of the column's declared type, so
    two spellings of one value (``'2020-01-01'``, ``date(2020, 1, 1)``) are
    one value here. Private keys and person-level sessions are never
    parallel: selection is data-dependent, and one person's rows can match
    several filters.
    """
    if len(members) < 2:
        return False
    if any(m.rows.contribution is not None for m in members):
        return False
    if any(m.grouping is not None and m.grouping.private for m in members):
        return False
    sets = [_value_sets(m.rows.where) for m in members]
    shared = set.intersection(*(set(s) for s in sets))
    for column in sorted(shared):
        groups = [s[column] for s in sets]
        if all(not (a & b) for a, b in itertools.combinations(groups, 2)):
            return True
    return False
