"""Accounting benchmark: how many releases a budget of (ε, δ) = (1, 10⁻⁶) affords.

Run: ``.venv/bin/python benchmarks/accounting.py`` (about a minute). For Gaussian
noise σ ∈ {20, 50, 100, 200} and Laplace scales {20, 50, 100, 200} (sensitivity
1), the number of identical releases each of dpkit's composition rules admits,
against Google's ``dp_accounting`` (RDP and PLD accountants) in the same run:

* basic: dpkit's ``composition="basic"``. Gaussian releases are charged
  (ε/k, δ/k)-style: each at δᵢ = δ/k and the smallest εᵢ the analytic Gaussian
  (Balle & Wang 2018) proves at δᵢ, for the largest k that fits.
* zCDP: dpkit's ``composition="zcdp"`` (ρ = Δ²/2σ², Laplace ε²/2; ρ_B by CKS20);
  dp_accounting: its RDP accountant.
* RDP filter: dpkit's ``composition="rdp"`` (adaptive-valid: Rényi orders with a
  union bound), ``Accountant.affordable``.
* PLD: dpkit's ``composition="pld"`` (dpkit.accounting.pld), the count found by
  binary search on self-composition and then confirmed by charging that many
  events one by one through the rule (one composition per charge, timed);
  dp_accounting: its PLD accountant.

Rows "discrete Gaussian" are what a session with ``noise="gaussian"`` charges for a
count (σ² = s², sensitivity 1, ρ = 1/(2s²), charged at δ = 10⁻⁶); their "basic"
column is what the same session affords today (geometric noise at ε = 1/σ, basic
composition: σ answers); dp_accounting has
no discrete Gaussian event, so its column composes its
``from_discrete_gaussian_mechanism`` PLD (connect the dots) directly.

Floors (issue 29): PLD within 1% of dp_accounting's; PLD ≥ 10× basic for
Gaussian σ ≥ 100. Writes the table to ``benchmarks/results/accounting.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpkit.accounting import Accountant, Budget
from dpkit.accounting.composition import _Rule, _Totals, event_rho, zcdp_to_dp
from dpkit.accounting.events import DiscreteGaussianEvent, GaussianEvent, LaplaceEvent
from dpkit.accounting.pld import largest_count
from dpkit.mechanisms.gaussian import DiscreteGaussian, analytic_delta

Event = GaussianEvent | LaplaceEvent | DiscreteGaussianEvent

BUDGET = Budget(1, Fraction(1, 10**6))
SCALES = (20.0, 50.0, 100.0, 200.0)
RESULTS = Path(__file__).parent / "results" / "accounting.md"


def _largest(fits: Callable[[int], bool], limit: int = 1_000_000) -> int:
    """The largest k ≥ 0 with fits(k), for a monotone predicate (doubling, then bisection)."""
    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, 2 * high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _gaussian_epsilon(sigma: float, delta: float) -> float:
    """The smallest ε (bisection, rounded up) at which N(0, σ²) on Δ = 1 is (ε, δ)-DP."""
    low, high = 0.0, 50.0
    for _ in range(80):
        mid = (low + high) / 2
        low, high = (low, mid) if analytic_delta(sigma, 1.0, mid) <= delta else (mid, high)
    return high


def _charged(event: GaussianEvent) -> GaussianEvent:
    b = zcdp_to_dp(event.proven_rho(), Fraction(1, 10**9))
    return GaussianEvent(
        event.sigma, event.sensitivity, epsilon=b.epsilon_exact, delta=b.delta_exact
    )


def basic_count(event: GaussianEvent | LaplaceEvent) -> int:
    rule = _Rule("basic", BUDGET)
    if isinstance(event, LaplaceEvent):
        cost = event.budget()
        return _largest(lambda k: rule.admits(_Totals.of([cost] * k)))

    def fits(k: int) -> bool:
        delta = BUDGET.delta_exact / k
        cost = Budget(_gaussian_epsilon(event.sigma, float(delta)), delta)
        return rule.admits(_Totals.of([cost] * k))

    return _largest(fits)


def zcdp_count(event: Event) -> int:
    rule = _Rule("zcdp", BUDGET)
    rho = event_rho(event)
    assert rule.rho_budget is not None and rho is not None
    return int(rule.rho_budget // rho)


def rdp_count(event: Event) -> int:
    def fits(k: int) -> bool:
        acc = rdp_privacy_accountant.RdpAccountant()
        acc.compose(event.dp_accounting(), k)
        return acc.get_epsilon(float(BUDGET.delta_exact)) <= 1.0

    return _largest(fits)


def dp_accounting_pld_count(event: Event) -> int:
    if isinstance(event, DiscreteGaussianEvent):
        from dp_accounting.pld import privacy_loss_distribution as pld

        one = pld.from_discrete_gaussian_mechanism(
            event.sigma, sensitivity=1, value_discretization_interval=1e-4, use_connect_dots=True
        )
        return _largest(
            lambda k: one.self_compose(k).get_epsilon_for_delta(float(BUDGET.delta_exact)) <= 1.0
        )

    def fits(k: int) -> bool:
        acc = pld_privacy_accountant.PLDAccountant()
        acc.compose(event.dp_accounting(), k)
        return acc.get_epsilon(float(BUDGET.delta_exact)) <= 1.0

    return _largest(fits)


def rdp_filter_count(event: Event) -> int:
    """dpkit's adaptive-valid rule: how many the "rdp" accountant admits."""
    return int(Accountant(BUDGET, composition="rdp").affordable(event.budget(), event))


def pld_count(event: Event) -> tuple[int, float]:
    """dpkit's PLD count, confirmed by charging one by one; and seconds per 1,000 charges."""
    count = largest_count(event, BUDGET)
    rule = _Rule("pld", BUDGET)
    cost = event.budget()
    totals = _Totals()
    start = time.perf_counter()
    admitted = 0
    while admitted <= count and rule.admits(nxt := totals.plus(cost, event)):
        totals, admitted = nxt, admitted + 1
    per_thousand = (time.perf_counter() - start) / max(admitted, 1) * 1000
    assert admitted == count, (event, admitted, count)
    return count, per_thousand


def main() -> None:
    started = time.perf_counter()
    rows = []
    floors_ok = True
    events: list[tuple[str, Event]] = (
        [(f"Gaussian σ = {s:g}", _charged(GaussianEvent(s, 1.0))) for s in SCALES]
        + [(f"Laplace scale {s:g}", LaplaceEvent(s, 1.0)) for s in SCALES]
        + [
            (
                f"discrete Gaussian σ = {s:g} (a session's count)",
                DiscreteGaussian.from_rho(Fraction(1, int(2 * s * s)), delta=1e-6).event,
            )
            for s in SCALES
        ]
    )
    for name, event in events:
        # a session's count today: geometric noise of scale σ (ε = 1/σ), basic composition
        basic = (
            basic_count(event) if not isinstance(event, DiscreteGaussianEvent) else int(event.sigma)
        )
        zcdp, rdp, ours = zcdp_count(event), rdp_count(event), rdp_filter_count(event)
        (pld, per_thousand), theirs = pld_count(event), dp_accounting_pld_count(event)
        within = abs(pld - theirs) <= 0.01 * theirs
        gain = pld / basic if basic else math.inf
        big = isinstance(event, GaussianEvent) and event.sigma >= 100
        ok = within and (gain >= 10 if big else True)
        floors_ok &= ok
        rows.append(
            f"| {name} | {basic:,} | {zcdp:,} | {ours:,} | {rdp:,} | {pld:,} | {theirs:,} | "
            f"{gain:.1f}× | {per_thousand:.2f} s | {'yes' if ok else 'NO'} |"
        )
    head = [
        f"## Releases affordable at (ε, δ) = (1, 1e-6), sensitivity 1 "
        f"(dp_accounting in the same run; {time.perf_counter() - started:.0f} s)",
        "",
        "| release | basic | zCDP (dpkit) | RDP filter (dpkit, adaptive) | RDP (dp_accounting) | "
        "PLD (dpkit) | PLD (dp_accounting) | PLD / basic | dpkit PLD: 1,000 charges | floors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    text = "\n".join([*head, *rows]) + "\n"
    text += (
        "\nFloors: dpkit's PLD count within 1% of dp_accounting's; PLD ≥ 10× basic for "
        f"Gaussian σ ≥ 100: {'met' if floors_ok else 'NOT met'}.\n"
    )
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
