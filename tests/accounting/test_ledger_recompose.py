"""The ledger's recorded events re-compose to the totals the accountant charged (property tests).

For random sequences of charges (Laplace, geometric, Gaussian, discrete
Gaussian, zCDP, (ε, δ), composed and repeated events, bare budgets, parallel
scopes) under every composition rule, the ledger file is reopened with
``Accountant.from_ledger`` and:

* the events read back are exactly those charged (bare budgets as ``as_event``);
* basic composition of the events' ``budget()`` (the max over the parts of a
  parallel scope) is what the "basic" rule reports spent, exactly;
* each rule's ``spent`` recomputed from the read-back events alone (Σ ρ for
  zcdp, the Rényi orders for rdp, ``dp_accounting``'s PLD
  accountant for pld) is the accountant's, before and after reopening.

A ledger written before events were recorded (schema 1) opens with its totals.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.accounting._ledgers import V1_SCHEMA

from dpkit.accounting import Accountant, Budget
from dpkit.accounting.composition import (
    COMPOSITION_RULES,
    event_rho,
    largest_rho,
    zcdp_to_dp,
)
from dpkit.accounting.events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    GeometricEvent,
    LaplaceEvent,
    PrivacyEvent,
    RepeatedEvent,
    ZCDPEvent,
    as_event,
)
from dpkit.accounting.renyi import delta_shares, rdp_curve, rdp_epsilon
from dpkit.errors import BudgetExceededError, InvalidParameterError
from dpkit.mechanisms.gaussian import DiscreteGaussian, Gaussian

BUDGET = Budget(6, Fraction(1, 1000))
DELTA = BUDGET.delta_exact

# ---------------------------------------------------------------------------------
# Strategies: one release's event (None: a bare budget), and a session's charges
# ---------------------------------------------------------------------------------
sensitivities = st.sampled_from([1.0, 2.0])


def _session_gaussian(sigma: float, sensitivity: float) -> GaussianEvent:
    """A Gaussian release as a session charges it: ρ = Δ²/(2σ²), (ε', δ_B) its conversion."""
    rho = Fraction(sensitivity) ** 2 / (2 * Fraction(sigma) ** 2)
    charge = zcdp_to_dp(rho, DELTA)
    return GaussianEvent(sigma, sensitivity, charge.epsilon_exact, DELTA, rho)


def _zcdp(rho: Fraction) -> ZCDPEvent:
    charge = zcdp_to_dp(rho, DELTA)
    return ZCDPEvent(rho, charge.epsilon_exact, DELTA)


simple_events: st.SearchStrategy[PrivacyEvent] = st.one_of(
    st.builds(LaplaceEvent, st.sampled_from([4.0, 10.0, 40.0]), sensitivities),
    st.builds(
        lambda scale, k: GeometricEvent(scale, float(k)),
        st.sampled_from([5.0, 20.0]),
        st.sampled_from([1, 2]),
    ),
    st.builds(_session_gaussian, st.sampled_from([3.0, 8.0, 30.0]), sensitivities),
    st.builds(
        lambda e, s: Gaussian(epsilon=e, delta=1e-5, sensitivity=s).event,
        st.sampled_from([0.25, 0.5]),
        sensitivities,
    ),
    st.builds(
        lambda e: DiscreteGaussian(epsilon=e, delta=1e-5, sensitivity=1).event,
        st.sampled_from([0.25, 0.5]),
    ),
    st.builds(_zcdp, st.sampled_from([Fraction(1, 200), Fraction(1, 50)])),
    st.builds(
        EpsilonDeltaEvent,
        st.sampled_from([Fraction(1, 10), Fraction(1, 4)]),
        st.sampled_from([Fraction(0), Fraction(0), Fraction(1, 10**6)]),
    ),
)
events: st.SearchStrategy[PrivacyEvent] = st.one_of(
    simple_events,
    st.lists(simple_events, min_size=1, max_size=3).map(lambda es: ComposedEvent(tuple(es))),
    st.builds(RepeatedEvent, simple_events, st.integers(min_value=1, max_value=3)),
)
# (event, charged bare): a bare charge gives only event.budget(), no event
charges = st.tuples(events, st.booleans())
# a parallel scope: 1-3 parts, each 1-2 charges on the same rows
scopes = st.lists(st.lists(charges, min_size=1, max_size=2), min_size=1, max_size=3)
sessions = st.lists(
    st.one_of(charges.map(lambda c: ("seq", c)), scopes.map(lambda s: ("par", s))),
    min_size=1,
    max_size=6,
)


@dataclass(frozen=True)
class Charged:
    """One charge that the accountant admitted: what the ledger must hold for it."""

    label: str
    event: PrivacyEvent  # as recorded (as_event(cost) for a bare charge)
    scope: tuple[str, str] | None  # (scope label, part key) for a charge in a parallel scope


def _charge_one(charge: object, label: str, bare: bool, event: PrivacyEvent) -> PrivacyEvent | None:
    """Charge through ``charge`` (a bound charge method); the recorded event, None if refused."""
    cost = event.budget()
    try:
        charge(cost, label, event=None if bare else event)  # type: ignore[operator]
    except (BudgetExceededError, InvalidParameterError):
        # over budget, or a cost the rule cannot compose (δ > 0 without ρ under zcdp/rdp)
        return None
    return as_event(cost) if bare else event


Charge = tuple[PrivacyEvent, bool]


def _run(acc: Accountant, session: list[tuple[str, object]]) -> list[Charged]:
    out: list[Charged] = []
    for i, (kind, item) in enumerate(session):
        if kind == "seq":
            event, bare = cast(Charge, item)
            got = _charge_one(acc.charge, f"release {i}", bare, event)
            if got is not None:
                out.append(Charged(f"release {i}", got, None))
            continue
        with acc.parallel(f"scope {i}") as scope:
            for p, part in enumerate(cast(list[list[Charge]], item)):
                for j, (event, bare) in enumerate(part):
                    label = f"scope {i} part {p} #{j}"
                    got = _charge_one(scope.part(f"p{p}").charge, label, bare, event)
                    if got is not None:
                        out.append(Charged(label, got, (f"scope {i}", f"p{p}")))
    return out


# ---------------------------------------------------------------------------------
# Independent recomputation from the read-back events
# ---------------------------------------------------------------------------------
def _blocks(records: Sequence[Charged]) -> list[list[list[PrivacyEvent]]]:
    """Sequential structure: each block is a list of parts (one part for a sequential charge)."""
    blocks: list[list[list[PrivacyEvent]]] = []
    index: dict[str, dict[str, list[PrivacyEvent]]] = {}
    for r in records:
        if r.scope is None:
            blocks.append([[r.event]])
            continue
        name, key = r.scope
        if name not in index:
            index[name] = {}
            blocks.append([])
        parts = index[name]
        if key not in parts:  # a scope's charges are consecutive: its block is the last
            parts[key] = []
            blocks[-1].append(parts[key])
        parts[key].append(r.event)
    return blocks


def _basic_total(records: Sequence[Charged]) -> tuple[Fraction, Fraction]:
    eps = delta = Fraction(0)
    for parts in _blocks(records):
        sums = [sum((e.budget() for e in part), Budget.zero()) for part in parts]
        eps += max(s.epsilon_exact for s in sums)
        delta += max(s.delta_exact for s in sums)
    return eps, delta


def _rho_total(records: Sequence[Charged]) -> Fraction | None:
    total = Fraction(0)
    for parts in _blocks(records):
        sums: list[Fraction] = []
        for part in parts:
            part_sum = Fraction(0)
            for e in part:
                rho = event_rho(e)
                if rho is None:
                    return None
                part_sum += rho
            sums.append(part_sum)
        total += max(sums)
    return total


def _rho(event: PrivacyEvent | None) -> Fraction:
    assert event is not None
    rho = event_rho(event)
    assert rho is not None
    return rho


def _sequential(records: Sequence[Charged]) -> bool:
    return all(r.scope is None for r in records)


def _best(candidates: list[tuple[Fraction, Fraction]]) -> tuple[Fraction, Fraction]:
    fitting = [c for c in candidates if c[0] <= BUDGET.epsilon_exact and c[1] <= BUDGET.delta_exact]
    return min(fitting or candidates)


def _rdp_spent(events: Sequence[PrivacyEvent]) -> float:
    """The rdp rule's spent ε for a sequential history, from its events alone."""
    basic = sum((e.budget() for e in events), Budget.zero())
    cands = [(basic.epsilon_exact, basic.delta_exact)]
    total = [0.0] * len(rdp_curve(events[0]))
    for e in events:
        total = [a + b for a, b in zip(total, rdp_curve(e), strict=True)]
    shares = delta_shares(BUDGET.epsilon_exact, DELTA)
    cands.append((Fraction(rdp_epsilon(tuple(total), shares)), DELTA))
    return float(_best(cands)[0])


_PLD_KINDS = (LaplaceEvent, GeometricEvent, GaussianEvent)


def _pld_native(event: PrivacyEvent) -> bool:
    if isinstance(event, ComposedEvent):
        return all(_pld_native(e) for e in event.events)
    if isinstance(event, RepeatedEvent):
        return _pld_native(event.event)
    return isinstance(event, _PLD_KINDS)


def _dp_accounting_pld_epsilon(events: Sequence[PrivacyEvent]) -> float:
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_event.ComposedDpEvent([e.dp_accounting() for e in events]))
    return float(acc.get_epsilon(float(DELTA)))


def _check_recomposition(rule: str, acc: Accountant, charged: list[Charged]) -> None:
    spent = acc.spent
    eps, delta = _basic_total(charged)
    if not charged:
        assert spent.is_zero
        return
    if rule == "basic":
        assert (spent.epsilon_exact, spent.delta_exact) == (eps, delta)
        return
    if rule == "zcdp":  # spent is the conversion of Σ ρ (documented: no min with basic)
        rho = _rho_total(charged)
        assert rho is not None and spent.rho_exact is not None
        assert spent.rho_exact <= largest_rho(BUDGET.epsilon_exact, DELTA)
        assert spent == zcdp_to_dp(rho, DELTA)
        return
    # the other rules certify at most basic composition when that fits the budget
    if eps <= BUDGET.epsilon_exact and delta <= BUDGET.delta_exact:
        assert spent.epsilon_exact <= eps
    if not _sequential(charged):
        return  # parallel scopes: compared with a replay by the caller
    events = [c.event for c in charged]
    if rule == "rdp":
        assert float(spent.epsilon_exact) == pytest.approx(_rdp_spent(events), rel=1e-9)
    elif rule == "pld" and all(_pld_native(e) for e in events):
        theirs = _dp_accounting_pld_epsilon(events)
        ours = float(spent.epsilon_exact)
        if ours < float(eps):  # the PLD candidate, not basic composition, was taken
            assert ours == pytest.approx(theirs, rel=0.01, abs=1e-6)
            assert ours >= theirs * (1 - 1e-6)  # pessimistic: never below dp_accounting's


def _replay(rule: str, charged: list[Charged]) -> Accountant:
    """A fresh in-memory accountant given the read-back events in the same structure."""
    acc = Accountant(BUDGET, composition=rule)  # type: ignore[arg-type]
    open_scopes: dict[str, object] = {}
    for c in charged:
        if c.scope is None:
            acc.charge(c.event.budget(), c.label, event=c.event)
            continue
        name, key = c.scope
        if name not in open_scopes:
            open_scopes[name] = acc.parallel(name)
        scope = open_scopes[name]
        scope.part(key).charge(c.event.budget(), c.label, event=c.event)  # type: ignore[attr-defined]
    return acc


_HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@pytest.mark.parametrize("rule", COMPOSITION_RULES)
@settings(max_examples=6, deadline=None, suppress_health_check=_HEALTH)
@given(session=sessions)
def test_recorded_events_read_back_and_recompose_to_the_charged_totals(
    tmp_path: Path, rule: str, session: list[tuple[str, object]]
) -> None:
    _check_session(tmp_path, rule, session)


@pytest.mark.audit
@pytest.mark.parametrize("rule", COMPOSITION_RULES)
@settings(max_examples=200, deadline=None, suppress_health_check=_HEALTH)
@given(session=sessions)
def test_recorded_events_recompose_many_sessions(
    tmp_path: Path, rule: str, session: list[tuple[str, object]]
) -> None:
    _check_session(tmp_path, rule, session)


def _check_session(tmp_path: Path, rule: str, session: list[tuple[str, object]]) -> None:
    path = tmp_path / f"{rule}-{abs(hash(repr(session)))}.sqlite"
    path.unlink(missing_ok=True)
    with Accountant(BUDGET, path, composition=rule) as acc:  # type: ignore[arg-type]
        charged = _run(acc, session)
        spent, remaining = acc.spent, acc.remaining
        over_time = acc.spent_over_time()
    _check_recomposition(rule, acc, charged)
    assert (over_time[-1][1] if over_time else Budget.zero()) == spent

    with Accountant.from_ledger(path) as reopened:
        assert reopened.composition == rule and reopened.budget == BUDGET
        history = reopened.history
        assert [r.label for r in history] == [c.label for c in charged]
        assert [r.event for r in history] == [c.event for c in charged]
        assert all(r.event is not None and r.event.budget() == r.cost for r in history)
        assert [r.scopes for r in history] == [
            () if c.scope is None else (c.scope,) for c in charged
        ]
        assert reopened.spent == spent and reopened.remaining == remaining
        _check_recomposition(rule, reopened, charged)
        # the same events charged afresh in the same structure give the same totals
        assert _replay(rule, charged).spent == spent


# ---------------------------------------------------------------------------------
# A ledger written before events were recorded (schema 1)
# ---------------------------------------------------------------------------------
# (V1_SCHEMA: tests/accounting/_ledgers.py)


def _v1_ledger(path: Path, composition: str, rows: Sequence[Budget]) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(V1_SCHEMA)
    meta = {
        "format": "dpkit-ledger",
        "schema_version": "1",
        "budget_epsilon": str(BUDGET.epsilon_exact),
        "budget_delta": str(DELTA),
        "budget_rho": "",
        "composition": composition,
        "created_at": "2026-11-01T00:00:00+00:00",
    }
    conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", meta.items())
    conn.executemany(
        "INSERT INTO charges(label, epsilon, delta, rho, scope_path, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [
            (
                f"old {i}",
                str(b.epsilon_exact),
                str(b.delta_exact),
                None if b.rho_declared is None else str(b.rho_declared),
                "[]",
                1.0e9 + i,
            )
            for i, b in enumerate(rows)
        ],
    )
    conn.close()


old_costs = st.one_of(
    st.sampled_from([Fraction(1, 10), Fraction(1, 4)]).map(Budget),
    st.sampled_from([Fraction(1, 400), Fraction(1, 50)]).map(
        lambda rho: zcdp_to_dp(rho, DELTA / 10)  # six fit the budget's delta
    ),
)


@settings(max_examples=10, deadline=None, suppress_health_check=_HEALTH)
@given(
    composition=st.sampled_from(["basic", "zcdp"]),
    rows=st.lists(old_costs, min_size=1, max_size=6),
)
def test_a_v1_ledger_opens_with_its_totals_and_events_stand_for_its_budgets(
    tmp_path: Path, composition: str, rows: list[Budget]
) -> None:
    path = tmp_path / f"v1-{composition}-{abs(hash(repr(rows)))}.sqlite"
    path.unlink(missing_ok=True)
    _v1_ledger(path, composition, rows)
    before = path.read_bytes()
    with Accountant.from_ledger(path) as acc:
        history = acc.history
        assert [r.cost for r in history] == rows
        assert [r.event for r in history] == [as_event(b) for b in rows]
        if composition == "basic":
            total = sum(rows, Budget.zero())
            assert (acc.spent.epsilon_exact, acc.spent.delta_exact) == (
                total.epsilon_exact,
                total.delta_exact,
            )
        else:
            rho = sum((_rho(r.event) for r in history), Fraction(0))
            assert acc.spent == zcdp_to_dp(rho, DELTA)
        spent = acc.spent
    assert path.read_bytes() == before  # reading never rewrites an old ledger
    # a new charge with an event upgrades the file; the old totals stay and add up
    extra = LaplaceEvent(10.0, 1.0)
    with Accountant.from_ledger(path) as acc:
        acc.charge(extra.budget(), "new count", event=extra)
    with Accountant.from_ledger(path) as acc:
        assert [r.event for r in acc.history][:-1] == [as_event(b) for b in rows]
        assert acc.history[-1].event == extra
        if composition == "basic":
            assert acc.spent.epsilon_exact == spent.epsilon_exact + extra.budget().epsilon_exact
        else:
            assert acc.spent == zcdp_to_dp(spent.rho_exact + event_rho(extra), DELTA)  # type: ignore[operator]


def test_a_discrete_gaussian_event_reads_back_with_its_lattice_units(tmp_path: Path) -> None:
    """The event a discrete Gaussian mechanism charges survives the ledger field by field."""
    mech = DiscreteGaussian(epsilon=0.5, delta=1e-6, sensitivity=3)
    event = mech.event
    assert isinstance(event, DiscreteGaussianEvent)
    path = tmp_path / "dg.sqlite"
    with Accountant(BUDGET, path, composition="zcdp") as acc:
        acc.charge(mech.cost, "dg", event=event)
    with Accountant.from_ledger(path) as acc:
        (record,) = acc.history
    assert record.event == event and record.cost == mech.cost
    assert record.event.to_json() == event.to_json()


@pytest.mark.parametrize("rule", ["zcdp"])
def test_zcdp_charges_a_composed_pure_event_the_rho_its_events_prove(rule: str) -> None:
    """Two Laplace releases of ε = 1/4 are 2 · (1/4)²/2 = 1/16-zCDP, together or apart."""
    laplace = LaplaceEvent(4.0, 1.0)
    apart = Accountant(BUDGET, composition=rule)  # type: ignore[arg-type]
    apart.charge(laplace.budget(), "a", event=laplace)
    apart.charge(laplace.budget(), "b", event=laplace)
    for bundle in (ComposedEvent((laplace, laplace)), RepeatedEvent(laplace, 2)):
        together = Accountant(BUDGET, composition=rule)  # type: ignore[arg-type]
        together.charge(bundle.budget(), "both", event=bundle)
        assert event_rho(bundle) == Fraction(1, 16)
        assert together.spent == apart.spent
