"""The "rdp" rule: Rényi curves per mechanism, the filter's boundary, dp_accounting as oracle, audits.

Claims checked: each event's curve is the theorem's (Mironov 2017 Prop. 6 for
Laplace, Bun & Steinke 2016 Prop. 3.3 for pure ε, α·ρ for Gaussians), and
agrees with Google's ``dp_accounting`` RdpAccountant; the filter refuses exactly
when neither branch (Gaussian DP, Rényi) certifies the history; the counts it
affords; an adaptive analyst (noise chosen from the last answer) stays within
the budget, and the same audit refutes a filter that lets more through.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.accounting import Accountant, Budget
from dpkit.accounting.composition import _Rule
from dpkit.accounting.events import (
    EpsilonDeltaEvent,
    GaussianEvent,
    GeometricEvent,
    LaplaceEvent,
    PrivacyEvent,
    RepeatedEvent,
    ZCDPEvent,
)
from dpkit.accounting.filters import PrivacyFilter, RenyiFilter, filter_for
from dpkit.accounting.renyi import (
    ORDERS,
    _cks_epsilon,
    delta_shares,
    laplace_rdp,
    pure_rdp,
    rdp_curve,
    rdp_epsilon,
)
from dpkit.audit import AuditResult, audit_samples
from dpkit.errors import BudgetExceededError, InvalidParameterError

BUDGET = Budget(1, Fraction(1, 10**6))
alphas = st.floats(min_value=1.01, max_value=500.0)
epsilons = st.floats(min_value=1e-4, max_value=5.0)


# ---------------------------------------------------------------------------------
# Each mechanism's Rényi curve
# ---------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(alphas, epsilons)
def test_pure_curve_is_bun_steinkes_bound_and_below_both_simple_bounds(
    alpha: float, eps: float
) -> None:
    # Bun & Steinke 2016, proof of Prop. 3.3, in its sinh form
    sinh_form = (
        math.log((math.sinh(alpha * eps) - math.sinh((alpha - 1) * eps)) / math.sinh(eps))
        / (alpha - 1)
        if alpha * eps < 300
        else None
    )
    value = pure_rdp(alpha, eps)
    if sinh_form is not None:
        assert value == pytest.approx(sinh_form, rel=1e-7, abs=1e-12)
    assert value <= eps * (1 + 1e-12) and value <= alpha * eps * eps / 2 * (1 + 1e-12)
    # the continuous Laplace mechanism is below the worst ε-DP mechanism
    assert laplace_rdp(alpha, eps) <= value * (1 + 1e-9) + 1e-15


def test_geometric_noise_gets_the_pure_curve_not_the_laplace_one() -> None:
    # a unit shift of discrete Laplace noise has privacy loss ±ε: randomized response.
    eps, alpha = 0.5, 4.0
    p = math.exp(eps) / (1 + math.exp(eps))  # P(loss = +ε)
    exact_rr = math.log(p**alpha * (1 - p) ** (1 - alpha) + (1 - p) ** alpha * p ** (1 - alpha))
    assert pure_rdp(alpha, eps) == pytest.approx(exact_rr / (alpha - 1), rel=1e-12)
    assert laplace_rdp(alpha, eps) < pure_rdp(alpha, eps)  # so Laplace's would undercount
    k = ORDERS.index(min(ORDERS, key=lambda a: abs(a - 4)))
    assert rdp_curve(GeometricEvent(2.0, 1.0))[k] == pure_rdp(ORDERS[k], 0.5)


def _oracle_rdp(events: Sequence[PrivacyEvent]) -> np.ndarray:
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    acc = rdp.RdpAccountant(orders=list(ORDERS))
    acc.compose(dp_event.ComposedDpEvent([e.dp_accounting() for e in events]))
    return np.asarray(acc._rdp), acc


@pytest.mark.parametrize(
    "events",
    [
        [GaussianEvent(20.0, 1.0)] * 5,
        [LaplaceEvent(50.0, 1.0)] * 7,
        [GaussianEvent(30.0, 2.0), LaplaceEvent(10.0, 1.0), GaussianEvent(5.0, 1.0)],
        [RepeatedEvent(LaplaceEvent(100.0, 1.0), 40), RepeatedEvent(GaussianEvent(80.0, 1.0), 60)],
    ],
)
def test_curves_and_epsilon_agree_with_dp_accountings_rdp_accountant(
    events: list[PrivacyEvent],
) -> None:
    ours = np.sum([rdp_curve(e) for e in events], axis=0)
    theirs, acc = _oracle_rdp(events)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9)
    # same conversion (CKS20 Prop. 12) at one δ: within 1% of dp_accounting's ε
    delta = 1e-6
    ours_eps = rdp_epsilon(tuple(ours), tuple(delta for _ in ORDERS))
    assert ours_eps == pytest.approx(acc.get_epsilon(delta), rel=0.01)


def test_events_without_a_curve_are_named_in_the_error() -> None:
    with pytest.raises(InvalidParameterError, match=r"delta > 0 has no Renyi-DP curve"):
        rdp_curve(EpsilonDeltaEvent(Fraction(1, 10), Fraction(1, 10**8)))
    with pytest.raises(InvalidParameterError, match="composition='basic'"):
        rdp_curve(Budget(Fraction(1, 10), Fraction(1, 10**8)))
    assert rdp_curve(Budget(Fraction(1, 10), Fraction(1, 10**8), rho=Fraction(1, 100)))[0] == (
        pytest.approx(ORDERS[0] / 100)
    )
    assert rdp_curve(ZCDPEvent(Fraction(1, 50)))[-1] == pytest.approx(ORDERS[-1] / 50)


# ---------------------------------------------------------------------------------
# The filter refuses exactly at its theorem's boundary
# ---------------------------------------------------------------------------------
event_strategy = st.one_of(
    st.floats(min_value=2.0, max_value=400.0).map(lambda s: GaussianEvent(s, 1.0)),
    st.floats(min_value=2.0, max_value=400.0).map(lambda s: LaplaceEvent(s, 1.0)),
    st.floats(min_value=2.0, max_value=400.0).map(lambda s: GeometricEvent(s, 1.0)),
)


def _expected_refusal(events: Sequence[PrivacyEvent], budget: Budget) -> bool:
    """The theorem's condition, recomputed independently of the accountant's totals."""
    e, d = float(budget.epsilon_exact), float(budget.delta_exact)
    shares = delta_shares(budget.epsilon_exact, budget.delta_exact)
    assert math.isclose(sum(shares), d, rel_tol=1e-12)
    total = np.sum([rdp_curve(x) for x in events], axis=0)
    return not any(
        _cks_epsilon(a, r, s) <= e * (1 - 1e-6) for a, r, s in zip(ORDERS, total, shares)
    )


@settings(max_examples=80, deadline=None)
@given(st.lists(event_strategy, min_size=1, max_size=40))
def test_rdp_filter_refuses_when_neither_branch_certifies_the_history(
    events: list[PrivacyEvent],
) -> None:
    f = RenyiFilter.for_budget(BUDGET)
    refused = f.would_exceed(events[:-1], events[-1])
    expected = _expected_refusal(events, BUDGET)
    if refused != expected:
        # only within the filter's float safety margins (10⁻⁹ relative) of the boundary
        total = np.sum([rdp_curve(x) for x in events], axis=0)
        eps = rdp_epsilon(tuple(total), delta_shares(1, Fraction(1, 10**6)))
        assert abs(eps - 1) < 1e-5 or not refused
    else:
        assert refused is expected


def test_rdp_filter_admits_the_boundary_and_not_one_release_past() -> None:
    f = RenyiFilter.for_budget(BUDGET)
    # Gaussians of ρ each: Σ ρ·α within B(α) at the best order, 482 at σ = 100
    event = GaussianEvent(100.0, 1.0)
    assert not f.would_exceed([], RepeatedEvent(event, 482))
    assert f.would_exceed([], RepeatedEvent(event, 483))
    rule = _Rule("rdp", BUDGET)
    best = max(range(len(ORDERS)), key=lambda k: rule.rdp_budget[k] / ORDERS[k])
    rho_cap = rule.rdp_budget[best] / ORDERS[best]  # the largest total ρ the best order admits
    assert not f.would_exceed([], ZCDPEvent(Fraction(rho_cap * (1 - 1e-6))))
    assert f.would_exceed([], ZCDPEvent(Fraction(rho_cap * (1 + 1e-6))))
    assert f.adaptive_valid and isinstance(f, PrivacyFilter) and f.name == "rdp"


def test_refusals_for_releases_without_a_curve_and_for_pure_budgets() -> None:
    f = RenyiFilter.for_budget(BUDGET)
    assert f.would_exceed([], EpsilonDeltaEvent(Fraction(1, 1000), Fraction(1, 10**9)))
    assert f.would_exceed([GaussianEvent(1000.0, 1.0)], Budget(Fraction(1, 1000), 10**-9))
    assert not f.would_exceed([], Budget(Fraction(1, 2)))  # pure: the Rényi branch
    with pytest.raises(
        InvalidParameterError, match="composition='rdp' needs a budget with delta > 0"
    ):
        filter_for("rdp", Budget(1))


# counts at (1, 1e-6), one release per query of sensitivity 1; the PLD
# counts (fixed sequences, not adaptive-valid) are 22/140/560/2241 (Gaussian)
# and 26/144/564/2247 (Laplace); zcdp's are 19/121/487/1948 for both.
RDP_COUNTS = {20.0: (19, 22), 50.0: (120, 124), 100.0: (482, 487), 200.0: (1928, 1935)}


def _affordable(f: RenyiFilter, event: PrivacyEvent) -> int:
    low, high = 0, 1
    while not f.would_exceed([], RepeatedEvent(event, high)):
        low, high = high, 2 * high
    while high - low > 1:
        mid = (low + high) // 2
        if f.would_exceed([], RepeatedEvent(event, mid)):
            high = mid
        else:
            low = mid
    return low


@pytest.mark.parametrize("scale", sorted(RDP_COUNTS))
def test_counts_affordable_at_one_and_one_in_a_million(scale: float) -> None:
    f = RenyiFilter.for_budget(BUDGET)
    gaussian, laplace = RDP_COUNTS[scale]
    assert _affordable(f, GaussianEvent(scale, 1.0)) == gaussian
    assert _affordable(f, LaplaceEvent(scale, 1.0)) == laplace
    # one at a time, as an interactive session charges them: the same count
    history: list[PrivacyEvent] = [GaussianEvent(scale, 1.0)] * (gaussian - 1)
    assert not f.would_exceed(history, GaussianEvent(scale, 1.0))
    assert f.would_exceed([*history, GaussianEvent(scale, 1.0)], GaussianEvent(scale, 1.0))
    # within 1.2 % of zcdp (the union over orders costs a little), far above basic
    rho_budget = filter_for("zcdp", BUDGET).rho_budget  # type: ignore[union-attr]
    zcdp_count = int(rho_budget * 2 * Fraction(scale) ** 2)
    assert min(gaussian, laplace) >= 0.988 * zcdp_count
    assert laplace >= int(scale)


# ---------------------------------------------------------------------------------
# The accountant with composition="rdp"
# ---------------------------------------------------------------------------------
def test_accountant_charges_through_the_rdp_filter() -> None:
    acc = Accountant(BUDGET, composition="rdp")
    assert isinstance(acc.privacy_filter, RenyiFilter) and acc.privacy_filter.adaptive_valid
    charged = 0
    with pytest.raises(BudgetExceededError, match=r"composition='rdp'"):
        for i in range(200):
            acc.charge(Fraction(1, 50), f"q{i}", event=LaplaceEvent(50.0, 1.0))
            charged += 1
    assert charged == RDP_COUNTS[50.0][1]
    spent = acc.spent
    assert spent.delta_exact == BUDGET.delta_exact and 0.99 < spent.epsilon <= 1
    assert not acc.can_afford(Budget(Fraction(1, 1000), Fraction(1, 10**9)))


def test_accountant_refuses_a_cost_without_a_curve_before_the_filter() -> None:
    acc = Accountant(BUDGET, composition="rdp")
    with pytest.raises(InvalidParameterError) as info:
        acc.charge(Budget(Fraction(1, 1000), Fraction(1, 10**9)), "an (epsilon, delta) release")
    assert str(info.value) == (
        "this accountant composes by Renyi DP (composition='rdp'), but the cost ε=0.001, "
        "δ=1e-09 has delta > 0 and no rho, so no Renyi curve; give the release's zCDP rho "
        "(Budget(epsilon, delta, rho=...)), or use an accountant with composition='basic'."
    )
    assert acc.history == ()


def test_an_rdp_ledger_reopens_with_its_rule_and_history(tmp_path: Path) -> None:
    path = tmp_path / "rdp.sqlite"
    acc = Accountant(BUDGET, path, composition="rdp")
    for i in range(3):
        acc.charge(Fraction(1, 50), f"q{i}", event=LaplaceEvent(50.0, 1.0))
    again = Accountant.from_ledger(path)
    assert again.composition == "rdp" and isinstance(again.privacy_filter, RenyiFilter)
    assert again.spent == acc.spent and again.remaining == acc.remaining


def test_spent_reports_the_renyi_conversion_for_a_gaussian_session() -> None:
    rule = _Rule("rdp", BUDGET)
    acc = Accountant(BUDGET, composition="rdp")
    event = GaussianEvent(50.0, 1.0, epsilon=Fraction(1, 10), delta=Fraction(1, 10**7))
    for i in range(100):
        acc.charge(event.budget(), f"g{i}", event=event)
    total = tuple(100 * x for x in rdp_curve(event))
    expected = rdp_epsilon(total, rule.rdp_shares)
    assert float(acc.spent.epsilon_exact) == pytest.approx(expected, rel=1e-6)
    assert acc.spent.epsilon_exact < 1


# ---------------------------------------------------------------------------------
# Audit: an adaptive analyst against the filter, on neighbouring datasets
# ---------------------------------------------------------------------------------
class _LetsMoreThrough:
    """A deliberately broken filter: admits ``extra`` releases past the first refusal."""

    name = "broken"
    adaptive_valid = True

    def __init__(self, inner: RenyiFilter, extra: int) -> None:
        self.inner, self.extra = inner, extra

    def would_exceed(self, history: Sequence[PrivacyEvent], next_event: PrivacyEvent) -> bool:
        # refuse only what the inner filter would refuse without the last ``extra`` releases
        seq = [*history, next_event]
        if len(seq) <= self.extra:
            return False
        return self.inner.would_exceed(seq[: -self.extra - 1], seq[-self.extra - 1])


Plan = Callable[[int, bool], PrivacyEvent]


def _transcript_losses(
    f: RenyiFilter | _LetsMoreThrough, plan: Plan, count: float, trials: int, seed: int
) -> np.ndarray:
    """The privacy loss log p(T | x)/p(T | x') of each transcript of an adaptive analyst.

    x has count 0, x' count 1 (one more row; sensitivity 1). Round i's release
    is ``plan(i, last answer > 1/2)``: its noise depends on the last answer
    (round 0 takes the cheaper one: the dearer Gaussian alone is past the budget,
    and an analyst refused at once makes the audit vacuous).
    The analyst asks until the filter refuses. Histories are few (two choices
    a round), so each decision is made once per history.
    """
    rng = np.random.default_rng(seed)
    loss = np.zeros(trials)
    active = np.ones(trials, dtype=bool)
    history = np.zeros(trials, dtype=np.int64)  # bits of past choices, with a leading 1
    history[:] = 1
    last_high = np.zeros(trials, dtype=bool)  # round 0 is the cheap release
    decided: dict[int, bool] = {}
    for i in range(60):
        codes = 2 * history + last_high
        for code in np.unique(codes[active]):
            if int(code) not in decided:
                bits = bin(int(code))[3:]
                events = [plan(k, b == "1") for k, b in enumerate(bits)]
                decided[int(code)] = f.would_exceed(events[:-1], events[-1])
        stop = np.array([decided.get(int(c), True) for c in codes])
        active &= ~stop
        if not active.any():
            break
        idx = np.flatnonzero(active)
        high = last_high[idx]
        events = {b: plan(i, b) for b in (False, True)}
        answers = np.empty(idx.size)
        for b, event in events.items():
            sel = high == b
            if isinstance(event, GaussianEvent):
                answers[sel] = count + rng.normal(0.0, event.sigma, sel.sum())
                loss[idx[sel]] += (1 - 2 * answers[sel]) / (2 * event.sigma**2)
            else:
                assert isinstance(event, LaplaceEvent)
                answers[sel] = count + rng.laplace(0.0, event.scale, sel.sum())
                a = answers[sel]
                loss[idx[sel]] += (np.abs(a - 1) - np.abs(a)) / event.scale
        history[idx] = codes[idx]
        last_high[idx] = answers > 0.5
    assert not active.any(), "the filter must stop the analyst"
    return np.round(loss, 9)


def _gaussian_plan(i: int, high: bool) -> PrivacyEvent:
    return GaussianEvent(1.0 if high else 2.0, 1.0)


def _mixed_plan(i: int, high: bool) -> PrivacyEvent:
    if i == 0:
        return LaplaceEvent(2.0, 1.0)
    return GaussianEvent(1.5 if high else 3.0, 1.0)


AUDIT_BUDGET = Budget(2, Fraction(1, 20))  # a large δ: its tail is visible in 10⁵ samples


def _audit(f: RenyiFilter | _LetsMoreThrough, plan: Plan, trials: int, seed: int) -> AuditResult:
    x = _transcript_losses(f, plan, 0.0, trials, seed)
    x_prime = _transcript_losses(f, plan, 1.0, trials, seed + 1)
    return audit_samples(x, x_prime, epsilon=2.0, delta=0.05, confidence=0.99)


def _check_audit(trials: int, seed: int) -> tuple[AuditResult, AuditResult]:
    good = RenyiFilter.for_budget(AUDIT_BUDGET)
    # Gaussian-only analyst: the Rényi orders (a union bound: three releases too
    # many are refuted)
    ok = _audit(good, _gaussian_plan, trials, seed)
    assert ok.passed, ok
    assert ok.epsilon_lower_bound > 0.8, ok  # not vacuous: the releases are seen
    broken = _audit(_LetsMoreThrough(good, 3), _gaussian_plan, trials, seed)
    assert not broken.passed, broken
    # a Laplace release first, then Gaussians chosen from the answers
    mixed = _audit(good, _mixed_plan, trials, seed)
    assert mixed.passed, mixed
    mixed_broken = _audit(_LetsMoreThrough(good, 3), _mixed_plan, trials, seed)
    assert not mixed_broken.passed, mixed_broken
    return ok, broken


def test_adaptive_analyst_stays_within_the_rdp_filters_budget() -> None:
    _check_audit(200_000, seed=3)


@pytest.mark.audit
def test_adaptive_analyst_rdp_audit_large() -> None:
    ok, broken = _check_audit(2_000_000, seed=5)
    assert ok.epsilon_lower_bound > 1.1, ok
    assert broken.epsilon_lower_bound > 2.2, broken
