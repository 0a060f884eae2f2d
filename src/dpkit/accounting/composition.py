"""Composition theorems: pure functions from sequences of costs to a total guarantee.

Every function here takes *public* privacy parameters only.

Exactness and rounding
----------------------
Sums of ε, δ and ρ are exact (:class:`fractions.Fraction`). Bounds that involve
square roots, logarithms or a numerical minimisation are computed in floating
point and then rounded *up* (against the analyst) by a relative margin of
``1e-12`` of the magnitude of the terms involved, far larger than the rounding
error of the few float operations behind each bound, before being turned into a
Fraction. A reported total is therefore never smaller than the theorem's true
value; it may be larger by about one part in 10¹².

Adaptivity
----------
The theorems below compose mechanisms that are chosen adaptively but whose
privacy *parameters* are fixed before the first release. Basic composition and
the zCDP sum stay valid when the parameters themselves are chosen adaptively
(privacy filters: Rogers, Roth, Ullman & Vadhan, NeurIPS 2016; Feldman & Zrnic,
NeurIPS 2021); advanced composition does not as stated. See
``docs/accounting.md`` and the ``composition`` option of
:class:`dpkit.accounting.Accountant`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import cast

from dpkit._checks import exact
from dpkit.accounting.budget import Amount, Budget, _exact_amount
from dpkit.accounting.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    GaussianEvent,
    GeometricEvent,
    LaplaceEvent,
    PrivacyEvent,
    RepeatedEvent,
    ZCDPEvent,
    _GaussianLike,
    as_event,
)
from dpkit.accounting.pld import PLDChain
from dpkit.accounting.renyi import (
    ORDERS,
    Curve,
    add_curves,
    delta_shares,
    rdp_budgets,
    rdp_curve,
    rdp_epsilon,
)
from dpkit.errors import InvalidParameterError

_MARGIN = 1e-12


def _round_up(value: float, scale: float | None = None) -> Fraction:
    """An exact rational >= ``value`` + float error of terms of size ``scale``."""
    if not math.isfinite(value):
        raise InvalidParameterError(
            "a composed privacy bound is not finite; the privacy parameters are too large "
            "to compose meaningfully."
        )
    size = abs(value) if scale is None else max(scale, abs(value))
    up = value + _MARGIN * size
    up = math.nextafter(up, math.inf)
    # exact() reads the shortest decimal repr, which lies within half an ulp of
    # ``up``: far inside the margin just added, so the result still bounds value.
    return max(exact(up), Fraction(0))


def _up_dyadic(value: float) -> Fraction:
    """A float rounded up by a few ulps, as its exact binary rational (for exact sums)."""
    return Fraction(math.nextafter(value * (1 + 1e-14), math.inf))


def _slack(delta: Amount, name: str = "delta_slack") -> Fraction:
    d = _exact_amount(delta, name, delta=True)
    if d == 0:
        raise InvalidParameterError(
            f"{name} must be > 0: advanced composition and zCDP conversions trade a small "
            "failure probability for a smaller epsilon, e.g. 1e-6."
        )
    return d


def _costs(costs: Iterable[Budget | Amount]) -> list[Budget]:
    return [Budget.coerce(c) for c in costs]


# ---------------------------------------------------------------------------------
# Basic and parallel composition
# ---------------------------------------------------------------------------------
def basic_composition(costs: Iterable[Budget | Amount]) -> Budget:
    """Sequential composition: (Σ εᵢ, Σ δᵢ), exact.

    Theorem (Dwork, McSherry, Nissim & Smith 2006; Dwork & Roth 2014, Thm 3.16):
    running mechanisms that are (εᵢ, δᵢ)-DP on the same data, each chosen after
    seeing the previous outputs, is (Σ εᵢ, Σ δᵢ)-DP. This stays true when the
    εᵢ, δᵢ are themselves chosen adaptively (Rogers et al. 2016, filters).

    ρ is carried as in :meth:`Budget.__add__` (summed when some cost declares it).
    """
    total = Budget.zero()
    for c in _costs(costs):
        total = total + c
    return total


def parallel_composition(costs: Iterable[Budget | Amount]) -> Budget:
    """Parallel composition: component-wise maximum of the costs, exact.

    Theorem (McSherry 2009, "Privacy integrated queries", parallel composition): mechanisms run
    on *disjoint* subsets of the rows, where the partition does not depend on
    the data of other rows (e.g. a public key column), are together
    (max εᵢ, max δᵢ)-DP under add/remove-one-row: one row changes one part only.
    The same argument gives max ρᵢ for zCDP when every cost has a ρ.
    """
    items = _costs(costs)
    if not items:
        return Budget.zero()
    eps = max(c.epsilon_exact for c in items)
    delta = max(c.delta_exact for c in items)
    rhos = [c.rho_exact for c in items]
    rho: Fraction | None = None
    if all(r is not None for r in rhos) and any(c.rho_declared is not None for c in items):
        rho = max(r for r in rhos if r is not None)
    return Budget._of(eps, delta, rho)


# ---------------------------------------------------------------------------------
# Advanced composition
# ---------------------------------------------------------------------------------
def _kairouz_epsilon(
    eps_sum: Fraction, eps_sq_sum: Fraction, tanh_sum: Fraction, slack: Fraction
) -> Fraction:
    """The ε̃ of Kairouz–Oh–Viswanath Thm 3.5 from the three sums it depends on."""
    if eps_sum == 0:
        return Fraction(0)
    s = float(eps_sq_sum)
    a = float(tanh_sum)
    d = float(slack)
    # float(slack) may round up by half an ulp; log(1/d) then shrinks by ~1e-16,
    # far inside the rounding margin of _round_up.
    second = a + math.sqrt(2 * s * math.log(math.e + math.sqrt(s) / d))
    third = a + math.sqrt(2 * s * math.log(1 / d))
    return min(eps_sum, _round_up(min(second, third)))


def _tanh_term(eps: Fraction) -> Fraction:
    """εᵢ (e^εᵢ − 1)/(e^εᵢ + 1) = εᵢ tanh(εᵢ/2), rounded up, as an exact dyadic."""
    if eps == 0:
        return Fraction(0)
    e = float(eps)
    return _up_dyadic(e * math.tanh(e / 2))


def advanced_composition(costs: Sequence[Budget | Amount], delta_slack: Amount) -> Budget:
    """Heterogeneous advanced composition of Kairouz, Oh & Viswanath (ICML 2015, Thm 3.5).

    For mechanisms that are (εᵢ, δᵢ)-DP, i = 1..k, composed adaptively, and any
    δ̃ ∈ (0, 1], the composition is (ε̃, 1 − (1 − δ̃) Πᵢ(1 − δᵢ))-DP with

        ε̃ = min{ Σ εᵢ,
                 Σ εᵢ(e^εᵢ − 1)/(e^εᵢ + 1) + sqrt(2 Σ εᵢ² · log(e + sqrt(Σ εᵢ²)/δ̃)),
                 Σ εᵢ(e^εᵢ − 1)/(e^εᵢ + 1) + sqrt(2 Σ εᵢ² · log(1/δ̃)) }.

    The εᵢ must be fixed before the first release (adaptively chosen εᵢ are not
    covered by the theorem). ``delta_slack`` is δ̃. The returned ε is rounded up
    (module docstring) and the returned δ is exact.

    It is never worse than Dwork–Rothblum–Vadhan (:func:`drv_composition`) and
    is worse than basic composition for few or large εᵢ; it takes the min with Σ εᵢ.
    """
    items = _costs(costs)
    slack = _slack(delta_slack)
    eps_sum = sum((c.epsilon_exact for c in items), Fraction(0))
    eps_sq = sum((c.epsilon_exact**2 for c in items), Fraction(0))
    tanh_sum = sum((_tanh_term(c.epsilon_exact) for c in items), Fraction(0))
    eps = _kairouz_epsilon(eps_sum, eps_sq, tanh_sum, slack)
    keep = 1 - slack
    for c in items:
        keep *= 1 - c.delta_exact
    delta = 1 - keep
    if delta >= 1:
        raise InvalidParameterError("the composed delta reaches 1; use smaller deltas.")
    return Budget._of(eps, delta)


def drv_composition(cost: Budget | Amount, k: int, delta_slack: Amount) -> Budget:
    """Advanced composition of Dwork, Rothblum & Vadhan (FOCS 2010, Thm III.3).

    k-fold adaptive composition of an (ε, δ)-DP mechanism is
    (sqrt(2k·ln(1/δ'))·ε + k·ε(e^ε − 1), k·δ + δ')-DP for any δ' > 0
    (Dwork & Roth 2014, Thm 3.20). Provided for comparison: the Kairouz bound of
    :func:`advanced_composition` is never larger. The min with basic kε is taken.
    """
    c = Budget.coerce(cost)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise InvalidParameterError(f"k must be an integer >= 0, got {k!r}.")
    slack = _slack(delta_slack)
    basic_eps = c.epsilon_exact * k
    delta = c.delta_exact * k + slack
    if delta >= 1:
        raise InvalidParameterError("the composed delta reaches 1; use smaller deltas.")
    e = float(c.epsilon_exact)
    if k == 0 or e == 0:
        return Budget._of(Fraction(0), delta)
    if e > 700:  # e^ε overflows; the bound is far above basic composition anyway
        return Budget._of(basic_eps, delta)
    first = math.sqrt(2 * k * math.log(1 / float(slack))) * e
    second = k * e * math.expm1(e)
    return Budget._of(min(basic_eps, _round_up(first + second)), delta)


# ---------------------------------------------------------------------------------
# zero-concentrated DP
# ---------------------------------------------------------------------------------
def dp_to_zcdp(epsilon: Amount) -> Fraction:
    """ρ = ε²/2: an ε-DP mechanism is (ε²/2)-zCDP (Bun & Steinke 2016, Prop. 1.4). Exact."""
    e = _exact_amount(epsilon, "epsilon")
    return e * e / 2


def zcdp_composition(costs: Iterable[Budget | Amount]) -> Fraction:
    """Σ ρᵢ: composing ρᵢ-zCDP mechanisms is (Σ ρᵢ)-zCDP (Bun & Steinke 2016, composition lemma).

    Exact. Holds for adaptively chosen ρᵢ as long as their sum stays below a
    fixed budget (Rényi filter, Feldman & Zrnic 2021, applied at every order α).
    Pure costs count ε²/2; a cost with δ > 0 and no declared ρ is refused.
    """
    total = Fraction(0)
    for i, c in enumerate(_costs(costs)):
        r = c.rho_exact
        if r is None:
            raise InvalidParameterError(
                f"cost #{i} ({c}) has delta > 0 and no zCDP parameter rho, so it cannot be "
                "composed in zCDP; give its rho (Gaussian releases have one) or use "
                "basic composition."
            )
        total += r
    return total


def _cks_epsilon(rho: float, delta: float) -> float:
    """A valid ε for ρ-zCDP at δ: CKS20 conversion at a numerically chosen order α."""
    from scipy.optimize import minimize_scalar

    log_inv_delta = math.log(1 / delta)

    def terms(alpha: float) -> tuple[float, float, float, float]:
        am1 = alpha - 1
        return (
            alpha * rho,
            log_inv_delta / am1,
            math.log1p(-1 / alpha),
            -math.log(alpha) / am1,
        )

    def objective(t: float) -> float:
        return math.fsum(terms(1 + math.exp(t)))

    # α − 1 = e^t; the optimum is near sqrt(log(1/δ)/ρ), well inside this range
    # for any ρ in [1e-12, 1e6]; any α > 1 gives a valid (if looser) bound.
    res = minimize_scalar(
        objective, bounds=(-30.0, 30.0), method="bounded", options={"xatol": 1e-9}
    )
    parts = terms(1 + math.exp(float(res.x)))
    value = math.fsum(parts)
    return value + _MARGIN * math.fsum(abs(p) for p in parts)


def zcdp_to_dp(rho: Amount, delta: Amount) -> Budget:
    """(ε, δ)-DP implied by ρ-zCDP, with the conversion of Canonne, Kamath & Steinke.

    CKS (NeurIPS 2020, "The discrete Gaussian for differential privacy",
    §2.3, conversion from Rényi DP of order α): a ρ-zCDP mechanism is
    (ε, δ)-DP for every α > 1 with

        ε = αρ + log(1/δ)/(α − 1) + log(1 − 1/α) − log(α)/(α − 1).

    α is chosen by a bounded scalar minimisation; whatever α is found, the
    bound at that α is valid. The result is also never above the classic
    ε = ρ + 2·sqrt(ρ·log(1/δ)) (Bun & Steinke 2016, Prop. 1.3), which is taken
    when smaller. ε is rounded up; the returned Budget carries ``rho``.
    """
    r = _exact_amount(rho, "rho")
    d = _slack(delta, "delta")
    if r == 0:
        return Budget._of(Fraction(0), d, Fraction(0))
    rf, df = float(r), float(d)
    simple = rf + 2 * math.sqrt(rf * math.log(1 / df))
    simple_up = simple + _MARGIN * simple
    cks = _cks_epsilon(rf, df)
    return Budget._of(_round_up(min(simple_up, cks)), d, r)


def zcdp_to_dp_simple(rho: Amount, delta: Amount) -> Budget:
    """ε = ρ + 2·sqrt(ρ·log(1/δ)) (Bun & Steinke 2016, Prop. 1.3), rounded up."""
    r = _exact_amount(rho, "rho")
    d = _slack(delta, "delta")
    rf = float(r)
    return Budget._of(_round_up(rf + 2 * math.sqrt(rf * math.log(1 / float(d)))), d, r)


def largest_rho(epsilon: Amount, delta: Amount) -> Fraction:
    """The largest ρ (found numerically) whose :func:`zcdp_to_dp` fits within (ε, δ).

    The result is verified: ``zcdp_to_dp(largest_rho(e, d), d).epsilon_exact <= e``.
    """
    e = _exact_amount(epsilon, "epsilon")
    d = _slack(delta, "delta")
    if e == 0:
        return Fraction(0)
    ef, log_inv = float(e), math.log(1 / float(d))
    # Inverse of the classic bound: a valid starting point below the answer.
    low = (math.sqrt(log_inv + ef) - math.sqrt(log_inv)) ** 2
    high = max(ef, 2 * low)
    for _ in range(2100):  # doubling from >= ef reaches any double's range
        if zcdp_to_dp(high, d).epsilon_exact > e:
            break
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        if zcdp_to_dp(mid, d).epsilon_exact <= e:
            low = mid
        else:
            high = mid
        if high - low <= 1e-13 * high:
            break
    # Round down to 12 significant digits (a readable decimal), then make sure.
    scale = 10 ** (11 - math.floor(math.log10(low)))
    rho = Fraction(math.floor(low * scale), scale)
    # The bisection left low within 1e-13 of the answer: one step of 1e-6 is enough;
    # the cap (a factor e^-10 in all) only bounds the loop.
    for _ in range(10_000):
        if rho <= 0 or zcdp_to_dp(rho, d).epsilon_exact <= e:
            return rho
        rho *= Fraction(999999, 1000000)
    return Fraction(0)


def event_rho(event: PrivacyEvent) -> Fraction | None:
    """The ρ-zCDP guarantee an event's mechanism proves, exactly; None if it has none.

    Gaussian and discrete Gaussian noise: ρ = Δ²/(2σ²) (Bun & Steinke 2016,
    Prop. 1.6; Canonne, Kamath & Steinke 2020, Thm 4), or the recorded ``rho``.
    Laplace and geometric noise: pure ε-DP with ε = Δ/scale (or the charge), so
    ρ = ε²/2 (Bun & Steinke 2016, Prop. 1.4). ``ZCDPEvent``: its ρ.
    ``EpsilonDeltaEvent``: ε²/2 if δ = 0, else None (an (ε, δ) guarantee with
    δ > 0 implies no zCDP bound; the zcdp rule refuses it, the tightest rule
    charges it by basic composition). Composed and repeated events: the sum.
    """
    if isinstance(event, _GaussianLike):
        return event.proven_rho() if event.rho is None else event.rho
    if isinstance(event, LaplaceEvent | GeometricEvent):
        eps = event.budget().epsilon_exact
        return eps * eps / 2
    if isinstance(event, ZCDPEvent):
        return event.rho
    if isinstance(event, EpsilonDeltaEvent):
        return event.epsilon * event.epsilon / 2 if event.delta == 0 else None
    if isinstance(event, ComposedEvent):
        total = Fraction(0)
        for e in event.events:
            r = event_rho(e)
            if r is None:
                return None
            total += r
        return total
    if isinstance(event, RepeatedEvent):
        r = event_rho(event.event)
        return None if r is None else r * event.count
    return None


# ---------------------------------------------------------------------------------
# The accountant's running totals and the rules that certify them
# ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Totals:
    """Sums over a sequence of costs, enough for every rule below; exact and reversible.

    ``plus``/``minus`` are exact, so a running total can be updated when one
    entry's cost grows (a parallel scope whose max rises).
    """

    count: int = 0
    epsilon: Fraction = field(default_factory=Fraction)
    delta: Fraction = field(default_factory=Fraction)
    epsilon_sq: Fraction = field(default_factory=Fraction)
    tanh: Fraction = field(default_factory=Fraction)
    # entries with a ρ (declared, or implicit for pure ones) vs the others
    rho: Fraction = field(default_factory=Fraction)
    missing_rho: int = 0
    epsilon_no_rho: Fraction = field(default_factory=Fraction)
    delta_no_rho: Fraction = field(default_factory=Fraction)
    # entries with a *declared* ρ vs the others (pure ones counted by ε)
    rho_declared: Fraction = field(default_factory=Fraction)
    epsilon_undeclared: Fraction = field(default_factory=Fraction)
    delta_undeclared: Fraction = field(default_factory=Fraction)
    # For the "pld" rule: the items added with plus() (fixed once charged) as a
    # chain whose composed PLD is cached, and the current costs of parallel
    # scopes (their max may still grow, so they stay (ε, δ) items).
    chain: PLDChain = field(default_factory=PLDChain.empty, compare=False, repr=False)
    scopes: tuple[Budget, ...] = field(default=(), compare=False)
    # For the "rdp" rule: Σ εᵢ(α) at each order of renyi.ORDERS over the entries
    # with a Rényi curve, and the count of those without.
    rdp: Curve = field(default=tuple(0.0 for _ in ORDERS), compare=False, repr=False)
    rdp_missing: int = 0

    def _with(
        self,
        cost: Budget,
        sign: int,
        chain: PLDChain | None = None,
        scopes: tuple[Budget, ...] | None = None,
        event: PrivacyEvent | None = None,
    ) -> _Totals:
        e, d = cost.epsilon_exact, cost.delta_exact
        r, declared = cost.rho_exact, cost.rho_declared
        curve = _rdp_or_none(cost if event is None else event)
        return _Totals(
            chain=self.chain if chain is None else chain,
            scopes=self.scopes if scopes is None else scopes,
            rdp=self.rdp if curve is None else add_curves(self.rdp, curve, sign),
            rdp_missing=self.rdp_missing + (sign if curve is None else 0),
            count=self.count + sign,
            epsilon=self.epsilon + sign * e,
            delta=self.delta + sign * d,
            epsilon_sq=self.epsilon_sq + sign * e * e,
            tanh=self.tanh + sign * _tanh_term(e),
            rho=self.rho + (sign * r if r is not None else 0),
            missing_rho=self.missing_rho + (sign if r is None else 0),
            epsilon_no_rho=self.epsilon_no_rho + (sign * e if r is None else 0),
            delta_no_rho=self.delta_no_rho + (sign * d if r is None else 0),
            rho_declared=self.rho_declared + (sign * declared if declared is not None else 0),
            epsilon_undeclared=self.epsilon_undeclared + (sign * e if declared is None else 0),
            delta_undeclared=self.delta_undeclared + (sign * d if declared is None else 0),
        )

    def plus(self, cost: Budget, event: PrivacyEvent | None = None) -> _Totals:
        """One more charge; ``event`` (what produced it) lets zCDP and PLD compose it tightly."""
        if event is not None and cost.rho_declared is None:
            # what the event's mechanisms prove: for composed pure parts Σ εᵢ²/2, below
            # the (Σ εᵢ)²/2 a bare pure cost stands for
            rho = event_rho(event)
            implicit = cost.rho_exact
            if rho is not None and (implicit is None or rho < implicit):
                cost = Budget._of(cost.epsilon_exact, cost.delta_exact, rho)
        return self._with(
            cost, 1, chain=self.chain.then(cost if event is None else event), event=event
        )

    def plus_copies(
        self, cost: Budget, event: PrivacyEvent | None, count: int, *, exact_floats: bool = True
    ) -> _Totals:
        """``count`` more charges of ``cost`` (made by ``event``): ``plus`` applied ``count`` times.

        In one step, for :meth:`Accountant.affordable`'s search. The exact sums
        (ε, δ, ρ, counts, the tanh terms) and the float Rényi sums
        (:func:`_repeated_sum`) equal ``count`` calls of ``plus`` bit for bit;
        the PLD chain gets one ``RepeatedEvent`` (composed by repeated
        squaring, O(log count) convolutions, :mod:`dpkit.accounting.pld`),
        which matches ``count`` compositions up to float rounding only.
        ``exact_floats=False`` adds the Rényi curve as ``count``·curve instead
        (faster; it may differ in the last bits).
        """
        if count <= 1:
            return self if count <= 0 else self.plus(cost, event)
        if event is not None and cost.rho_exact is None:
            rho = event_rho(event)
            if rho is not None:
                cost = Budget._of(cost.epsilon_exact, cost.delta_exact, rho)
        repeated = RepeatedEvent(as_event(cost if event is None else event), count)
        out = self._with(cost, count, chain=self.chain.then(repeated), event=event)
        curve = _rdp_or_none(cost if event is None else event)
        if curve is None or not exact_floats:
            return out
        # the Rényi sums ``count`` charges make, bit for bit (they decide the "rdp" rule)
        rdp = tuple(_repeated_sum(x, y, count) for x, y in zip(self.rdp, curve, strict=True))
        return dataclasses.replace(out, rdp=rdp)

    def minus(self, cost: Budget) -> _Totals:
        return self._with(cost, -1)

    def replace(self, old: Budget | None, new: Budget) -> _Totals:
        """Swap a parallel scope's cost ``old`` (None: a new scope) for ``new``."""
        scopes = list(self.scopes)
        base = self
        if old is not None:
            scopes.remove(old)
            base = self.minus(old)
        return base._with(new, 1, scopes=(*scopes, new))

    def sequential_budget(self) -> Budget:
        """Basic composition of the entries, with ρ = Σ ρᵢ when every entry has one."""
        rho = self.rho if self.missing_rho == 0 and self.count > 0 else None
        return Budget._of(self.epsilon, self.delta, rho)

    @classmethod
    def of(cls, costs: Iterable[Budget]) -> _Totals:
        t = cls()
        for c in costs:
            t = t.plus(c)
        return t


def _repeated_sum(start: float, step: float, count: int) -> float:
    """``start`` after ``count`` float additions of ``step`` ≥ 0, bit for bit, in O(binades) work.

    Within one binade [2^(e−1), 2^e) of the running sum s (spacing u), while
    s + step stays below 2^e, fl(s + step) = s + j·u with j the nearest
    integer to step/u, ties to an even s/u: after at most one step (a tie
    with s/u odd) j is constant, so the additions left in the binade are
    taken at once, in exact integer arithmetic. A few loop turns per binade;
    zero, subnormal and non-finite values are added one at a time.
    """
    s, left = start, count
    while left > 0:
        if step == 0.0 or math.isinf(s) or math.isnan(s):
            return s
        if not math.isfinite(step) or s < sys.float_info.min:
            s, left = s + step, left - 1
            continue
        mant, exp = math.frexp(s)  # s = mant·2^exp, 1/2 ≤ mant < 1: u = 2^(exp−53)
        units = int(mant * (1 << 53))  # s/u, in [2^52, 2^53)
        step_mant, step_exp = math.frexp(step)
        shift = step_exp - exp  # step/u = int(step_mant·2^53)·2^shift = q + rem/den
        if shift >= 0:
            q, rem, den = int(step_mant * (1 << 53)) << shift, 0, 1
        else:
            den = 1 << -shift
            q, rem = divmod(int(step_mant * (1 << 53)), den)
        if 2 * rem == den and units % 2 == 1:  # a tie from an odd s/u: one plain step
            s, left = s + step, left - 1
            continue
        j = q if 2 * rem < den or (2 * rem == den and q % 2 == 0) else q + 1
        if j == 0:
            return s
        # additions i = 0, 1, ... stay in the binade while units + i·j + q + rem/den < 2^53
        room = ((1 << 53) - units - q) * den - rem
        if room <= 0:  # this addition leaves the binade: one plain step
            s, left = s + step, left - 1
            continue
        taken = min(left, -(-room // (j * den)))
        s, left = math.ldexp(float(units + taken * j), exp - 53), left - taken
    return s


def _rdp_or_none(item: Budget | PrivacyEvent) -> Curve | None:
    """The item's Rényi curve (:func:`~dpkit.accounting.renyi.rdp_curve`), None if it has none."""
    try:
        return _cached_curve(cast(Hashable, item))
    except TypeError:  # an unhashable event (not one of dpkit's frozen ones)
        return _curve(item)


def _curve(item: object) -> Curve | None:
    try:
        return rdp_curve(item)  # type: ignore[arg-type]
    except InvalidParameterError:
        return None


# Sessions repeat a few kinds of release, and a curve costs ~0.2 ms. Equal
# items (Budget: same ε, δ, ρ; events: same type and fields) have equal curves.
@functools.lru_cache(maxsize=4096)
def _cached_curve(item: Hashable) -> Curve | None:
    return _curve(item)


def _mu_squared(event: PrivacyEvent | None) -> Fraction | None:
    """μ² = (sensitivity / σ)² of a continuous Gaussian event, exactly; None for others.

    Composed and repeated events of continuous Gaussians: the sum (μ-GDP
    composes as √Σμᵢ², Dong, Roth & Su 2022, Cor. 3.3).
    """
    if isinstance(event, GaussianEvent):
        return (exact(event.sensitivity) / exact(event.sigma)) ** 2
    if isinstance(event, RepeatedEvent):
        inner = _mu_squared(event.event)
        return None if inner is None else inner * event.count
    if isinstance(event, ComposedEvent):
        total = Fraction(0)
        for e in event.events:
            part = _mu_squared(e)
            if part is None:
                return None
            total += part
        return total
    return None


#: Composition rules an accountant can use (see Accountant's ``composition``).
COMPOSITION_RULES = ("basic", "zcdp", "tightest", "pld", "rdp")


def _candidates(totals: _Totals, delta_budget: Fraction) -> list[tuple[str, Budget]]:
    """Totals certified by each theorem for a fixed sequence with a δ allowance.

    Each candidate is a valid (ε, δ) guarantee of the whole sequence. Those that
    use a δ slack use all that ``delta_budget`` leaves, so their δ equals it.
    """
    out: list[tuple[str, Budget]] = [("basic", Budget._of(totals.epsilon, totals.delta))]
    if delta_budget <= 0 or totals.count == 0:
        return out
    # Kairouz et al. with δ̃ = δ_B − Σ δᵢ: valid as 1 − (1 − δ̃)Π(1 − δᵢ) ≤ δ̃ + Σ δᵢ.
    slack = delta_budget - totals.delta
    if slack > 0:
        eps = _kairouz_epsilon(totals.epsilon, totals.epsilon_sq, totals.tanh, slack)
        out.append(("advanced", Budget._of(eps, delta_budget)))
    # zCDP for the entries with a ρ (implicit ones included), basic for the rest.
    for name, rho, eps_rest, delta_rest in (
        ("zcdp+basic", totals.rho, totals.epsilon_no_rho, totals.delta_no_rho),
        (
            "declared-zcdp+basic",
            totals.rho_declared,
            totals.epsilon_undeclared,
            totals.delta_undeclared,
        ),
    ):
        left = delta_budget - delta_rest
        if rho > 0 and left > 0:
            eps = eps_rest + zcdp_to_dp(rho, left).epsilon_exact
            out.append((name, Budget._of(eps, delta_budget, None)))
    return out


def tightest_composition(costs: Sequence[Budget | Amount], delta_budget: Amount) -> Budget:
    """The smallest-ε total that one of the theorems above certifies, for a fixed sequence.

    Candidates, each valid on its own for a sequence of costs fixed in advance:
    basic composition; Kairouz et al. advanced composition with δ̃ the largest
    slack ``delta_budget`` leaves; zCDP composition of the costs that carry ρ
    (converted with :func:`zcdp_to_dp` at the δ left over) plus basic
    composition of the rest (two variants: pure costs inside or outside the
    zCDP part). Returns the candidate with the smallest ε whose δ fits
    ``delta_budget`` (basic composition's total if none fits).
    """
    items = _costs(costs)
    db = _exact_amount(delta_budget, "delta_budget", delta=True)
    cands = [b for _, b in _candidates(_Totals.of(items), db)]
    fitting = [b for b in cands if b.delta_exact <= db]
    pool = fitting or cands
    if not pool:
        return basic_composition(items)
    return min(pool, key=lambda b: (b.epsilon_exact, b.delta_exact))


class _Rule:
    """How an accountant decides whether a running total fits its budget.

    ``basic``: Σ εᵢ ≤ ε_B and Σ δᵢ ≤ δ_B. Valid when each cost is chosen
    adaptively, after seeing earlier releases (a privacy filter: Rogers et al.
    2016). Exact.

    ``zcdp``: every cost must carry ρ (pure ones do, ε²/2); Σ ρᵢ ≤ ρ_B, the
    largest ρ whose CKS conversion fits (ε_B, δ_B) (capped by a ρ declared on
    the budget). Valid for adaptively chosen costs (Rényi filter, Feldman &
    Zrnic 2021, at every order α; then CKS20).

    ``tightest``: a cost is admitted iff *some* theorem of
    :func:`tightest_composition` certifies the whole sequence within (ε_B, δ_B).
    Valid only when the sequence of costs is fixed before the first release
    (a scripted pipeline): advanced composition and the choice among theorems
    are not covered by filter theorems when costs depend on earlier answers.

    ``pld``: a cost is admitted iff basic composition or the privacy loss
    distribution of the whole sequence (:mod:`dpkit.accounting.pld`, Google's
    ``dp_accounting``, pessimistic) keeps it within (ε_B, δ_B); the PLD's ε is
    read at δ_B. Each charge composes its event (or, for a bare cost, the
    worst-case PLD of its (ε, δ)) onto a cached composition: O(1) convolutions
    per charge. A parallel scope is composed as its current (ε, δ) (the max over
    its parts, as for the other rules): the max of parts' PLDs is not a PLD
    operation, and a scope's cost may still grow. Valid for mechanisms chosen
    adaptively whose noise parameters are fixed before the first release (PLD
    composition of fixed dominating pairs); parameters that depend on earlier
    answers need a PLD filter theorem, which this rule does not claim.

    ``rdp``: a privacy filter for mixed histories (adaptive-valid): admitted
    iff some order α of :data:`~dpkit.accounting.renyi.ORDERS` keeps
    Σ εᵢ(α) ≤ B(α), B(α) converting to (ε_B, δ_α) with Σ δ_α = δ_B (Feldman &
    Zrnic 2021 at each order, a union over orders). Entries without a Rényi
    curve ((ε, δ) with δ > 0 and no ρ) are refused. See ``docs/accounting.md``,
    "The Rényi filter".
    """

    def __init__(self, name: str, budget: Budget) -> None:
        if name not in COMPOSITION_RULES:
            raise InvalidParameterError(
                f"composition must be one of {', '.join(map(repr, COMPOSITION_RULES))}, "
                f"got {name!r}."
            )
        self.name = name
        self.budget = budget
        self.rho_budget: Fraction | None = None
        if name == "zcdp":
            if budget.delta_exact == 0:
                raise InvalidParameterError(
                    "composition='zcdp' needs a budget with delta > 0 (zCDP converts to "
                    "(epsilon, delta)-DP only for delta > 0); give e.g. Budget(1.0, 1e-6) or "
                    "use composition='basic'."
                )
            cap = largest_rho(budget.epsilon_exact, budget.delta_exact)
            if budget.rho_declared is not None:
                cap = min(cap, budget.rho_declared)
            self.rho_budget = cap
        if name == "rdp":
            # δ_B spread over the orders; raises for δ_B = 0, with the rule's own message
            self.rdp_shares = delta_shares(budget.epsilon_exact, budget.delta_exact)
            self.rdp_budget = rdp_budgets(budget.epsilon_exact, self.rdp_shares)
        if name == "pld" and budget.delta_exact == 0:
            raise InvalidParameterError(
                "composition='pld' needs a budget with delta > 0 (for delta = 0 privacy loss "
                "distributions give back basic composition); give e.g. Budget(1.0, 1e-6) or use "
                "composition='basic'."
            )

    def _pld_epsilon(self, t: _Totals) -> Fraction | None:
        return t.chain.epsilon(self.budget.delta_exact, t.scopes)

    def _rdp_admits(self, t: _Totals) -> bool:
        return t.rdp_missing == 0 and any(
            total <= cap for total, cap in zip(t.rdp, self.rdp_budget, strict=True)
        )

    def _rdp_spent(self, t: _Totals) -> list[Budget]:
        """(ε, δ_B) certified by the rdp rule's Rényi orders, if ``t`` has curves."""
        if t.rdp_missing:
            return []
        return [Budget._of(exact(rdp_epsilon(t.rdp, self.rdp_shares)), self.budget.delta_exact)]

    def admits(self, t: _Totals) -> bool:
        b = self.budget
        if self.name == "rdp":
            return self._rdp_admits(t)
        if self.name == "pld":
            if t.epsilon <= b.epsilon_exact and t.delta <= b.delta_exact:
                return True
            return t.chain.within(b, t.scopes)
        if self.name == "zcdp":
            assert self.rho_budget is not None
            return t.missing_rho == 0 and t.rho <= self.rho_budget
        if t.epsilon <= b.epsilon_exact and t.delta <= b.delta_exact:
            return True
        if self.name == "basic":
            return False
        return any(c.is_within(b) for _, c in _candidates(t, b.delta_exact)[1:])

    def spent(self, t: _Totals) -> Budget:
        b = self.budget
        if self.name == "basic" or t.count == 0:
            return Budget._of(t.epsilon, t.delta)
        if self.name == "rdp":
            cands = [Budget._of(t.epsilon, t.delta), *self._rdp_spent(t)]
            fitting = [c for c in cands if c.is_within(b)] or cands
            return min(fitting, key=lambda c: (c.epsilon_exact, c.delta_exact))
        if self.name == "pld":
            cands = [Budget._of(t.epsilon, t.delta)]
            eps = self._pld_epsilon(t)
            if eps is not None:
                cands.append(Budget._of(eps, b.delta_exact))
            fitting = [c for c in cands if c.is_within(b)] or cands
            return min(fitting, key=lambda c: (c.epsilon_exact, c.delta_exact))
        if self.name == "zcdp":
            if t.rho == 0:
                return Budget._of(Fraction(0), Fraction(0), Fraction(0))
            return zcdp_to_dp(t.rho, b.delta_exact)
        cands = [c for _, c in _candidates(t, b.delta_exact)]
        fitting = [c for c in cands if c.is_within(b)] or cands
        return min(fitting, key=lambda c: (c.epsilon_exact, c.delta_exact))

    def remaining(self, t: _Totals) -> Budget:
        b = self.budget
        if self.name == "zcdp":
            # The ρ left, and the largest pure ε it pays for (ε²/2 ≤ ρ), rounded down.
            assert self.rho_budget is not None
            left = max(self.rho_budget - t.rho, Fraction(0))
            eps = Fraction(0)
            if left > 0:
                eps = exact(math.sqrt(2 * float(left)) * (1 - 1e-12))
                for _ in range(10_000):  # one step at most in practice; bounded regardless
                    if eps * eps / 2 <= left:
                        break
                    eps *= Fraction(999999, 1000000)
                else:
                    eps = Fraction(0)
            return Budget._of(eps, Fraction(0), left)
        s = self.spent(t)
        return Budget._of(
            max(b.epsilon_exact - s.epsilon_exact, Fraction(0)),
            max(b.delta_exact - s.delta_exact, Fraction(0)),
        )
