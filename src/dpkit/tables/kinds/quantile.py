"""Quantiles (median, min and max too) by permute-and-flip over a public grid.

Privacy (add/remove one row; ``k`` per person): the candidates are the
``grid_size`` points of a public grid over the declared bounds (by default,
for a column whose declared type holds only integers, the integers and
half-integers of the bounds: :func:`~dpkit.tables.queries.aligned_grid`; the
choice reads the schema, never the data). A candidate's
utility is minus its distance, in rows, from the target rank
(:func:`~dpkit.tables.queries.quantile_utilities`), which one row moves by at
most ``max(q, 1 - q)``; permute-and-flip with that sensitivity (times ``k``)
is ε-DP (McKenna & Sheldon 2020) and never worse in expected utility than the
exponential mechanism. Min and max are the 0.01 and 0.99 quantiles: a raw
extreme plus noise is not DP on bounded data. ``details["rank_error"]`` bounds
the rank error at the release's level (a function of ε, the grid and the
level only). Groups: one selection per group (parallel composition); private
keys first pay half of ε for partition selection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit.accounting.events import PrivacyEvent
from dpkit.errors import InvalidParameterError
from dpkit.tables import groups as G
from dpkit.tables import queries as Q
from dpkit.tables.engines.base import Engine
from dpkit.tables.kinds.base import (
    COMMON,
    ExpectedError,
    Kind,
    parameter,
    percent,
    pure,
    selection,
)
from dpkit.tables.validation import (
    TableContext,
    ValidatedQuery,
    check_memory,
    numeric_value,
    public_bounds,
)
from dpkit.tables.values import numeric_type

__all__ = [
    "MAX",
    "MEDIAN",
    "MIN",
    "QUANTILE",
    "QuantileQuery",
    "check_grid_size",
    "check_q",
    "expected_error",
    "release",
    "validate",
]

_PF = "permute-and-flip"
_MAX_QUANTILE_GRID = 2**22 + 1


@dataclass(frozen=True)
class QuantileQuery(ValidatedQuery):
    """A validated quantile (median, min, max too): public bounds, the target q, the grid."""

    bounds: tuple[float, float]
    q: float
    grid_size: int
    grid_start: float
    step: float


def check_q(q: Any) -> float:
    if isinstance(q, bool) or not isinstance(q, int | float) or not 0 <= float(q) <= 1:
        raise InvalidParameterError("q must be a number in [0, 1].")
    return float(q)


def check_grid_size(grid_size: Any) -> int:
    if (
        isinstance(grid_size, bool)
        or not isinstance(grid_size, int)
        or not 2 <= grid_size <= _MAX_QUANTILE_GRID
    ):
        raise InvalidParameterError(
            f"grid_size must be an integer from 2 to {_MAX_QUANTILE_GRID} (candidate answers)."
        )
    return int(grid_size)


def validate(spec: Any, ctx: TableContext, common: dict[str, Any]) -> QuantileQuery:
    """q in [0, 1]; a grid of distinct doubles over public bounds, within the memory ceiling."""
    kind, column = spec.kind, spec.column
    default_q = {"median": 0.5, "min": Q.MIN_QUANTILE, "max": Q.MAX_QUANTILE}.get(kind)
    q = check_q(default_q if spec.q is None and kind != "quantile" else spec.q)
    grouping = common["grouping"]
    bounds = public_bounds(ctx, column, spec.bounds, allow_private=False)
    aligned = None
    if spec.grid_size is None:
        grid_size = Q.QUANTILE_GRID if grouping is None else Q.GROUPED_QUANTILE_GRID
        if _integral(ctx, column):
            aligned = Q.aligned_grid(bounds, grid_size)
    else:
        grid_size = check_grid_size(spec.grid_size)
    if aligned is not None:
        bounds, step, grid_size = aligned
        start = bounds[0]
    else:
        grid = Q.uniform_grid(bounds, grid_size)
        start, step = bounds[0], (bounds[1] - bounds[0]) / (grid_size - 1)
        if not (math.isfinite(step) and step > 0) or not np.all(np.diff(grid) > 0):
            raise InvalidParameterError(
                f"bounds {bounds} are too narrow (or too wide) for {grid_size} distinct "
                "candidate answers in double precision; widen them or ask for a smaller "
                "grid_size."
            )
    check_memory(grouping, 2 * grid_size - 1, "the quantile's grid")
    return QuantileQuery(
        statistic="quantile",
        value=numeric_value(ctx, column, bounds),
        bounds=bounds,
        q=q,
        grid_size=grid_size,
        grid_start=start,
        step=step,
        **common,
    )


def _integral(ctx: TableContext, column: str) -> bool:
    """True when every value the engine reads from ``column`` is an integer (declared type).

    Booleans, integer storage types and DECIMAL(p, 0), with no fractional
    replacement for missing values: a property of the schema, never of the data.
    """
    spec, kind = ctx.schema.get(column), ctx.kinds[column]
    if kind == "numeric":
        rep = numeric_type(ctx.types[column])
        if not (rep.family == "integer" or (rep.family == "decimal" and rep.scale == 0)):
            return False
    elif kind != "boolean":
        return False
    return spec.nulls != "replace" or float(spec.replacement).is_integer()


def release(v: QuantileQuery, engine: Engine, rng: Any) -> Any:
    """The chosen grid point(s); the privacy argument is this module's docstring."""
    from dpkit.mechanisms import permute_and_flip

    assert v.value is not None
    grouping, k, q = v.grouping, v.max_contributions, v.q
    sensitivity = k * max(q, 1.0 - q)
    lo, hi = v.bounds
    step = v.step
    grid = v.grid_start + np.arange(v.grid_size, dtype=np.float64) * step
    eps_sel, eps_em = G.selection_split(v, v.epsilon)
    frame = engine.grid_counts(
        G.pushed_down(v.rows, grouping),
        v.value,
        grouping.values if grouping else (),
        v.grid_start,
        step,
        grid.size,
    )
    n_codes = 2 * grid.size - 1
    codes = frame["code"].to_numpy(dtype=np.int64)
    codes = np.where((codes >= 0) & (codes < n_codes), codes, -1)
    keys, matrix = G.dense_matrix(frame, grouping, codes, n_codes)
    details: dict[str, Any] = {
        "q": q,
        "bounds": (lo, hi),
        "resolution": step,
        "rank_error": Q.em_rank_error(eps_em, sensitivity, grid.size, v.level),
    }
    keys, matrix = G.keep_selected(v, keys, matrix, eps_sel, rng, details)
    if matrix.shape[0] == 0:
        return G.finish(v, [], [], [], _PF, details)
    utilities = Q.quantile_utilities(matrix, q)
    chosen = np.atleast_1d(
        permute_and_flip(utilities, epsilon=eps_em, sensitivity=sensitivity, rng=rng)
    )
    values = [float(x) for x in grid[chosen]]
    return G.finish(v, keys, values, [None] * len(keys), _PF, details)


def parts(v: QuantileQuery) -> list[PrivacyEvent]:
    """Private keys' selection, then permute-and-flip (an exponential mechanism: ε-DP only)."""
    eps_sel, eps_em = G.selection_split(v, v.epsilon)
    return [*selection(v, eps_sel), pure(eps_em)]


def expected_error(v: QuantileQuery, level: float) -> ExpectedError:
    """The rank error (in rows) at ``level``: ε, ``q``, the grid size and ``k`` only.

    No bar in value units exists without the data (how many rows lie near
    the answer is private), so this is the bound the release states as
    ``details["rank_error"]`` (:func:`~dpkit.tables.queries.em_rank_error`).
    """
    sensitivity = v.max_contributions * max(v.q, 1.0 - v.q)
    eps_em = G.selection_split(v, v.epsilon)[1]
    rows = Q.em_rank_error(eps_em, sensitivity, v.grid_size, level)
    target = "the median's" if v.q == 0.5 else f"the {v.q:g} quantile's"
    each = " in each group" if v.grouping is not None else ""
    return ExpectedError(
        level,
        f"rank within ± {rows:,.0f} rows of {target}{each} ({percent(level)})",
        half_width=rows,
        unit="rows",
    )


_BOUNDS = parameter(
    "bounds",
    "(lo, hi): the public range of the grid (else the schema's)",
    "[lo, hi]",
    "tuple[float, float] | None",
)
_GRID = parameter(
    "grid_size",
    "the number of candidate answers (default 1,048,577; 10,001 per group; integer columns: "
    "every integer and half-integer of the bounds, within those sizes)",
    "integer",
    "int | None",
    check=check_grid_size,
)


def _q(doc: str, **more: Any) -> Any:
    return parameter("q", doc, "number", "float", check=check_q, **more)


def _quantile(name: str, q: Any, doc: str) -> Kind:
    return Kind(
        name=name,
        summary=doc.split("\n", 1)[0],
        doc=doc,
        parameters=(*COMMON, _BOUNDS, *q, _GRID),
        query_type=QuantileQuery,
        validate_query=validate,
        release_query=release,
        module_doc=__doc__ or "",
        head=(lambda v: f"quantile({v.spec.column}, q={v.q})") if name == "quantile" else None,
        error=expected_error,
        parts=parts,
    )


QUANTILE = _quantile(
    "quantile",
    (_q("the quantile to release, in [0, 1]", required=True, positional=True),),
    """A q-quantile chosen by permute-and-flip over a public grid.

    The candidates are ``grid_size`` evenly spaced points of ``bounds``
    (public; default :data:`~dpkit.tables.queries.QUANTILE_GRID` = 1,048,577
    points, or 10,001 per group with ``group_by``). One engine pass counts
    the clipped values by grid position; candidate ``c`` has utility
    ``-max(#{x < c} - qn, #{x > c} - (1-q)n, 0)``
    (:func:`~dpkit.tables.queries.quantile_utilities`), sensitivity
    ``Δ = max(q, 1 - q)`` (times ``k`` per person). Permute-and-flip
    (McKenna & Sheldon 2020) accepts candidates in a random order, each
    with probability ``exp(ε (u - u_max) / (2Δ))``: ε-DP, like the
    exponential mechanism ``∝ exp(ε u / (2Δ))``, and never less accurate in
    expectation. The answer is a grid point, so its resolution is
    ``(hi - lo) / (grid_size - 1)``.

    Integer columns (a declared integer, boolean or DECIMAL(p, 0) type, and
    no fractional replacement for missing values): without ``grid_size``,
    the bounds become ``(ceil(lo), floor(hi))`` (no integer moves) and the
    candidates are every integer and half-integer between them (step 1/2;
    a coarser power-of-two step when that exceeds the default size), so a
    median of integer ages can be exactly the integer it is
    (:func:`~dpkit.tables.queries.aligned_grid`). ``details["resolution"]``
    and ``details["bounds"]`` report the grid used.

    Accuracy: no interval in value units can be given without looking at
    the data, so ``ci`` is ``None`` and ``details["rank_error"]`` states
    the guarantee instead: with probability ≥ ``level`` the released
    value's utility is within that many rows of the best grid point's.
    """,
)
MEDIAN = _quantile(
    "median",
    (),
    """:meth:`quantile` with ``q = 0.5`` (same guarantee: ε-DP, or (ε, δ) with private keys).""",
)
MIN = _quantile(
    "min",
    (_q("the quantile released as the minimum", default=Q.MIN_QUANTILE),),
    """A private minimum: the ``q = MIN_QUANTILE`` (0.01) quantile by :meth:`quantile`.

    Never the raw minimum plus noise, which is not differentially private
    at any noise scale: one row can move the minimum anywhere in the
    bounds. Same guarantee as :meth:`quantile` (ε-DP).
    """,
)
MAX = _quantile(
    "max",
    (_q("the quantile released as the maximum", default=Q.MAX_QUANTILE),),
    """A private maximum: the ``q = MAX_QUANTILE`` (0.99) quantile by :meth:`quantile` (ε-DP).""",
)
