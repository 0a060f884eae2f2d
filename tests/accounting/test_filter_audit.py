"""Audit of the privacy filter under adaptively chosen queries, through the Accountant itself.

Claim checked: a session whose accountant composes by ``"zcdp"`` or ``"rdp"``
(both adaptive-valid filters, docs/accounting.md) is (ε_B, δ_B)-DP as a whole
even when the analyst picks each next query's noise (a Gaussian σ, or Laplace
versus Gaussian) from the previous noisy answers and asks until the accountant
refuses. The analyst here knows every row but one: x has a count of 0, its
neighbour x' a count of 1 (one more row; sensitivity 1).

Each round's release is charged to a real :class:`~dpkit.accounting.Accountant`
exactly as a session charges it (a Gaussian step: ``Budget(ε', δ_B, rho=ρ)``
with ε' the zCDP conversion at δ_B, its ``GaussianEvent``; a Laplace step: its
``LaplaceEvent``); the first refusal ends the transcript. The statistic audited
is the transcript's privacy loss log p(T | x)/p(T | x') under the noise actually
drawn: the analyst's most powerful test. :func:`dpkit.audit.audit_samples`
bounds the ε it shows from below (Clopper–Pearson, 99 %) at the budget's δ; the
bound must not pass ε_B. Two deliberately broken variants must be refuted:

* an accountant that ignores the last charges (it judges each request against
  the history without its last two releases: two releases too many get through;
  one too many is within what 10⁵ transcripts can resolve at this δ);
* noise half as large as charged (the accountant is charged σ, the answer gets σ/2).

A large δ_B (1/20) keeps δ's tail visible in 10⁵ transcripts.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

from dpkit.accounting import Accountant, Budget
from dpkit.accounting.composition import zcdp_to_dp
from dpkit.accounting.events import GaussianEvent, LaplaceEvent, PrivacyEvent
from dpkit.audit import AuditResult, audit_samples
from dpkit.errors import BudgetExceededError

BUDGET = Budget(2, Fraction(1, 20))
MAX_ROUNDS = 40  # the filter stops every analyst below: asserted

#: round number, "the last answer looked like x'" -> the next release's event
Plan = Callable[[int, bool], PrivacyEvent]


def gaussian_step(sigma: float) -> GaussianEvent:
    """A Gaussian count as a session charges it (shared design): ρ = 1/(2σ²), (ε', δ_B)."""
    rho = 1 / (2 * Fraction(sigma) ** 2)
    charge = zcdp_to_dp(rho, BUDGET.delta_exact)
    return GaussianEvent(sigma, 1.0, charge.epsilon_exact, BUDGET.delta_exact, rho)


def sigma_plan(i: int, high: bool) -> PrivacyEvent:
    """Less noise when the last answer looked like the neighbour's count."""
    return gaussian_step(1.5 if high else 3.0)


def mixed_plan(i: int, high: bool) -> PrivacyEvent:
    """A Laplace count first, then Laplace or Gaussian depending on the last answer."""
    if i == 0:
        return LaplaceEvent(2.0, 1.0)
    return LaplaceEvent(2.5, 1.0) if high else gaussian_step(2.0)


class Decider:
    """Whether the accountant admits the next release after a history of releases.

    Every history is charged to a fresh in-memory :class:`Accountant` (the
    session's own object, its filter included); decisions are remembered per
    (history, next release), as histories are few (two choices a round).
    ``forget``: the broken accountant, blind to the history's last ``forget`` charges.
    """

    def __init__(self, rule: str, plan: Plan, *, forget: int = 0) -> None:
        self.rule, self.plan, self.forget = rule, plan, forget
        self.memo: dict[str, bool] = {}

    def admits(self, choices: str) -> bool:
        """``choices``: one bit per round so far and the next ("1": last answer high)."""
        if choices not in self.memo:
            events = [self.plan(k, b == "1") for k, b in enumerate(choices)]
            history, nxt = events[:-1], events[-1]
            history = history[: len(history) - self.forget]
            acc = Accountant(BUDGET, composition=self.rule)  # type: ignore[arg-type]
            try:
                for k, e in enumerate([*history, nxt]):
                    acc.charge(e.budget(), f"round {k}", event=e)
            except BudgetExceededError:
                self.memo[choices] = False
            else:
                self.memo[choices] = True
        return self.memo[choices]


def transcript_losses(
    decider: Decider, count: float, trials: int, seed: int, *, noise_factor: float = 1.0
) -> np.ndarray:
    """The privacy loss log p(T | x)/p(T | x') of each transcript, with the noise drawn.

    ``noise_factor``: the noise added is this times the charged noise (1: as
    charged; 1/2: the broken mechanism). The loss uses the noise actually drawn.
    """
    rng = np.random.default_rng(seed)
    loss = np.zeros(trials)
    active = np.ones(trials, dtype=bool)
    codes = np.ones(trials, dtype=np.int64)  # past choices as bits after a leading 1
    high = np.ones(trials, dtype=bool)  # the first round's choice: as if high
    for i in range(MAX_ROUNDS):
        nxt = 2 * codes + high
        for code in np.unique(nxt[active]):
            if not decider.admits(bin(int(code))[3:]):
                active &= nxt != code
        if not active.any():
            return np.round(loss, 9)
        groups = [(c, np.flatnonzero(active & (high == c))) for c in (False, True)]
        for choice, sel in groups:  # chosen before any answer of this round is drawn
            if sel.size == 0:
                continue
            event = decider.plan(i, choice)
            if isinstance(event, GaussianEvent):
                sigma = event.sigma * noise_factor
                answers = count + rng.normal(0.0, sigma, sel.size)
                loss[sel] += (1 - 2 * answers) / (2 * sigma**2)
            else:
                assert isinstance(event, LaplaceEvent)
                scale = event.scale * noise_factor
                answers = count + rng.laplace(0.0, scale, sel.size)
                loss[sel] += (np.abs(answers - 1) - np.abs(answers)) / scale
            high[sel] = answers > 0.5
        codes[active] = nxt[active]
    raise AssertionError("the accountant must stop the analyst within MAX_ROUNDS")


def audit(
    rule: str,
    plan: Plan,
    trials: int,
    seed: int,
    *,
    forget: int = 0,
    noise_factor: float = 1.0,
) -> AuditResult:
    decider = Decider(rule, plan, forget=forget)
    x = transcript_losses(decider, 0.0, trials, seed, noise_factor=noise_factor)
    x_prime = transcript_losses(decider, 1.0, trials, seed + 1, noise_factor=noise_factor)
    return audit_samples(
        x,
        x_prime,
        epsilon=float(BUDGET.epsilon_exact),
        delta=float(BUDGET.delta_exact),
        confidence=0.99,
    )


def _check(rule: str, plan: Plan, trials: int, seed: int) -> tuple[AuditResult, ...]:
    good = audit(rule, plan, trials, seed)
    assert good.passed, good
    halved = audit(rule, plan, trials, seed, noise_factor=0.5)
    assert not halved.passed, halved
    return good, halved


@pytest.mark.parametrize("rule", ["zcdp", "rdp"])
@pytest.mark.parametrize("plan", [sigma_plan, mixed_plan], ids=["sigma", "mixed"])
def test_an_adaptive_analyst_stays_within_the_accountants_budget(rule: str, plan: Plan) -> None:
    _check(rule, plan, 50_000, seed=21)


@pytest.mark.parametrize("rule", ["zcdp", "rdp"])
def test_an_accountant_blind_to_its_last_charges_is_refuted(rule: str) -> None:
    """Two Gaussian releases past the filter's stop show in the transcript's privacy loss."""
    broken = audit(rule, sigma_plan, 100_000, seed=21, forget=2)
    assert not broken.passed, broken


def test_the_analyst_really_adapts_and_the_accountant_really_stops_it() -> None:
    """Transcripts differ in length and noise with the answers, and every one ends in a refusal."""
    for rule in ("zcdp", "rdp"):
        decider = Decider(rule, sigma_plan)
        transcript_losses(decider, 0.0, 2_000, seed=1)
        lengths = {len(k) - 1 for k, admitted in decider.memo.items() if not admitted}
        assert len(lengths) > 1, (rule, lengths)  # the stopping time depends on the answers


@pytest.mark.audit
@pytest.mark.parametrize("rule", ["zcdp", "rdp"])
@pytest.mark.parametrize("plan", [sigma_plan, mixed_plan], ids=["sigma", "mixed"])
def test_adaptive_filter_audit_large(rule: str, plan: Plan) -> None:
    _, halved = _check(rule, plan, 2_000_000, seed=33)
    assert halved.epsilon_lower_bound > float(BUDGET.epsilon_exact) * 1.2, halved
    if plan is sigma_plan:
        broken = audit(rule, plan, 2_000_000, seed=33, forget=2)
        assert not broken.passed, broken
