"""What a table engine must compute, and the public specs it receives.

An engine is a thin adapter: it turns a :class:`Rows` (filter, contribution
bound), a :class:`Value` (how to read one column: null policy, clipping) and a
list of group-by columns into *one* aggregation query, runs it inside the
engine (SQL in DuckDB, DataFrame operations in Spark) and returns the small
exact result as a pandas DataFrame. Engines never add noise and never loop over
rows in Python; the session adds noise to what they return.

Every spec here holds only public parameters (column names, bounds, filter
literals chosen by the analyst, a salt), never data.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import pandas as pd

from dpkit.errors import InvalidParameterError

__all__ = [
    "COMPARISONS",
    "ColumnKind",
    "Condition",
    "Contribution",
    "Engine",
    "Rows",
    "Value",
    "check_literal",
]

ColumnKind = Literal["numeric", "text", "boolean", "temporal", "other"]

#: Operators a :class:`Condition` may use.
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "not null")

Literal_ = str | int | float | bool | _dt.date | _dt.datetime


def check_literal(value: object, column: str) -> Literal_:
    """A filter literal must be a plain, finite scalar (it is rendered into the query)."""
    if isinstance(value, bool | int | str | _dt.date | _dt.datetime):
        if isinstance(value, str) and "\x00" in value:
            raise InvalidParameterError(
                f"the filter value for {column!r} contains a NUL character."
            )
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidParameterError(
                f"the filter value for {column!r} must be finite; use ('is null', None) for missing values."
            )
        return value
    # numpy scalars
    if hasattr(value, "item") and not hasattr(value, "__len__"):
        return check_literal(value.item(), column)
    raise InvalidParameterError(
        f"the filter value for {column!r} must be a string, number, boolean or date, "
        f"got {type(value).__name__}."
    )


@dataclass(frozen=True)
class Condition:
    """``column <op> value``; a :class:`Rows` ANDs its conditions.

    ``value`` is a scalar literal, a tuple of literals for ``in``/``not in``,
    and ``None`` for ``is null``/``not null``.
    """

    column: str
    op: str
    value: Any = None


@dataclass(frozen=True)
class Contribution:
    """Keep at most ``max_rows`` rows per value of ``column`` (the privacy unit).

    Which rows are kept is decided by ordering each person's (filtered) rows
    by a 64-bit hash of the row's own content and ``salt`` (drawn afresh for
    every query), keeping the first ``max_rows``. Proof sketch, add/remove
    one person P: every other person's kept rows are a function of their own
    rows and the salt only — not of positions, which P's rows would shift —
    so they are identical on both datasets, and the aggregate changes only by
    P's at most ``max_rows`` kept rows. Identical rows of one person tie, and
    it does not matter which of them is kept; distinct rows collide with
    probability about 2**-64 per pair. Rows whose id is missing are dropped.

    ``max_groups`` (``None``: no bound on groups) bounds a person's groups in a
    grouped aggregation (the ``group_by`` the engine receives; with none, it
    is ignored: one group). Each person's distinct groups are ranked by a
    64-bit hash of the group key — the very value the engine groups by — with
    ``salt``, ties broken by the key itself, and only the first
    ``max_groups`` are kept; within each kept group the first ``max_rows``
    rows by the row hash above. Proof sketch, add/remove one person P: the
    groups and rows another person keeps are a function of that person's own
    rows and the salt only (neither ranking looks at any other person's
    rows), so they are identical on both datasets; P's kept rows lie in at
    most ``max_groups`` groups, at most ``max_rows`` in each. So any vector
    of per-group counts changes by at most ``max_rows`` in at most
    ``max_groups`` coordinates: ℓ1 ``max_rows·max_groups``, ℓ2
    ``max_rows·√max_groups`` (times the per-row bound for sums).
    """

    column: str
    max_rows: int
    salt: int
    max_groups: int | None = None


@dataclass(frozen=True)
class Rows:
    """Which rows a query aggregates: the filter, then the contribution bound."""

    where: tuple[Condition, ...] = ()
    contribution: Contribution | None = None

    def ungrouped(self) -> Rows:
        """These rows with no bound on groups (for a pass whose group columns are not groups)."""
        c = self.contribution
        if c is None or c.max_groups is None:
            return self
        return Rows(self.where, Contribution(c.column, c.max_rows, c.salt))


@dataclass(frozen=True)
class Value:
    """How a query reads one column.

    Rows where the column is missing (NULL; for numbers also NaN and ±inf,
    and with ``bounds`` finite values outside ``queries.valid_range(bounds)``;
    with ``coerce`` also text that does not parse as a number) are dropped if
    ``nulls == "drop"``, else the value is ``replacement``. Numeric values are
    then clipped to ``bounds`` when given.
    """

    column: str
    numeric: bool
    nulls: Literal["drop", "replace"] = "drop"
    replacement: Any = None
    coerce: bool = False
    bounds: tuple[float, float] | None = None
    #: a date/time column whose values come back to Python as ISO text (group keys,
    #: value counts): converting engine dates to pandas can fail on odd dates
    #: (year 1, 9999, beyond), and nothing after the charge may fail on data.
    temporal: bool = False

    def numeric_fill(self) -> float:
        """The public replacement of a missing number, clipped to ``bounds`` (both engines)."""
        fill = float(self.replacement)
        if self.bounds is not None:
            fill = min(max(fill, self.bounds[0]), self.bounds[1])
        return fill


@dataclass(frozen=True)
class Coding:
    """How one column becomes an integer code in ``[0, missing]`` (public, for marginals).

    ``edges`` (numbers): the bin of :func:`~dpkit.tables.engines.base.Engine.bin_counts`'
    rule (values beyond the outer edges go to the end bins). ``categories``:
    the position of the value in the tuple, by equality with each category
    read as a value of the column (:func:`~dpkit.tables.values.category_value`:
    a category that no value of the column can equal matches nothing). A
    value that is missing (NULL; for numbers also NaN and ±inf; with
    ``coerce`` text that is no number) or not among the categories gets code
    ``missing``. Exactly one of ``edges``/``categories`` is given. ``coerce``
    reads a column not stored as numbers or booleans by its text; a column of
    numbers is read as it is.
    """

    column: str
    missing: int
    edges: tuple[float, ...] | None = None
    categories: tuple[Any, ...] | None = None
    coerce: bool = False


@runtime_checkable
class Engine(Protocol):
    """The operations a session needs from a table engine.

    Each method runs one aggregation pass over the table. Results are pandas
    DataFrames with one column per group-by column (named ``_g0``, ``_g1``, ...
    in the order given) followed by the aggregate columns named in each
    method's doc.
    Groups with no rows do not appear (the session fills them in).
    """

    name: str

    def column_kinds(self) -> dict[str, ColumnKind]:
        """Each column's storage kind (public schema information)."""
        ...

    def column_types(self) -> dict[str, str]:
        """Each column's storage type name as the engine reports it."""
        ...

    def has_rows(self) -> bool:
        """Whether the table has at least one row (checked once, at session start)."""
        ...

    def moments(
        self,
        rows: Rows,
        value: Value | None,
        group_by: Sequence[Value],
        center: float = 0.0,
        grids: Sequence[float] = (),
    ) -> pd.DataFrame:
        """Column ``n`` (rows) and, for each ``grids[p-1]``, ``s{p}``: the exact integer

        ``sum(round((v - center)**p / grids[p-1]))`` (returned as a float; exact
        below 2**53). Integer sums do not depend on the summation order, so the
        sensitivity argument holds for the computed value, not just for real
        arithmetic (floating-point sums can exceed their nominal sensitivity),
        and every engine returns the same numbers. ``value=None`` counts rows;
        otherwise rows whose value is dropped by the null policy are not counted.
        """
        ...

    def grid_counts(
        self, rows: Rows, value: Value, group_by: Sequence[Value], lo: float, step: float, size: int
    ) -> pd.DataFrame:
        """Columns ``code``, ``n``: counts of clipped values by grid position.

        With ``t = (v - lo) / step`` (``v`` clipped to ``[lo, lo + step*(size-1)]``),
        code ``2*floor(t)`` if ``t`` is an integer ("on grid point floor(t)"),
        else ``2*floor(t) + 1`` ("between points floor(t) and floor(t)+1").
        """
        ...

    def bin_counts(
        self, rows: Rows, value: Value, group_by: Sequence[Value], edges: Sequence[float]
    ) -> pd.DataFrame:
        """Columns ``bin``, ``n``: counts by histogram bin.

        Values are clipped to ``[edges[0], edges[-1]]``; bin ``i`` holds
        ``edges[i] <= v < edges[i+1]``, the last bin also ``v == edges[-1]``.
        Uneven edges are compared exactly (a binary search); equal-width edges
        use ``floor((v - lo) / w)`` between exact end bins (see ``_sql.bin_index``).
        """
        ...

    def bin_counts_2d(
        self,
        rows: Rows,
        x: Value,
        y: Value,
        x_edges: Sequence[float],
        y_edges: Sequence[float],
    ) -> pd.DataFrame:
        """Columns ``bin_x``, ``bin_y``, ``n``: counts by cell of a 2-D grid.

        Each axis follows :meth:`bin_counts`' rule (clipped into the end bins);
        a row is used when both values are present under their null policies.
        """
        ...

    def value_counts(
        self,
        rows: Rows,
        value: Value,
        group_by: Sequence[Value],
        domain: Sequence[Any] | None = None,
    ) -> pd.DataFrame:
        """Columns ``value``, ``n``: counts of each distinct (non-dropped) value.

        With ``domain``, only values in it are counted (keeps the result small).
        """
        ...


#: Boosting passes (:class:`BoostingPass`) work in exact integer units: model values in
#: units of 2^-MODEL_BITS, per-row gradients and Hessians in units of 2^-GRADIENT_BITS,
#: the log loss's p read from a table at the score rounded to 2^-SCORE_BITS and
#: clipped to +-SCORE_LIMIT (``dpkit.trees.boosting._cyclic`` has the argument).
MODEL_BITS = 24
GRADIENT_BITS = 20
SCORE_BITS = 8
SCORE_LIMIT = 16


@dataclass(frozen=True)
class GridCoding:
    """A numeric column's code on a tree's public grid (``trees.engine._grid.FeatureGrid``).

    The code is the number of ``thresholds`` strictly below the value, computed
    as the grid computes it: a guess ``ceil((clip(x, lo, hi) - lo) / step) - 1``
    clipped to ``[0, len(thresholds)]``, then one exact comparison up and one
    down with the thresholds. Threshold k (1-based) must be ``lo + k * step``
    in IEEE doubles (as the grid computes it): engines recompute it so, rather
    than look it up. A missing value (NULL, NaN, ±inf; with ``coerce`` text
    that is no number) has code ``missing``.
    """

    column: str
    lo: float
    hi: float
    step: float
    thresholds: tuple[float, ...]
    missing: int
    coerce: bool = False


@dataclass(frozen=True)
class BoostingPass:
    """One boosting pass's aggregation: per code of each feature in ``keys``, the exact
    integer sums of the loss's gradient ``g`` and Hessian ``h`` at the current additive
    model, and the row count ``n``.

    All public: the codings (``GridCoding`` or ``Coding`` with categories), the label
    column and its rule, the model (``intercept`` and one tuple of values per code
    of every feature, integers in units of 2^-MODEL_BITS), the features ``keys`` whose
    per-code sums come back (one feature for a cyclic update; every feature for a
    round's update against one model: one scan, one grouping set per feature). The
    result has columns ``feature``, ``code``, ``g``, ``h``, ``n`` (at most the sum of
    the keys' code counts rows; a code no row has is absent). Per row, with F the
    model's score:

    * ``loss="logistic"``: target t = 1 if the label equals ``classes[positive]``,
      0 if it equals another declared class, the row left out otherwise;
      g = clip(t 2^GRADIENT_BITS - P[u], -C, C), h = Hn[u], with C the
      ``gradient_limit`` (2^GRADIENT_BITS: no clipping), ``probabilities`` P and
      ``hessians`` Hn indexed by u = clip(floor(F 2^SCORE_BITS + 1/2), -L, L) + L,
      L = SCORE_LIMIT 2^SCORE_BITS (an arithmetic shift of the integer score).
    * ``"squared"`` / ``"absolute"``: a finite label clipped to ``target_bounds`` and
      scaled to [0, 1] (rows with another label are left out), r = y - F;
      g = floor(clip(r, -1, 1) 2^GRADIENT_BITS + 1/2) or sign(r) 2^GRADIENT_BITS,
      h = 2^GRADIENT_BITS.

    ``drop_missing``: leave out a row with a missing (or undeclared) feature value
    instead of giving it the feature's missing code. ``where``: the fit's filter
    (conditions checked against the schema, read as queries read them), applied
    before anything else. ``fit``: the fit the pass
    belongs to (not 0): an engine may code the rows once for all passes of one fit,
    and drops them on ``boosting_done(fit)``; 0: no such reuse.
    """

    codings: tuple[GridCoding | Coding, ...]
    label: str
    loss: Literal["logistic", "squared", "absolute"]
    intercept: int
    shapes: tuple[tuple[int, ...], ...]
    keys: tuple[int, ...]
    classes: tuple[Any, ...] = ()
    positive: int | None = None
    target_bounds: tuple[float, float] | None = None
    drop_missing: bool = False
    probabilities: tuple[int, ...] = ()
    hessians: tuple[int, ...] = ()
    where: tuple[Condition, ...] = ()
    fit: int = 0
    gradient_limit: int = 1 << GRADIENT_BITS
