"""``Accountant.affordable``: how many more charges of one kind the budget admits, before spending.

Checked here: the count is exactly what charging one by one gives (that many
charges succeed, the next is refused) for every composition rule, for Laplace,
Gaussian and mixed events, after mixed histories and parallel scopes; every
rule is monotone in the number of copies (hypothesis), which the search relies
on; the one-step k-fold totals equal k successive charges on every exact sum;
other processes' charges count; nothing is charged; invalid input fails as
:meth:`Accountant.charge` fails.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.accounting import Accountant, Budget
from dpkit.accounting.accountant import _largest_admitted
from dpkit.accounting.composition import (
    COMPOSITION_RULES,
    _repeated_sum,
    _Totals,
    zcdp_to_dp,
)
from dpkit.accounting.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    GeometricEvent,
    LaplaceEvent,
    PrivacyEvent,
    ZCDPEvent,
)
from dpkit.accounting.filters import filter_for
from dpkit.errors import BudgetExceededError, InvalidParameterError

DELTA = Fraction(1, 10**6)
BUDGET = Budget(1, DELTA)


def gaussian(sigma: float, delta: Fraction = DELTA / 20) -> GaussianEvent:
    """A Gaussian release (sensitivity 1) charged as its zCDP conversion at ``delta``."""
    rho = Fraction(1) / (2 * Fraction(sigma) ** 2)
    eps = zcdp_to_dp(rho, delta).epsilon_exact
    return GaussianEvent(sigma, 1.0, epsilon=eps, delta=delta, rho=rho)


LAPLACE = LaplaceEvent(12.0, 1.0)
GAUSS = gaussian(20.0)
MIXED = ComposedEvent((LaplaceEvent(40.0, 1.0), gaussian(30.0)))
EVENTS = {"laplace": LAPLACE, "gaussian": GAUSS, "mixed": MIXED}
HISTORIES: dict[str, list[PrivacyEvent]] = {
    "empty": [],
    "mixed": [LaplaceEvent(25.0, 1.0), gaussian(40.0), GeometricEvent(30.0, 2.0)],
}


def _charge_until_refused(acc: Accountant, event: PrivacyEvent, cap: int = 400) -> int:
    for n in range(cap):
        try:
            acc.charge(event.budget(), f"q{n}", event=event)
        except BudgetExceededError:
            return n
    raise AssertionError(f"still admitted after {cap} charges")


@pytest.mark.parametrize("history", HISTORIES, ids=str)
@pytest.mark.parametrize("kind", EVENTS, ids=str)
@pytest.mark.parametrize("rule", COMPOSITION_RULES)
def test_exactly_that_many_charges_succeed_and_the_next_is_refused(
    rule: str, kind: str, history: str
) -> None:
    event = EVENTS[kind]
    acc = Accountant(BUDGET, composition=rule)  # type: ignore[arg-type]
    for i, past in enumerate(HISTORIES[history]):
        acc.charge(past.budget(), f"past {i}", event=past)
    charges, left = len(acc.history), acc.remaining
    n = acc.affordable(event.budget(), event)
    # nothing charged, nothing changed
    assert len(acc.history) == charges and acc.remaining == left and not acc.refusals
    assert acc.affordable(event.budget(), event, limit=2) == min(n, 2)
    assert acc.affordable(event.budget(), event, limit=0) == 0
    assert _charge_until_refused(acc, event) == n
    assert acc.affordable(event.budget(), event) == 0


def test_the_counts_are_the_ones_each_rule_is_known_for() -> None:
    """Gaussian σ = 20 at (1, 1e-6): 19 under zCDP, 22 by PLD (issue 29's table); Laplace 12: 12."""
    sigma20 = gaussian(20.0, DELTA)
    counts = {
        rule: Accountant(BUDGET, composition=rule).affordable(sigma20.budget(), sigma20)  # type: ignore[arg-type]
        for rule in ("basic", "zcdp", "pld")
    }
    assert counts == {"basic": 1, "zcdp": 19, "pld": 22}
    assert Accountant(BUDGET).affordable(LAPLACE.budget(), LAPLACE) == 12
    assert Accountant(Budget(1)).affordable(Budget(0)) == 1_000_000  # free releases: the limit


def test_after_a_parallel_scope_the_count_still_matches_charging() -> None:
    for rule in ("basic", "zcdp", "pld"):
        acc = Accountant(BUDGET, composition=rule)  # type: ignore[arg-type]
        acc.charge_parallel(
            {"a": Budget(Fraction(1, 10)), "b": Budget(Fraction(1, 20))}, "per region"
        )
        n = acc.affordable(LAPLACE.budget(), LAPLACE)
        assert n > 0
        assert _charge_until_refused(acc, LAPLACE) == n


def test_other_processes_charges_count(tmp_path: Path) -> None:
    path = tmp_path / "shared.dpkit-ledger"
    mine = Accountant(BUDGET, path, composition="zcdp", dataset="d")
    other = Accountant(BUDGET, path, composition="zcdp", dataset="d")
    before = mine.affordable(GAUSS.budget(), GAUSS)
    for i in range(3):
        other.charge(GAUSS.budget(), f"elsewhere {i}", event=GAUSS)
    assert mine.affordable(GAUSS.budget(), GAUSS) == before - 3
    mine.close()
    other.close()


def test_invalid_input_fails_as_charge_fails() -> None:
    acc = Accountant(BUDGET, composition="zcdp")
    no_rho = Budget(Fraction(1, 10), Fraction(1, 10**8))
    for call in (lambda: acc.charge(no_rho, "q"), lambda: acc.affordable(no_rho)):
        with pytest.raises(InvalidParameterError, match="has delta > 0 and no rho"):
            call()
    with pytest.raises(InvalidParameterError, match="they must be the same amount"):
        acc.affordable(Budget(Fraction(1, 2)), LAPLACE)
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(InvalidParameterError, match="limit must be a whole number"):
            acc.affordable(LAPLACE.budget(), LAPLACE, limit=bad)  # type: ignore[arg-type]
    assert not acc.history and not acc.refusals


def test_the_search_finds_the_boundary_with_logarithmically_many_checks() -> None:
    for limit in (0, 1, 2, 7, 1000, 10**6):
        for answer in (0, 1, 2, 3, 5, 64, 65, 999, 10**6):
            calls: list[int] = []

            def admits(k: int, answer: int = answer, calls: list[int] = calls) -> bool:
                calls.append(k)
                return k <= answer

            assert _largest_admitted(admits, limit) == min(answer, limit)
            assert len(calls) <= 2 * max(limit, 1).bit_length() + 2
            assert all(1 <= k <= limit for k in calls)


# ------------------------------------------------------------------ property tests
_amount = st.fractions(Fraction(1, 1000), Fraction(1, 2), max_denominator=1000)
_scale = st.floats(2.0, 400.0, allow_nan=False)
_event = st.one_of(
    st.builds(LaplaceEvent, _scale, st.just(1.0)),
    st.builds(GeometricEvent, _scale, st.sampled_from([1.0, 2.0])),
    st.builds(lambda s: gaussian(s), st.floats(3.0, 400.0)),
    st.builds(lambda e: EpsilonDeltaEvent(e), _amount),
    st.builds(
        lambda r: ZCDPEvent(r, zcdp_to_dp(r, DELTA).epsilon_exact, DELTA),
        _amount.map(lambda a: a / 100),
    ),
)
_FAST_RULES = tuple(r for r in COMPOSITION_RULES if r != "pld")


def _admits(rule: str, totals: _Totals) -> bool:
    return not filter_for(rule, BUDGET).exceeds(totals)  # type: ignore[attr-defined]


@settings(max_examples=60, deadline=None)
@given(
    history=st.lists(_event, max_size=4),
    event=_event,
    k=st.integers(1, 3000),
    rule=st.sampled_from(_FAST_RULES),
)
def test_every_rule_is_monotone_in_the_number_of_copies(
    history: list[PrivacyEvent], event: PrivacyEvent, k: int, rule: str
) -> None:
    """admits(k) implies admits(k − 1): the premise of the exponential and binary search."""
    base = _Totals()
    for past in history:
        base = base.plus(past.budget(), past)
    if _admits(rule, base.plus_copies(event.budget(), event, k)):
        assert _admits(rule, base.plus_copies(event.budget(), event, k - 1))


@settings(max_examples=8, deadline=None)
@given(event=st.sampled_from([LAPLACE, GAUSS, MIXED, LaplaceEvent(3.0, 1.0)]), k=st.integers(2, 60))
def test_the_pld_rule_is_monotone_in_the_number_of_copies(event: PrivacyEvent, k: int) -> None:
    base = _Totals().plus(gaussian(25.0).budget(), gaussian(25.0))
    if _admits("pld", base.plus_copies(event.budget(), event, k)):
        assert _admits("pld", base.plus_copies(event.budget(), event, k - 1))


@settings(max_examples=40, deadline=None)
@given(history=st.lists(_event, max_size=3), event=_event, k=st.integers(0, 12))
def test_k_copies_at_once_are_k_charges_on_every_exact_sum(
    history: list[PrivacyEvent], event: PrivacyEvent, k: int
) -> None:
    base = _Totals()
    for past in history:
        base = base.plus(past.budget(), past)
    one_by_one = base
    for _ in range(k):
        one_by_one = one_by_one.plus(event.budget(), event)
    at_once = base.plus_copies(event.budget(), event, k)
    assert at_once == one_by_one  # every compared field: the exact sums and counts
    assert at_once.rdp == one_by_one.rdp  # the float Rényi sums, bit for bit
    fast = base.plus_copies(event.budget(), event, k, exact_floats=False)
    assert fast.rdp == pytest.approx(one_by_one.rdp, rel=1e-12, abs=1e-300)


_start = st.one_of(
    st.sampled_from([0.0, 5e-324, 1e-310, 0.1, 0.5, 1.0, 3.0, 1e300, math.inf]),
    st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
)
_step = st.one_of(
    st.sampled_from([0.0, 5e-324, 1e-17, 0.1, 0.375, 1 / 3, 2.0**-30 * 3, 1e300, math.inf]),
    st.floats(0, 100, allow_nan=False, allow_infinity=False),
    st.floats(1e-12, 1e-3),
)


@settings(max_examples=300, deadline=None)
@given(start=_start, step=_step, count=st.integers(0, 3000))
def test_repeated_sum_is_count_float_additions_bit_for_bit(
    start: float, step: float, count: int
) -> None:
    expected = start
    for _ in range(count):
        expected += step
    got = _repeated_sum(start, step, count)
    assert got == expected or (math.isnan(got) and math.isnan(expected))


@settings(max_examples=15, deadline=None)
@given(
    history=st.lists(_event, max_size=3),
    event=_event,
    rule=st.sampled_from(_FAST_RULES),
)
def test_the_count_is_what_charging_gives_for_any_history_and_event(
    history: list[PrivacyEvent], event: PrivacyEvent, rule: str
) -> None:
    acc = Accountant(BUDGET, composition=rule)  # type: ignore[arg-type]
    for i, past in enumerate(history):
        if not acc.can_afford(past.budget()):
            break
        try:
            acc.charge(past.budget(), f"past {i}", event=past)
        except (BudgetExceededError, InvalidParameterError):
            break  # e.g. a cost the rule refuses outright
    try:
        n = acc.affordable(event.budget(), event, limit=120)
    except InvalidParameterError:
        with pytest.raises(InvalidParameterError):
            acc.charge(event.budget(), "refused outright", event=event)
        return
    admitted = 0
    while admitted < n + 1:  # n charges, then one more: refused unless n is the limit
        try:
            acc.charge(event.budget(), f"q{admitted}", event=event)
        except BudgetExceededError:
            break
        admitted += 1
    assert admitted == n or admitted == n + 1 == 121
