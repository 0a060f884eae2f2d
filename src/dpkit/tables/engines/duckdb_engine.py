"""The default engine: every aggregation is one SQL query inside DuckDB.

The engine wraps a DuckDB view or table (over a CSV or Parquet scan, a
registered DataFrame or Arrow table, a table of an attached database) and runs
each aggregation as one SQL statement: DuckDB plans and executes it in
parallel, vectorised, and only the small result (one row per group or bucket)
comes back to Python.

DuckDB's own error messages can quote data values (e.g. a failed conversion
names the offending string), so every failure is re-raised as a
:class:`~dpkit.errors.DataError` that names only the operation and columns.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import duckdb
import pandas as pd

from dpkit.errors import DataError
from dpkit.tables.engines import _sql
from dpkit.tables.engines.base import (
    GRADIENT_BITS,
    MODEL_BITS,
    SCORE_BITS,
    SCORE_LIMIT,
    BoostingPass,
    Coding,
    ColumnKind,
    Condition,
    GridCoding,
    Rows,
    Value,
)
from dpkit.tables.engines.boosting_sql import (
    boosting_aggregates,
    boosting_grouping,
    boosting_groups,
)
from dpkit.tables.engines.scoring import (
    NUMBER_KINDS,
    AdditiveModel,
    Columns,
    category_code,
    scored_select,
)

__all__ = ["DuckDBEngine", "connect"]

_ALIAS = "__dpkit_table"

#: Which persons a query reads: ``None`` all, ``(j, parts)`` part ``j`` of ``parts``.
Part = tuple[int, int] | None

#: Rows of the table per part of a per-person bounded query (``DuckDBEngine(rows_per_part=)``):
#: A table of up to 16.8 M rows runs in one part, as before parts existed (no extra scans);
#: at 10⁸ rows the process grew by at most 1.8 GB (benchmarks/queries.py --bounding).
ROWS_PER_PART = 1 << 24
#: The scratch database whose memory setting flushes DuckDB's caches (see _give_back).
_SCRATCH: dict[int, duckdb.DuckDBPyConnection] = {}
_SCRATCH_LOCK = threading.Lock()
#: Rows per Arrow batch when codes are counted in NumPy (8 MB of codes at a time).
_CODE_BATCH = 1 << 20

_NUMERIC = re.compile(
    r"^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|UHUGEINT|"
    r"FLOAT|DOUBLE|REAL|DECIMAL.*|INT\d*|UINT\d*|FLOAT\d*)$"
)
_TEMPORAL = re.compile(r"^(DATE|TIME.*|TIMESTAMP.*|INTERVAL)$")


def connect() -> duckdb.DuckDBPyConnection:
    """A private in-memory DuckDB connection that never downloads extensions."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    # Casts must stay where dpkit wrote them (see _sql.value_sql); older DuckDB has no
    # such optimizer, and then there is nothing to turn off.
    with contextlib.suppress(duckdb.Error):
        con.execute("SET disabled_optimizers = 'type_pushdown'")
    return con


def _kind(type_name: str) -> ColumnKind:
    t = type_name.upper()
    if _NUMERIC.match(t):
        return "numeric"
    if t == "BOOLEAN":
        return "boolean"
    if t.startswith("VARCHAR") or t in ("TEXT", "STRING"):
        return "text"
    if _TEMPORAL.match(t):
        return "temporal"
    return "other"


def _clamp_codes(frame: pd.DataFrame, size: int) -> pd.DataFrame:
    """Values are clipped to the grid, so only rounding can push a code past the last point."""
    top = 2 * (int(size) - 1)
    if len(frame) and int(frame["code"].max()) > top:
        clipped = frame.assign(code=frame["code"].clip(upper=top))
        keys = [c for c in frame.columns if c != "n"]
        return clipped.groupby(keys, as_index=False, sort=False).agg(n=("n", "sum"))
    return frame


def _int_array(values: Sequence[int]) -> str:
    """A constant BIGINT array (fixed size: DuckDB indexes it without copying per row)."""
    return f"CAST([{', '.join(str(int(v)) for v in values)}] AS BIGINT[{max(len(values), 1)}])"


def _code_type(missing: int) -> str:
    """The smallest integer type that holds codes 0 .. missing and code + 1."""
    return "UTINYINT" if missing < 255 else "USMALLINT" if missing < 65535 else "INTEGER"


def _failure(what: str, value: Value | None, group_by: Sequence[Value]) -> DataError:
    """The one generic error of a failed query: it names the operation and columns, never data."""
    cols = [v.column for v in group_by] + ([value.column] if value is not None else [])
    where = f" for column(s) {cols}" if cols else ""
    return DataError(
        f"DuckDB failed while {what}{where}. Its message is withheld because it can "
        "quote data values. Check that each column's stored type matches how the "
        "query uses it (e.g. numbers stored as text need coerce=True in the schema)."
    )


def _round_half_away(v: float) -> float:
    """DuckDB's ``round``: to the nearest integer, halves away from zero (|v| < 2**52)."""
    return math.copysign(math.floor(abs(v) + 0.5), v)


def _clipped_units(value: Value, center: float, grid: float) -> str:
    """SQL for ``sum(round((clip(x) - center) / grid))``, exact, without CASE.

    With ``u = round((x - center) / grid)`` and the bounds in the same units
    ``L <= H``, ``clip(u, L, H) = (|u - L| - |u - H| + L + H) / 2``: pure
    arithmetic, which DuckDB runs several times faster than a CASE. Every
    step is exact in doubles: ``grid`` is a power of two and a present value
    lies in :func:`~dpkit.tables.queries.valid_range`, so ``|u| < 2**52``;
    the numerator is an even integer. As rounding is monotone,
    ``clip(round(y)) = round(clip(y))``: each row's term is the one its
    clipped value gives, in ``[L, H]``, as the sensitivity analysis needs.
    The terms are integers of at most 2**21 (:func:`~dpkit.tables.queries.sum_grid`),
    so their double sum is exact, in any order, for up to 2**32 rows per group.
    """
    scale = _sql.literal(1.0 / grid)
    u = f"round(({_sql.V} - {_sql.literal(float(center))}) * {scale})"
    if value.bounds is None:  # never from a session (it bounds every sum): no exactness claim
        return f"coalesce(sum({u}), 0)"
    lo, hi = (_round_half_away((float(b) - float(center)) * (1.0 / grid)) for b in value.bounds)
    L, H = _sql.literal(lo), _sql.literal(hi)
    return f"coalesce(sum((abs({u} - {L}) - abs({u} - {H}) + {_sql.literal(lo + hi)}) * 0.5), 0)"


class DuckDBEngine:
    """Aggregations over a DuckDB table or view, one SQL query each.

    Args:
        connection: the DuckDB connection that holds the table.
        table: the name of a table or view on ``connection`` (quoted, never
            spliced in raw), or a ``duckdb.DuckDBPyRelation`` (then queried
            through ``relation.query``, which works on any connection but has
            a few milliseconds more overhead per query).
        rows_per_part: the memory setting of per-person bounding (``None``:
            :data:`ROWS_PER_PART`). A query with a contribution bound
            (``privacy_unit=``) runs as ``ceil(table rows / rows_per_part)``
            queries, each over the persons of one part (a hash of the id),
            one after another, and adds their counts and sums up: DuckDB's
            window over a person's rows then holds about ``rows_per_part``
            rows at a time, not the table. The kept rows and every result are
            the same for any value (see
            :func:`~dpkit.tables.engines._sql.person_part`); only memory and
            time change. The table's rows are counted once, at the first
            bounded query (a number that decides only the split). After such
            a query the engine hands the memory DuckDB freed back to the
            operating system.
    """

    name = "duckdb"

    def __init__(
        self,
        connection: Any,
        table: str | duckdb.DuckDBPyRelation,
        rows_per_part: int | None = None,
    ) -> None:
        per_part = ROWS_PER_PART if rows_per_part is None else rows_per_part
        if isinstance(per_part, bool) or not isinstance(per_part, int) or per_part < 1:
            raise ValueError(
                "rows_per_part must be a positive integer (rows of the table per part)"
            )
        self._rows_per_part = per_part
        self._parts: int | None = None
        self._constants: dict[str, str] = {}
        self._row_tables: dict[tuple[int, str], str] = {}
        self._connection = connection
        if isinstance(table, duckdb.DuckDBPyRelation):
            self._relation: duckdb.DuckDBPyRelation | None = table
            self._table = _ALIAS
            columns, types = table.columns, table.types
        else:
            if connection is None:
                raise ValueError("a table name needs its connection")
            self._relation = None
            self._table = _sql.quote(table)
            described = connection.execute(f"DESCRIBE SELECT * FROM {self._table}").fetchall()
            columns, types = [r[0] for r in described], [r[1] for r in described]
        self._types = {c: str(t) for c, t in zip(columns, types)}
        # Every query reads the table through this projection: text columns carry the
        # binary collation, so filters, key matches, GROUP BY, DISTINCT and PARTITION BY
        # compare exact code points (dpkit's rule) whatever collation the column or the
        # connection's default_collation declares, and a released key is the data's own
        # spelling of a value that equals the public key.
        projected = [
            _sql.binary_text(_sql.quote(c)) + f" AS {_sql.quote(c)}"
            if _kind(t) == "text"
            else _sql.quote(c)
            for c, t in self._types.items()
        ]
        if any(_kind(t) == "text" for t in self._types.values()):
            self._table = f"(SELECT {', '.join(projected)} FROM {self._table})"

    # -- metadata -------------------------------------------------------------

    def column_types(self) -> dict[str, str]:
        return dict(self._types)

    def column_kinds(self) -> dict[str, ColumnKind]:
        return {c: _kind(t) for c, t in self._types.items()}

    def has_rows(self) -> bool:
        out = self._fetch(
            f"SELECT EXISTS (SELECT 1 FROM {self._table}) AS any_row", "checking the table"
        )
        return bool(out["any_row"].iloc[0])

    # -- aggregations ------------------------------------------------------------

    def moments(
        self,
        rows: Rows,
        value: Value | None,
        group_by: Sequence[Value],
        center: float = 0.0,
        grids: Sequence[float] = (),
    ) -> pd.DataFrame:
        groups = _sql.group_list(group_by)
        aggs = ["count(*) AS n"]
        if value is not None and grids:
            aggs.append(f"{_clipped_units(value, center, grids[0])} AS s1")
            clipped = _sql.V if value.bounds is None else _sql.clip_sql(_sql.V, value.bounds)
            centred = f"({clipped} - {_sql.literal(float(center))})"
            for p, grid in enumerate(grids[1:], start=2):
                term = " * ".join([centred] * p)
                units = f"round({term} * {_sql.literal(1.0 / grid)})"
                aggs.append(f"coalesce(sum({units}), 0) AS s{p}")

        def sql(part: Part) -> str:
            base = _sql.base_query(
                rows, value, group_by, self._table, clip=False, types=self._types, part=part
            )
            out = f"SELECT {', '.join([*groups, *aggs])} FROM ({base})"
            return out + (f" GROUP BY {', '.join(groups)}" if groups else "")

        return self._bounded_fetch(rows, sql, groups, "aggregating", value, group_by)

    def grid_counts(
        self, rows: Rows, value: Value, group_by: Sequence[Value], lo: float, step: float, size: int
    ) -> pd.DataFrame:
        groups = _sql.group_list(group_by)
        t = f"(({_sql.V} - {_sql.literal(float(lo))}) / {_sql.literal(float(step))})"
        # 2j on grid point j, 2j + 1 strictly between points j and j + 1 (no CASE: faster).
        code = f"CAST(2 * floor({t}) AS BIGINT) + CAST({t} <> floor({t}) AS BIGINT)"
        keys = [*groups, "code"]

        def sql(part: Part) -> str:
            base = _sql.base_query(rows, value, group_by, self._table, types=self._types, part=part)
            inner = f"SELECT {', '.join([*groups, f'{code} AS code'])} FROM ({base})"
            return (
                f"SELECT {', '.join(keys)}, count(*) AS n FROM ({inner}) GROUP BY {', '.join(keys)}"
            )

        what = "counting by grid position"
        if not groups and rows.contribution is None:
            base = _sql.base_query(rows, value, group_by, self._table, types=self._types)
            codes = f"SELECT {code} AS code FROM ({base})"
            return self._code_counts(codes, 2 * (int(size) - 1), what, value)
        frame = self._bounded_fetch(rows, sql, keys, what, value, group_by)
        return _clamp_codes(frame, size)

    def bin_counts(
        self, rows: Rows, value: Value, group_by: Sequence[Value], edges: Sequence[float]
    ) -> pd.DataFrame:
        groups = _sql.group_list(group_by)
        index = _sql.bin_index(_sql.V, edges)
        keys = [*groups, "bin"]

        def sql(part: Part) -> str:
            base = _sql.base_query(
                rows, value, group_by, self._table, clip=False, types=self._types, part=part
            )
            inner = f"SELECT {', '.join([*groups, f'{index} AS bin'])} FROM ({base})"
            return (
                f"SELECT {', '.join(keys)}, count(*) AS n FROM ({inner}) GROUP BY {', '.join(keys)}"
            )

        return self._bounded_fetch(rows, sql, keys, "counting by bin", value, group_by)

    def bin_counts_2d(
        self,
        rows: Rows,
        x: Value,
        y: Value,
        x_edges: Sequence[float],
        y_edges: Sequence[float],
    ) -> pd.DataFrame:
        # y rides along as the one "group" column: the same null policy and bounds rules.
        bx, by = _sql.bin_index(_sql.V, x_edges), _sql.bin_index("_g0", y_edges)
        ungrouped = rows.ungrouped()

        def sql(part: Part) -> str:
            base = _sql.base_query(
                ungrouped, x, [y], self._table, clip=False, types=self._types, part=part
            )
            inner = f"SELECT {bx} AS bin_x, {by} AS bin_y FROM ({base})"
            return f"SELECT bin_x, bin_y, count(*) AS n FROM ({inner}) GROUP BY bin_x, bin_y"

        keys = ["bin_x", "bin_y"]
        return self._bounded_fetch(ungrouped, sql, keys, "counting by grid cell", x, [y])

    def value_counts(
        self,
        rows: Rows,
        value: Value,
        group_by: Sequence[Value],
        domain: Sequence[Any] | None = None,
    ) -> pd.DataFrame:
        groups = _sql.group_list(group_by)
        shown = _sql.as_text(_sql.V) if value.temporal else _sql.V
        keys = [*groups, f"{shown} AS value"]
        where = ""
        if domain is not None:
            items = _sql.in_list(domain, value.column, self._types.get(value.column))
            where = f" WHERE {_sql.V} IN ({', '.join(items)})" if items else " WHERE FALSE"

        def sql(part: Part) -> str:
            base = _sql.base_query(rows, value, group_by, self._table, types=self._types, part=part)
            out = f"SELECT {', '.join(keys)}, count(*) AS n FROM ({base}){where}"
            return out + f" GROUP BY {', '.join([*groups, _sql.V])}"

        what = "counting values"
        return self._bounded_fetch(rows, sql, [*groups, "value"], what, value, group_by)

    def coded_counts(self, codings: Sequence[Coding]) -> pd.DataFrame:
        """Columns ``c0``, ``c1``, ... (each column's code, :class:`Coding`) and ``n``: one pass.

        Every row of the table is counted once, in the cell of its codes (a
        missing or undeclared value has its column's ``missing`` code), so
        adding or removing one row changes one cell by 1. The codes are
        computed here, in SQL: numbers by :func:`_sql.bin_index` (beyond the
        outer edges: the end bins), categories by equality with each declared
        value (:func:`~dpkit.tables.values.category_value`: typed as the
        column, compared binary-collated; a category that no value of the
        column can equal matches nothing).

        Categories are coded after a first GROUP BY on their values, so the
        comparisons run once per distinct value instead of once per row; the
        counts are the same, since a value's code is a function of the value
        and the grouping's equality is the comparison's (text reaches this
        engine binary-collated, see ``__init__``; NULLs form one group, which
        the CASE sends to ``missing`` as it sends each NULL).
        """
        inner, outer = [], []
        for i, coding in enumerate(codings):
            if coding.edges is None and coding.categories:
                inner.append(f"{_sql.quote(coding.column)} AS v{i}")
                outer.append(f"{self._category_code(coding, f'v{i}')} AS c{i}")
            else:
                inner.append(f"{self._code(coding)} AS v{i}")
                outer.append(f"v{i} AS c{i}")
        keys = ", ".join(f"v{i}" for i in range(len(codings)))
        grouped = (
            f"SELECT {', '.join(inner)}, count(*) AS n FROM {self._table} AS {_sql.ROW} "
            f"GROUP BY {keys}"
        )
        codes = ", ".join(f"c{i}" for i in range(len(codings)))
        sql = (
            f"SELECT {', '.join(outer)}, CAST(sum(n) AS BIGINT) AS n FROM ({grouped}) "
            f"GROUP BY {codes}"
        )
        return self._fetch(sql, "counting coded cells", None, ())

    def _code(self, coding: Coding) -> str:
        col = _sql.quote(coding.column)
        missing = int(coding.missing)
        if coding.edges is not None:
            # a column of numbers (or booleans) is read as it is, coerce or not, as scored() reads it
            text = coding.coerce and _kind(self._types[coding.column]) not in NUMBER_KINDS
            x = f"TRY_CAST(concat({col}, '') AS DOUBLE)" if text else f"CAST({col} AS DOUBLE)"
            # isfinite is NULL for NULL and false for NaN and ±inf: all go to ELSE.
            return f"(CASE WHEN isfinite({x}) THEN {_sql.bin_index(x, coding.edges)} ELSE {missing} END)"
        return self._category_code(coding, col)

    def _category_code(self, coding: Coding, expr: str) -> str:
        """The position of ``expr`` (the column's value) among the declared categories, else missing."""
        from dpkit.tables.values import category_value

        missing = int(coding.missing)
        type_name = self._types[coding.column]
        whens = []
        for j, category in enumerate(coding.categories or ()):
            value = category_value(category, coding.column, _kind(type_name), type_name)
            items = [] if value is None else _sql.in_list([value], coding.column, type_name)
            if items:  # a fraction never equals an integer column's value
                whens.append(f"WHEN {expr} = {items[0]} THEN {j}")
        if not whens:
            return str(missing)
        return f"(CASE {' '.join(whens)} ELSE {missing} END)"

    def boosting_sums(self, spec: BoostingPass) -> pd.DataFrame:
        """Columns ``feature``, ``code``, ``g``, ``h``, ``n``: one scan of a boosting pass.

        The rule is :class:`~dpkit.tables.engines.base.BoostingPass`'s. Every
        per-row term is an integer computed from integers (codes, the model's
        values, table look-ups, arithmetic shifts) or, for regression, from one
        IEEE subtraction and a rounding, so the sums (BIGINT) are exact, in any
        order, and equal to NumPy's on the same rows. The score is computed once
        per row and summed per code of every feature in ``keys`` (one grouping
        set each); only one row per (feature, code) comes back.
        """
        keep: list[str] = []
        if spec.drop_missing:
            keep += [f"c{j} <> {int(c.missing)}" for j, c in enumerate(spec.codings)]
        label = _sql.quote(spec.label)
        if spec.loss == "logistic":
            type_name = self._types.get(spec.label)
            whens = []
            for i, value in enumerate(spec.classes):
                items = _sql.in_list([value], spec.label, type_name)
                if items:
                    whens.append(f"WHEN {label} = {items[0]} THEN {int(i == spec.positive)}")
            target = f"(CASE {' '.join(whens)} END)" if whens else "CAST(NULL AS BIGINT)"
        else:
            assert spec.target_bounds is not None
            lo, hi = (float(b) for b in spec.target_bounds)
            y = f"CAST({label} AS DOUBLE)"
            clipped = _sql.clip_sql(y, (lo, hi))
            target = (
                f"(CASE WHEN isfinite({y}) THEN ({clipped} - {_sql.literal(lo)}) / "
                f"{_sql.literal(hi - lo)} END)"
            )
        keep.append("t IS NOT NULL")
        inner = self._boost_rows(spec, target, keep)
        model = self._boost_model(spec)
        terms = [str(int(spec.intercept))] + [
            f"{model}[{j + 1}][c{j} + 1]" for j in range(len(spec.shapes))
        ]
        score = " + ".join(terms)
        codes = ", ".join(f"c{int(k)}" for k in spec.keys)
        one = 1 << GRADIENT_BITS
        if spec.loss == "logistic":
            limit = SCORE_LIMIT << SCORE_BITS
            shift = MODEL_BITS - SCORE_BITS
            index = f"least(greatest(((({score}) + {1 << (shift - 1)}) >> {shift}), -{limit}), {limit}) + {limit + 1}"
            scored = f"SELECT {codes}, t, {index} AS u FROM {inner}"
            # p and h by a join with the public table: DuckDB indexes a long constant
            # array slowly (per chunk and row), a hash join on u is nearly free
            table = self._logistic_table(spec.probabilities, spec.hessians)
            scored = f"SELECT {codes}, t, p, hn FROM ({scored}) JOIN {table} USING (u)"
            clip = int(spec.gradient_limit)  # |g| <= clip units: the loss's bound
            g = f"least(greatest(t * {one} - p, -{clip}), {clip})"
            h = "hn"
        else:
            unit = _sql.literal(2.0**-MODEL_BITS)
            r = f"(t - CAST({score} AS DOUBLE) * {unit})"
            scored = f"SELECT {codes}, {r} AS r FROM {inner}"
            if spec.loss == "absolute":
                g = f"CAST(sign(r) AS BIGINT) * {one}"
            else:
                g = f"CAST(floor({_sql.clip_sql('r', (-1.0, 1.0))} * {_sql.literal(float(one))} + 0.5) AS BIGINT)"
            h = str(one)
        # g and h as columns of their own: inside the aggregates, DuckDB would evaluate
        # them once per grouping set.
        per_row = f"SELECT {codes}, {g} AS g, {h} AS h FROM ({scored})"
        sql = (
            f"SELECT {boosting_groups(spec.keys)}, {boosting_aggregates('g', 'h')} "
            f"FROM ({per_row}) {boosting_grouping(spec.keys)}"
        )
        return self._fetch(sql, "summing a boosting update", None, ())

    def scored(self, model: AdditiveModel, keep: Sequence[str]) -> duckdb.DuckDBPyRelation:
        """A lazy relation: the ``keep`` columns and the model's outputs for every row.

        Every feature's code as a boosting pass computes it (:meth:`_boost_codes`:
        numbers by the grid's arithmetic, text read as a number or else missing;
        categories by :func:`~dpkit.tables.engines.scoring.category_code`), then
        :func:`~dpkit.tables.engines.scoring.scored_select`. Nothing runs until the
        relation is read. Not a release: the rows are the table's own, as private
        as the table.
        """
        columns = Columns(self.column_kinds(), self._types)
        codings = [
            replace(f.coding, coerce=columns.kinds.get(f.coding.column) not in NUMBER_KINDS)
            if isinstance(f.coding, GridCoding)
            else f.coding
            for f in model.features
        ]
        carry = [(_sql.quote(c), f"__dpkit_k{i}") for i, c in enumerate(keep)]
        codes = self._boost_codes(
            codings, carry, lambda c: category_code(c, _sql.quote(c.column), columns)
        )
        sql = scored_select(model, codes, [(name, c) for (_, name), c in zip(carry, keep)])
        try:
            if self._relation is not None:
                relation = self._relation.query(_ALIAS, sql)
            else:
                relation = self._connection.sql(sql)
        except duckdb.Error:
            raise _failure("scoring a model", None, ()) from None
        assert relation is not None  # a SELECT always gives a relation
        return relation

    def _boost_rows(self, spec: BoostingPass, target: str, keep: Sequence[str]) -> str:
        """SQL of a pass's rows: the codes ``c0, c1, ...`` and the target ``t`` of every
        row the pass keeps (``keep``), as a table to read from.

        A fit's passes differ only in the model, so on a connection the rows are
        coded once, into a temporary table (one byte a code where the codes fit),
        and every later pass of the fit reads that table: the codes' arithmetic
        runs once per fit instead of once per pass. :meth:`boosting_done` drops
        it when the fit ends (passes with ``fit=0`` code the rows every time). The
        table is the data's, as private as the table it
        came from, and never leaves the engine.
        """
        coded = self._boost_codes(spec.codings, [(target, "t")], where=spec.where)
        select = f"SELECT * FROM ({coded}) WHERE {' AND '.join(keep)}"
        if not spec.fit:
            return f"({select})"
        # everything of the spec but the model (the passes of one fit share it)
        key = (spec.fit, repr(replace(spec, intercept=0, shapes=(), keys=())))
        name = self._row_tables.get(key)
        if name is None:
            name = f"__dpkit_boost_rows_{id(self):x}_{spec.fit}_{len(self._row_tables)}"
            typed = [
                f"CAST(c{j} AS {_code_type(c.missing)}) AS c{j}" for j, c in enumerate(spec.codings)
            ]
            t = "CAST(t AS TINYINT)" if spec.loss == "logistic" else "t"
            try:
                self._run(
                    f"CREATE TEMPORARY TABLE {name} AS SELECT {', '.join(typed)}, {t} AS t "
                    f"FROM ({select})"
                )
            except duckdb.Error:
                raise _failure("coding the rows of a boosting fit", None, ()) from None
            self._row_tables[key] = name
        return name

    def boosting_done(self, fit: int) -> None:
        """Drop the coded rows of ``fit`` (:meth:`_boost_rows`); other fits keep theirs."""
        for key in [k for k in self._row_tables if k[0] == fit]:
            name = self._row_tables.pop(key)
            with contextlib.suppress(duckdb.Error):
                self._run(f"DROP TABLE IF EXISTS {name}")

    def _run(self, sql: str) -> None:
        """Run a statement on the engine's connection (a relation's engine: the relation's)."""
        if self._relation is None:
            self._connection.execute(sql)
            return
        result = self._relation.query(_ALIAS, sql)
        if result is not None:
            result.fetchall()

    def _logistic_table(self, probabilities: Sequence[int], hessians: Sequence[int]) -> str:
        """SQL of the public table (u, p, hn), u = 1 .. len: made once per connection.

        A temporary table on the engine's connection (the same values in every
        pass); without a connection, the rows unnested from constant arrays.
        """
        values = f"SELECT generate_series AS u, {_int_array(probabilities)}[generate_series] AS p, "
        values += f"{_int_array(hessians)}[generate_series] AS hn "
        values += f"FROM generate_series(1, {len(probabilities)})"
        if self._connection is None:
            return f"({values})"
        key = f"logistic:{hash((tuple(probabilities), tuple(hessians)))}"
        name = self._constants.get(key)
        if name is None:
            name = f"__dpkit_boost_logistic_{len(self._constants)}"
            try:
                self._connection.execute(f"CREATE OR REPLACE TEMPORARY TABLE {name} AS {values}")
            except duckdb.Error:
                raise _failure("setting a public table", None, ()) from None
            self._constants[key] = name
        return name

    def _boost_model(self, spec: BoostingPass) -> str:
        """SQL reading the pass's model: every feature's shape (lists of BIGINT).

        Set as one connection variable per pass (DuckDB re-parses a constant array
        written into a query), else written into the query.
        """
        lists = spec.shapes
        value = "[" + ", ".join(f"[{', '.join(str(int(v)) for v in x)}]" for x in lists) + "]"
        array = f"CAST({value} AS BIGINT[][])"
        if self._connection is None:
            return f"({array})"
        try:
            self._connection.execute(f"SET VARIABLE __dpkit_boost_model_{id(self)} = {array}")
        except duckdb.Error:
            raise _failure("setting the model", None, ()) from None
        return f"getvariable('__dpkit_boost_model_{id(self)}')"

    def _boost_codes(
        self,
        codings: Sequence[GridCoding | Coding],
        carry: Sequence[tuple[str, str]],
        code_of: Callable[[Coding], str] | None = None,
        where: Sequence[Condition] = (),
    ) -> str:
        """A subquery of every row's feature codes ``c0, c1, ...`` and the ``carry``
        columns ((SQL, name) pairs: the target ``t`` of a pass, kept columns of a scoring).

        Categories: :meth:`_code` (or ``code_of``). Numbers: :class:`GridCoding`'s rule,
        the grid's arithmetic (``FeatureGrid._numeric_codes``) one step per subquery
        level, so no expression is repeated: the value clipped to the bounds (a missing
        one replaced by a bound; its code is ``missing`` anyway), the guess, the guess
        clamped to the codes, the exact step up or down.
        """
        level = [f"{sql} AS {name}" for sql, name in carry]
        steps: list[list[str]] = [[], [], []]
        carried = [name for _, name in carry]
        for j, coding in enumerate(codings):
            if isinstance(coding, Coding):
                level.append(f"{(code_of or self._code)(coding)} AS c{j}")
                carried.append(f"c{j}")
                continue
            col = _sql.quote(coding.column)
            x = (
                f"TRY_CAST(concat({col}, '') AS DOUBLE)"
                if coding.coerce
                else f"CAST({col} AS DOUBLE)"
            )
            lo = _sql.literal(float(coding.lo))
            top = len(coding.thresholds)
            step = _sql.literal(float(coding.step))

            def thr(k: str, lo: str = lo, step: str = step) -> str:
                # threshold k (1-based) as the grid computes it: lo + k * step, two IEEE ops
                return f"({lo} + CAST({k} AS DOUBLE) * {step})"

            hi = _sql.literal(float(coding.hi))
            level.append(f"coalesce(isfinite({x}), FALSE) AS f{j}")
            # clipped to [lo, hi]; a missing value (code ``missing`` below) reads lo, and
            # NaN (above every number in DuckDB) reads hi: finite either way, so no cast fails
            level.append(
                f"(CASE WHEN {x} < {lo} THEN {lo} WHEN {x} > {hi} THEN {hi} "
                f"WHEN isfinite({x}) THEN {x} ELSE {lo} END) AS x{j}"
            )
            steps[0].append(f"CAST(ceil((x{j} - {lo}) / {step}) AS BIGINT) - 1 AS g{j}")
            steps[1].append(
                f"(CASE WHEN g{j} < 0 THEN 0 WHEN g{j} > {top} THEN {top} ELSE g{j} END) AS g{j}"
            )
            # one step up, then one down; never both (thresholds increase), so both
            # tests read the same guess: integer arithmetic instead of two CASE levels
            steps[2].append(
                f"(CASE WHEN f{j} THEN g{j} + CAST(g{j} < {top} AND x{j} > {thr(f'g{j} + 1')} "
                f"AS BIGINT) - CAST(g{j} > 0 AND x{j} <= {thr(f'g{j}')} AS BIGINT) "
                f"ELSE {int(coding.missing)} END) AS c{j}"
            )
            carried += [f"f{j}", f"x{j}"]
        sql = f"SELECT {', '.join(level)} FROM {self._table} AS {_sql.ROW}"
        if where:  # the filter first, as a query's (``_sql.base_query``)
            sql += " WHERE " + " AND ".join(_sql.condition_sql(c, self._types) for c in where)
        codes = [c for c in carried if c.startswith("c")]
        for depth, stage in enumerate(steps):
            if not stage:
                continue
            keep = carried if depth < 2 else [*(name for _, name in carry), *codes]
            sql = f"SELECT {', '.join([*keep, *stage])} FROM ({sql})"
        return sql

    # -- plumbing ----------------------------------------------------------------

    def _bounded_fetch(
        self,
        rows: Rows,
        sql: Callable[[Part], str],
        keys: Sequence[str],
        what: str,
        value: Value | None,
        group_by: Sequence[Value],
    ) -> pd.DataFrame:
        """The frame of ``sql``; with a contribution bound, part by part, added up, memory freed.

        Each part's query keeps the persons of one part (``_sql.person_part``);
        the frames' counts and sums (every column but ``keys``) add up exactly:
        counts are integers, and the sums are of integer-valued doubles (units
        of a power-of-two grid, see :func:`_clipped_units`), exact in any order.
        The adding up is one more DuckDB ``GROUP BY`` over the parts' results,
        on a private connection, with text keys binary-collated: the keys
        compare exactly as the one-query plan's ``GROUP BY`` compares them.
        Every failure is the one generic error of :meth:`_fetch`.
        """
        if rows.contribution is None:
            return self._fetch(sql(None), what, value, group_by)
        try:
            parts = self._part_count(what, value, group_by)
            if parts == 1:
                return self._fetch(sql(None), what, value, group_by)
            tables = [
                self._fetch(sql((j, parts)), what, value, group_by, arrow=True)
                for j in range(parts)
            ]
            return self._add_up(tables, keys, what, value, group_by)
        finally:
            self._give_back()

    def _part_count(self, what: str, value: Value | None, group_by: Sequence[Value]) -> int:
        """How many parts a bounded query runs in: ``ceil(table rows / rows_per_part)`` (counted once)."""
        if self._parts is None:
            counted = self._fetch(f"SELECT count(*) AS n FROM {self._table}", what, value, group_by)
            rows = int(counted["n"].iloc[0])
            self._parts = max(1, -(-rows // self._rows_per_part))
        return self._parts

    def _add_up(
        self,
        tables: list[Any],
        keys: Sequence[str],
        what: str,
        value: Value | None,
        group_by: Sequence[Value],
    ) -> pd.DataFrame:
        import pyarrow as pa

        merged = pa.concat_tables(tables)  # one query's parts: one schema
        columns = list(merged.column_names)
        types = dict(zip(columns, (str(t) for t in merged.schema.types)))
        shown = [
            f'{_sql.quote(c)} COLLATE "binary" AS {_sql.quote(c)}'
            if types[c] in ("string", "large_string", "string_view")
            else _sql.quote(c)
            for c in keys
        ]
        sums = [
            f"CAST(sum({_sql.quote(c)}) AS BIGINT) AS {_sql.quote(c)}"
            if types[c] == "int64"
            else f"sum({_sql.quote(c)}) AS {_sql.quote(c)}"
            for c in columns
            if c not in keys
        ]
        sql = f"SELECT {', '.join([*shown, *sums])} FROM __dpkit_parts"
        if keys:
            sql += f" GROUP BY {', '.join(str(i + 1) for i in range(len(keys)))}"
        try:
            con = connect()
            try:
                result = con.from_arrow(merged).query("__dpkit_parts", sql)
                if result is not None:
                    return result.df()
            finally:
                con.close()
        except duckdb.Error:
            pass  # raised below, as _fetch does
        raise _failure(what, value, group_by)

    def _code_counts(self, sql: str, top: int, what: str, value: Value | None) -> pd.DataFrame:
        """How many rows of ``sql`` have each ``code`` (0 .. ``top``), as (code, n) rows.

        The codes stream out of DuckDB in Arrow batches and are counted with
        ``np.bincount``: several times faster than a ``GROUP BY`` over up to
        ``top + 1`` distinct codes (one per grid position), in memory of one
        batch plus the counts, both fixed by public sizes. A code above
        ``top`` (a value at the grid's end, rounded up) counts at ``top`` and
        one below 0 or missing is left out: the ``GROUP BY`` frame after
        :func:`_clamp_codes` and the quantile's domain check, row for row.
        Every failure is the one generic error of :meth:`_fetch`; the reader
        is always closed, so the connection is free for the next query.
        """
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        counts = np.zeros(top + 2, dtype=np.int64)  # slot 0: codes left out
        try:
            relation = (
                self._connection.sql(sql)
                if self._relation is None
                else self._relation.query(_ALIAS, sql)
            )
            if relation is not None:
                # DuckDB 2 renamed fetch_arrow_reader (and deprecates the old name)
                opener = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
                reader = opener(_CODE_BATCH)
                try:
                    for batch in reader:
                        column = pc.fill_null(batch.column(0), -1).to_numpy()
                        counts += np.bincount(np.clip(column, -1, top) + 1, minlength=top + 2)
                finally:
                    reader.close()
                kept = np.flatnonzero(counts[1:])
                return pd.DataFrame({"code": kept, "n": counts[1:][kept]})
        except (duckdb.Error, pa.ArrowException, OSError):  # Arrow hands DuckDB's as OSError
            pass  # raised below, as _fetch does
        raise _failure(what, value, ())

    def _give_back(self) -> None:
        """Hand the memory DuckDB freed after a query back to the operating system (results unchanged).

        DuckDB's allocator keeps freed memory for later queries; setting a
        memory limit makes it flush those caches, process-wide. The limit is
        set on a scratch in-memory database, so the table's connection, its
        settings and its buffers are not touched; a failure only leaves the
        memory where it was. The scratch database is opened once per process
        (opening one costs ~25 ms, the setting ~3 ms) and used under a lock.
        """
        with _SCRATCH_LOCK, contextlib.suppress(duckdb.Error):
            scratch = _SCRATCH.get(os.getpid())  # never a parent's, after a fork
            if scratch is None:
                scratch = duckdb.connect(config={"autoinstall_known_extensions": False})
                _SCRATCH.clear()
                _SCRATCH[os.getpid()] = scratch
            scratch.execute("SET memory_limit = '64MB'")

    def interrupt(self) -> None:
        """Stop the query running on this engine's connection (from another thread; a time-out)."""
        if self._connection is not None:
            self._connection.interrupt()

    def _fetch(
        self,
        sql: str,
        what: str,
        value: Value | None = None,
        group_by: Sequence[Value] = (),
        arrow: bool = False,
    ) -> Any:
        try:
            if self._relation is None:
                if arrow:
                    return self._connection.sql(sql).to_arrow_table()
                return self._connection.execute(sql).df()
            result = self._relation.query(_ALIAS, sql)
            if result is not None:
                return result.to_arrow_table() if arrow else result.df()
        except duckdb.Error:
            pass  # raised below, outside the handler, so the original is not even chained
        raise _failure(what, value, group_by)
