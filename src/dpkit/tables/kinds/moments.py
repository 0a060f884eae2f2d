"""Sums, means, variances and standard deviations of a clipped column.

Privacy (add/remove one row; ``k`` rows per person with a privacy unit): each
value is clipped to the public ``bounds = (lo, hi)`` and, for a mean or
variance, centred at their middle ``c`` with radius ``r = (hi - lo) / 2``
(a sum is centred at 0, ``r = max(|lo|, |hi|)``). One row then moves the sum
of ``(x - c)**p`` by at most ``r**p``. The engines sum these terms as exact
integers on a ``2**-j`` grid (:func:`~dpkit.tables.queries.sum_grid`), so the
computed sum — not only the real-arithmetic one — has sensitivity
``k·(r**p + g/2)``. Laplace noise with that sensitivity is ε-DP per sum; the
row count gets geometric noise of scale ``k/ε``. Mean and variance split ε
between their parts (:func:`~dpkit.tables.queries.mean_split`,
:func:`~dpkit.tables.queries.variance_split`) and compose sequentially; group
vectors are parallel (a row is in one group, so at most ``k`` coordinates
change: the Laplace grid is calibrated with ``changed=k``, never on the
number of observed groups). With ``bounds="private"``, a fraction of ε first
buys the bounds from a thresholded noisy histogram over a public coarse grid
(:func:`private_bounds`); everything after is post-processing of that.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit.errors import InvalidParameterError
from dpkit.tables import groups as G
from dpkit.tables import queries as Q
from dpkit.tables.engines.base import Engine, Rows
from dpkit.tables.kinds.base import COMMON, ExpectedError, Kind, amount, parameter, percent
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


def release(v: MomentQuery, engine: Engine, rng: Any) -> Any:
    """The noisy moment(s); the privacy argument is this module's docstring."""
    from dataclasses import replace

    from dpkit.mechanisms import Geometric, Laplace

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
    center, radius = moment_scale(bounds, kind)
    # Per-row terms are summed as integers on a 2**-j grid (exact); a row's rounded
    # term is at most radius**p + grid/2 in absolute value.
    grids = [Q.sum_grid(radius**p) for p in range(1, power + 1)]
    bound = [radius**p + g / 2 for p, g in zip(range(1, power + 1), grids)]
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
    # A person changes at most k groups' sums; with private keys the observed size is
    # private, so only k (public) may calibrate the grid.
    changed = k if private_keys else min(k, size)
    keep = np.ones(len(keys), dtype=bool)

    def laplace(eps: float, sens: float) -> Laplace:
        return Laplace(epsilon=eps, sensitivity=k * sens, size=size, changed=changed)

    if kind == "sum":
        eps_sel, eps_sum = G.selection_split(v, eps_query)
        if private_keys:
            keep, _, threshold = G.select_keys(n, eps_sel, v.delta, k, rng)
            details["threshold"] = threshold
        mech = laplace(eps_sum, bound[0])
        values = np.asarray(mech.randomise(cols["s1"], rng=rng)).reshape(-1)
        h = mech.half_width(v.level)
        cis = [(float(x) - h, float(x) + h) for x in values]
        details.update(half_width=h, scale=mech.scale)
        mechanism = "laplace"
    elif kind == "mean":
        eps_sum, eps_count = Q.mean_split(eps_query)
        c_mech = Geometric(epsilon=eps_count, sensitivity=k, size=size)
        noisy_n = np.asarray(c_mech.randomise(n, rng=rng), dtype=np.float64).reshape(-1)
        if private_keys:
            threshold = Q.partition_threshold(eps_count, v.delta, k)
            keep = noisy_n >= threshold
            details["threshold"] = threshold
        s_mech = laplace(eps_sum, bound[0])
        noisy_s = np.asarray(s_mech.randomise(cols["s1"], rng=rng)).reshape(-1)
        part = 1 - (1 - v.level) / 2
        h_s, h_n = s_mech.half_width(part), c_mech.half_width(part)
        values = Q.mean_estimate(noisy_s, noisy_n, (lo, hi))
        ci_lo, ci_hi = Q.mean_interval(noisy_s, noisy_n, h_s, h_n, (lo, hi))
        cis = list(zip(ci_lo.tolist(), ci_hi.tolist()))
        details["epsilon_split"] = {"sum": eps_sum, "count": eps_count}
        if grouping is None:
            details["noisy_count"] = float(noisy_n[0])
        mechanism = "laplace+geometric"
    else:
        eps_q, eps_s, eps_c = Q.variance_split(eps_query)
        c_mech = Geometric(epsilon=eps_c, sensitivity=k, size=size)
        noisy_n = np.asarray(c_mech.randomise(n, rng=rng), dtype=np.float64).reshape(-1)
        if private_keys:
            threshold = Q.partition_threshold(eps_c, v.delta, k)
            keep = noisy_n >= threshold
            details["threshold"] = threshold
        s_mech, q_mech = laplace(eps_s, bound[0]), laplace(eps_q, bound[1])
        noisy_s = np.asarray(s_mech.randomise(cols["s1"], rng=rng)).reshape(-1)
        noisy_q = np.asarray(q_mech.randomise(cols["s2"], rng=rng)).reshape(-1)
        part = 1 - (1 - v.level) / 3
        hq, hs, hn = q_mech.half_width(part), s_mech.half_width(part), c_mech.half_width(part)
        values = Q.variance_estimate(noisy_q, noisy_s, noisy_n, (lo, hi))
        v_lo, v_hi = Q.variance_interval(noisy_q, noisy_s, noisy_n, hq, hs, hn, (lo, hi))
        if kind == "std":
            values, v_lo, v_hi = np.sqrt(values), np.sqrt(v_lo), np.sqrt(v_hi)
        cis = list(zip(v_lo.tolist(), v_hi.tolist()))
        details["epsilon_split"] = {"squares": eps_q, "sum": eps_s, "count": eps_c}
        mechanism = "laplace+geometric"
    return G.finish(
        v,
        [key for key, ok in zip(keys, keep) if ok],
        [float(x) for x, ok in zip(values, keep) if ok],
        [c for c, ok in zip(cis, keep) if ok],
        mechanism,
        details,
    )


def expected_error(v: MomentQuery, level: float) -> ExpectedError:
    """The moment's error bar from ε, the bounds, ``k`` and the level only (no data).

    A sum: ``± half_width`` of its Laplace noise (the same mechanism the release
    builds). A mean or variance divides by the private row count ``n``, so the
    bar is ``per_row / n`` to first order (the worst case over the data of the
    linearised error, :func:`~dpkit.tables.queries.mean_split` and
    :func:`~dpkit.tables.queries.variance_split`), never more than the bounds
    allow; a std's is the square root of its variance's. With
    ``bounds="private"`` the whole coarse range stands in for the bounds to be
    bought (a bar the bought bounds can only shrink).
    """
    from dpkit.mechanisms import Geometric, Laplace

    kind, grouping, k = v.statistic, v.grouping, v.max_contributions
    private_keys = grouping is not None and grouping.private
    eps = v.epsilon
    if v.private_bounds:
        grid = Q.coarse_grid(v.coarse_range)
        bounds = (float(grid[0]), float(grid[-1]))
        eps = Q.split_epsilon(eps, [Q.PRIVATE_BOUNDS_FRACTION, 1 - Q.PRIVATE_BOUNDS_FRACTION])[1]
        note = ", at most: bounds='private' buys them first and the bar shrinks to theirs"
    else:
        assert v.bounds is not None
        bounds, note = v.bounds, ""
    _, radius = moment_scale(bounds, kind)
    size = 1 if grouping is None or private_keys else max(len(grouping.keys or ()), 1)
    changed = k if private_keys else min(k, size)

    def noise(e: float, p: int, part: float) -> float:
        bound = radius**p + Q.sum_grid(radius**p) / 2
        mech = Laplace(epsilon=e, sensitivity=k * bound, size=size, changed=changed)
        return mech.half_width(part)

    def count_noise(e: float, part: float) -> float:
        return Geometric(epsilon=e, sensitivity=k).half_width(part)

    each = " per group" if grouping is not None else ""
    tail = f"{each}{note} ({percent(level)})"
    if kind == "sum":
        h = noise(G.selection_split(v, eps)[1], 1, level)
        return ExpectedError(level, f"± {amount(h)}{tail}", half_width=h)
    if kind == "mean":
        eps_sum, eps_count = Q.mean_split(eps)
        part = 1 - (1 - level) / 2
        per_row = noise(eps_sum, 1, part) + radius * count_noise(eps_count, part)
        text = f"± about {amount(per_row)}/n for n rows{tail}, at most ± {amount(2 * radius)}"
        return ExpectedError(level, text, per_row=per_row)
    eps_q, eps_s, eps_c = Q.variance_split(eps)
    part = 1 - (1 - level) / 3
    per_row = (
        noise(eps_q, 2, part)
        + 2 * radius * noise(eps_s, 1, part)
        + radius**2 * count_noise(eps_c, part)
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
    """,
)
MEAN = _moment(
    "mean",
    """Noisy mean of the column clipped to ``bounds``: noisy centred sum / noisy count.

    Privacy: ε-DP by sequential composition of a Laplace sum of
    ``clip(x) - mid`` (sensitivity ``(hi - lo)/2``, times ``k``) and a
    geometric count (sensitivity ``k``), with ε split by
    :func:`~dpkit.tables.queries.mean_split` to minimise the worst-case
    error bound. The ratio is post-processing. ``ci`` contains the clipped
    mean with probability ≥ ``level`` (union bound over the two noises,
    interval arithmetic: :func:`~dpkit.tables.queries.mean_interval`).
    With private keys the noisy count also selects the groups.
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
    (:func:`~dpkit.tables.queries.variance_interval`).
    """,
)
STD = _moment(
    "std",
    """Square root of :meth:`variance` (post-processing; same guarantee and cost).""",
)
