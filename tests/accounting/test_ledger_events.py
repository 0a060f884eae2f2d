"""Privacy events in the ledger and the accountant: recorded, read back, checked, old ledgers kept."""

from __future__ import annotations

import sqlite3
import threading
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.accounting._ledgers import V1_SCHEMA

from dpkit.accounting import Accountant, Budget, charge_and_run
from dpkit.accounting.events import (
    DiscreteGaussianEvent,
    EpsilonDeltaEvent,
    GeometricEvent,
    LaplaceEvent,
    PrivacyEvent,
    RepeatedEvent,
    ZCDPEvent,
    as_event,
)
from dpkit.accounting.ledger import event_text
from dpkit.errors import InvalidParameterError, LedgerCorruptError, LedgerError
from dpkit.mechanisms.gaussian import DiscreteGaussian, Gaussian
from dpkit.mechanisms.laplace import Geometric, Laplace


def _v1_ledger(path: Path) -> None:
    """A ledger as dpkit bef8d6f wrote it: budget (2, 1e-5), two charges, one with a rho."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(V1_SCHEMA)
    meta = {
        "format": "dpkit-ledger",
        "schema_version": "1",
        "budget_epsilon": "2",
        "budget_delta": "1/100000",
        "budget_rho": "",
        "composition": "basic",
        "created_at": "2026-11-01T00:00:00+00:00",
    }
    conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", meta.items())
    conn.executemany(
        "INSERT INTO charges(label, epsilon, delta, rho, scope_path, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [
            ("count", "1/10", "0", None, "[]", 1.0e9),
            ("gaussian mean", "1/2", "1/1000000", "1/40", "[]", 1.0e9 + 1),
        ],
    )
    conn.close()


def _version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def test_a_ledger_written_before_events_opens_and_reads_its_charges_as_budgets(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.sqlite"
    _v1_ledger(path)
    before = path.read_bytes()
    acc = Accountant.from_ledger(path)
    old = acc.history
    assert [r.event for r in old] == [
        EpsilonDeltaEvent(Fraction(1, 10)),
        ZCDPEvent(Fraction(1, 40), Fraction(1, 2), Fraction(1, 10**6)),
    ]
    assert [r.event for r in old] == [as_event(r.cost) for r in old]
    assert acc.spent == Budget(0.6, 1e-6)
    acc.close()
    assert path.read_bytes() == before  # reading never changes an old ledger

    # The first new charge adds the (nullable) event column; the old rows stay as they were.
    acc = Accountant.from_ledger(path)
    event = LaplaceEvent(10.0, 1.0)
    acc.charge(Budget(0.1), "new count", event=event)
    acc.close()
    assert _version(path) == 2
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT label, epsilon, event FROM charges ORDER BY id").fetchall()
        version_row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    assert rows == [
        ("count", "1/10", None),
        ("gaussian mean", "1/2", None),
        ("new count", "1/10", event_text(event)),
    ]
    assert version_row == ("2",)
    reopened = Accountant.from_ledger(path)
    assert [r.event for r in reopened.history] == [*(r.event for r in old), event]
    assert reopened.spent == Budget(0.7, 1e-6)
    reopened.close()


def test_a_refused_charge_does_not_upgrade_an_old_ledger(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    _v1_ledger(path)
    with Accountant.from_ledger(path) as acc, pytest.raises(Exception, match="exceeded"):
        acc.charge(5, "too much")
    assert _version(path) == 1


def test_an_old_dpkit_and_a_new_one_share_a_ledger_being_upgraded(tmp_path: Path) -> None:
    # A second accountant opened while the file was version 1 keeps working after the upgrade.
    path = tmp_path / "old.sqlite"
    _v1_ledger(path)
    first, second = Accountant.from_ledger(path), Accountant.from_ledger(path)
    event = GeometricEvent(10.0, 1.0)
    first.charge(Budget(0.1), "after upgrade", event=event)
    assert second.history[-1].event == event
    second.charge(0.2, "bare")
    assert first.history[-1].event == EpsilonDeltaEvent(Fraction(1, 5))
    first.close()
    second.close()


def test_new_ledgers_round_trip_events(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    gaussian = DiscreteGaussian(epsilon=0.5, delta=1e-7, sensitivity=1)
    events: list[PrivacyEvent] = [
        LaplaceEvent(20.0, 2.0),
        gaussian.event,
        RepeatedEvent(GeometricEvent(5.0, 1.0), 3),
    ]
    with Accountant(Budget(5, 1e-5), path) as acc:
        for i, event in enumerate(events):
            acc.charge(event.budget(), f"release {i}", event=event)
        acc.charge(Budget(0.25), "bare")
    with Accountant.from_ledger(path) as acc:
        assert [r.event for r in acc.history] == [*events, EpsilonDeltaEvent(Fraction(1, 4))]
        assert acc.history[1].cost == gaussian.cost
    assert _version(path) == 2


def test_a_charge_whose_event_disagrees_with_its_cost_is_refused_before_writing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "l.sqlite"
    with Accountant(Budget(5), path) as acc:
        with pytest.raises(InvalidParameterError) as err:
            acc.charge(Budget(0.5), "mean", event=LaplaceEvent(1.0, 1.0))
        assert str(err.value) == (
            "the event is charged as ε=1, δ=0 but the cost given is ε=0.5, δ=0; they must be "
            "the same amount (build the cost as event.budget(), or omit the cost's event)."
        )
        with pytest.raises(InvalidParameterError, match="must be a dpkit privacy event"):
            acc.charge(Budget(1), "mean", event={"type": "laplace"})  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="not a Budget"):
            acc.charge(Budget(1), "mean", event=Budget(1))  # type: ignore[arg-type]
        with pytest.raises(InvalidParameterError, match="no \\(epsilon, delta\\) charge"):
            acc.charge(Budget(1), "mean", event=DiscreteGaussianEvent(2.0, 1.0))
        with acc.parallel("groups") as scope, pytest.raises(InvalidParameterError):
            scope.charge(Budget(0.5), "a", part="a", event=LaplaceEvent(1.0, 1.0))
        assert acc.history == ()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM charges").fetchone() == (0,)


def test_parallel_charges_record_their_events() -> None:
    acc = Accountant(Budget(3))
    with acc.parallel("by region") as scope:
        scope.charge(Budget(1), "north", part="n", event=LaplaceEvent(1.0, 1.0))
        scope.part("s").charge(Budget(0.5), "south", event=LaplaceEvent(2.0, 1.0))
    assert [r.event for r in acc.history] == [LaplaceEvent(1.0, 1.0), LaplaceEvent(2.0, 1.0)]
    assert acc.spent == Budget(1)


def _insert_raw(path: Path, event: str, epsilon: str = "1/10") -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO charges(label, epsilon, delta, rho, scope_path, created_at, event) "
            "VALUES ('x', ?, '0', NULL, '[]', 1.0, ?)",
            (epsilon, event),
        )


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ('{"type": "telepathy"}', "the event of charge #1 is unreadable"),
        ("not json", "the event of charge #1 is unreadable"),
        ("[" * 100_000 + "]" * 100_000, "the event of charge #1 is unreadable"),
        (
            '{"type": "epsilon_delta", "epsilon": "1/5", "delta": "0"}',
            "the event of charge #1 does not match its charged budget",
        ),
    ],
)
def test_an_unreadable_or_inconsistent_event_is_a_corrupt_ledger(
    tmp_path: Path, text: str, what: str
) -> None:
    path = tmp_path / "l.sqlite"
    Accountant(Budget(1), path).close()
    _insert_raw(path, text)
    with pytest.raises(LedgerCorruptError) as err:
        Accountant.from_ledger(path)
    assert what in str(err.value)


def test_a_newer_schema_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    Accountant(Budget(1), path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 3")
    with pytest.raises(LedgerError, match="schema version 3, written by a newer dpkit"):
        Accountant.from_ledger(path)


def test_charge_and_run_and_mechanisms_record_their_events() -> None:
    acc = Accountant(Budget(10, 1e-5))
    event = LaplaceEvent(4.0, 2.0)
    assert charge_and_run(acc, Budget(0.5), "direct", lambda: 7, event=event) == 7
    with pytest.raises(InvalidParameterError, match="must be the same amount"):
        charge_and_run(acc, Budget(1), "wrong", lambda: 7, event=event)
    mechanisms = [
        Laplace(epsilon=0.5, sensitivity=3.0),
        Geometric(epsilon=0.5, sensitivity=1),
        Gaussian(epsilon=0.5, delta=1e-6, sensitivity=2.0),
        DiscreteGaussian(epsilon=0.5, delta=1e-6, sensitivity=1),
    ]
    for m in mechanisms:
        m.release(1, rng=0, accountant=acc)
    history = acc.history
    assert [r.label for r in history] == ["direct"] + [f"{m.name} mechanism" for m in mechanisms]
    assert [r.event for r in history] == [event] + [m.event for m in mechanisms]
    assert [r.cost for r in history[1:]] == [m.cost for m in mechanisms]


event_costs = st.one_of(
    st.fractions(min_value=Fraction(1, 100), max_value=1, max_denominator=100).map(
        lambda e: LaplaceEvent(float(1 / e), 1.0, epsilon=e)
    ),
    st.integers(min_value=1, max_value=20).map(lambda k: GeometricEvent(float(k), 1.0)),
    st.tuples(
        st.fractions(min_value=Fraction(1, 100), max_value=1, max_denominator=100),
        st.integers(min_value=1, max_value=10),
    ).map(lambda t: EpsilonDeltaEvent(t[0], Fraction(t[1], 10**8))),
    st.none(),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(event_costs, st.booleans()), max_size=12))
def test_recorded_events_recompose_to_the_charged_total(
    charges: list[tuple[PrivacyEvent | None, bool]],
) -> None:
    """Basic composition of the history's event.budget() is the accountant's spent, exactly."""
    acc = Accountant(Budget(1000, 0.5))
    for i, (event, bare) in enumerate(charges):
        cost = Budget(Fraction(1, 7)) if event is None else event.budget()
        acc.charge(cost, f"release {i}", event=None if bare else event)
    history = acc.history
    total = sum((r.event.budget() for r in history if r.event is not None), Budget.zero())
    assert all(r.event is not None and r.event.budget() == r.cost for r in history)
    assert total.epsilon_exact == acc.spent.epsilon_exact
    assert total.delta_exact == acc.spent.delta_exact
    assert len(history) == len(charges)


def test_accountants_upgrading_an_old_ledger_at_once_lose_no_charge(tmp_path: Path) -> None:
    """Four connections charge a version-1 ledger concurrently: one upgrade, every charge kept."""
    path = tmp_path / "old.sqlite"
    _v1_ledger(path)  # 0.6 of the budget's epsilon 2 already spent
    event = LaplaceEvent(100.0, 1.0)
    accountants = [Accountant.from_ledger(path) for _ in range(4)]
    errors: list[BaseException] = []

    def worker(acc: Accountant, i: int) -> None:
        try:
            for j in range(10):
                acc.charge(Budget(0.01), f"t{i}-{j}", event=event if j % 2 else None)
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(a, i)) for i, a in enumerate(accountants)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for acc in accountants:
        acc.close()
    assert errors == []
    assert _version(path) == 2
    with Accountant.from_ledger(path) as acc:
        history = acc.history
        assert len(history) == 42
        assert acc.spent == Budget(1, 1e-6)
        assert sum(r.event == event for r in history) == 20
