"""Every table query charges its privacy *event* (issue 29): the noise it draws, from public parameters.

Checked: for every kind and option of the transcript cases, ``event(query).budget()``
equals ``cost(query)`` exactly (so charges and ledger labels are unchanged);
the session's ledger rows hold those events and re-compose to ``spent``;
additive kinds record their geometric / Laplace noise (not a bare (ε, δ)),
with the scale the release actually used; hypothesis varies ε, δ, k and bounds.
"""

from __future__ import annotations

from fractions import Fraction

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.tables._neighbours import CSV_TYPES, SCHEMA
from tests.tables.test_transcripts import CASES

from dpkit._checks import exact
from dpkit.accounting import Budget
from dpkit.accounting.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    GeometricEvent,
    PrivacyEvent,
    event_from_json,
)
from dpkit.tables import Session, costing
from dpkit.tables.specs import QuerySpec

GROUPS = ["a", "b", "c"]


def _people(n: int = 40) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "pid": range(n),
            "x": [float(i % 97) for i in range(n)],
            "cnt": [i % 7 for i in range(n)],
            "t": [str(i % 13) for i in range(n)],
            "flag": [i % 2 == 0 for i in range(n)],
            "day": pd.to_datetime(["2024-01-01"] * n).date,
            "ts": pd.to_datetime(["2024-01-01 10:00"] * n),
            "g": [GROUPS[i % 3] for i in range(n)],
        }
    )


def _session(k: int = 1) -> Session:
    return Session.from_pandas(
        _people(),
        epsilon=10_000.0,
        delta=0.5,
        schema=SCHEMA,
        types=CSV_TYPES,
        max_contributions=k,
        privacy_unit="pid" if k > 1 else None,
        rng=7,
    )


def _leaves(event: PrivacyEvent) -> list[PrivacyEvent]:
    if isinstance(event, ComposedEvent):
        return [leaf for e in event.events for leaf in _leaves(e)]
    return [event]


ADDITIVE = {"count", "sum", "mean", "variance", "std"}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("k", [1, 3])
def test_every_kind_charges_its_event_and_the_ledger_recomposes(k: int) -> None:
    session = _session(k)
    for case in CASES:
        before = len(session.accountant.history)
        try:
            case.call(session)
        except Exception:  # some cases are refusals (checked before any charge)
            assert len(session.accountant.history) == before, case.id
            continue
        rows = session.accountant.history[before:]
        assert len(rows) == 1, case.id
        row = rows[0]
        assert row.event is not None
        assert row.event.budget() == row.cost, case.id
        assert event_from_json(row.event.to_json()) == row.event, case.id
        kind = row.label.split("(", 1)[0]
        # count with private keys is (ε, δ) as a whole; a plan is charged its total
        whole = case.id.startswith(("count-by-private", "plan"))
        if (kind in ADDITIVE or case.opts.additive) and not whole:
            # the noise is recorded, not only its (ε, δ)
            assert any(isinstance(e, GeometricEvent) for e in _leaves(row.event)), case.id
    spent = sum((r.event.budget() for r in session.accountant.history), Budget.zero())
    assert spent == session.accountant.spent


def test_count_records_the_geometric_noise_the_release_drew() -> None:
    session = _session(k=2)
    release = session.count(epsilon=0.5, group_by="g", keys=GROUPS)
    event = session.accountant.history[-1].event
    assert isinstance(event, GeometricEvent)
    assert event.sensitivity == 2
    assert event.scale == release.details["scale"]
    assert event.budget() == Budget(Fraction(1, 2))


def test_mean_records_its_two_sided_sums_and_private_keys_their_selection() -> None:
    session = _session()
    release = session.mean("x", epsilon=1.0, bounds=(0, 100))
    (part,) = _leaves(session.accountant.history[-1].event)  # type: ignore[arg-type]
    assert isinstance(part, GeometricEvent)  # one Laplace over (A, B): all of ε
    assert part.budget() == Budget(1)
    assert part.sensitivity / part.scale == 1.0  # type: ignore[attr-defined]
    assert release.mechanism == "laplace"
    session.mean("x", epsilon=1.0, bounds=(0, 100), group_by="g", keys="private", delta=1e-6)
    parts = _leaves(session.accountant.history[-1].event)  # type: ignore[arg-type]
    assert isinstance(parts[0], EpsilonDeltaEvent)  # the selecting count, then the old split
    assert isinstance(parts[1], GeometricEvent)
    session.sum("x", epsilon=1.0, bounds=(0, 100), group_by="g", keys="private", delta=1e-6)
    parts = _leaves(session.accountant.history[-1].event)  # type: ignore[arg-type]
    assert isinstance(parts[0], EpsilonDeltaEvent) and parts[0].delta == exact(1e-6)
    assert isinstance(parts[1], GeometricEvent)


SPECS = {
    "count": lambda e, d, b: QuerySpec("count", epsilon=e),
    "count-private": lambda e, d, b: QuerySpec(
        "count", epsilon=e, group_by="g", keys="private", delta=d
    ),
    "sum": lambda e, d, b: QuerySpec("sum", "x", epsilon=e, bounds=b, group_by="g", keys=GROUPS),
    "sum-private": lambda e, d, b: QuerySpec(
        "sum", "x", epsilon=e, bounds=b, group_by="g", keys="private", delta=d
    ),
    "mean": lambda e, d, b: QuerySpec("mean", "x", epsilon=e, bounds=b),
    "mean-private": lambda e, d, b: QuerySpec(
        "mean", "x", epsilon=e, bounds=b, group_by="g", keys="private", delta=d
    ),
    "variance": lambda e, d, b: QuerySpec("variance", "x", epsilon=e, bounds=b),
    "std-private-bounds": lambda e, d, b: QuerySpec("std", "x", epsilon=e, bounds="private"),
    "histogram": lambda e, d, b: QuerySpec("histogram", "x", epsilon=e, bins=4, bounds=b),
    "histogram-private": lambda e, d, b: QuerySpec(
        "histogram", "g", epsilon=e, domain=GROUPS, group_by="flag", keys="private", delta=d
    ),
    "mode": lambda e, d, b: QuerySpec("mode", "g", epsilon=e, domain=GROUPS),
    "quantile-private": lambda e, d, b: QuerySpec(
        "quantile",
        "x",
        q=0.3,
        epsilon=e,
        bounds=b,
        grid_size=33,
        group_by="g",
        keys="private",
        delta=d,
    ),
}

SESSIONS = {k: _session(k) for k in (1, 2, 5)}


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(SPECS)),
    epsilon=st.floats(1e-3, 50.0),
    delta=st.floats(1e-12, 1e-2),
    lo=st.floats(-1e6, 1e6),
    width=st.floats(1e-3, 1e6),
    k=st.sampled_from([1, 2, 5]),
)
def test_event_budget_is_exactly_the_cost(
    name: str, epsilon: float, delta: float, lo: float, width: float, k: int
) -> None:
    """No data is read: the event is a function of the validated query (public parameters)."""
    planned = SESSIONS[k].prepare(SPECS[name](epsilon, delta, (lo, lo + width)))
    event = costing.event(planned.query)
    assert event.budget() == costing.cost(planned.query)
    assert event.budget().epsilon_exact == exact(epsilon)
