"""Rényi-DP curves of dpkit's privacy events, for the ``"rdp"`` privacy filter.

The ``"rdp"`` composition rule (:class:`dpkit.accounting.filters.RenyiFilter`)
is an adaptive-valid stopping rule for *mixed* histories — Laplace, geometric,
Gaussian, discrete Gaussian, zCDP and pure-ε releases in any order, each
chosen after reading the earlier answers. This module holds its pure
functions: each release's RDP curve εᵢ(α) at the orders of :data:`ORDERS`
(:func:`rdp_curve`, one theorem per mechanism), the split of δ over the
orders (:func:`delta_shares`) and the RDP budget per order
(:func:`rdp_budgets`, the conversion of Canonne, Kamath & Steinke 2020,
Prop. 12). The theorem and its proof sketch are in ``docs/accounting.md``,
"The Rényi filter". Everything here depends on public parameters only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from dpkit.accounting.budget import Budget
from dpkit.accounting.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    GeometricEvent,
    LaplaceEvent,
    PrivacyEvent,
    RepeatedEvent,
    ZCDPEvent,
    _GaussianLike,
    as_event,
)
from dpkit.errors import InvalidParameterError

__all__ = [
    "ORDERS",
    "add_curves",
    "delta_shares",
    "laplace_rdp",
    "pure_rdp",
    "rdp_budgets",
    "rdp_curve",
    "rdp_epsilon",
]

#: The Rényi orders α the filter watches: α − 1 on a geometric grid from 0.05 to
#: about 640 (ratio 1.2, 53 orders), so the order best for a budget is within
#: 10% of the grid. Small orders serve large budgets, large orders long sequences.
ORDERS: tuple[float, ...] = tuple(1 + 0.05 * 1.2**k for k in range(53))

Curve = tuple[float, ...]


def _logsumexp2(a: float, b: float) -> float:
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m))


def laplace_rdp(alpha: float, epsilon: float) -> float:
    """RDP of the Laplace mechanism with scale b = Δ/ε at order α > 1 (Mironov 2017, Prop. 6).

    D_α = 1/(α−1) · log( α/(2α−1) · e^{(α−1)ε} + (α−1)/(2α−1) · e^{−αε} ), computed
    in log space (no overflow for large αε).
    """
    a = math.log(alpha / (2 * alpha - 1)) + (alpha - 1) * epsilon
    b = math.log((alpha - 1) / (2 * alpha - 1)) - alpha * epsilon
    return min(_logsumexp2(a, b) / (alpha - 1), epsilon)


def pure_rdp(alpha: float, epsilon: float) -> float:
    """The largest RDP at order α of any ε-DP mechanism: randomized response's.

    Bun & Steinke (TCC 2016), proof of Prop. 3.3: an ε-DP pair has
    D_α ≤ 1/(α−1) · log( (e^{αε} + e^{(1−α)ε}) / (1 + e^ε) ), with equality for
    randomized response; it is at most min(ε, αε²/2). Used for pure-ε costs and
    for the two-sided geometric (discrete Laplace) mechanism, whose privacy
    loss for a unit shift *is* randomized response's (±ε), so the continuous
    Laplace curve would not bound it.
    """
    if epsilon == 0:
        return 0.0
    num = _logsumexp2(alpha * epsilon, (1 - alpha) * epsilon)
    den = epsilon + math.log1p(math.exp(-epsilon))  # log(1 + e^ε)
    return min((num - den) / (alpha - 1), epsilon, alpha * epsilon * epsilon / 2)


def _no_curve(what: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"composition='rdp' cannot account {what}: an (epsilon, delta) guarantee with "
        "delta > 0 has no Renyi-DP curve. Give the mechanism's noise (a Laplace, geometric, "
        "Gaussian or zCDP event), or use composition='basic' for (epsilon, delta) releases."
    )


def rdp_curve(item: Budget | PrivacyEvent, orders: Sequence[float] = ORDERS) -> Curve:
    """The RDP εᵢ(α) of one release at each order, by the theorem for its mechanism.

    Gaussian / discrete Gaussian / zCDP: α·ρ with ρ = Δ²/(2σ²) or the recorded ρ
    (Mironov 2017, Prop. 7; Canonne, Kamath & Steinke 2020, Thm 4; Bun &
    Steinke 2016). Laplace: :func:`laplace_rdp` at ε = Δ/scale. Geometric:
    :func:`pure_rdp`. A bare (ε, 0) cost: :func:`pure_rdp`, capped by α·ρ if it
    declares a ρ; a bare (ε, δ > 0) cost with a declared ρ: α·ρ.
    Composed / repeated events: the sum. Raises :class:`InvalidParameterError`
    for an (ε, δ) cost with δ > 0 and no ρ.
    """
    if isinstance(item, Budget):
        # a function of (ε, δ, ρ) only: the values Budget equality compares
        rho = None if item.rho_exact is None else float(item.rho_exact)
        if item.delta_exact == 0:
            eps = float(item.epsilon_exact)
            return tuple(
                pure_rdp(a, eps) if rho is None else min(pure_rdp(a, eps), a * rho) for a in orders
            )
        if rho is None:
            raise _no_curve("a cost given only as (epsilon, delta)")
        return tuple(a * rho for a in orders)
    event = as_event(item)
    if isinstance(event, _GaussianLike):
        rho = float(event.proven_rho() if event.rho is None else event.rho)
        return tuple(a * rho for a in orders)
    if isinstance(event, ZCDPEvent):
        return tuple(a * float(event.rho) for a in orders)
    if isinstance(event, LaplaceEvent):
        eps = float(event.proven_epsilon())
        return tuple(laplace_rdp(a, eps) for a in orders)
    if isinstance(event, GeometricEvent):
        eps = float(event.proven_epsilon())
        return tuple(pure_rdp(a, eps) for a in orders)
    if isinstance(event, EpsilonDeltaEvent):
        if event.delta != 0:
            raise _no_curve("an EpsilonDeltaEvent with delta > 0")
        return tuple(pure_rdp(a, float(event.epsilon)) for a in orders)
    if isinstance(event, ComposedEvent):
        parts = [rdp_curve(e, orders) for e in event.events]
        return tuple(math.fsum(p[k] for p in parts) for k in range(len(orders)))
    if isinstance(event, RepeatedEvent):
        return tuple(event.count * x for x in rdp_curve(event.event, orders))
    raise _no_curve(f"an event of type {type(event).__name__}")


def _cks_epsilon(alpha: float, rdp: float, delta: float) -> float:
    """ε of an (α, rdp)-RDP guarantee at δ (Canonne, Kamath & Steinke 2020, Prop. 12)."""
    return rdp + math.log1p(-1 / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1)


#: The share of the Rényi branch's δ put on the order α* best for α·ρ curves at the budget.
BEST_ORDER_SHARE = 0.9


def delta_shares(epsilon: Fraction, delta: Fraction, orders: Sequence[float] = ORDERS) -> Curve:
    """δ_α per order, Σ δ_α ≤ δ: :data:`BEST_ORDER_SHARE` on the order best for α·ρ curves, the rest spread.

    The best order α* maximises B(α)/α, i.e. admits the largest total ρ (a
    Gaussian or zCDP history, or many small Laplace releases, whose curves are
    close to α·ρ); it depends on the public budget only. The other orders
    serve workloads whose curves are not linear in α (a few large pure-ε
    releases). Measured at (ε, δ) = (1, 10⁻⁶) with 90 % of δ for the Rényi
    branch: 477 discrete Gaussian releases of ρ = 5·10⁻⁵ (zCDP: 487; with half
    of δ on α*, 451).
    """
    if delta <= 0:
        raise InvalidParameterError(
            "composition='rdp' needs a budget with delta > 0 (Renyi DP converts to "
            "(epsilon, delta)-DP only for delta > 0); give e.g. Budget(1.0, 1e-6) or use "
            "composition='basic'."
        )
    e, d = float(epsilon), float(delta)
    top = d * BEST_ORDER_SHARE
    best = max(
        range(len(orders)), key=lambda k: (e - _cks_epsilon(orders[k], 0.0, top)) / orders[k]
    )
    rest = (d - top) / (len(orders) - 1)
    return tuple(top if k == best else rest for k in range(len(orders)))


def rdp_budgets(epsilon: Fraction, shares: Curve, orders: Sequence[float] = ORDERS) -> Curve:
    """B(α): the largest RDP at order α that converts to (ε, δ_α), lowered by 10⁻⁹ (float safety).

    Negative where no RDP at that order fits (the order is never usable).
    """
    e = float(epsilon)
    out = []
    for a, share in zip(orders, shares, strict=True):
        b = e - _cks_epsilon(a, 0.0, share)
        out.append(b - 1e-9 * abs(b) if b > 0 else b)
    return tuple(out)


def rdp_epsilon(total: Curve, shares: Curve, orders: Sequence[float] = ORDERS) -> float:
    """The ε certified for RDP ``total`` with δ_α = ``shares`` (Σ δ_α at most δ_B)."""
    return max(
        0.0,
        min(_cks_epsilon(a, r, s) for a, r, s in zip(orders, total, shares, strict=True)),
    )


def add_curves(a: Curve, b: Curve, sign: int = 1) -> Curve:
    """Order-wise a + sign·b."""
    return tuple(x + sign * y for x, y in zip(a, b, strict=True))
