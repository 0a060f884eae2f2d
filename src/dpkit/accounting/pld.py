"""Privacy loss distributions (PLD): the tightest (ε, δ) of a sequence of privacy events.

The numerical work is Google's ``dp_accounting`` (``dp_accounting.pld``,
imported lazily): each event becomes the privacy loss distribution of its
mechanism, discretised *pessimistically* (every privacy loss rounded up to a
multiple of :data:`VALUE_DISCRETIZATION_INTERVAL`, truncated tails counted as
infinite loss), so the ε read off a composition is never below the true one
(Meiser & Mohammadi, CCS 2018; Koskela, Jälkö & Honkela, AISTATS 2020;
Doroshenko, Ghazi, Kamath, Kumar & Manurangsi, PETS 2022, "connect the dots").

Composition theorem relied on: the privacy loss distribution of an adaptive
composition of mechanisms whose dominating pairs are fixed in advance is the
convolution of their PLDs (Dong, Roth & Su 2022, f-DP composition; Zhu, Dong &
Wang, AISTATS 2022). The mechanisms may be chosen after seeing earlier answers;
their noise parameters are recorded in the events and must not depend on data.

What each event composes as (neighbouring relation: add/remove one row):

* ``LaplaceEvent(scale, sensitivity)``: the Laplace PLD of that scale and shift.
* ``GeometricEvent(scale, sensitivity)``: the discrete Laplace PLD, parameter 1/scale.
* ``GaussianEvent(sigma, sensitivity)``: the Gaussian PLD (valid for vector
  queries of l2 sensitivity ``sensitivity``: the Gaussian is rotation invariant).
* ``DiscreteGaussianEvent`` whose neighbours differ along one lattice axis
  (``scalar=True``, or l2 sensitivity below √2:
  :attr:`~dpkit.accounting.events.DiscreteGaussianEvent.one_axis_shift`): the
  discrete Gaussian PLD of that integer shift (Canonne, Kamath & Steinke 2020;
  ``from_discrete_gaussian_mechanism``, tails beyond its truncation counted
  as infinite loss).
* ``ComposedEvent`` / ``RepeatedEvent``: convolution / self-convolution.
* Everything else (other ``DiscreteGaussianEvent``, ``ZCDPEvent``,
  ``EpsilonDeltaEvent``, a bare :class:`Budget`): the (ε, δ) it is charged as
  (``budget()``), through the worst-case PLD of an (ε, δ)-DP mechanism
  (``from_privacy_parameters``: loss ε, −ε, or ∞ with probability δ). A
  discrete Gaussian on a multi-dimensional lattice has no one-dimensional PLD,
  and ρ-zCDP does not determine a PLD, so these stay conservative.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from typing import TYPE_CHECKING

from dpkit.accounting.budget import Budget
from dpkit.accounting.events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    GaussianEvent,
    GeometricEvent,
    LaplaceEvent,
    PrivacyEvent,
    RepeatedEvent,
    as_event,
)
from dpkit.errors import InvalidParameterError

if TYPE_CHECKING:
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

__all__ = [
    "VALUE_DISCRETIZATION_INTERVAL",
    "PLDChain",
    "discrete_gaussian_pld",
    "event_pld",
    "largest_count",
    "pld_epsilon",
]

#: Width of the privacy-loss grid. Measured (benchmarks/accounting.py, σ = 200,
#: 2,241 Gaussian releases at δ = 1e-6): ε = 1.0000 at 1e-4 vs 0.99996 at 1e-5,
#: a discretisation error of 4e-5 relative (1e-3 gives 3.5e-3), far below 1%.
VALUE_DISCRETIZATION_INTERVAL = 1e-4

#: Releases coarser than this have no PLD here (the rule then uses basic composition):
#: a pure ε above 5 (Laplace, geometric, an (ε, δ) pair) or a Gaussian with
#: sensitivity/σ above 2 spends most of any useful budget alone, and the PLD's
#: grid grows with it (measured: a Gaussian with sensitivity/σ = 5 takes 1.3
#: million grid points and 3 s to build; an (ε = 50) pair, 5 s per composition).
#: This bounds the work of every charge by public parameters.
_MAX_PURE_EPSILON = 5.0
_MAX_GAUSSIAN_RATIO = 2.0
#: A discrete Gaussian's PLD sums its lattice support (±12σ): up to ~2.4·10⁷ points.
_MAX_LATTICE_SIGMA = 1e6

# Most sessions repeat a few kinds of release: their PLDs are built once (PLDs are
# immutable: compose() returns a new one). Bounded; cleared when full.
_CACHE_SIZE = 256
_CACHE: dict[object, PrivacyLossDistribution | None] = {}
_MISSING = object()

#: Relative margin added to every ε read off a PLD: the float error of FFT
#: convolutions (the same events composed in another order differ by ~1e-11
#: relative), so the ε reported is never below dp_accounting's for any order.
_MARGIN = 1e-9


def _up(value: float) -> Fraction:
    """An exact rational >= ``value`` plus the float noise of dp_accounting's convolutions."""
    return Fraction(math.nextafter(value * (1 + _MARGIN) + 1e-15, math.inf))


def _identity() -> PrivacyLossDistribution:
    from dp_accounting.pld import privacy_loss_distribution as pld

    return pld.identity(value_discretization_interval=VALUE_DISCRETIZATION_INTERVAL)


def _from_budget(budget: Budget) -> PrivacyLossDistribution | None:
    """The worst-case PLD of an (ε, δ)-DP release (None: too coarse, see above)."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    if budget.is_zero:
        return _identity()
    if budget.epsilon_exact > _MAX_PURE_EPSILON:
        return None
    eps = float(_up(float(budget.epsilon_exact)))
    # float(delta) may round down by half an ulp: take the next float up.
    delta = math.nextafter(float(budget.delta_exact), math.inf) if budget.delta_exact else 0.0
    return pld.from_privacy_parameters(
        common.DifferentialPrivacyParameters(epsilon=eps, delta=delta),
        value_discretization_interval=VALUE_DISCRETIZATION_INTERVAL,
    )


def _build_pld(event: PrivacyEvent) -> PrivacyLossDistribution | None:
    from dp_accounting.pld import privacy_loss_distribution as pld

    vdi = VALUE_DISCRETIZATION_INTERVAL
    if isinstance(event, LaplaceEvent):
        if event.sensitivity / event.scale > _MAX_PURE_EPSILON:
            return None
        return pld.from_laplace_mechanism(
            event.scale, sensitivity=event.sensitivity, value_discretization_interval=vdi
        )
    if isinstance(event, GeometricEvent):
        if event.sensitivity / event.scale > _MAX_PURE_EPSILON:
            return None
        return pld.from_discrete_laplace_mechanism(
            1.0 / event.scale,
            sensitivity=int(event.sensitivity),
            value_discretization_interval=vdi,
        )
    if isinstance(event, GaussianEvent):
        if event.sensitivity / event.sigma > _MAX_GAUSSIAN_RATIO:
            return None
        return pld.from_gaussian_mechanism(
            event.sigma, sensitivity=event.sensitivity, value_discretization_interval=vdi
        )
    if isinstance(event, DiscreteGaussianEvent) and event.one_axis_shift is not None:
        shift = event.one_axis_shift
        if shift / event.sigma > _MAX_GAUSSIAN_RATIO or event.sigma > _MAX_LATTICE_SIGMA:
            return None
        return discrete_gaussian_pld(event.sigma, shift)
    if isinstance(event, ComposedEvent):
        out: PrivacyLossDistribution | None = _identity()
        for e in event.events:
            part = event_pld(e)
            if part is None or out is None:
                return None
            out = out.compose(part)
        return out
    if isinstance(event, RepeatedEvent):
        if event.count == 0:
            return _identity()
        return _repeated(event.event, event.count)
    return _from_budget(event.budget())


def discrete_gaussian_pld(sigma: float, shift: int) -> PrivacyLossDistribution:
    """The pessimistic PLD of discrete Gaussian noise N_Z(0, σ²) on a one-axis integer shift.

    Neighbouring outputs are Y and Y + shift, Y ~ N_Z(0, σ²) (the pmf
    ∝ exp(−y²/(2σ²)) on the integers; the normaliser cancels). The privacy
    loss at y is L(y) = (shift² − 2·shift·y)/(2σ²), decreasing in y, with the
    same distribution for adding and removing a row (y ↦ shift − y), so the
    PLD is symmetric. It is discretised by pessimistic *connect the dots*
    (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi, PETS 2022, Alg. 1;
    ``dp_accounting``'s ``create_pmf_pessimistic_connect_dots``) on every grid
    point between the smallest and largest loss: its input is the exact
    hockey-stick divergence δ(ε) = P[L > ε] − e^ε·Q[L > ε] at each grid ε,
    here prefix sums over the lattice (one NumPy pass), so a lattice σ of 10⁶
    takes about a second. (``from_discrete_gaussian_mechanism`` computes the
    same point by point; its default privacy buckets round every loss up,
    which for σ = 100 costs 5 % of the answers a session affords.)

    The support is |y| ≤ h, h = ⌈shift + 12σ⌉ + 1; the mass beyond it, at most
    2·exp(−h²/(2σ²))·(1 + 3σ) (per side Σ_{y>h} exp(−y²/(2σ²)) ≤
    exp(−h²/(2σ²))·σ²/h, and the normaliser is at least 1), is added to every
    δ(ε) (infinite loss), and δ is made non-increasing by raising values, never
    lowering them: the ε read off is never below the true one.
    """
    import numpy as np
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld

    vdi = VALUE_DISCRETIZATION_INTERVAL
    var = sigma * sigma
    half = math.ceil(shift + 12.0 * sigma) + 1
    y = np.arange(-half, half + 1, dtype=np.float64)
    log_w = -(y * y) / (2.0 * var)
    w = np.exp(log_w - log_w.max())
    p = w / w.sum()  # pairwise summation: relative error ~1e-16·log2(n)
    # Q(y) = p(y - shift): 0 below the support (a smaller Q only raises δ)
    q = np.concatenate([np.zeros(shift), p[: p.size - shift]])
    cum_p = np.concatenate([[0.0], np.cumsum(p)])
    cum_q = np.concatenate([[0.0], np.cumsum(q)])
    tail = min(1.0, 2.0 * math.exp(-(half * half) / (2.0 * var)) * (1.0 + 3.0 * sigma))
    low_loss = (shift * shift - 2.0 * shift * half) / (2.0 * var)
    high_loss = (shift * shift + 2.0 * shift * half) / (2.0 * var)
    grid = np.arange(math.floor(low_loss / vdi), math.ceil(high_loss / vdi) + 1)
    eps = grid * vdi
    # L(y) > ε  <=>  y < y*(ε); k = how many lattice points lie below y*
    k = np.searchsorted(y, (shift * shift - 2.0 * var * eps) / (2.0 * shift), side="left")
    deltas = np.clip(cum_p[k] - np.exp(eps) * cum_q[k] + tail, 0.0, 1.0)
    deltas = np.maximum.accumulate(deltas[::-1])[::-1]  # non-increasing, only raised
    pmf = pld_pmf.create_pmf_pessimistic_connect_dots(vdi, grid, deltas)
    return pld.PrivacyLossDistribution(pmf)


def _repeated(event: PrivacyEvent, count: int) -> PrivacyLossDistribution | None:
    """``event``'s PLD composed with itself ``count`` times, from cached PLDs of smaller counts.

    A power of two is the square of its half; any other count is the PLD of
    ``count`` without its lowest bit composed with that bit's power of two.
    Both parts go through the cache, so a search over counts whose probes
    extend an earlier probe by one bit (``Accountant.affordable``) pays one
    convolution per probe, and any count costs O(log count) convolutions.
    Not dp_accounting's ``self_compose``: for a small (sparse) PLD it first
    computes ``size ** count`` as a Python integer, seconds for count = 10⁶.
    Each ``compose`` truncates tails pessimistically, so the result stays an
    upper bound on the privacy loss.
    """
    if count == 1:
        return event_pld(event)
    lowest = count & -count
    if lowest == count:
        half = event_pld(RepeatedEvent(event, count // 2))
        return None if half is None else half.compose(half)
    rest = event_pld(RepeatedEvent(event, count - lowest))
    part = event_pld(event if lowest == 1 else RepeatedEvent(event, lowest))
    if rest is None or part is None:
        return None
    return rest.compose(part)


def event_pld(event: PrivacyEvent | Budget) -> PrivacyLossDistribution | None:
    """The pessimistic ``dp_accounting`` PLD of one event (a bare Budget: its (ε, δ)).

    None for a release too coarse to compose as a PLD (see ``_MAX_PURE_EPSILON``):
    a sequence containing one is accounted by basic composition. Raises
    InvalidParameterError for an event without a PLD and without a recorded
    (ε, δ) charge (e.g. a zCDP event built without ``epsilon=``).
    """
    e = as_event(event)
    hit = _CACHE.get(e, _MISSING)
    if hit is _MISSING:
        hit = _build_pld(e)
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        _CACHE[e] = hit
    return hit


def _fits(composed: PrivacyLossDistribution | None, budget: Budget) -> bool:
    """Whether ε at δ_B, rounded up as :func:`_epsilon` does, is at most ε_B.

    Decided by δ(ε) ≤ δ_B at an ε a little below ε_B (the same curve read the
    other way, monotone): dp_accounting computes δ(ε) with one vectorised pass,
    ε(δ) with a Python loop, 20 ms per call on a composition of hundreds.
    The margins make ``_epsilon(composed, δ_B) <= ε_B`` whenever this is True.
    """
    if composed is None:
        return False
    eps = float(budget.epsilon_exact) * (1 - 4 * _MARGIN) - 1e-14
    if eps < 0:
        return False
    delta = float(composed.get_delta_for_epsilon(eps))
    return delta * (1 + _MARGIN) <= float(budget.delta_exact) * (1 - _MARGIN)


def _epsilon(composed: PrivacyLossDistribution | None, delta: Fraction) -> Fraction | None:
    """ε at ``delta`` rounded up; None when no finite ε exists (infinite loss mass > δ)."""
    if composed is None:
        return None
    # float(delta) may round up by half an ulp; the float below it is a smaller δ,
    # for which the ε found is larger: still valid at the exact δ.
    d = float(delta)
    if Fraction(d) > delta:
        d = math.nextafter(d, 0.0)
    value = composed.get_epsilon_for_delta(d)
    if not math.isfinite(value):
        return None
    return max(_up(value), Fraction(0))


class PLDChain:
    """Events composed in sequence; the composed PLD is computed once per event and cached.

    Immutable from the outside: :meth:`then` returns a new chain one event
    longer. :meth:`pld` composes only the events added since the last chain
    whose PLD was computed, so an accountant that checks every charge pays one
    convolution per charge, not one per charge in its history. A computed
    chain forgets its parent, so old PLDs are freed. Once an event too coarse
    for a PLD joins, the chain's PLD is None for good (no more work).
    """

    __slots__ = ("_done", "_item", "_memo", "_next", "_parent")

    def __init__(self, parent: PLDChain | None = None, item: PrivacyEvent | Budget | None = None):
        self._parent = parent
        self._item = item
        self._done = item is None  # the empty chain: the identity PLD
        self._memo: PrivacyLossDistribution | None = None
        # the last child composed from this chain: (item, its PLD), so that a
        # charge checked (a preview) and then committed is composed once.
        self._next: tuple[PrivacyEvent | Budget, PrivacyLossDistribution | None] | None = None

    @classmethod
    def empty(cls) -> PLDChain:
        return cls()

    def then(self, item: PrivacyEvent | Budget) -> PLDChain:
        """This chain followed by ``item`` (nothing is computed yet)."""
        return PLDChain(self, item)

    def pld(self) -> PrivacyLossDistribution | None:
        """The composed PLD of every event in the chain (None: some event is too coarse)."""
        pending: list[PLDChain] = []
        node: PLDChain | None = self
        while node is not None and not node._done:
            pending.append(node)
            node = node._parent
        assert node is not None  # the empty chain at the root is always done
        base = _identity() if node._item is None and node._memo is None else node._memo
        prev = node
        for n in reversed(pending):
            assert n._item is not None
            hit = prev._next
            if hit is not None and hit[0] == n._item:
                base = hit[1]
            elif base is not None:
                one = event_pld(n._item)
                base = None if one is None else base.compose(one)
                prev._next = (n._item, base)
            n._memo, n._done, n._parent, prev = base, True, None, n
        return base

    def _with_extra(self, extra: Iterable[Budget]) -> PrivacyLossDistribution | None:
        composed = self.pld()
        for b in extra:
            one = _from_budget(b)
            if composed is None or one is None:
                return None
            composed = composed.compose(one)
        return composed

    def epsilon(self, delta: Fraction, extra: Iterable[Budget] = ()) -> Fraction | None:
        """ε at ``delta`` of the chain followed by ``extra`` (ε, δ) items; None if none is finite."""
        return _epsilon(self._with_extra(extra), delta)

    def within(self, budget: Budget, extra: Iterable[Budget] = ()) -> bool:
        """Whether the chain followed by ``extra`` is (ε_B, δ_B)-DP by its PLD (fast)."""
        return _fits(self._with_extra(extra), budget)


def pld_epsilon(
    events: Iterable[PrivacyEvent | Budget], delta: Fraction | float
) -> Fraction | None:
    """The tightest ε at ``delta`` of the events composed in sequence, rounded up.

    None when no finite ε exists at that δ (e.g. the events' own δ add up to more).
    """
    chain = PLDChain.empty()
    for e in events:
        chain = chain.then(e)
    return _epsilon(chain.pld(), Fraction(delta))


def largest_count(event: PrivacyEvent | Budget, budget: Budget, limit: int = 1_000_000) -> int:
    """How many times ``event`` can be repeated within ``budget`` under PLD composition.

    A binary search on the count with self-composition (one FFT-based
    self-convolution per probe): O(log limit) compositions.
    """
    one = event_pld(event)
    if one is None:
        raise InvalidParameterError(
            "this release is too coarse to compose as a privacy loss distribution "
            f"(pure epsilon above {_MAX_PURE_EPSILON:g} or sensitivity/sigma above "
            f"{_MAX_GAUSSIAN_RATIO:g}); use more noise or basic composition."
        )
    base = one

    def fits(k: int) -> bool:
        return _fits(base.self_compose(k), budget)

    if not fits(1):
        return 0
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return low
