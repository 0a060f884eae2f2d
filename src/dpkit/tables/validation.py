"""Step 1 of every query: check a spec against the declared schema. No data is read here.

:func:`validate` turns a :class:`~dpkit.tables.specs.QuerySpec` into a
:class:`ValidatedQuery` holding everything execution needs, every piece of it
a function of public input: the schema the data owner declared, the table's
column names and storage types, the session's privacy unit, and the spec.
Whatever can go wrong with public input goes wrong *here*, before the charge:

* unknown columns, wrong column kinds, parameters that do not fit the kind;
* filter literals, keys and domains parsed as values of the column's type
  (:mod:`dpkit.tables.values`), never left to the engine to cast;
* bounds finite, ordered, and small enough that no sum over up to
  :data:`MAX_ROWS_PER_GROUP` rows can overflow; quantile grids whose points
  are distinct doubles;
* sizes — keys × grid, keys × bins, keys × domain — against
  :data:`MEMORY_CEILING`, so nothing after the charge runs out of memory
  because of what the analyst asked for.

After this, execution (:mod:`dpkit.tables.execution`) cannot fail in a way
that depends on the data; if an engine fails anyway, the analyst sees one
generic :class:`~dpkit.errors.ReleaseFailedError`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit._checks import MEMORY_CEILING, check_bounds, check_delta, check_epsilon, check_level
from dpkit.errors import DataError, InvalidParameterError
from dpkit.tables import queries as Q
from dpkit.tables.engines.base import COMPARISONS, ColumnKind, Condition, Rows, Value
from dpkit.tables.schema import Column, Schema
from dpkit.tables.specs import QuerySpec
from dpkit.tables.values import canonical, temporal_type

__all__ = [
    "HISTOGRAM2D_METHODS",
    "HISTOGRAM_METHODS",
    "MAX_ROWS_PER_GROUP",
    "MEMORY_CEILING",
    "Grouping",
    "TableContext",
    "ValidatedQuery",
    "validate",
]

#: ``histogram(method=...)`` values delegated to :mod:`dpkit.histograms`.
HISTOGRAM_METHODS = (
    "laplace",
    "hierarchical",
    "noise_first",
    "structure_first",
    "hb",
    "ahp",
    "dawa",
    "auto",
)
#: ``histogram2d(method=...)`` values, all from :mod:`dpkit.histograms`; ``auto2d`` is the default.
HISTOGRAM2D_METHODS = ("auto2d", "agrid", "ugrid", "dawa2d", "laplace2d")
HISTOGRAM2D_DEFAULT = "auto2d"
#: DAWA's partition step is quadratic in the cells: about a minute at this size.
MAX_DAWA2D_CELLS = 1 << 18
_N_RECORDS_METHODS = ("auto2d", "agrid", "ugrid")
#: Methods that take ``max_count``: StructureFirst's F; for ``auto``, the bound on rows.
_MAX_COUNT_METHODS = ("structure_first", "auto")


#: Rows per group for which sums are exact and cannot overflow (the documented limit).
MAX_ROWS_PER_GROUP = 2**32

_MAX_QUANTILE_GRID = 2**22 + 1


@dataclass(frozen=True)
class TableContext:
    """The public facts a query is checked against."""

    kinds: Mapping[str, ColumnKind]
    types: Mapping[str, str]
    schema: Schema
    max_contributions: int
    privacy_unit: str | None
    level: float


@dataclass(frozen=True)
class Grouping:
    """``group_by`` columns, how each is read, and the public keys (``None``: private keys)."""

    columns: tuple[str, ...]
    values: tuple[Value, ...]
    keys: tuple[tuple[Any, ...], ...] | None
    #: the public keys as the analyst wrote them (released under these names)
    labels: tuple[tuple[Any, ...], ...] | None = None

    @property
    def private(self) -> bool:
        return self.keys is None

    @property
    def width(self) -> int:
        """Rows of dense per-group arrays known before reading: public keys, else 1 per group."""
        return 1 if self.keys is None else len(self.keys)


@dataclass(frozen=True)
class ValidatedQuery:
    """A spec checked against the schema: everything execution needs, all of it public."""

    spec: QuerySpec
    statistic: str  # count, sum, mean, variance, std, quantile, mode, histogram, histogram2d
    epsilon: float
    delta: float
    level: float
    rows: Rows
    grouping: Grouping | None
    value: Value | None
    max_contributions: int
    bounds: tuple[float, float] | None = None
    private_bounds: bool = False
    coarse_range: tuple[float, float] | None = None
    q: float | None = None
    grid_size: int | None = None
    domain: tuple[Any, ...] | None = None
    #: the domain as the analyst or schema wrote it (answers are reported in these terms)
    domain_labels: tuple[Any, ...] | None = None
    edges: tuple[float, ...] | None = None
    method: str | None = None
    max_count: int | None = None
    #: histogram2d: the y axis (``value``/``edges`` are the x axis) and the declared row count
    value2: Value | None = None
    edges2: tuple[float, ...] | None = None
    n_records: float | None = None

    @property
    def privacy_unit(self) -> str | None:
        return None if self.rows.contribution is None else self.rows.contribution.column


def validate(spec: QuerySpec, ctx: TableContext) -> ValidatedQuery:
    """Check ``spec`` against the public facts in ``ctx``; raise on anything wrong."""
    if not isinstance(spec, QuerySpec):
        raise InvalidParameterError("expected a query spec (dpkit.tables.Query / QuerySpec).")
    kind = spec.kind
    epsilon = check_epsilon(spec.epsilon)
    # Per contributed row (histogram methods spend epsilon / k): the floor keeps every
    # share of it within the samplers' range, so nothing fails after the charge.
    check_epsilon(epsilon / ctx.max_contributions, name="epsilon / max_contributions")
    level = ctx.level if spec.level is None else check_level(spec.level)
    column = spec.column
    if column is None and kind != "count":
        raise InvalidParameterError(f"{kind}() needs a column.")
    if column is not None:
        _check_column(ctx, column)
    where = tuple(_condition(ctx, c) for c in spec.where)
    grouping = _grouping(ctx, spec.group_by, spec.keys)
    delta = check_delta(spec.delta or 0.0)
    if grouping is not None and grouping.private:
        check_delta(delta, allow_zero=False, name="delta (needed by keys='private')")
    elif delta:
        raise InvalidParameterError(
            f"{kind}() spends no delta unless keys='private' (partition selection); drop delta=."
        )
    from dpkit.tables.engines.base import Contribution

    contribution = (
        None
        if ctx.privacy_unit is None
        else Contribution(ctx.privacy_unit, ctx.max_contributions, 0)  # salt drawn per query
    )
    common: dict[str, Any] = {
        "spec": spec,
        "epsilon": epsilon,
        "delta": float(delta),
        "level": level,
        "rows": Rows(where=where, contribution=contribution),
        "grouping": grouping,
        "max_contributions": ctx.max_contributions,
    }
    if kind == "count":
        return ValidatedQuery(statistic="count", value=_count_value(ctx, column), **common)
    assert column is not None
    if kind in ("sum", "mean", "variance", "std"):
        return _moments(ctx, kind, column, common)
    if kind in ("quantile", "median", "min", "max"):
        return _quantile(ctx, kind, column, common)
    if kind == "mode":
        domain, labels = _domain(ctx, column, spec.domain, "mode()")
        _check_memory(grouping, len(domain), "mode() over the domain")
        return ValidatedQuery(
            statistic="mode",
            value=_category_value(ctx, column),
            domain=domain,
            domain_labels=labels,
            **common,
        )
    if kind == "histogram2d":
        return _histogram2d(ctx, column, common)
    return _histogram(ctx, column, common)


# ----------------------------------------------------------------------------- columns


def _check_column(ctx: TableContext, name: object, where: str = "the query") -> str:
    if not isinstance(name, str) or name not in ctx.kinds:
        raise InvalidParameterError(
            f"unknown column {name!r} in {where}; the table's columns are {sorted(ctx.kinds)}."
        )
    return name


def _condition(ctx: TableContext, cond: Condition) -> Condition:
    column = _check_column(ctx, cond.column, "the filter")
    if cond.op not in COMPARISONS:
        raise InvalidParameterError(
            f"unknown filter operator {cond.op!r}; use one of {COMPARISONS}."
        )
    kind, type_name = ctx.kinds[column], ctx.types[column]
    if cond.op in ("is null", "not null"):
        return Condition(column, cond.op)
    if cond.op in ("in", "not in"):
        values = cond.value if isinstance(cond.value, tuple) else ()
        out = tuple(canonical(v, column, kind, type_name, "filter value") for v in values)
        return Condition(column, cond.op, tuple(dict.fromkeys(out)))
    if kind == "boolean" and cond.op not in ("==", "!="):
        raise InvalidParameterError(
            f"boolean column {column!r} is filtered by == or != (or a list), not {cond.op!r}."
        )
    return Condition(
        column, cond.op, canonical(cond.value, column, kind, type_name, "filter value")
    )


def _count_value(ctx: TableContext, column: str | None) -> Value | None:
    if column is None:
        return None
    spec = ctx.schema.get(column)
    numeric = ctx.kinds[column] == "numeric"
    replacement = spec.replacement
    if spec.nulls == "replace":
        if numeric and (isinstance(replacement, bool) or not isinstance(replacement, int | float)):
            raise InvalidParameterError(
                f"the replacement for missing values of numeric column {column!r} must be a number."
            )
        replacement = float(replacement) if numeric else replacement
    return Value(column, numeric=numeric, nulls=spec.nulls, replacement=replacement)


def numeric_value(ctx: TableContext, column: str, bounds: tuple[float, float] | None) -> Value:
    """How a numeric query reads ``column``; errors for columns with no numbers."""
    spec = ctx.schema.get(column)
    kind = ctx.kinds[column]
    if kind == "text" and not spec.coerce:
        raise DataError(
            f"column {column!r} is stored as text ({ctx.types[column]}), so it has no numbers "
            "to aggregate. Clean the source, or declare coerce=True for it in the schema to "
            "read entries that are not numbers as missing (handled by its null policy)."
        )
    if kind not in ("numeric", "boolean", "text"):
        raise DataError(
            f"column {column!r} has type {ctx.types[column]}, which is not numeric; numeric "
            "queries need numbers or booleans."
        )
    if spec.nulls == "replace" and (
        isinstance(spec.replacement, bool) or not isinstance(spec.replacement, int | float)
    ):
        raise InvalidParameterError(
            f"the replacement for missing values of numeric column {column!r} must be a number."
        )
    return Value(
        column,
        numeric=True,
        nulls=spec.nulls,
        replacement=float(spec.replacement) if spec.nulls == "replace" else None,
        coerce=spec.coerce and kind == "text",
        bounds=bounds,
    )


def _category_value(ctx: TableContext, column: str) -> Value:
    """How a group or category column is read; only kinds whose values dpkit can compare."""
    kind, type_name = ctx.kinds[column], ctx.types[column]
    if kind == "other" or (kind == "temporal" and not temporal_type(type_name)):
        raise InvalidParameterError(
            f"column {column!r} has type {type_name}, which cannot be grouped or counted by "
            "value; use a numeric, text, boolean, DATE or TIMESTAMP column."
        )
    spec = ctx.schema.get(column)
    replacement = spec.replacement
    if spec.nulls == "replace":
        replacement = canonical(
            replacement, column, ctx.kinds[column], ctx.types[column], "replacement"
        )
    return Value(
        column,
        numeric=False,
        nulls=spec.nulls,
        replacement=replacement,
        temporal=kind == "temporal",
    )


def _bounds(
    ctx: TableContext, column: str, bounds: Any, *, allow_private: bool
) -> tuple[float, float]:
    if isinstance(bounds, str):
        accepted = "(lo, hi) or 'private'" if allow_private else "(lo, hi)"
        hint = (
            "" if allow_private else " bounds='private' is accepted by sum, mean, variance and std."
        )
        raise InvalidParameterError(f"bounds must be {accepted}, got a string.{hint}")
    if bounds is not None:
        return check_bounds(bounds)
    declared = ctx.schema.get(column).bounds
    if declared is not None:
        return declared
    private_hint = (
        ", or pass bounds='private' to spend part of epsilon finding them" if allow_private else ""
    )
    raise InvalidParameterError(
        f"column {column!r} has no public bounds. dpkit never takes bounds from the data "
        f"(that would leak it): pass bounds=(lo, hi) to the query, declare them in the "
        f"schema (Column({column!r}, bounds=(lo, hi))){private_hint}."
    )


def _domain(
    ctx: TableContext, column: str, domain: Any, what: str
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(canonical values, values as written) of a public domain."""
    if domain is None:
        declared = ctx.schema.get(column).domain
        if declared is None:
            raise InvalidParameterError(
                f"{what} needs the public list of values of column {column!r}: pass domain=[...] "
                f"or declare it in the schema (Column({column!r}, domain=[...])). It cannot be "
                "read from the data: a rare value's presence would leak."
            )
        domain = declared
    if isinstance(domain, str) or not isinstance(domain, tuple | list):
        raise InvalidParameterError(f"the domain of {column!r} must be a list of values.")
    kind, type_name = ctx.kinds[column], ctx.types[column]
    out = tuple(canonical(v, column, kind, type_name, "domain value") for v in domain)
    if not out:
        raise InvalidParameterError(f"the domain of {column!r} is empty.")
    if len(set(out)) != len(out):
        raise InvalidParameterError(
            f"the domain of {column!r} lists a value twice (as a value of the column's type)."
        )
    return out, tuple(domain)


# ----------------------------------------------------------------------------- grouping


def _grouping(ctx: TableContext, group_by: Any, keys: Any) -> Grouping | None:
    if group_by is None:
        if keys is not None:
            raise InvalidParameterError("keys= needs group_by=.")
        return None
    cols = tuple(group_by)
    for c in cols:
        _check_column(ctx, c, "group_by")
    values = tuple(_category_value(ctx, c) for c in cols)
    if isinstance(keys, str):
        if keys != "private":
            raise InvalidParameterError(
                "keys must be a list of group keys, 'private' (partition selection), or omitted "
                "(the schema's domains)."
            )
        return Grouping(cols, values, None)
    keys = _public_keys(ctx, cols, keys)
    canon = []
    for key in keys:
        canon.append(
            tuple(
                canonical(part, c, ctx.kinds[c], ctx.types[c], "key") for part, c in zip(key, cols)
            )
        )
    if len(set(canon)) != len(canon):
        raise InvalidParameterError("keys lists a key twice (as values of the columns' types).")
    return Grouping(cols, values, tuple(canon), tuple(keys))


def _public_keys(ctx: TableContext, cols: tuple[str, ...], keys: Any) -> list[tuple[Any, ...]]:
    """The public keys as tuples (one part per column), from the argument or the schema."""
    if keys is None:
        domains = [ctx.schema.get(c).domain for c in cols]
        missing = [c for c, d in zip(cols, domains) if d is None]
        if missing:
            raise InvalidParameterError(
                f"group_by needs the public keys of {missing}: pass keys=[...], declare a domain "
                "in the schema, or pass keys='private' with delta=... to select keys by DP "
                "partition selection."
            )
        sizes = [len(d) for d in domains if d is not None]
        if math.prod(sizes) * 64 > MEMORY_CEILING:
            raise InvalidParameterError(_too_big("the product of the group_by domains"))
        keys = list(itertools.product(*domains))  # type: ignore[arg-type]
    if len(keys) * 64 > MEMORY_CEILING:
        raise InvalidParameterError(_too_big("keys"))
    out = []
    for key in keys:
        key = key if isinstance(key, tuple) else (key,)
        if len(key) != len(cols):
            raise InvalidParameterError(
                f"each key must have {len(cols)} part(s), one per group_by column."
            )
        out.append(key)
    if not out:
        raise InvalidParameterError("keys is empty.")
    return out


def _check_memory(grouping: Grouping | None, width: int, what: str) -> None:
    """Dense arrays of (public keys × width) doubles must fit the ceiling."""
    rows = 1 if grouping is None else grouping.width
    if rows * width * 8 > MEMORY_CEILING:
        raise InvalidParameterError(_too_big(what))


def _too_big(what: str) -> str:
    return (
        f"{what} would need more than {MEMORY_CEILING // 2**30} GiB of memory; ask for fewer "
        "keys, bins or grid points (or split the query)."
    )


# ----------------------------------------------------------------------------- kinds


def _moments(ctx: TableContext, kind: str, column: str, common: dict[str, Any]) -> ValidatedQuery:
    spec: QuerySpec = common["spec"]
    numeric_value(ctx, column, None)  # the column's type, before anything is charged
    private = spec.bounds == "private"
    if private:
        coarse = ctx.schema.get(column).coarse_range
        grid = Q.coarse_grid(coarse)
        return ValidatedQuery(
            statistic=kind,
            value=numeric_value(ctx, column, (float(grid[0]), float(grid[-1]))),
            private_bounds=True,
            coarse_range=coarse,
            **common,
        )
    bounds = _bounds(ctx, column, spec.bounds, allow_private=True)
    check_moment_range(bounds, kind)
    return ValidatedQuery(
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


def _quantile(ctx: TableContext, kind: str, column: str, common: dict[str, Any]) -> ValidatedQuery:
    spec: QuerySpec = common["spec"]
    default_q = {"median": 0.5, "min": Q.MIN_QUANTILE, "max": Q.MAX_QUANTILE}.get(kind)
    q = default_q if spec.q is None and kind != "quantile" else spec.q
    if isinstance(q, bool) or not isinstance(q, int | float) or not 0 <= float(q) <= 1:
        raise InvalidParameterError("q must be a number in [0, 1].")
    grouping: Grouping | None = common["grouping"]
    grid_size = spec.grid_size
    if grid_size is None:
        grid_size = Q.QUANTILE_GRID if grouping is None else Q.GROUPED_QUANTILE_GRID
    if (
        isinstance(grid_size, bool)
        or not isinstance(grid_size, int)
        or not 2 <= grid_size <= _MAX_QUANTILE_GRID
    ):
        raise InvalidParameterError(
            f"grid_size must be an integer from 2 to {_MAX_QUANTILE_GRID} (candidate answers)."
        )
    bounds = _bounds(ctx, column, spec.bounds, allow_private=False)
    grid = Q.uniform_grid(bounds, grid_size)
    step = (bounds[1] - bounds[0]) / (grid_size - 1)
    if not (math.isfinite(step) and step > 0) or not np.all(np.diff(grid) > 0):
        raise InvalidParameterError(
            f"bounds {bounds} are too narrow (or too wide) for {grid_size} distinct candidate "
            "answers in double precision; widen them or ask for a smaller grid_size."
        )
    _check_memory(grouping, 2 * grid_size - 1, "the quantile's grid")
    return ValidatedQuery(
        statistic="quantile",
        value=numeric_value(ctx, column, bounds),
        bounds=bounds,
        q=float(q),
        grid_size=int(grid_size),
        **common,
    )


def _histogram(ctx: TableContext, column: str, common: dict[str, Any]) -> ValidatedQuery:
    spec: QuerySpec = common["spec"]
    grouping: Grouping | None = common["grouping"]
    method = spec.method
    if method is not None and method not in HISTOGRAM_METHODS:
        raise InvalidParameterError(f"method must be one of {HISTOGRAM_METHODS} or None.")
    schema_col = ctx.schema.get(column)
    categorical = spec.domain is not None or (
        spec.edges is None
        and spec.bins is None
        and spec.bounds is None
        and schema_col.domain is not None
        and schema_col.edges is None
    )
    max_count = _max_count(spec.max_count, method)
    if categorical:
        if spec.edges is not None or spec.bins is not None or spec.bounds is not None:
            raise InvalidParameterError(
                "give either domain= (categories) or edges=/bins= (numbers), not both."
            )
        domain, labels = _domain(ctx, column, spec.domain, "histogram()")
        _check_memory(grouping, len(domain), "the histogram")
        _check_method(method, len(domain), common["epsilon"], max_count)
        return ValidatedQuery(
            statistic="histogram",
            value=_category_value(ctx, column),
            domain=domain,
            domain_labels=labels,
            method=method,
            max_count=max_count,
            **common,
        )
    edges = _numeric_edges(ctx, column, spec.edges, spec.bins, spec.bounds, grouping=grouping)
    _check_memory(grouping, len(edges) - 1, "the histogram's bins")
    _check_method(method, len(edges) - 1, common["epsilon"], max_count)
    return ValidatedQuery(
        statistic="histogram",
        value=numeric_value(ctx, column, (edges[0], edges[-1])),
        edges=edges,
        method=method,
        max_count=max_count,
        **common,
    )


def _numeric_edges(
    ctx: TableContext,
    column: str,
    edges: Any,
    bins: Any,
    bounds: Any,
    axis: str = "",
    grouping: Grouping | None = None,
) -> tuple[float, ...]:
    """Public bin edges of a numeric column: ``edges``, ``bins`` over ``bounds``, or the schema's."""
    if edges is not None:
        if bins is not None or bounds is not None:
            raise InvalidParameterError(f"give edges=, or bins= with bounds=, not both{axis}.")
        out = Column(column, edges=tuple(edges)).edges
        assert out is not None
        return out
    if bins is not None:
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise InvalidParameterError(f"bins must be an integer >= 1{axis}.")
        _check_memory(grouping, bins, "the histogram's bins")  # before making the edges
        lo, hi = _bounds(ctx, column, bounds, allow_private=False)
        out = tuple(np.linspace(lo, hi, int(bins) + 1).tolist())
        if len(set(out)) != len(out):
            raise InvalidParameterError(
                f"bounds are too narrow for that many distinct bin edges in double precision{axis}."
            )
        return out
    declared = ctx.schema.get(column).edges
    if declared is not None:
        return declared
    raise InvalidParameterError(
        f"a histogram of {column!r} needs public bins: edges=[...], bins= with "
        "bounds=(lo, hi), domain=[...] for categories, or edges/domain declared in the schema."
    )


def _histogram2d(ctx: TableContext, column: str, common: dict[str, Any]) -> ValidatedQuery:
    spec: QuerySpec = common["spec"]
    y = _check_column(ctx, spec.y_column, "histogram2d()'s y_column")
    if y == column:
        raise InvalidParameterError(
            "histogram2d() needs two different columns; use histogram() for one."
        )
    method = HISTOGRAM2D_DEFAULT if spec.method is None else spec.method
    if method not in HISTOGRAM2D_METHODS:
        raise InvalidParameterError(f"method must be one of {HISTOGRAM2D_METHODS}.")
    per_axis: list[tuple[Any, Any]] = []
    for name, key in (("edges", spec.edges), ("bins", spec.bins), ("bounds", spec.bounds)):
        if key is None:
            per_axis.append((None, None))
        elif name == "bins" and isinstance(key, int) and not isinstance(key, bool):
            per_axis.append((key, key))  # one number: the same on both axes
        elif isinstance(key, tuple) and len(key) == 2:
            per_axis.append(key)
        else:
            raise InvalidParameterError(
                f"histogram2d()'s {name}= takes one entry per axis: ({name} of {column!r}, "
                f"{name} of {y!r})" + (", or one integer for both." if name == "bins" else ".")
            )
    (ex, ey), (bx, by), (lx, ly) = per_axis
    x_edges = _numeric_edges(ctx, column, ex, bx, lx, f" (axis {column!r})")
    y_edges = _numeric_edges(ctx, y, ey, by, ly, f" (axis {y!r})")
    cells = (len(x_edges) - 1) * (len(y_edges) - 1)
    _check_memory(None, 64 * cells, "the 2-D histogram's cells")
    if method == "dawa2d" and cells > MAX_DAWA2D_CELLS:
        raise InvalidParameterError(
            f"method='dawa2d' takes at most {MAX_DAWA2D_CELLS:,} unit cells (its partition step "
            "grows with the square of the cells); use fewer bins or method='agrid'."
        )
    n_records = spec.n_records
    if n_records is not None and (
        isinstance(n_records, bool)
        or not isinstance(n_records, int | float)
        or not (math.isfinite(n_records) and n_records > 0)
    ):
        raise InvalidParameterError("n_records must be a number > 0 (the public number of rows).")
    if n_records is not None and method not in _N_RECORDS_METHODS:
        raise InvalidParameterError(
            "n_records= is used by method='auto2d', 'agrid' and 'ugrid' only."
        )
    return ValidatedQuery(
        statistic="histogram2d",
        value=numeric_value(ctx, column, (x_edges[0], x_edges[-1])),
        value2=numeric_value(ctx, y, (y_edges[0], y_edges[-1])),
        edges=x_edges,
        edges2=y_edges,
        method=method,
        n_records=None if n_records is None else float(n_records),
        **common,
    )


def _check_method(method: str | None, n: int, epsilon: float, max_count: int | None) -> None:
    """The memory a :mod:`dpkit.histograms` method needs for n bins (public; before the charge)."""
    if method not in ("noise_first", "structure_first"):
        return  # the others need O(n log n) memory, covered by the bins' own check
    from dpkit.histograms._memory import check_memory, memory_needed
    from dpkit.histograms.structure_first import default_n_bins

    k = default_n_bins(n, epsilon, max_count) if method == "structure_first" else None
    check_memory(
        memory_needed(method, n, k),
        f"histogram(method={method!r}) over {n:,} bins",
        "use fewer bins or another method.",
    )


def _max_count(max_count: Any, method: str | None) -> int | None:
    if method == "structure_first" and max_count is None:
        raise InvalidParameterError(
            "histogram(method='structure_first') needs max_count=, a public upper bound on any "
            "one bin's count (e.g. the number of people the table may hold)."
        )
    if max_count is None:
        return None
    if method not in _MAX_COUNT_METHODS:
        raise InvalidParameterError(
            "max_count= is used by method='structure_first' (a bound on any bin's count) and "
            "method='auto' (a bound on the number of rows) only."
        )
    if (
        isinstance(max_count, bool)
        or not isinstance(max_count, int | float)
        or not (math.isfinite(max_count) and max_count >= 1)
    ):
        raise InvalidParameterError("max_count must be a number >= 1.")
    return math.ceil(max_count)
