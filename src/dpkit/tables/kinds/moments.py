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

import warnings
from typing import Any

import numpy as np

from dpkit.tables import groups as G
from dpkit.tables import queries as Q
from dpkit.tables.engines.base import Engine, Rows
from dpkit.tables.validation import ValidatedQuery, moment_scale

__all__ = ["private_bounds", "release"]


def private_bounds(
    v: ValidatedQuery, engine: Engine, rows: Rows, epsilon: float, rng: Any
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


def release(v: ValidatedQuery, engine: Engine, rng: Any) -> Any:
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
                stacklevel=4,
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
