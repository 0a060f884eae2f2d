"""Privacy filters: when to stop an analyst who chooses each release after seeing the last.

An interactive analyst picks the next query, *and its privacy parameters*,
after reading earlier answers. Composition theorems that assume the list of
parameters is fixed in advance do not cover that; a **privacy filter** does
(Rogers, Roth, Ullman & Vadhan, NeurIPS 2016): a stopping rule, evaluated
before each release on the public parameters only, such that the whole
interaction is (ε_B, δ_B)-DP whatever the analyst's strategy.

Every filter here answers one question, ``would_exceed(history, next_event)``:
would admitting ``next_event`` after the releases in ``history`` leave the rule
the filter's theorem needs? The accountant asks it before any data is read and
refuses the release when the answer is yes. Each class names the theorem it
relies on; ``adaptive_valid`` says whether that theorem allows adaptively
chosen parameters. See ``docs/accounting.md``, "Adaptive composition: which
theorem each accountant relies on".

All decisions depend on public parameters only (costs, noise scales,
sensitivities), never on data; sums are exact (:class:`fractions.Fraction`).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Protocol, runtime_checkable

from dpkit.accounting.budget import Budget
from dpkit.accounting.composition import _candidates, _mu_squared, _Rule, _Totals, largest_rho
from dpkit.accounting.events import GaussianEvent, PrivacyEvent, as_event
from dpkit.accounting.gdp import gdp_delta as _gdp_delta  # noqa: F401 (tests read it here)
from dpkit.accounting.gdp import largest_mu
from dpkit.errors import InvalidParameterError

__all__ = [
    "BasicFilter",
    "FixedSequenceRule",
    "GaussianDPFilter",
    "PrivacyFilter",
    "RenyiFilter",
    "ZCDPFilter",
    "filter_for",
]


@runtime_checkable
class PrivacyFilter(Protocol):
    """A stopping rule for adaptively chosen releases (a privacy filter, [RRUV16]).

    ``would_exceed(history, next_event)`` is True when ``next_event`` must be
    refused: the sequence ``history + [next_event]`` would leave the region in
    which the filter's theorem certifies the budget. It reads public
    parameters only. ``adaptive_valid`` is False for a rule whose theorem
    needs the parameters fixed before the first release (not a filter).
    """

    name: str
    adaptive_valid: bool

    def would_exceed(
        self, history: Sequence[Budget | PrivacyEvent], next_event: Budget | PrivacyEvent
    ) -> bool: ...


def _budget_of(item: Budget | PrivacyEvent) -> Budget:
    return item if isinstance(item, Budget) else as_event(item).budget()


class _TotalsFilter:
    """A filter whose decision depends on the running sums of :class:`_Totals` only.

    The accountant folds its history (parallel scopes included: a scope counts
    as one cost, its component-wise maximum) into those sums and calls
    :meth:`exceeds`; :meth:`would_exceed` is the same decision on a flat list.
    """

    name = ""
    adaptive_valid = True

    def exceeds(self, totals: _Totals) -> bool:
        raise NotImplementedError

    def would_exceed(
        self, history: Sequence[Budget | PrivacyEvent], next_event: Budget | PrivacyEvent
    ) -> bool:
        totals = _Totals()
        for item in [*history, next_event]:
            # an event (not a bare Budget) lets the totals use the ρ its noise proves
            totals = totals.plus(_budget_of(item), None if isinstance(item, Budget) else item)
        return self.exceeds(totals)


class BasicFilter(_TotalsFilter):
    """Refuses when Σ εᵢ > ε_B or Σ δᵢ > δ_B (exact).

    Theorem (basic composition as a filter; Rogers, Roth, Ullman & Vadhan,
    NeurIPS 2016, the filter that halts when Σ εᵢ > ε_B or Σ δᵢ > δ_B): for
    mechanisms *and* (εᵢ, δᵢ) chosen adaptively from earlier outputs, the
    interaction is (ε_B, δ_B)-DP. Whitehouse, Ramdas, Rogers & Wu (ICML 2023)
    re-derive it as a special case of their fully adaptive filters.
    """

    name = "basic"

    def __init__(self, budget: Budget) -> None:
        self.budget = budget

    def exceeds(self, totals: _Totals) -> bool:
        b = self.budget
        return not (totals.epsilon <= b.epsilon_exact and totals.delta <= b.delta_exact)


class ZCDPFilter(_TotalsFilter):
    """Refuses when a cost has no ρ or Σ ρᵢ > ρ_B.

    ρ_B is the largest ρ whose conversion (Canonne, Kamath & Steinke 2020,
    from Rényi DP at the best order) fits (ε_B, δ_B), capped by a ρ declared on
    the budget (:func:`~dpkit.accounting.composition.largest_rho`).

    Theorem (Rényi filter; Feldman & Zrnic, NeurIPS 2021, their main
    composition theorem): for any order α > 1, if adaptively chosen
    mechanisms are (α, εᵢ(α))-RDP with Σ εᵢ(α) ≤ B(α) on every path, the
    interaction is (α, B(α))-RDP. A
    ρᵢ-zCDP mechanism is (α, αρᵢ)-RDP for every α, and Σ ρᵢ ≤ ρ_B implies
    Σ αρᵢ ≤ αρ_B at every α at once; so the interaction is ρ_B-zCDP and
    converts to (ε_B, δ_B)-DP by CKS20 (a post-processing of the Rényi
    bound). Whitehouse et al. (ICML 2023) give a zCDP filter too.
    """

    name = "zcdp"

    def __init__(self, budget: Budget, rho_budget: Fraction | None = None) -> None:
        self.budget = budget
        if rho_budget is None:
            if budget.delta_exact == 0:
                raise InvalidParameterError(
                    "a zCDP filter needs a budget with delta > 0 (zCDP converts to "
                    "(epsilon, delta)-DP only for delta > 0); give e.g. Budget(1.0, 1e-6)."
                )
            rho_budget = largest_rho(budget.epsilon_exact, budget.delta_exact)
            if budget.rho_declared is not None:
                rho_budget = min(rho_budget, budget.rho_declared)
        self.rho_budget = rho_budget

    def exceeds(self, totals: _Totals) -> bool:
        return not (totals.missing_rho == 0 and totals.rho <= self.rho_budget)


class FixedSequenceRule(_TotalsFilter):
    """Admits a cost iff *some* fixed-sequence theorem certifies the whole list (``"tightest"``).

    Not a privacy filter (``adaptive_valid = False``): advanced composition
    (Kairouz, Oh & Viswanath 2015), and choosing after the fact among several
    theorems, assume the list of (εᵢ, δᵢ) is decided before the first release;
    with adaptively chosen parameters the classic advanced bound is not a
    valid stopping rule (Rogers et al. 2016, §1 and §5). Use it for a scripted
    pipeline whose costs are all decided up front; interactive sessions use
    :class:`BasicFilter` or :class:`ZCDPFilter`.
    """

    name = "tightest"
    adaptive_valid = False

    def __init__(self, budget: Budget) -> None:
        self.budget = budget

    def exceeds(self, totals: _Totals) -> bool:
        b = self.budget
        if totals.epsilon <= b.epsilon_exact and totals.delta <= b.delta_exact:
            return False
        return not any(c.is_within(b) for _, c in _candidates(totals, b.delta_exact)[1:])


# ---------------------------------------------------------------------------------
# Gaussian differential privacy: the valid route to PLD-tight Gaussian accounting
# ---------------------------------------------------------------------------------
class GaussianDPFilter:
    """Refuses unless every event is a continuous :class:`GaussianEvent` and Σ μᵢ² ≤ μ_B².

    μᵢ = sensitivityᵢ / σᵢ; μ_B is the largest μ whose μ-GDP guarantee is
    (ε_B, δ_B)-DP (:func:`largest_mu`, Dong, Roth & Su 2022, Cor. 2.13).

    Theorem (Smith & Thakurta 2022, "Fully adaptive composition for Gaussian
    differential privacy"): if each adaptively chosen mechanism is μᵢ-GDP and
    the analyst is stopped before Σ μᵢ² exceeds μ_B², the interaction is
    μ_B-GDP. For Gaussian mechanisms this is exactly what a PLD accountant
    computes (composing Gaussians is a Gaussian), so this is the adaptive-valid
    form of PLD accounting for Gaussian releases. A natural PLD / f-DP filter
    over *mixed* mechanism families is not valid in general (Tran, Koskela,
    Räisä & Honkela 2026, "f-DP filters: validity and approximate
    solutions"), so any other
    event (Laplace, discrete Gaussian, (ε, δ)) is refused here: mixed
    workloads go through :class:`RenyiFilter` (``"rdp"``, which uses this
    theorem as its Gaussian branch) or :class:`ZCDPFilter`.
    """

    name = "gaussian-dp"
    adaptive_valid = True

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.mu_budget = largest_mu(budget.epsilon_exact, budget.delta_exact)

    @staticmethod
    def mu_squared(event: Budget | PrivacyEvent) -> Fraction | None:
        """μ² = (sensitivity / σ)² of a continuous Gaussian event, exactly; None for others."""
        return _mu_squared(event if isinstance(event, GaussianEvent) else None)

    def would_exceed(
        self, history: Sequence[Budget | PrivacyEvent], next_event: Budget | PrivacyEvent
    ) -> bool:
        total = Fraction(0)
        for event in [*history, next_event]:
            mu2 = self.mu_squared(event)
            if mu2 is None:
                return True
            total += mu2
        return total > self.mu_budget**2


class PLDRule(FixedSequenceRule):
    """Admits a cost iff basic composition or the PLD of the whole sequence fits (``"pld"``).

    The privacy loss distribution (:mod:`dpkit.accounting.pld`, Google's
    ``dp_accounting``) of mechanisms whose noise parameters are fixed in advance
    composes by convolution (Dong, Roth & Su 2022). Not a privacy filter
    (``adaptive_valid = False``): a PLD filter over mixed mechanism families is
    not valid in general (see :class:`GaussianDPFilter`).
    """

    name = "pld"

    def __init__(self, rule: _Rule) -> None:
        super().__init__(rule.budget)
        self._rule = rule

    def exceeds(self, totals: _Totals) -> bool:
        return not self._rule.admits(totals)

    def would_exceed(
        self, history: Sequence[Budget | PrivacyEvent], next_event: Budget | PrivacyEvent
    ) -> bool:
        totals = _Totals()
        for item in [*history, next_event]:
            event = None if isinstance(item, Budget) else item
            totals = totals.plus(_budget_of(item), event)
        return self.exceeds(totals)


class RenyiFilter(_TotalsFilter):
    """The ``"rdp"`` rule: a privacy filter for mixed Laplace / Gaussian / pure-ε histories.

    Admits a release iff, with it, some order α of
    :data:`~dpkit.accounting.renyi.ORDERS` has Σ εᵢ(α) ≤ B(α), the RDP that
    converts to (ε_B, δ_α) with Σ_α δ_α = δ_B (CKS20, Prop. 12). Each release's
    curve εᵢ(α) is :func:`~dpkit.accounting.renyi.rdp_curve`; an (ε, δ) cost
    with δ > 0 and no ρ has none and is refused.

    Theorem (``docs/accounting.md``, "The Rényi filter"): for mechanisms and
    noise parameters chosen adaptively, the interaction is (ε_B, δ_B)-DP.
    Sketch: for each α, exp((α−1)(L − Σ εᵢ(α))) is a non-negative
    supermartingale (Feldman & Zrnic 2021), so path by path
    (1 − e^{ε_B − L})₊ ≤ Σ_α Kα·exp((α−1)(L − Σ εᵢ(α))) with Kα the CKS
    constant, and δ(ε_B) ≤ Σ_α δ_α = δ_B. Lécuyer (2021) uses the same
    halting rule (stop when every order is exhausted); the union bound over
    orders is what dpkit proves, and costs log(1/share)/(α−1) in ε.
    """

    name = "rdp"

    def __init__(self, rule: _Rule) -> None:
        self.budget = rule.budget
        self._rule = rule

    @classmethod
    def for_budget(cls, budget: Budget) -> RenyiFilter:
        return cls(_Rule("rdp", budget))

    def exceeds(self, totals: _Totals) -> bool:
        return not self._rule.admits(totals)

    def would_exceed(
        self, history: Sequence[Budget | PrivacyEvent], next_event: Budget | PrivacyEvent
    ) -> bool:
        totals = _Totals()
        for item in [*history, next_event]:
            if isinstance(item, Budget):
                totals = totals.plus(item)
            else:
                # a Gaussian event need not carry its (ε, δ) charge here: the
                # rule reads its noise only, so any placeholder cost does
                totals = totals.plus(Budget(0), as_event(item))
        return self.exceeds(totals)


def filter_for(
    composition: str, budget: Budget
) -> BasicFilter | ZCDPFilter | FixedSequenceRule | RenyiFilter:
    """The filter an :class:`~dpkit.accounting.Accountant` with rule ``composition`` refuses by."""
    return _filter_for_rule(_Rule(composition, budget))


def _filter_for_rule(rule: _Rule) -> BasicFilter | ZCDPFilter | FixedSequenceRule | RenyiFilter:
    if rule.name == "rdp":
        return RenyiFilter(rule)
    if rule.name == "zcdp":
        return ZCDPFilter(rule.budget, rule.rho_budget)
    if rule.name == "tightest":
        return FixedSequenceRule(rule.budget)
    if rule.name == "pld":
        return PLDRule(rule)
    return BasicFilter(rule.budget)
