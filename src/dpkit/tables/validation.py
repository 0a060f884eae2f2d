"""Step 1 of every query: check a spec against the declared schema. No data is read here.

:func:`dpkit.tables.kinds.validate` turns a :class:`~dpkit.tables.specs.QuerySpec`
into a :class:`ValidatedQuery` (each kind has its own subclass, holding only
what it needs): :func:`check_common` checks what every kind shares, then the
kind's own ``validate`` (in its module under :mod:`dpkit.tables.kinds`) uses
the checks defined here. Every piece of the result is a function of public
input: the schema the data owner declared, the table's column names and
storage types, the session's privacy unit, and the spec. Whatever can go
wrong with public input goes wrong *here*, before the charge:

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
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._checks import MEMORY_CEILING, check_bounds, check_delta, check_epsilon, check_level
from dpkit.errors import DataError, InvalidParameterError
from dpkit.histograms.methods import PUBLISHERS_1D, PUBLISHERS_2D
from dpkit.tables.engines.base import COMPARISONS, ColumnKind, Condition, Contribution, Rows, Value
from dpkit.tables.noise import LAPLACE, Noise
from dpkit.tables.schema import Column, Schema
from dpkit.tables.values import canonical, temporal_type

__all__ = [
    "HISTOGRAM2D_METHODS",
    "HISTOGRAM_METHODS",
    "MAX_ROWS_PER_GROUP",
    "MEMORY_CEILING",
    "Grouping",
    "TableContext",
    "ValidatedQuery",
    "category_value",
    "check_column",
    "check_common",
    "check_memory",
    "check_where",
    "count_value",
    "numeric_edges",
    "numeric_value",
    "public_bounds",
    "public_domain",
]

#: ``histogram(method=...)`` values: the 1-D publishers of :mod:`dpkit.histograms.methods`.
HISTOGRAM_METHODS = tuple(PUBLISHERS_1D)
#: ``histogram2d(method=...)`` values: the 2-D publishers (``auto2d``, the default, first).
HISTOGRAM2D_METHODS = tuple(PUBLISHERS_2D)


#: Rows per group for which sums are exact and cannot overflow (the documented limit).
MAX_ROWS_PER_GROUP = 2**32


@dataclass(frozen=True)
class TableContext:
    """The public facts a query is checked against."""

    kinds: Mapping[str, ColumnKind]
    types: Mapping[str, str]
    schema: Schema
    max_contributions: int
    privacy_unit: str | None
    level: float
    #: the noise of additive steps and the paying accountant's rule (dpkit.tables.noise)
    noise: Noise = LAPLACE
    #: a person's groups per grouped query (``None``: unbounded; needs ``privacy_unit``)
    max_groups: int | None = None


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
    """A spec checked against the schema: what every kind needs, all of it public.

    Each kind extends it with its own fields (:mod:`dpkit.tables.kinds`);
    ``statistic`` names the family (count, sum, mean, variance, std, quantile,
    mode, histogram, histogram2d: ``median``/``min``/``max`` are quantiles).
    """

    spec: Any  # the QuerySpec
    statistic: str
    epsilon: float
    delta: float
    level: float
    rows: Rows
    grouping: Grouping | None
    value: Value | None
    #: the most rows one person adds to this query: ``k``, or ``k·G`` grouped with ``max_groups=G``
    max_contributions: int
    noise: Noise

    @property
    def privacy_unit(self) -> str | None:
        return None if self.rows.contribution is None else self.rows.contribution.column

    @property
    def l2_contributions(self) -> float:
        """The ℓ2 norm of a person's per-group row counts: ``k``, or ``k·√G`` with ``max_groups=G``.

        Without a bound on groups a person's ``k`` rows may all fall in one
        group (ℓ2 = ℓ1 = ``k``); with it, at most ``k`` rows in each of at most
        ``G`` groups (:class:`~dpkit.tables.engines.base.Contribution`), so
        ``√(G·k²)``, rounded up to a float whose square is at least ``G·k²``.
        """
        bound = self.rows.contribution
        if bound is None or bound.max_groups is None:
            return float(self.max_contributions)
        return root_up(bound.max_rows**2 * bound.max_groups)


def root_up(n: int) -> float:
    """The least float whose exact square is at least the integer ``n`` (√n, never rounded down)."""
    r = math.sqrt(n)
    while Fraction(r) ** 2 < n:
        r = math.nextafter(r, math.inf)
    return r


def check_common(spec: Any, ctx: TableContext, *, needs_column: bool = True) -> dict[str, Any]:
    """Check what every kind shares (budget, level, column, filter, grouping, δ).

    Returns the common fields of :class:`ValidatedQuery` (``statistic`` and
    ``value`` are the kind's). ``spec`` is a :class:`~dpkit.tables.specs.QuerySpec`.
    """
    kind = spec.kind
    epsilon = check_epsilon(spec.epsilon)
    # Per contributed row (histogram methods spend epsilon / k): the floor keeps every
    # share of it within the samplers' range, so nothing fails after the charge.
    check_epsilon(epsilon / ctx.max_contributions, name="epsilon / max_contributions", warn=False)
    level = ctx.level if spec.level is None else check_level(spec.level)
    column = spec.column
    if column is None and needs_column:
        raise InvalidParameterError(f"{kind}() needs a column.")
    if column is not None:
        check_column(ctx, column)
    where = tuple(_condition(ctx, c) for c in spec.where)
    grouping = _grouping(ctx, spec.group_by, spec.keys)
    delta = check_delta(spec.delta or 0.0)
    if grouping is not None and grouping.private:
        check_delta(delta, allow_zero=False, name="delta (needed by keys='private')")
    elif delta:
        raise InvalidParameterError(
            f"{kind}() spends no delta unless keys='private' (partition selection); drop delta=."
        )
    # A bound on groups applies to grouped queries only (an ungrouped query is one group);
    # a person then adds up to k rows to each of G groups: k·G rows in all.
    max_groups = ctx.max_groups if grouping is not None else None
    rows_per_person = ctx.max_contributions * (max_groups or 1)
    if max_groups is not None:
        check_epsilon(
            epsilon / rows_per_person, name="epsilon / (max_contributions * max_groups)", warn=False
        )
    contribution = (
        None
        if ctx.privacy_unit is None
        else Contribution(ctx.privacy_unit, ctx.max_contributions, 0, max_groups)  # salt per query
    )
    return {
        "spec": spec,
        "epsilon": epsilon,
        "delta": float(delta),
        "level": level,
        "rows": Rows(where=where, contribution=contribution),
        "grouping": grouping,
        "max_contributions": rows_per_person,
        "noise": ctx.noise,
    }


# ----------------------------------------------------------------------------- columns


def check_where(ctx: TableContext, where: Any) -> tuple[Condition, ...]:
    """A ``where=`` filter's conditions, every column and literal checked against the
    declared schema (public metadata only; an error says what to fix)."""
    from dpkit.tables.filters import parse_where

    return tuple(_condition(ctx, c) for c in parse_where(where, ctx.kinds))


def check_column(ctx: TableContext, name: object, where: str = "the query") -> str:
    if not isinstance(name, str) or name not in ctx.kinds:
        raise InvalidParameterError(
            f"unknown column {name!r} in {where}; the table's columns are {sorted(ctx.kinds)}."
        )
    return name


def _condition(ctx: TableContext, cond: Condition) -> Condition:
    column = check_column(ctx, cond.column, "the filter")
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


def count_value(ctx: TableContext, column: str | None) -> Value | None:
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


def category_value(ctx: TableContext, column: str) -> Value:
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


def public_bounds(
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


def public_domain(
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
        check_column(ctx, c, "group_by")
    values = tuple(category_value(ctx, c) for c in cols)
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
            raise InvalidParameterError(too_big("the product of the group_by domains"))
        keys = list(itertools.product(*domains))  # type: ignore[arg-type]
    if len(keys) * 64 > MEMORY_CEILING:
        raise InvalidParameterError(too_big("keys"))
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


def check_memory(grouping: Grouping | None, width: int, what: str) -> None:
    """Dense arrays of (public keys × width) doubles must fit the ceiling."""
    rows = 1 if grouping is None else grouping.width
    if rows * width * 8 > MEMORY_CEILING:
        raise InvalidParameterError(too_big(what))


def too_big(what: str) -> str:
    return (
        f"{what} would need more than {MEMORY_CEILING // 2**30} GiB of memory; ask for fewer "
        "keys, bins or grid points (or split the query)."
    )


def numeric_edges(
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
        check_memory(grouping, bins, "the histogram's bins")  # before making the edges
        lo, hi = public_bounds(ctx, column, bounds, allow_private=False)
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
