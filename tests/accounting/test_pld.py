"""PLD accounting (dpkit.accounting.pld and composition="pld") and zCDP on privacy events.

Checked against ground truth: the exact privacy curve of composed Gaussians
(μ-GDP, Dong, Roth & Su 2022) and of composed pure-ε mechanisms (binomial
privacy loss, Kairouz, Oh & Viswanath 2015), and against Google's
``dp_accounting`` in the same process.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as dpa_pld
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.stats import norm

from dpkit.accounting import Accountant, Budget
from dpkit.accounting.composition import (
    COMPOSITION_RULES,
    _Rule,
    _Totals,
    event_rho,
    zcdp_to_dp,
)
from dpkit.accounting.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    GeometricEvent,
    LaplaceEvent,
    RepeatedEvent,
    ZCDPEvent,
)
from dpkit.accounting.filters import filter_for
from dpkit.accounting.pld import PLDChain, event_pld, largest_count, pld_epsilon
from dpkit.errors import BudgetExceededError, InvalidParameterError

DELTA = Fraction(1, 10**6)
BUDGET = Budget(1, DELTA)


def _charged(event: GaussianEvent) -> GaussianEvent:
    """The same Gaussian with an (ε, δ) charge recorded (its zCDP conversion at δ = 1e-9)."""
    b = zcdp_to_dp(event.proven_rho(), Fraction(1, 10**9))
    return GaussianEvent(
        event.sigma, event.sensitivity, epsilon=b.epsilon_exact, delta=b.delta_exact
    )


def _dp_accounting_epsilon(events: list[LaplaceEvent | GaussianEvent], delta: float) -> float:
    acc = pld_privacy_accountant.PLDAccountant()
    for e in events:
        acc.compose(e.dp_accounting())
    return float(acc.get_epsilon(delta))


# --- ground truth -----------------------------------------------------------------------
def _gdp_epsilon(mu: float, delta: float) -> float:
    """Exact ε at δ of μ-GDP (k Gaussians of σ, Δ = 1: μ = √k/σ), Dong, Roth & Su Cor. 2.13."""

    def excess(eps: float) -> float:
        return float(
            norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta
        )

    return float(brentq(excess, 0.0, 50.0, xtol=1e-12))


def _pure_epsilon(eps: float, k: int, delta: float) -> float:
    """Exact ε at δ of k composed ε-DP mechanisms (optimal composition, binomial privacy loss)."""
    p = math.exp(eps) / (1 + math.exp(eps))
    losses = [
        ((k - 2 * j) * eps, math.comb(k, j) * p ** (k - j) * (1 - p) ** j) for j in range(k + 1)
    ]

    def excess(target: float) -> float:
        return sum(w * -math.expm1(target - x) for x, w in losses if x > target) - delta

    return float(brentq(excess, 0.0, k * eps, xtol=1e-12))


@pytest.mark.parametrize(("sigma", "count"), [(20, 22), (50, 140), (100, 560), (5, 3)])
def test_gaussian_pld_is_above_the_exact_curve_and_within_one_percent(
    sigma: float, count: int
) -> None:
    got = pld_epsilon([GaussianEvent(sigma, 1.0)] * count, DELTA)
    truth = _gdp_epsilon(math.sqrt(count) / sigma, float(DELTA))
    assert got is not None
    assert truth <= float(got) <= truth * 1.01


@pytest.mark.parametrize(("eps", "count"), [(0.05, 60), (0.1, 30), (0.2, 12)])
def test_pure_epsilon_pld_is_above_optimal_composition_and_within_one_percent(
    eps: float, count: int
) -> None:
    got = pld_epsilon([Budget(eps)] * count, DELTA)
    truth = _pure_epsilon(eps, count, float(DELTA))
    assert got is not None
    assert truth <= float(got) <= truth * 1.01
    assert float(got) < eps * count  # tighter than basic composition


events = st.one_of(
    st.builds(LaplaceEvent, st.sampled_from([5.0, 20.0, 50.0, 200.0]), st.just(1.0)),
    st.builds(GaussianEvent, st.sampled_from([5.0, 20.0, 50.0, 200.0]), st.just(1.0)),
)


@settings(max_examples=20, deadline=None)
@given(st.lists(events, min_size=1, max_size=8), st.sampled_from([1e-6, 1e-5, 1e-3]))
def test_pld_agrees_with_dp_accounting_and_is_never_below_it(
    seq: list[LaplaceEvent | GaussianEvent], delta: float
) -> None:
    got = pld_epsilon(seq, Fraction(delta))
    theirs = _dp_accounting_epsilon(seq, delta)
    assert got is not None
    assert float(got) >= theirs
    assert float(got) <= theirs * 1.01 + 1e-9


@pytest.mark.parametrize(("sigma", "count"), [(20, 19), (50, 121), (100, 487)])
def test_zcdp_of_gaussian_events_agrees_with_dp_accounting_rdp(sigma: int, count: int) -> None:
    rho = sum(
        (event_rho(GaussianEvent(sigma, 1.0)) or Fraction(0) for _ in range(count)), Fraction(0)
    )
    assert rho == Fraction(count, 2 * sigma * sigma)
    ours = float(zcdp_to_dp(rho, DELTA).epsilon_exact)
    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(dp_event.GaussianDpEvent(sigma), count)
    theirs = float(acc.get_epsilon(float(DELTA)))
    assert abs(ours - theirs) <= 0.01 * theirs
    assert ours <= 1.0  # the issue's zCDP counts fit the budget


def test_event_rho_per_kind() -> None:
    assert event_rho(GaussianEvent(10.0, 2.0)) == Fraction(4, 200)
    assert event_rho(LaplaceEvent(10.0, 1.0)) == Fraction(1, 200)
    assert event_rho(GeometricEvent(4.0, 1.0)) == Fraction(1, 32)
    assert event_rho(ZCDPEvent(Fraction(1, 7))) == Fraction(1, 7)
    assert event_rho(EpsilonDeltaEvent(Fraction(1, 2))) == Fraction(1, 8)
    assert event_rho(EpsilonDeltaEvent(Fraction(1, 2), DELTA)) is None  # no zCDP bound
    assert event_rho(RepeatedEvent(LaplaceEvent(10.0, 1.0), 3)) == Fraction(3, 200)
    mixed = ComposedEvent((LaplaceEvent(10.0, 1.0), EpsilonDeltaEvent(Fraction(1), DELTA)))
    assert event_rho(mixed) is None


def test_the_zcdp_rule_takes_rho_from_the_event() -> None:
    rule = _Rule("zcdp", BUDGET)
    gauss = GaussianEvent(50.0, 1.0)
    cost = Budget(Fraction(1, 10), Fraction(1, 10**8))  # an (ε, δ) with no declared ρ
    assert not rule.admits(_Totals().plus(cost))  # a bare (ε, δ > 0) has no ρ: refused
    assert rule.admits(_Totals().plus(cost, gauss))
    assert _Totals().plus(cost, gauss).rho == Fraction(1, 5000)


def test_composed_and_repeated_events_compose_like_their_parts() -> None:
    lap, gau = LaplaceEvent(20.0, 1.0), GaussianEvent(20.0, 1.0)
    flat = pld_epsilon([lap, gau, gau, gau], DELTA)
    nested = pld_epsilon([ComposedEvent((lap, RepeatedEvent(gau, 3)))], DELTA)
    assert flat is not None and nested is not None
    assert abs(float(flat) - float(nested)) <= 1e-3 * float(flat)


def test_events_without_a_pld_compose_as_their_charge() -> None:
    # a bare (ε, δ): the worst-case (ε, δ) PLD, never better than the pair itself
    eps = pld_epsilon([Budget(Fraction(1, 2), Fraction(1, 10**7))], DELTA)
    assert eps is not None and Fraction(1, 2) <= eps <= Fraction(1, 2) * Fraction(1001, 1000)
    # more δ than the budget's: no finite ε
    assert pld_epsilon([Budget(Fraction(1, 2), Fraction(1, 10**5))], DELTA) is None
    with pytest.raises(InvalidParameterError, match="no \\(epsilon, delta\\) charge recorded"):
        event_pld(ZCDPEvent(Fraction(1, 100)))


def test_releases_too_coarse_for_a_pld_fall_back_to_basic_composition_quickly() -> None:
    # each of these alone would take seconds and hundreds of MB of grid (or overflow)
    for coarse in (LaplaceEvent(0.1, 1.0), GaussianEvent(0.2, 1.0), Budget(1000)):
        assert event_pld(coarse) is None
        assert pld_epsilon([LaplaceEvent(20.0, 1.0), coarse], DELTA) is None
    rule = _Rule("pld", Budget(30, DELTA))
    start = time.perf_counter()
    totals = _Totals().plus(Budget(Fraction(1, 20)), LaplaceEvent(20.0, 1.0))
    totals = totals.plus(Budget(10), LaplaceEvent(0.1, 1.0))
    for _ in range(50):
        totals = totals.plus(Budget(Fraction(1, 20)), LaplaceEvent(20.0, 1.0))
    assert rule.admits(totals)
    assert rule.spent(totals) == Budget(Fraction(51, 20) + 10)  # basic composition
    assert not rule.admits(totals.plus(Budget(20)))
    assert time.perf_counter() - start < 20
    with pytest.raises(InvalidParameterError, match="too coarse"):
        largest_count(LaplaceEvent(0.1, 1.0), BUDGET)


# --- the "pld" rule ---------------------------------------------------------------------
def test_pld_is_a_composition_rule_and_needs_delta() -> None:
    assert "pld" in COMPOSITION_RULES
    with pytest.raises(
        InvalidParameterError, match="composition='pld' needs a budget with delta > 0"
    ):
        _Rule("pld", Budget(1))


@pytest.mark.parametrize(
    ("event", "expected"),
    [(GaussianEvent(50.0, 1.0), 140), (LaplaceEvent(50.0, 1.0), 144)],
)
def test_the_pld_rule_admits_the_issues_counts_and_refuses_before_overspending(
    event: LaplaceEvent | GaussianEvent, expected: int
) -> None:
    rule = _Rule("pld", BUDGET)
    if isinstance(event, GaussianEvent):
        event = _charged(event)
    cost = event.budget()
    totals, count = _Totals(), 0
    while rule.admits(nxt := totals.plus(cost, event)):
        totals, count = nxt, count + 1
        if count % 25 == 0:  # spent() reads ε(δ), 20 ms a call: sampled
            assert rule.spent(totals).is_within(BUDGET)
        assert count <= 10 * expected
    assert count == expected
    assert rule.spent(totals).is_within(BUDGET)
    # the refused one would overspend by dp_accounting's own reckoning too
    assert _dp_accounting_epsilon([event] * (count + 1), float(DELTA)) > 1.0
    assert _dp_accounting_epsilon([event] * count, float(DELTA)) <= 1.0
    assert largest_count(event, BUDGET) == expected


def test_a_charge_costs_one_composition_not_one_per_charge_in_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = 0
    original = dpa_pld.PrivacyLossDistribution.compose

    def counting(self: object, other: object, *args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return original(self, other, *args, **kwargs)

    monkeypatch.setattr(dpa_pld.PrivacyLossDistribution, "compose", counting)
    rule = _Rule("pld", BUDGET)
    event = _charged(GaussianEvent(200.0, 1.0))
    cost = event.budget()
    totals = _Totals()
    start = time.perf_counter()
    for _ in range(300):
        nxt = totals.plus(cost, event)
        assert rule.admits(nxt)  # the check (a preview)...
        totals = totals.plus(cost, event)  # ...then the commit reuses its composition
        assert rule.admits(totals)
    assert calls <= 301
    assert time.perf_counter() - start < 60  # ~1 s here; a generous bound for a busy machine


def test_a_chain_forgets_its_parents_once_composed() -> None:
    chain = PLDChain.empty().then(LaplaceEvent(10.0, 1.0)).then(LaplaceEvent(10.0, 1.0))
    chain.pld()
    assert chain._parent is None


def test_the_pld_filter_refuses_like_the_rule() -> None:
    filt = filter_for("pld", BUDGET)
    assert filt.name == "pld" and filt.adaptive_valid is False
    event = _charged(GaussianEvent(50.0, 1.0))
    assert not filt.would_exceed([event] * 139, event)
    assert filt.would_exceed([event] * 140, event)


# --- through an Accountant (bare budgets: the worst-case PLD of each (ε, δ)) ------------
def test_an_accountant_with_pld_gives_more_pure_answers_than_basic() -> None:
    acc = Accountant(BUDGET, composition="pld")
    assert acc.composition == "pld"
    count = 0
    with pytest.raises(BudgetExceededError, match="composition='pld'"):
        for i in range(1000):
            acc.charge(Budget(Fraction(1, 20)), f"q{i}")
            count += 1
            assert acc.spent.is_within(BUDGET)
    # basic composition stops at 20; optimal composition of 0.05-DP mechanisms allows more
    truth = _pure_epsilon(0.05, count + 1, float(DELTA))
    assert count > 20 and truth > 1.0 * 0.99


def test_an_accountant_with_pld_composes_a_parallel_scope_by_its_max() -> None:
    acc = Accountant(BUDGET, composition="pld")
    for i in range(10):
        acc.charge(Budget(Fraction(1, 20)), f"q{i}")
    with acc.parallel("by region") as scope:
        scope.charge(Budget(Fraction(1, 20)), "north")
        scope.charge(Budget(Fraction(1, 10)), "south")
        assert scope.cost == Budget(Fraction(1, 10))
    expected = pld_epsilon([Budget(Fraction(1, 20))] * 10 + [Budget(Fraction(1, 10))], DELTA)
    assert acc.spent.epsilon_exact == min(expected or 2, Fraction(6, 10))


def test_a_pld_ledger_reopens_with_its_rule(tmp_path: object) -> None:
    path = f"{tmp_path}/ledger.sqlite"
    with Accountant(BUDGET, path, composition="pld") as acc:
        for i in range(25):
            acc.charge(Budget(Fraction(1, 20)), f"q{i}")
        spent = acc.spent
    again = Accountant.from_ledger(path)
    assert again.composition == "pld"
    assert again.spent == spent
    assert spent.epsilon_exact < Fraction(25, 20)
    again.close()


def test_an_accountant_with_pld_composes_the_charged_events(tmp_path: object) -> None:
    path = f"{tmp_path}/gauss.sqlite"
    event = _charged(GaussianEvent(50.0, 1.0))
    count = 0
    with Accountant(BUDGET, path, composition="pld") as acc:
        with pytest.raises(BudgetExceededError):
            for i in range(1000):
                acc.charge(event.budget(), f"g{i}", event=event)
                count += 1
        spent = acc.spent
        assert acc.history[-1].event == event
    assert count == 140  # dp_accounting's PLD count; basic composition allows 12
    assert spent.is_within(BUDGET) and spent.epsilon > 0.99
    again = Accountant.from_ledger(path)  # the events are read back from the ledger
    assert again.spent == spent
    assert not again.can_afford(event.budget())
    again.close()
