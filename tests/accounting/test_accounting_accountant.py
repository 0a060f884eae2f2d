"""The accountant: charges, refusals, parallel scopes and composition rules (in memory)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.accounting import (
    Accountant,
    Budget,
    ChargeRecord,
    ParallelScope,
    largest_rho,
    tightest_composition,
    zcdp_to_dp,
)
from dpkit.accounting.accountant import Composition
from dpkit.errors import BudgetExceededError, InvalidParameterError


def test_ten_charges_of_a_tenth_fit_and_the_eleventh_does_not() -> None:
    acc = Accountant(Budget(1.0))
    for i in range(10):
        acc.charge(0.1, f"query {i}")
    assert acc.spent == Budget(1.0)
    assert acc.remaining == Budget.zero()
    with pytest.raises(BudgetExceededError) as info:
        acc.charge(Budget(0.1), "one too many")
    message = str(info.value)
    assert "'one too many'" in message  # names the label
    assert "costs ε=0.1, δ=0" in message  # what was asked
    assert "only ε=0, δ=0" in message and "ε=1, δ=0" in message  # what is left, of what
    assert info.value.requested == Budget(0.1)
    assert info.value.remaining == Budget.zero()
    assert len(acc.history) == 10


def test_refusal_happens_before_the_release_reads_data() -> None:
    acc = Accountant(0.5)
    reads: list[str] = []

    def release(epsilon: float, label: str) -> str:
        acc.charge(epsilon, label)  # the pattern every release follows
        reads.append(label)
        return "noisy answer"

    release(0.4, "first")
    with pytest.raises(BudgetExceededError):
        release(0.2, "second")
    assert reads == ["first"]
    assert [r.label for r in acc.history] == ["first"]
    assert acc.spent == Budget(0.4)


def test_once_spent_always_refused() -> None:
    acc = Accountant(0.3)
    acc.charge(0.3, "all of it")
    for eps in (0.1, 1e-9):
        assert not acc.can_afford(eps)
        with pytest.raises(BudgetExceededError):
            acc.charge(eps, "more")
    acc.charge(Budget.zero(), "post-processing costs nothing")


def test_approximate_budget_counts_delta() -> None:
    acc = Accountant(Budget(1.0, 1e-6))
    acc.charge(Budget(0.1, 6e-7), "a")
    assert acc.can_afford(Budget(0.1, 4e-7))
    assert not acc.can_afford(Budget(0.1, 5e-7))
    assert not acc.can_afford(Budget(0.95))
    assert acc.remaining == Budget(0.9, 4e-7)


def test_history_records() -> None:
    acc = Accountant(1.0)
    rec = acc.charge(Budget(0.25), "mean age")
    assert isinstance(rec, ChargeRecord)
    assert (rec.id, rec.label, rec.cost, rec.scopes) == (1, "mean age", Budget(0.25), ())
    assert rec.timestamp.tzinfo is UTC
    assert acc.history == (rec,)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"budget": 0}, "epsilon must be > 0"),
        ({"budget": 1.0, "timeout": 0}, "timeout must be a positive number"),
        ({"budget": 1.0, "composition": "fancy"}, "composition must be one of"),
        ({"budget": 1.0, "composition": "zcdp"}, "needs a budget with delta > 0"),
        ({"budget": 1.0, "ledger": 3}, "ledger must be a file path or None"),
    ],
)
def test_invalid_accountant_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        Accountant(**kwargs)


def test_invalid_labels_and_keys() -> None:
    acc = Accountant(1.0)
    with pytest.raises(InvalidParameterError, match="label must be a non-empty string"):
        acc.charge(0.1, "")
    with pytest.raises(InvalidParameterError, match="part key must be a non-empty string"):
        acc.parallel("p").part("")
    with pytest.raises(InvalidParameterError, match="at least one cost"):
        acc.charge_parallel([], "none")
    assert acc.history == ()


# --- parallel composition ---------------------------------------------------------------
def test_parallel_scope_costs_the_max() -> None:
    acc = Accountant(1.0)
    with acc.parallel("count by region") as scope:
        for region in ("north", "south", "east"):
            scope.charge(0.5, f"count {region}")
        assert scope.cost == Budget(0.5)
    assert acc.spent == Budget(0.5)
    assert acc.history[0].scopes == (("count by region", None),)


def test_parallel_scope_refuses_a_new_max_that_overspends() -> None:
    acc = Accountant(1.0)
    acc.charge(0.4, "sequential first")
    with acc.parallel("histogram") as scope:
        scope.charge(0.5, "bin a")
        scope.charge(0.6, "bin b")  # max rises to 0.6: total 1.0, fits
        with pytest.raises(BudgetExceededError, match="'bin c' in parallel scope 'histogram'"):
            scope.charge(0.7, "bin c")  # max would be 0.7: total 1.1
        scope.charge(0.6, "bin d")  # another part at the current max is free
    assert acc.spent == Budget(1.0)
    assert [r.label for r in acc.history] == ["sequential first", "bin a", "bin b", "bin d"]


def test_a_part_is_sequential_within_and_parallel_across() -> None:
    acc = Accountant(2.0)
    with acc.parallel("by region") as scope:
        with scope.part("north") as north:
            north.charge(0.3, "count")
            north.charge(0.4, "sum")  # same rows: 0.7 for this part
        scope.charge(0.5, "count", part="south")
        scope.charge(0.1, "sum", part="south")  # 0.6 for south
        cost = scope.cost
        assert (cost.epsilon_exact, cost.delta_exact) == (Fraction(7, 10), 0)
        assert cost.rho_exact == max(Fraction(9 + 16, 200), Fraction(25 + 1, 200))  # Σ ε²/2
    acc.charge(0.2, "afterwards")
    assert acc.spent == Budget(0.9)


def test_nested_parallel_scopes() -> None:
    acc = Accountant(3.0)
    with acc.parallel("region") as regions:
        for region, eps in (("north", 0.5), ("south", 0.2)):
            part = regions.part(region)
            part.charge(0.1, f"{region} total")
            with part.parallel("age group") as ages:
                for group in ("young", "old"):
                    ages.charge(eps, f"{region} {group}")
    # north: 0.1 + max(0.5, 0.5) = 0.6; south: 0.1 + 0.2 = 0.3; region scope: 0.6
    assert acc.spent == Budget(0.6)
    assert acc.history[-1].scopes == (("region", "south"), ("age group", None))


def test_closed_scope_refuses_charges() -> None:
    acc = Accountant(1.0)
    with acc.parallel("p") as scope:
        part = scope.part("a")
        nested = part.parallel("q")
    for action in (
        lambda: scope.charge(0.1, "late"),
        lambda: part.charge(0.1, "late"),
        lambda: nested.charge(0.1, "late"),
    ):
        with pytest.raises(InvalidParameterError, match=r"scope '[pq]' is closed"):
            action()
    assert isinstance(scope, ParallelScope) and scope.closed and nested.closed
    assert acc.history == ()


def test_charge_parallel_is_all_or_nothing() -> None:
    acc = Accountant(1.0)
    records = acc.charge_parallel({"a": 0.3, "b": 0.8, "c": 0.5}, "per group")
    assert [r.label for r in records] == ["per group[a]", "per group[b]", "per group[c]"]
    assert acc.spent == Budget(0.8)
    with pytest.raises(BudgetExceededError):
        acc.charge_parallel([0.1, 0.3], "too much")  # max 0.3 > 0.2 left
    assert len(acc.history) == 3
    acc.charge_parallel([0.1, 0.2], "fits")
    assert acc.spent == Budget(1.0)


def _brute_force(records: Sequence[ChargeRecord], extra: ChargeRecord | None = None) -> Budget:
    """Recompute the total from the history by the definition (sum / max), independently."""
    items = list(records) + ([extra] if extra is not None else [])

    def sequence(recs: list[ChargeRecord], depth: int) -> tuple[Fraction, Fraction]:
        eps = delta = Fraction(0)
        scopes: dict[str, dict[str, list[ChargeRecord]]] = {}
        for r in recs:
            if len(r.scopes) == depth:
                eps, delta = eps + r.cost.epsilon_exact, delta + r.cost.delta_exact
            else:
                label, part = r.scopes[depth]
                key = part if part is not None else f"#own-{r.id}"
                scopes.setdefault(label, {}).setdefault(key, []).append(r)
        for parts in scopes.values():
            totals = [sequence(p, depth + 1) for p in parts.values()]
            eps += max(t[0] for t in totals)
            delta += max(t[1] for t in totals)
        return eps, delta

    e, d = sequence(items, 0)
    return Budget._of(e, d)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_running_total_matches_brute_force_and_refusals_are_right(data: st.DataObject) -> None:
    budget = Budget(2.0, 1e-6)
    acc = Accountant(budget)
    scopes: list[tuple[ParallelScope, tuple[tuple[str, str | None], ...]]] = []
    for step in range(data.draw(st.integers(min_value=1, max_value=30))):
        kind = data.draw(st.sampled_from(["seq", "open", "own part", "keyed part", "nest"]))
        cost = Budget(
            data.draw(st.decimals(min_value="0", max_value="0.8", places=2).map(float)),
            data.draw(st.sampled_from([0, 1e-7, 3e-7])),
        )
        label = f"c{step}"
        if kind == "open":
            scopes.append((acc.parallel(f"s{step}"), ()))
            continue
        target: ParallelScope | None = None
        part: str | None = None
        prefix: tuple[tuple[str, str | None], ...] = ()
        if kind != "seq" and scopes:
            target, path = data.draw(st.sampled_from(scopes))
            key = data.draw(st.sampled_from(["a", "b"]))
            if kind == "nest":
                scopes.append((target.part(key).parallel(f"s{step}"), (*path, (target.label, key))))
                continue
            part = key if kind == "keyed part" else None
            prefix = (*path, (target.label, part))
        before = acc.history
        hypothetical = ChargeRecord(10**9, label, cost, datetime.now(UTC), prefix)
        would_be = _brute_force(before, hypothetical)
        try:
            if target is None:
                acc.charge(cost, label)
            else:
                target.charge(cost, label, part=part)
        except BudgetExceededError:
            assert not would_be.is_within(budget)
            assert acc.history == before
        else:
            assert would_be.is_within(budget)
        assert acc.spent == _brute_force(acc.history)
        assert acc.spent.is_within(budget)


def test_threads_sharing_one_accountant_never_overspend() -> None:
    acc = Accountant(5.0)
    successes = [0] * 8

    def worker(i: int) -> None:
        for j in range(100):
            try:
                acc.charge(0.01, f"t{i}-{j}")
                successes[i] += 1
            except BudgetExceededError:
                pass

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(successes) == 500
    assert len(acc.history) == 500
    assert acc.spent == Budget(5)


# --- composition rules --------------------------------------------------------------------
def _fill(acc: Accountant, cost: Budget) -> int:
    n = 0
    while acc.can_afford(cost):
        acc.charge(cost, f"q{n}")
        n += 1
    with pytest.raises(BudgetExceededError):
        acc.charge(cost, "one more")
    return n


def test_zcdp_rule_admits_exactly_what_rho_pays_for() -> None:
    budget = Budget(1.0, 1e-6)
    rho = Fraction(2, 10**4)
    gauss = zcdp_to_dp(rho, 1e-8)  # a Gaussian release: about (0.12, 1e-8)-DP and ρ-zCDP
    basic = _fill(Accountant(budget), gauss)
    zcdp_acc = Accountant(budget, composition="zcdp")
    zcdp = _fill(zcdp_acc, gauss)
    assert basic == int(1 / gauss.epsilon_exact)
    assert zcdp == int(largest_rho(1.0, 1e-6) / rho)
    assert zcdp > 10 * basic
    spent = zcdp_acc.spent
    assert spent.rho_exact == rho * zcdp and spent.is_within(budget)
    left = zcdp_acc.remaining
    assert left.rho_exact is not None and left.rho_exact < rho
    assert left.epsilon_exact**2 / 2 <= left.rho_exact  # the pure ε it still pays for


def test_zcdp_rule_refuses_costs_without_rho() -> None:
    acc = Accountant(Budget(1.0, 1e-6), composition="zcdp")
    with pytest.raises(InvalidParameterError, match="no rho"):
        acc.charge(Budget(0.1, 1e-8), "classic gaussian")
    assert not acc.can_afford(Budget(0.1, 1e-8))
    acc.charge(0.1, "pure ones carry rho implicitly")


def test_tightest_rule_admits_more_and_stays_certified() -> None:
    budget = Budget(1.0, 1e-6)
    basic = _fill(Accountant(budget), Budget(0.01))
    acc = Accountant(budget, composition="tightest")
    tight = _fill(acc, Budget(0.01))
    assert basic == 100
    assert tight > 400
    costs = [r.cost for r in acc.history]
    assert tightest_composition(costs, 1e-6).is_within(budget)
    assert not tightest_composition([*costs, Budget(0.01)], 1e-6).is_within(budget)


def test_pure_budget_uses_exact_basic_composition_in_every_rule() -> None:
    rules: tuple[Composition, ...] = ("basic", "tightest")
    for rule in rules:
        acc = Accountant(1.0, composition=rule)
        assert _fill(acc, Budget(0.01)) == 100
        assert acc.spent == Budget(1)
