"""Sums, means, variances and standard deviations of a clipped column.

Privacy (add/remove one row; ``k`` rows per person with a privacy unit): each
value is clipped to the public ``bounds = (lo, hi)`` and, for a mean or
variance, centred at their middle ``c`` with radius ``r = (hi - lo) / 2``
(a sum is centred at 0, ``r = max(|lo|, |hi|)``). One row then moves the sum
of ``(x - c)**p`` by at most ``r**p``. The engines sum these terms as exact
integers on a ``2**-j`` grid (:func:`~dpkit.tables.queries.sum_grid`), so the
computed sum — not only the real-arithmetic one — has sensitivity
``k·(r**p + g/2)``. Laplace noise with that sensitivity is ε-DP per sum; the
row count gets geometric noise of scale ``k/ε``. A variance splits ε between
its parts (:func:`~dpkit.tables.queries.variance_split`) and composes them
sequentially. A mean with Laplace noise and public or no keys releases instead
its *two-sided sums* ``A = Σ (r_g + t)`` and ``B = Σ (r_g - t)`` (``t`` a
row's term on the grid, ``|t| <= r_g``, :func:`~dpkit.tables.queries.paired_radius`)
with one Laplace of all of ε: a row adds two non-negative terms whose sum is
exactly ``2 r_g``, so the vector's ℓ1 sensitivity is ``2 k r_g``
(:func:`~dpkit.tables.queries.paired_sensitivity`, which also covers the
conversion of the exact integer sums to doubles). The mean
``(mid - r_g) + 2 r_g A / (A + B)`` is post-processing. Against a centred sum
and a count at ε/2 each (the same ℓ1 ball, measured along other axes) its
error ``(Z_A (1 - f) - Z_B f) / n`` (``f`` the mean's place in the bounds) has
half the variance: ``(1 + (2f - 1)²)/2`` against ``1 + (2f - 1)²``, in units
of ``2 b² / n²``, to first order. A mean with private keys (its noisy count selects the
groups) or Gaussian steps splits ε between a sum and a count
(:func:`~dpkit.tables.queries.mean_split`). Group
vectors are parallel (a row is in one group, so at most ``k`` coordinates
change: the Laplace grid is calibrated with ``changed=k``, never on the
number of observed groups). With ``bounds="private"``, a fraction of ε first
buys the bounds from a thresholded noisy histogram over a public coarse grid
(:func:`private_bounds`); everything after is post-processing of that.

Gaussian noise (a session's ``noise="gaussian"``, or ``"auto"`` where it is
narrower; :mod:`dpkit.tables.noise`): each additive step spending εᵢ (each
sum of powers, and the row count of a mean or variance with public or no
keys) may instead add discrete Gaussian noise calibrated to ρᵢ = εᵢ²/2 zCDP,
sampled exactly (:meth:`~dpkit.mechanisms.Gaussian.from_rho` on the same
``2**-j`` grid; :meth:`~dpkit.mechanisms.DiscreteGaussian.from_rho` for the
count). Its ℓ2 sensitivity is the ℓ1 one, ``k·(r**p + g/2)`` (``k`` for the
count): a person's ``k`` rows may all fall in one group. With the session's
``max_groups=G`` a person keeps at most ``k`` rows in each of at most ``G``
groups (:class:`~dpkit.tables.engines.base.Contribution`): then ℓ1 is
``G·k·(r**p + g/2)`` (Laplace) and ℓ2 ``√G·k·(r**p + g/2)`` (Gaussian). Each Gaussian step is ρᵢ-zCDP (Canonne, Kamath & Steinke 2020,
Thm 14; its rounding to the grid is in its sensitivity), a Laplace step
εᵢ-DP hence εᵢ²/2-zCDP, so the query is ρ-zCDP with ρ = Σ εᵢ²/2 over its
steps (sequential composition; group vectors still parallel). A Gaussian
step is charged ``(εᵢ', δ_n)`` with ρᵢ declared (εᵢ' the zCDP→(ε, δ)
conversion at the paying accountant's δ_n); the query's event is the
composition of its steps' events and its cost that event's budget. The
choice of noise per step is a public rule (:func:`_chosen`) made from ε,
``k``, the level and the public bounds (with ``bounds="private"``, the
public coarse range): never from the data. With private keys the count that
selects the groups stays geometric (its threshold is calibrated to it), and
a Gaussian sum is calibrated for the ``k`` groups a person can change (not
for the observed, private, number of groups).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from dpkit._checks import exact
from dpkit.accounting.events import EpsilonDeltaEvent, PrivacyEvent, ZCDPEvent
from dpkit.errors import InvalidParameterError
from dpkit.tables import groups as G
from dpkit.tables import queries as Q
from dpkit.tables.engines.base import Engine, Rows
from dpkit.tables.kinds.base import (
    COMMON,
    ExpectedError,
    Kind,
    amount,
    parameter,
    percent,
    selection,
)
from dpkit.tables.kinds.count import counting_noise, gaussian_cost
from dpkit.tables.noise import additive, choose

if TYPE_CHECKING:
    from dpkit.mechanisms import Laplace

from dpkit.tables.validation import (
    MAX_ROWS_PER_GROUP,
    TableContext,
    ValidatedQuery,
    numeric_value,
    public_bounds,
)

__all__ = [
    "MEAN",
    "STD",
    "SUM",
    "VARIANCE",
    "MomentQuery",
    "check_moment_range",
    "expected_error",
    "moment_scale",
    "private_bounds",
    "release",
    "validate",
]


@dataclass(frozen=True)
class MomentQuery(ValidatedQuery):
    """A validated sum, mean, variance or std: public clipping bounds, or private ones to buy."""

    bounds: tuple[float, float] | None = None
    private_bounds: bool = False
    coarse_range: tuple[float, float] | None = None


def validate(spec: Any, ctx: TableContext, common: dict[str, Any]) -> MomentQuery:
    """Bounds public (finite, in range for the kind) or 'private' (a public coarse grid)."""
    kind, column = spec.kind, spec.column
    numeric_value(ctx, column, None)  # the column's type, before anything is charged
    private = spec.bounds == "private"
    if private:
        coarse = ctx.schema.get(column).coarse_range
        grid = Q.coarse_grid(coarse)
        return MomentQuery(
            statistic=kind,
            value=numeric_value(ctx, column, (float(grid[0]), float(grid[-1]))),
            private_bounds=True,
            coarse_range=coarse,
            **common,
        )
    bounds = public_bounds(ctx, column, spec.bounds, allow_private=True)
    check_moment_range(bounds, kind)
    return MomentQuery(
        statistic=kind, value=numeric_value(ctx, column, bounds), bounds=bounds, **common
    )


def moment_scale(bounds: tuple[float, float], kind: str) -> tuple[float, float]:
    """(center, radius) of a moment's terms: a sum is centred at 0, the others at the middle."""
    lo, hi = bounds
    center = 0.0 if kind == "sum" else (lo + hi) / 2
    return center, max(abs(lo - center), abs(hi - center))


def check_moment_range(bounds: tuple[float, float], kind: str) -> None:
    """Refuse bounds whose terms, or sums of up to 2**32 of them, leave a double's range."""
    power = 2 if kind in ("variance", "std") else 1
    lo, hi = bounds
    center, radius = moment_scale(bounds, kind)
    try:
        # sum_grid(v) is about v / 2**20 and the engines scale by its inverse: keep both
        # normal; and a whole group's sum (and its noise) must stay finite.
        ok = math.isfinite(center) and all(
            math.isfinite(radius**p * MAX_ROWS_PER_GROUP * 2**4) and radius**p >= 2.0**-1000
            for p in range(1, power + 1)
        )
    except OverflowError:
        ok = False
    if not ok:
        raise InvalidParameterError(
            f"bounds ({lo!r}, {hi!r}) are out of range for a {kind}: the clipped values"
            f"{' or their squares' if power == 2 else ''}, summed over up to 2**32 rows, "
            "overflow or underflow a double. Declare bounds in other units (e.g. thousands, "
            "or millionths)."
        )


def private_bounds(
    v: MomentQuery, engine: Engine, rows: Rows, epsilon: float, rng: Any
) -> tuple[tuple[float, float], bool]:
    """Clipping bounds from a noisy histogram over a public coarse grid (ε-DP), and whether found.

    One pass counts the values by coarse bin (``±2**j`` edges, or the
    schema's ``coarse_range``); each row is in one bin, so geometric noise of
    scale ``k/ε`` makes the counts ε-DP, and the bounds are post-processing.
    If no bin's noisy count reaches the threshold (too few rows for this ε),
    the whole coarse range is returned and ``found`` is false.
    """
    from dpkit.mechanisms import Geometric

    grid = Q.coarse_grid(v.coarse_range)
    assert v.value is not None
    frame = engine.bin_counts(rows, v.value, (), list(grid))
    counts = np.zeros(grid.size - 1, dtype=np.int64)
    bins = frame["bin"].to_numpy(dtype=np.int64)
    ok = (bins >= 0) & (bins < counts.size)
    np.add.at(counts, bins[ok], frame["n"].to_numpy(dtype=np.int64)[ok])
    mech = Geometric(epsilon=epsilon, sensitivity=v.max_contributions, size=counts.size)
    noisy = np.asarray(mech.randomise(counts, rng=rng)).reshape(-1)
    threshold = Q.private_bounds_threshold(epsilon, counts.size, v.max_contributions)
    found = bool(np.any(noisy >= threshold))
    return Q.private_bounds(noisy, grid, threshold), found


def _summed(bounds: tuple[float, float], kind: str) -> tuple[float, list[float], list[float]]:
    """(centre, sum grids, per-row bounds) of the sums a moment adds up, from its bounds.

    Per-row terms are summed as integers on a 2**-j grid (exact); a row's
    rounded term is at most ``radius**p + grid/2`` in absolute value.
    """
    power = 2 if kind in ("variance", "std") else 1
    center, radius = moment_scale(bounds, kind)
    grids = [Q.sum_grid(radius**p) for p in range(1, power + 1)]
    bound = [radius**p + g / 2 for p, g in zip(range(1, power + 1), grids)]
    return center, grids, bound


def _laplace(v: MomentQuery, epsilon: float, sensitivity: float, size: int) -> Laplace:
    """The Laplace noise of one sum over ``size`` groups (sensitivity times ``k``)."""
    from dpkit.mechanisms import Laplace

    k = v.max_contributions
    # A person changes at most k groups' sums; with private keys the observed size is
    # private, so only k (public) may calibrate the grid.
    private_keys = v.grouping is not None and v.grouping.private
    changed = k if private_keys else min(k, size)
    return Laplace(epsilon=epsilon, sensitivity=k * sensitivity, size=size, changed=changed)


def _private_keys(v: MomentQuery) -> bool:
    return v.grouping is not None and v.grouping.private


def _public_size(v: MomentQuery) -> int:
    """How many values a step releases, as far as it is public (1 with private keys)."""
    grouping = v.grouping
    return 1 if grouping is None or grouping.private else max(len(grouping.keys or ()), 1)


def _sum_noise(v: MomentQuery, name: str, epsilon: float, sensitivity: float, size: int) -> Any:
    """The mechanism ``name`` ("laplace" or "gaussian") of one sum, ℓ1 = ℓ2 = ``k·sensitivity``.

    Grouped with ``max_groups=G`` (``k`` rows in each of at most ``G``
    groups): ℓ1 ``G·k·sensitivity`` (``v.max_contributions`` is ``k·G``), ℓ2
    ``√G·k·sensitivity`` (:attr:`~dpkit.tables.validation.ValidatedQuery.l2_contributions`).
    A Gaussian sum with private keys is calibrated for the ``k`` coordinates a
    person can change (:func:`_randomise` applies it to any number of groups),
    never for the observed number of groups.
    """
    if name == "laplace":
        return _laplace(v, epsilon, sensitivity, size)
    l1 = v.max_contributions * sensitivity
    l2 = v.l2_contributions * sensitivity
    gaussian = replace(v.noise, kind="gaussian")
    width = v.max_contributions if _private_keys(v) else size
    return additive(gaussian, epsilon=epsilon, l1=l1, l2=l2, level=v.level, size=width)


def _chosen(v: MomentQuery, epsilon: float, sensitivity: float) -> str:
    """The noise of one sum: the public rule of :mod:`dpkit.tables.noise` on public parameters.

    Laplace when the session's noise is Laplace-only, Gaussian when it asks
    for it, else (``"auto"``) the one whose half-width at the query's level is
    the smaller (ties: Laplace), compared on the mechanisms the release builds.
    """
    if v.noise.laplace_only:  # nothing to build: today's path, unchanged
        return "laplace"
    size = _public_size(v)
    chosen = choose(
        v.noise,
        lambda: _sum_noise(v, "laplace", epsilon, sensitivity, size),
        lambda: _sum_noise(v, "gaussian", epsilon, sensitivity, size),
        v.level,
    )
    return str(chosen.name)


def _count_noise(v: MomentQuery, epsilon: float, size: int) -> Any:
    """The row count's mechanism: the selection's geometric counts with private keys, else
    :func:`~dpkit.tables.kinds.count.counting_noise` (geometric or discrete Gaussian)."""
    from dpkit.mechanisms import Geometric

    if _private_keys(v):
        return Geometric(epsilon=epsilon, sensitivity=v.max_contributions, size=size)
    return counting_noise(v, epsilon, size=size)


@dataclass(frozen=True)
class _Steps:
    """A moment's additive steps after any bounds step: ε shares and mechanisms, in order.

    ``count`` is None for a sum (its private keys' selection is separate);
    ``sums[p - 1]`` adds noise to the sum of ``(x - c)**p``. Built by
    :func:`_steps`, the one construction the release, its events and its
    error bar use.
    """

    count: Any | None
    count_epsilon: float
    sums: tuple[Any, ...]
    sum_epsilons: tuple[float, ...]
    selection_epsilon: float = 0.0
    #: a mean's two-sided sums (:func:`_paired`): ``sums`` is one Laplace over (A, B) per group
    paired: bool = False

    @property
    def mechanisms(self) -> list[Any]:
        """The mechanisms in the order they run: the count (if any), then the sums."""
        return [*([] if self.count is None else [self.count]), *self.sums]

    def name(self) -> str:
        """``mechanism`` of the release: the sums' names then the count's, without repeats."""
        return "+".join(dict.fromkeys(m.name for m in [*reversed(self.sums), *self.mechanisms]))

    def any_gaussian(self) -> bool:
        return any(m.name not in ("laplace", "geometric") for m in self.mechanisms)


def _steps(
    v: MomentQuery,
    epsilon: float,
    bounds: tuple[float, float],
    size: int,
    public_bounds: tuple[float, float] | None = None,
) -> _Steps:
    """The mechanisms of a moment spending ``epsilon`` with clipping ``bounds`` over ``size`` values.

    The noise of each sum is chosen (:func:`_chosen`) at ``public_bounds``
    (default ``bounds``): with ``bounds="private"`` the public coarse range,
    so that the choice, hence the event charged, never depends on the bought
    bounds.
    """
    kind = v.statistic
    _, _, bound = _summed(bounds, kind)
    _, _, public = _summed(public_bounds or bounds, kind)

    def noisy_sum(eps: float, p: int) -> Any:
        return _sum_noise(v, _chosen(v, eps, public[p - 1]), eps, bound[p - 1], size)

    if kind == "sum":
        eps_sel, eps_sum = G.selection_split(v, epsilon)
        return _Steps(None, 0.0, (noisy_sum(eps_sum, 1),), (eps_sum,), eps_sel)
    if kind == "mean" and _paired(v):
        return _Steps(
            None, 0.0, (_paired_noise(v, epsilon, bounds, size),), (epsilon,), paired=True
        )
    if kind == "mean":
        eps_sum, eps_count = Q.mean_split(epsilon)
        count = _count_noise(v, eps_count, size)
        return _Steps(count, eps_count, (noisy_sum(eps_sum, 1),), (eps_sum,))
    eps_q, eps_s, eps_c = Q.variance_split(epsilon)
    count = _count_noise(v, eps_c, size)
    return _Steps(count, eps_c, (noisy_sum(eps_s, 1), noisy_sum(eps_q, 2)), (eps_s, eps_q))


def _paired(v: MomentQuery) -> bool:
    """Whether a mean releases two-sided sums (public parameters only).

    Laplace-only noise without private keys: the count that selects private
    keys must stay a count, and Gaussian steps keep their own calibration.
    """
    return v.statistic == "mean" and v.noise.laplace_only and not _private_keys(v)


def _paired_noise(v: MomentQuery, epsilon: float, bounds: tuple[float, float], size: int) -> Any:
    """The Laplace noise of a mean's two-sided sums: ``2·size`` values, all of ε.

    Sensitivity :func:`~dpkit.tables.queries.paired_sensitivity`: ``2 k r_g``
    over the two coordinates of each of the at most ``min(k, size)`` groups a
    person's rows fall in.
    """
    from dpkit.mechanisms import Laplace

    _, radius = moment_scale(bounds, "mean")
    k = v.max_contributions
    changed = min(k, size)
    sensitivity = Q.paired_sensitivity(radius, k, changed)
    return Laplace(epsilon=epsilon, sensitivity=sensitivity, size=2 * size, changed=2 * changed)


def _randomise(mech: Any, values: Any, rng: Any) -> Any:
    """``mech``'s noise on each of ``values`` (an array; none when there are none).

    A mechanism calibrated for another number of coordinates than there are
    values (a Gaussian sum with private keys, calibrated for the ``k`` groups
    a person can change) is applied chunk by chunk: independent noise of the
    same σ on every coordinate, which is the multivariate discrete Gaussian its
    sensitivity was calibrated for (only ``k`` coordinates differ between
    neighbours, each rounded on the same grid). No observed group (private
    keys, nothing selected) releases nothing instead of failing after the
    charge.
    """
    arr = np.asarray(values).reshape(-1)
    m = mech.size
    if arr.size == m:
        return np.asarray(mech.randomise(arr, rng=rng)).reshape(-1)
    if arr.size == 0:
        return arr
    chunks = -(-arr.size // m)
    padded = np.zeros(chunks * m, dtype=arr.dtype)
    padded[: arr.size] = arr
    out = [np.asarray(mech.randomise(c, rng=rng)).reshape(-1) for c in padded.reshape(chunks, m)]
    return np.concatenate(out)[: arr.size]


def _facts(mech: Any) -> dict[str, Any]:
    """Public facts of one step's noise: its name and scale, or sigma and the ρ charged."""
    if mech.name in ("laplace", "geometric"):
        return {"mechanism": mech.name, "scale": mech.scale}
    return {"mechanism": mech.name, "sigma": mech.sigma, "rho": float(mech.charged_rho)}


def _zcdp_event(mech: Any) -> PrivacyEvent:
    """A Gaussian step known by its ρ (and its (ε', δ) charge) only: its σ follows bought bounds."""
    cost = mech.cost
    return ZCDPEvent(cost.rho_declared, epsilon=cost.epsilon_exact, delta=cost.delta_exact)


def parts(v: MomentQuery) -> list[PrivacyEvent]:
    """The release's events, in order, from public parameters only (:func:`_steps`).

    ``bounds="private"``: geometric counts over the coarse grid, then the
    moment at the rest of ε: as a pure-ε event with Laplace noise only (its
    noise scale follows the bounds found, so only its ε is fixed in advance);
    with Gaussian steps, each step's own event, a Gaussian sum's known by
    its ρ and (ε', δ) charge (:class:`~dpkit.accounting.events.ZCDPEvent`).
    Otherwise sum: private keys' selection, then its noisy sum; mean: a count
    (with private keys it also selects, (ε, δ)) and a sum; variance: the same
    with a sum of squares last.
    """
    from dpkit.mechanisms import Geometric

    k = v.max_contributions
    size = _public_size(v)
    if v.private_bounds:
        eps_bounds, eps_query = Q.split_epsilon(
            v.epsilon, [Q.PRIVATE_BOUNDS_FRACTION, 1 - Q.PRIVATE_BOUNDS_FRACTION]
        )
        first = Geometric(epsilon=eps_bounds, sensitivity=k).event
        whole = [first, EpsilonDeltaEvent(exact(eps_query), exact(v.delta))]
        if v.noise.laplace_only:
            return whole
        steps = _steps(v, eps_query, _coarse_bounds(v), size)
        if not steps.any_gaussian():
            return whole
        sums = [
            _zcdp_event(m) if m.name == "gaussian" else EpsilonDeltaEvent(exact(e))
            for m, e in zip(steps.sums, steps.sum_epsilons)
        ]
        return [first, *_count_events(v, steps), *sums]
    assert v.bounds is not None
    steps = _steps(v, v.epsilon, v.bounds, size)
    return [*_count_events(v, steps), *(m.event for m in steps.sums)]


def _count_events(v: MomentQuery, steps: _Steps) -> list[PrivacyEvent]:
    """The selection (private keys: (ε, δ) as a whole) or the count's noise, before the sums."""
    if steps.count is None:
        return selection(v, steps.selection_epsilon)
    return selection(v, steps.count_epsilon) or [steps.count.event]


def _coarse_bounds(v: MomentQuery) -> tuple[float, float]:
    """The public coarse range ``bounds="private"`` buys its bounds in."""
    grid = Q.coarse_grid(v.coarse_range)
    return float(grid[0]), float(grid[-1])


def release(v: MomentQuery, engine: Engine, rng: Any) -> Any:
    """The noisy moment(s); the privacy argument is this module's docstring."""
    kind, grouping, k = v.statistic, v.grouping, v.max_contributions
    private_keys = grouping is not None and grouping.private
    power = 2 if kind in ("variance", "std") else 1
    details: dict[str, Any] = {"sensitivity_factor": k}
    eps_query = v.epsilon
    if v.private_bounds:
        eps_bounds, eps_query = Q.split_epsilon(
            v.epsilon, [Q.PRIVATE_BOUNDS_FRACTION, 1 - Q.PRIVATE_BOUNDS_FRACTION]
        )
        bounds, found = private_bounds(v, engine, v.rows, eps_bounds, rng)
        details.update(bounds_epsilon=eps_bounds, bounds_found=found)
        if not found:  # a function of the noisy histogram: post-processing, not a leak
            warnings.warn(
                "bounds='private' found no coarse bin above its noise threshold (too few rows "
                "for this epsilon), so it fell back to the whole coarse range; the answer is "
                "then very noisy. Declare public bounds, or spend more epsilon.",
                UserWarning,
                stacklevel=5,  # past Kind.release, execute and the session
            )
    else:
        assert v.bounds is not None
        bounds = v.bounds
    lo, hi = bounds
    details["bounds"] = (lo, hi)
    assert v.value is not None
    value = replace(v.value, bounds=(lo, hi))
    center, grids, _ = _summed(bounds, kind)
    frame = engine.moments(
        G.pushed_down(v.rows, grouping),
        value,
        grouping.values if grouping else (),
        center,
        grids,
    )
    names = ["n", *[f"s{p}" for p in range(1, power + 1)]]
    keys, cols = G.aligned_columns(frame, grouping, names)
    n = cols["n"].astype(np.int64)
    for p, g in enumerate(grids, start=1):
        cols[f"s{p}"] = cols[f"s{p}"] * g  # exact: g is a power of 2
    size = max(len(keys), 1)
    keep = np.ones(len(keys), dtype=bool)
    public = _coarse_bounds(v) if v.private_bounds else None
    steps = _steps(v, eps_query, (lo, hi), size, public)

    if kind == "sum":
        if private_keys:
            keep, _, threshold = G.select_keys(n, steps.selection_epsilon, v.delta, k, rng)
            details["threshold"] = threshold
        (mech,) = steps.sums
        values = _randomise(mech, cols["s1"], rng)
        h = mech.half_width(v.level)
        cis = [(float(x) - h, float(x) + h) for x in values]
        details["half_width"] = h
        details.update({key: x for key, x in _facts(mech).items() if key != "mechanism"})
    elif steps.paired:
        (mech,) = steps.sums
        _, radius = moment_scale((lo, hi), "mean")
        low, high = Q.paired_sums(cols["s1"], n, radius)
        both = _randomise(mech, np.concatenate([low, high]), rng)
        noisy_low, noisy_high = both[: low.size], both[low.size :]
        h = mech.half_width(1 - (1 - v.level) / 2)  # a union bound over the two noises
        values = Q.paired_mean_estimate(noisy_low, noisy_high, (lo, hi), radius)
        ci_lo, ci_hi = Q.paired_mean_interval(noisy_low, noisy_high, h, (lo, hi), radius)
        cis = list(zip(ci_lo.tolist(), ci_hi.tolist()))
        details.update(estimator="two-sided sums", scale=mech.scale, half_width=h)
        details["epsilon_split"] = {"sums": steps.sum_epsilons[0]}
        if grouping is None:
            r_g, _ = Q.paired_radius(radius)
            details["noisy_count"] = float(noisy_low[0] + noisy_high[0]) / (2 * r_g)
    else:
        c_mech = steps.count
        assert c_mech is not None  # a mean or variance counts its rows
        noisy_n = np.asarray(_randomise(c_mech, n, rng), dtype=np.float64)
        if private_keys:
            threshold = Q.partition_threshold(steps.count_epsilon, v.delta, k)
            keep = noisy_n >= threshold
            details["threshold"] = threshold
        noisy = [_randomise(m, cols[f"s{p}"], rng) for p, m in enumerate(steps.sums, start=1)]
        part = 1 - (1 - v.level) / (power + 1)  # a union bound over the power + 1 noises
        h_n = c_mech.half_width(part)
        hs = [m.half_width(part) for m in steps.sums]
        if kind == "mean":
            values = Q.mean_estimate(noisy[0], noisy_n, (lo, hi))
            ci_lo, ci_hi = Q.mean_interval(noisy[0], noisy_n, hs[0], h_n, (lo, hi))
            cis = list(zip(ci_lo.tolist(), ci_hi.tolist()))
            details["epsilon_split"] = {"sum": steps.sum_epsilons[0], "count": steps.count_epsilon}
            if grouping is None:
                details["noisy_count"] = float(noisy_n[0])
        else:
            noisy_s, noisy_q = noisy
            values = Q.variance_estimate(noisy_q, noisy_s, noisy_n, (lo, hi))
            v_lo, v_hi = Q.variance_interval(noisy_q, noisy_s, noisy_n, hs[1], hs[0], h_n, (lo, hi))
            if kind == "std":
                values, v_lo, v_hi = np.sqrt(values), np.sqrt(v_lo), np.sqrt(v_hi)
            cis = list(zip(v_lo.tolist(), v_hi.tolist()))
            eps_s, eps_q = steps.sum_epsilons
            eps_c = steps.count_epsilon
            details["epsilon_split"] = {"squares": eps_q, "sum": eps_s, "count": eps_c}
    if not v.noise.laplace_only:  # which noise each step drew, and its public σ / scale
        labels = ["sum", "squares"][: len(steps.sums)]
        details["noise"] = {label: _facts(m) for label, m in zip(labels, steps.sums)}
        if steps.count is not None:
            details["noise"]["count"] = _facts(steps.count)
    return G.finish(
        v,
        [key for key, ok in zip(keys, keep) if ok],
        [float(x) for x, ok in zip(values, keep) if ok],
        [c for c, ok in zip(cis, keep) if ok],
        steps.name(),
        details,
        cost=gaussian_cost(_KINDS[kind], v),
    )


def expected_error(v: MomentQuery, level: float) -> ExpectedError:
    """The moment's error bar from ε, the bounds, ``k`` and the level only (no data).

    Built from the mechanisms the release builds (:func:`_steps`, Laplace or
    Gaussian per step, chosen at the query's level), each at ``level``'s
    share. A sum: ``± half_width`` of its noise. A mean or variance divides
    by the private row count ``n``, so the bar is ``per_row / n`` to first
    order (the worst case over the data of the linearised error,
    :func:`~dpkit.tables.queries.mean_split` and
    :func:`~dpkit.tables.queries.variance_split`), never more than the bounds
    allow; a std's is the square root of its variance's. With
    ``bounds="private"`` the whole coarse range stands in for the bounds to be
    bought (a bar the bought bounds can only shrink).
    """
    kind, grouping = v.statistic, v.grouping
    eps = v.epsilon
    if v.private_bounds:
        bounds = _coarse_bounds(v)
        eps = Q.split_epsilon(eps, [Q.PRIVATE_BOUNDS_FRACTION, 1 - Q.PRIVATE_BOUNDS_FRACTION])[1]
        note = ", at most: bounds='private' buys them first and the bar shrinks to theirs"
    else:
        assert v.bounds is not None
        bounds, note = v.bounds, ""
    _, radius = moment_scale(bounds, kind)
    steps = _steps(v, eps, bounds, _public_size(v))
    each = " per group" if grouping is not None else ""
    tail = f"{each}{note} ({percent(level)})"
    if kind == "sum":
        h = steps.sums[0].half_width(level)
        return ExpectedError(level, f"± {amount(h)}{tail}", half_width=h)
    if steps.paired:  # the error is (Z_A (1 - f) - Z_B f) / n, f in [0, 1]: at most h / n
        per_row = steps.sums[0].half_width(1 - (1 - level) / 2)
        text = f"± about {amount(per_row)}/n for n rows{tail}, at most ± {amount(2 * radius)}"
        return ExpectedError(level, text, per_row=per_row)
    assert steps.count is not None
    if kind == "mean":
        part = 1 - (1 - level) / 2
        per_row = steps.sums[0].half_width(part) + radius * steps.count.half_width(part)
        text = f"± about {amount(per_row)}/n for n rows{tail}, at most ± {amount(2 * radius)}"
        return ExpectedError(level, text, per_row=per_row)
    part = 1 - (1 - level) / 3
    per_row = (
        steps.sums[1].half_width(part)
        + 2 * radius * steps.sums[0].half_width(part)
        + radius**2 * steps.count.half_width(part)
    )
    if kind == "std":
        text = f"± about √({amount(per_row)}/n) for n rows{tail}, at most ± {amount(radius)}"
    else:
        text = f"± about {amount(per_row)}/n for n rows{tail}, at most ± {amount(radius**2)}"
    return ExpectedError(level, text, per_row=per_row)


_BOUNDS = parameter(
    "bounds",
    "(lo, hi): public clipping bounds (else the schema's), or 'private' to spend 25% of "
    "epsilon finding them",
    "[lo, hi] | 'private'",
    "tuple[float, float] | str | None",
)


def _moment(name: str, doc: str) -> Kind:
    return Kind(
        name=name,
        summary=doc.split("\n", 1)[0],
        doc=doc,
        parameters=(*COMMON, _BOUNDS),
        query_type=MomentQuery,
        validate_query=validate,
        release_query=release,
        module_doc=__doc__ or "",
        error=expected_error,
        parts=parts,
    )


SUM = _moment(
    "sum",
    """Noisy sum of the column clipped to ``bounds = (lo, hi)``.

    Privacy: ε-DP. Clipping bounds each row's contribution, so adding or
    removing a row changes the sum by at most ``max(|lo|, |hi|)`` (times
    ``k`` per person): Laplace noise of that scale over ε. ``ci`` is
    ``value ± half_width`` and contains the *clipped* sum. See
    :meth:`count` for ``group_by``/``keys``; with private keys half of ε
    selects the groups. ``bounds="private"`` first spends
    ``PRIVATE_BOUNDS_FRACTION`` (25%) of ε choosing the bounds from a
    thresholded noisy histogram over a public coarse grid (they are in
    ``details["bounds"]``); the same option works for mean, variance, std.
    With the session's ``noise="gaussian"`` (or ``"auto"`` where it is
    narrower): discrete Gaussian noise of σ = Δ₂/ε with Δ₂ = Δ₁ (a person's
    ``k`` rows may all be in one group), ρ = ε²/2 zCDP, charged ``(ε', δ)``
    with that ρ; ``mechanism`` is ``"gaussian"``, ``details`` has ``sigma``,
    ``rho`` and ``noise``.
    """,
)
MEAN = _moment(
    "mean",
    """Noisy mean of the column clipped to ``bounds``, from its two-sided sums.

    Privacy: ε-DP (add/remove one row; ``k`` rows per person). Each row's
    clipped value ``x`` adds ``x - lo`` to one sum and ``hi - x`` to another
    (on the exact sum grid, ``r_g + t`` and ``r_g - t``): two non-negative
    terms of total exactly ``hi - lo`` (``2 r_g``), so one Laplace of
    sensitivity ``k (hi - lo)`` on the pair, per group, spends all of ε
    (:func:`~dpkit.tables.queries.paired_sensitivity`). The mean
    ``lo + (hi - lo) A / (A + B)`` is post-processing, its RMSE 1/√2 of a
    centred sum over a count at ε/2 each, wherever the mean lies (to first
    order; docs/queries.md). ``ci`` contains the clipped mean with probability ≥ ``level``
    (union bound over the two noises, interval arithmetic:
    :func:`~dpkit.tables.queries.paired_mean_interval`); ``details`` has
    ``estimator`` ("two-sided sums"), the Laplace ``scale`` and each noise's
    ``half_width``. With private keys the groups are selected by a noisy
    count, so the mean is that count and a centred sum, ε split by
    :func:`~dpkit.tables.queries.mean_split`
    (:func:`~dpkit.tables.queries.mean_interval`).
    With the session's ``noise="gaussian"`` (or ``"auto"``, per step, where
    it is narrower) each step spending εᵢ adds discrete Gaussian noise of
    σ = Δ₂/εᵢ (Δ₂ = Δ₁), ρ-zCDP with ρ = Σ εᵢ²/2, the interval built the same
    way from each step's own half-width; ``details["noise"]`` names each
    step's noise with its σ and ρ (or scale). The selecting count of private
    keys stays geometric.
    """,
)
VARIANCE = _moment(
    "variance",
    """Noisy population variance of the clipped column, from three noisy sums.

    Privacy: ε-DP: Laplace sums of ``(clip(x) - mid)**2`` (sensitivity
    ``r**2``) and ``clip(x) - mid`` (``r``), and a geometric count
    (1), all times ``k``, with ε split ``0.293 : 0.414 : 0.293``
    (:func:`~dpkit.tables.queries.variance_split`). ``ci`` contains the
    clipped variance with probability ≥ ``level``
    (:func:`~dpkit.tables.queries.variance_interval`). Gaussian noise
    (``noise="gaussian"``/``"auto"``) as for :meth:`mean`, step by step:
    ρ = Σ εᵢ²/2 over the three sums.
    """,
)
STD = _moment(
    "std",
    """Square root of :meth:`variance` (post-processing; same guarantee and cost).""",
)

#: The moment kinds by name (a release's cost is its kind's: :func:`gaussian_cost`).
_KINDS = {kind.name: kind for kind in (SUM, MEAN, VARIANCE, STD)}
