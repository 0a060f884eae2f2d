"""The Spark engine: the same aggregations as DataFrame operations in PySpark.

For tables that outgrow one machine. Each method builds one Spark plan (filter,
null policy, clip, optional per-person row bound, group-by aggregate), runs it
on the cluster and collects only the small result. The expressions mirror the
DuckDB engine's SQL one for one, and the test suite checks that both return
the same exact aggregates on the same data.

PySpark is imported lazily: dpkit works without it unless a session is made
from a Spark DataFrame. Spark's error messages can quote data values, so
failures are re-raised as a :class:`~dpkit.errors.DataError` without them.
"""

from __future__ import annotations

import contextlib
import functools
import operator
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from dpkit.errors import DataError
from dpkit.tables import queries as Q
from dpkit.tables.engines.base import (
    GRADIENT_BITS,
    MODEL_BITS,
    SCORE_BITS,
    SCORE_LIMIT,
    BoostingPass,
    Coding,
    ColumnKind,
    Condition,
    Contribution,
    GridCoding,
    Rows,
    Value,
    check_literal,
)
from dpkit.tables.engines.boosting_sql import (
    boosting_aggregates,
    boosting_grouping,
    boosting_groups,
)
from dpkit.tables.engines.scoring import NUMBER_KINDS

__all__ = ["SparkEngine"]

_V = "__dpkit_v"
_PID = "__dpkit_pid"
_POS = "__dpkit_pos"
_NUMERIC_PREFIXES = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal")
_INF = float("inf")


def _kind(type_name: str) -> ColumnKind:
    t = type_name.lower()
    if t.startswith(_NUMERIC_PREFIXES):
        return "numeric"
    if t == "boolean":
        return "boolean"
    if t in ("string", "varchar", "char") or t.startswith(("varchar", "char", "string collate")):
        return "text"
    if t.startswith(("date", "timestamp")):
        return "temporal"
    return "other"


def _code_type(missing: int) -> str:
    """The smallest Spark integer type that holds codes 0 .. missing."""
    return "byte" if missing < 127 else "short" if missing < 32767 else "int"


class SparkEngine:
    """Aggregations over a PySpark DataFrame, one Spark job each."""

    name = "spark"

    def __init__(self, frame: Any) -> None:
        from pyspark.sql import functions

        # Text columns are read with Spark's binary collation (UTF8_BINARY): filters, key
        # matches, groupBy and the person-id window then compare exact code points, dpkit's
        # one rule, whatever collation (UTF8_LCASE, UNICODE_CI, ...) the column declares.
        collated = [c for c, t in frame.dtypes if t.lower().startswith("string collate")]
        if collated:
            frame = frame.withColumns(
                {c: functions.collate(functions.col(f"`{c}`"), "UTF8_BINARY") for c in collated}
            )
        self._df = frame
        self._F = functions
        self._types = dict(frame.dtypes)
        self._kinds = {c: _kind(t) for c, t in self._types.items()}
        self._job_group = f"dpkit-{id(self):x}"  # this engine's jobs, for interrupt()
        self._logistic: dict[tuple[tuple[int, ...], tuple[int, ...]], Any] = {}
        self._row_frames: dict[tuple[int, str], Any] = {}  # a fit's coded rows, persisted

    # -- metadata -------------------------------------------------------------

    def column_types(self) -> dict[str, str]:
        return dict(self._types)

    def column_kinds(self) -> dict[str, ColumnKind]:
        return {c: _kind(t) for c, t in self._types.items()}

    def has_rows(self) -> bool:
        return bool(self._run(lambda: len(self._df.limit(1).collect()) > 0, "checking the table"))

    # -- expressions -------------------------------------------------------------

    def _literal(self, value: Any, column: str) -> Any:
        """A literal typed as the column's declared numeric type (see ``_sql.literal``)."""
        from dpkit.tables.values import numeric_type

        v = check_literal(value, column)
        lit = self._F.lit(v)
        if (
            isinstance(v, int | float)
            and not isinstance(v, bool)
            and self._kinds[column] == "numeric"
        ):
            rep = numeric_type(self._types[column])
            if rep.family == "decimal":
                import decimal

                return self._F.lit(decimal.Decimal(repr(v))).cast(self._types[column])
            if not (rep.family == "integer" and isinstance(v, float)):
                return lit.cast(self._types[column])
        return lit

    def _in_list(self, values: Sequence[Any], column: str) -> list[Any]:
        """IN items typed as the column; fractions left out for integer columns (``_sql.in_list``)."""
        from dpkit.tables.values import numeric_type

        integer = (
            self._kinds[column] == "numeric"
            and numeric_type(self._types[column]).family == "integer"
        )
        return [
            self._literal(v, column)
            for v in values
            if not (integer and isinstance(v, float) and not v.is_integer())
        ]

    def _condition(self, cond: Condition) -> Any:
        F = self._F
        col = F.col(f"`{cond.column}`")
        op = cond.op
        if op == "is null":
            return col.isNull()
        if op == "not null":
            return col.isNotNull()
        if op in ("in", "not in"):
            items = self._in_list(cond.value, cond.column)
            if not items:
                if op == "in":
                    return F.lit(False)
                return F.lit(True) if not cond.value else col.isNotNull()
            member = col.isin(items)
            return member if op == "in" else ~member
        lit = self._literal(cond.value, cond.column)
        return {
            "==": col == lit,
            "!=": col != lit,
            "<": col < lit,
            "<=": col <= lit,
            ">": col > lit,
            ">=": col >= lit,
        }[op]

    def _number(self, column: str, coerce: bool) -> tuple[Any, Any]:
        """The column as a double, and whether that is missing (NULL, NaN or ±inf).

        ``coerce``: the value's text parsed as a number, NULL when it is none
        (DuckDB's ``TRY_CAST(concat(x, '') AS DOUBLE)``); ``try_cast`` never
        fails, in ANSI mode too.
        """
        F = self._F
        col = F.col(f"`{column}`")
        if coerce:
            text = col if self._kinds[column] == "text" else col.cast("string")
            x = text.try_cast("double")
        else:
            x = col.cast("double")
        return x, x.isNull() | F.isnan(x) | (F.abs(x) == F.lit(_INF))

    def _value(self, value: Value) -> tuple[Any, Any | None]:
        F = self._F
        col = F.col(f"`{value.column}`")
        if value.numeric:
            x, missing = self._number(value.column, value.coerce)
            if value.bounds is not None:  # the same valid range as the DuckDB engine
                w_lo, w_hi = Q.valid_range(value.bounds)
                missing = missing | (x < F.lit(w_lo)) | (x > F.lit(w_hi))
        else:
            x = col
            missing = col.isNull()
        if value.nulls == "drop":
            expr, keep = x, ~missing
        else:
            fill = (
                F.lit(value.numeric_fill())
                if value.numeric
                else self._literal(value.replacement, value.column)
            )
            expr, keep = F.when(missing, fill).otherwise(x), None
        if value.numeric and value.bounds is not None:
            lo, hi = F.lit(float(value.bounds[0])), F.lit(float(value.bounds[1]))
            expr = F.when(expr < lo, lo).when(expr > hi, hi).otherwise(expr)
        return expr, keep

    def _base(self, rows: Rows, value: Value | None, group_by: Sequence[Value]) -> Any:
        F = self._F
        df = self._df
        for cond in rows.where:
            df = df.filter(self._condition(cond))
        cols: list[Any] = []
        for i, g in enumerate(group_by):
            expr, keep = self._value(g)
            cols.append((expr.cast("string") if g.temporal else expr).alias(f"_g{i}"))
            if keep is not None:
                df = df.filter(keep)
        if value is not None:
            expr, keep = self._value(value)
            cols.append(expr.alias(_V))
            if keep is not None:
                df = df.filter(keep)
        contribution = rows.contribution
        if contribution is not None:
            pid = F.col(f"`{contribution.column}`")
            df = df.filter(pid.isNotNull())
            cols.append(pid.alias(_PID))
            if value is None and not group_by:
                return self._counted(df.select(*cols), contribution)
            # The row's own content, hashed with the query's salt (64-bit): never an id
            # assigned after filtering, which other people's rows would shift.
            content = [F.col(f"`{c}`") for c in self._df.columns]
            cols.append(F.xxhash64(*content, F.lit(int(contribution.salt))).alias(_POS))
        df = df.select(*cols) if cols else df.select(F.lit(1).alias("__dpkit_one"))
        if contribution is not None:
            df = self._bounded(df, contribution, group_by)
        return df

    def _counted(self, df: Any, contribution: Contribution) -> Any:
        """An ungrouped count's bounded rows: ``min(rows, max_rows)`` rows per person, no window.

        Which of a person's rows the bound keeps does not change how many it
        keeps, so a count needs no ranking: one aggregate per person (Spark
        combines it before the shuffle), then that many placeholder rows. The
        count equals :meth:`_bounded`'s, whose proof (:class:`Contribution`'s) applies.
        """
        F = self._F
        kept = F.least(F.count(F.lit(1)), F.lit(int(contribution.max_rows)))
        per_person = df.groupBy(_PID).agg(kept.alias("__dpkit_n"))
        one = F.explode(F.sequence(F.lit(1), F.col("__dpkit_n"))).alias("__dpkit_one")
        return per_person.select(one)

    def _bounded(self, df: Any, contribution: Contribution, group_by: Sequence[Value]) -> Any:
        """The contribution bound: the rule of ``_sql.bounded`` (DuckDB), in Spark.

        The group rank hashes the ``_g`` columns, the values ``groupBy`` groups
        by; a numeric 0 is hashed as +0.0, since ``groupBy`` takes -0.0 for 0.0
        (a hash that told them apart would only rank one group twice: fewer
        groups kept, never more). The proof is :class:`Contribution`'s.
        """
        from pyspark.sql import Window

        F = self._F
        k = int(contribution.max_rows)
        groups = self._groups(group_by)
        if contribution.max_groups is None or not groups:
            window = Window.partitionBy(_PID).orderBy(F.col(_POS))
            return (
                df.withColumn("__dpkit_rank", F.row_number().over(window))
                .filter(F.col("__dpkit_rank") <= k)
                .drop("__dpkit_rank")
            )
        keys = [F.col(g) for g in groups]
        hashed = [
            F.when(F.col(g) == F.lit(0.0), F.lit(0.0)).otherwise(F.col(g))
            if v.numeric and not v.temporal
            else F.col(g)
            for g, v in zip(groups, group_by)
        ]
        rank = F.xxhash64(*hashed, F.lit(int(contribution.salt)))
        rows = Window.partitionBy(_PID, *keys).orderBy(F.col(_POS))
        ranked = Window.partitionBy(_PID).orderBy(rank, *keys)
        return (
            df.withColumn("__dpkit_rank", F.row_number().over(rows))
            .withColumn("__dpkit_group", F.dense_rank().over(ranked))
            .filter(
                (F.col("__dpkit_rank") <= k)
                & (F.col("__dpkit_group") <= int(contribution.max_groups))
            )
            .drop("__dpkit_rank", "__dpkit_group")
        )

    @staticmethod
    def _groups(group_by: Sequence[Value]) -> list[str]:
        return [f"_g{i}" for i in range(len(group_by))]

    def _bin_index(self, x: Any, edges: Sequence[float]) -> Any:
        """The same rule as the DuckDB engine's (``_sql.bin_index``): arithmetic for equal widths."""
        from dpkit.tables.engines._sql import equal_width

        F = self._F
        width = equal_width(edges)
        n = len(edges) - 1
        if width is None:
            return self._bin_tree(x, edges, 0, n - 1)
        inner = F.floor((x - F.lit(float(edges[0]))) / F.lit(width)).cast("long")
        return (
            F.when(x < F.lit(float(edges[1])), F.lit(0))
            .when(x >= F.lit(float(edges[-2])), F.lit(n - 1))
            .otherwise(inner)
        )

    def _bin_tree(self, x: Any, edges: Sequence[float], first: int, last: int) -> Any:
        F = self._F
        if first == last:
            return F.lit(first)
        mid = (first + last + 1) // 2
        return F.when(
            x < F.lit(float(edges[mid])), self._bin_tree(x, edges, first, mid - 1)
        ).otherwise(self._bin_tree(x, edges, mid, last))

    # -- aggregations ------------------------------------------------------------

    def moments(
        self,
        rows: Rows,
        value: Value | None,
        group_by: Sequence[Value],
        center: float = 0.0,
        grids: Sequence[float] = (),
    ) -> pd.DataFrame:
        F = self._F
        df = self._base(rows, value, group_by)
        aggs = [F.count(F.lit(1)).alias("n")]
        if value is not None:
            centred = F.col(_V) - F.lit(float(center))
            term = centred
            for p, grid in enumerate(grids, start=1):
                # Exact integer sums as in DuckDB (a term is < 2**21: no overflow below 2**42 rows).
                units = F.round(term / F.lit(float(grid))).cast("long")
                aggs.append(F.coalesce(F.sum(units), F.lit(0)).cast("double").alias(f"s{p}"))
                term = term * centred
        groups = self._groups(group_by)
        out = df.groupBy(*groups).agg(*aggs) if groups else df.agg(*aggs)
        return self._collect(out, "aggregating", value, group_by)

    def grid_counts(
        self, rows: Rows, value: Value, group_by: Sequence[Value], lo: float, step: float, size: int
    ) -> pd.DataFrame:
        from dpkit.tables.engines.duckdb_engine import _clamp_codes

        F = self._F
        df = self._base(rows, value, group_by)
        t = (F.col(_V) - F.lit(float(lo))) / F.lit(float(step))
        f = F.floor(t)
        code = F.when(t == f, f * 2).otherwise(f * 2 + 1).cast("long")
        groups = self._groups(group_by)
        out = (
            df.select(*groups, code.alias("code"))
            .groupBy(*groups, "code")
            .agg(F.count(F.lit(1)).alias("n"))
        )
        return _clamp_codes(self._collect(out, "counting by grid position", value, group_by), size)

    def bin_counts(
        self, rows: Rows, value: Value, group_by: Sequence[Value], edges: Sequence[float]
    ) -> pd.DataFrame:
        F = self._F
        df = self._base(rows, value, group_by)
        tree = self._bin_index(F.col(_V), edges)
        groups = self._groups(group_by)
        out = (
            df.select(*groups, tree.alias("bin"))
            .groupBy(*groups, "bin")
            .agg(F.count(F.lit(1)).alias("n"))
        )
        return self._collect(out, "counting by bin", value, group_by)

    def bin_counts_2d(
        self,
        rows: Rows,
        x: Value,
        y: Value,
        x_edges: Sequence[float],
        y_edges: Sequence[float],
    ) -> pd.DataFrame:
        F = self._F
        df = self._base(rows.ungrouped(), x, [y])  # y as the one group column, as in DuckDB
        out = (
            df.select(
                self._bin_index(F.col(_V), x_edges).alias("bin_x"),
                self._bin_index(F.col("_g0"), y_edges).alias("bin_y"),
            )
            .groupBy("bin_x", "bin_y")
            .agg(F.count(F.lit(1)).alias("n"))
        )
        return self._collect(out, "counting by grid cell", x, [y])

    def value_counts(
        self,
        rows: Rows,
        value: Value,
        group_by: Sequence[Value],
        domain: Sequence[Any] | None = None,
    ) -> pd.DataFrame:
        F = self._F
        df = self._base(rows, value, group_by)
        if domain is not None:
            items = self._in_list(domain, value.column)
            df = df.filter(F.col(_V).isin(items) if items else F.lit(False))
        groups = self._groups(group_by)
        out = (
            df.select(
                *groups,
                (F.col(_V).cast("string") if value.temporal else F.col(_V)).alias("value"),
            )
            .groupBy(*groups, "value")
            .agg(F.count(F.lit(1)).alias("n"))
        )
        return self._collect(out, "counting values", value, group_by)

    def coded_counts(self, codings: Sequence[Coding]) -> pd.DataFrame:
        """Columns ``c0``, ``c1``, ... (each column's code, :class:`Coding`) and ``n``: one job.

        The DuckDB engine's rule, in Spark: every row of the table is counted
        once, in the cell of its codes (a missing or undeclared value has its
        column's ``missing`` code), so adding or removing one row changes one
        cell by 1. Numbers are binned by :meth:`_bin_index` (``_sql.bin_index``'s
        rule; beyond the outer edges: the end bins), categories coded by
        equality with each declared value
        (:func:`~dpkit.tables.values.category_value`), typed as the column
        (text binary-collated, see ``__init__``). One ``groupBy`` of the codes;
        only the counts are collected. The plan is built inside :meth:`_run`:
        Spark checks types as it builds a plan, and its messages are withheld.
        """
        F = self._F
        names = [f"c{i}" for i in range(len(codings))]

        def count() -> list[Any]:
            codes = [self._code(c).alias(name) for c, name in zip(codings, names)]
            cells = self._df.select(*codes).groupBy(*names)
            return cells.agg(F.count(F.lit(1)).alias("n")).collect()

        rows = self._run(count, "counting coded cells")
        frame = pd.DataFrame([tuple(r) for r in rows], columns=[*names, "n"])
        return frame.astype("int64")

    def _code(self, coding: Coding) -> Any:
        """One column's code: its bin, or its category's position; else ``missing``."""
        F = self._F
        if coding.edges is None:
            return self._category_code(coding)
        # a column of numbers (or booleans) is read as it is, coerce or not (as DuckDB's _code)
        text = coding.coerce and self._kinds[coding.column] not in NUMBER_KINDS
        x, missing = self._number(coding.column, text)
        return F.when(missing, F.lit(int(coding.missing))).otherwise(
            self._bin_index(x, coding.edges)
        )

    def _category_code(self, coding: Coding) -> Any:
        """The value's position among the categories its column can equal, else ``missing``."""
        from dpkit.tables.values import category_value

        F = self._F
        col = F.col(f"`{coding.column}`")
        kind, type_name = self._kinds[coding.column], self._types[coding.column]
        code = None
        for j, category in enumerate(coding.categories or ()):
            value = category_value(category, coding.column, kind, type_name)
            items = [] if value is None else self._in_list([value], coding.column)
            if items:  # a fraction never equals an integer column's value
                equal = col == items[0]
                code = F.when(equal, F.lit(j)) if code is None else code.when(equal, F.lit(j))
        missing = F.lit(int(coding.missing))
        return missing if code is None else code.otherwise(missing)

    # -- boosting ----------------------------------------------------------------

    def boosting_sums(self, spec: BoostingPass) -> pd.DataFrame:
        """Columns ``feature``, ``code``, ``g``, ``h``, ``n``: one scan of a boosting pass.

        The rule is :class:`~dpkit.tables.engines.base.BoostingPass`'s, and the
        DuckDB engine's query, step for step: every per-row term is an integer
        (codes, the model's values, an arithmetic shift, look-ups in the public
        logistic table) or, for regression, one IEEE subtraction rounded to an
        integer, so the LONG sums are exact in any order and equal DuckDB's and
        NumPy's. The grouping is the shared ``boosting_sql`` (GROUPING SETS,
        one per feature in ``keys``); only one row per (feature, code) is
        collected. The plan is built inside :meth:`_run`: any failure is the
        engine's one generic error.
        """

        def run() -> list[Any]:
            terms = self._boost_terms(spec)
            sql = (
                f"SELECT {boosting_groups(spec.keys)}, {boosting_aggregates('g', 'h')} "
                f"FROM {{terms}} {boosting_grouping(spec.keys)}"
            )
            return self._df.sparkSession.sql(sql, terms=terms).collect()

        rows = self._run(run, "summing a boosting update")
        columns = ["feature", "code", "g", "h", "n"]
        return pd.DataFrame([tuple(r) for r in rows], columns=columns).astype("int64")

    def _boost_terms(self, spec: BoostingPass) -> Any:
        """Every kept row's codes of the ``keys`` features and its ``g`` and ``h`` (LONG)."""
        F = self._F
        one = 1 << GRADIENT_BITS
        rows = self._boost_rows(spec)
        codes = [f"c{int(k)}" for k in spec.keys]
        score = self._boost_score(spec)
        if spec.loss == "logistic":
            limit = SCORE_LIMIT << SCORE_BITS
            shift = MODEL_BITS - SCORE_BITS
            # shiftright on a LONG is arithmetic: floor(F 2^SCORE_BITS + 1/2), as DuckDB's >>
            rounded = F.shiftright(score + F.lit(1 << (shift - 1)), shift)
            u = F.least(F.greatest(rounded, F.lit(-limit)), F.lit(limit)) + F.lit(limit)
            indexed = rows.select(*codes, "t", u.alias("u"))
            # a broadcast join with the public (u, p, h) table: two 8193-entry arrays in
            # every plan cost 0.6-1.3 s per pass to analyse (measured locally), the join ~0.2 s
            joined = indexed.join(F.broadcast(self._logistic_table(spec)), "u")
            clip = int(spec.gradient_limit)  # |g| <= clip units: the loss's bound
            g = F.least(F.greatest(F.col("t") * F.lit(one) - F.col("p"), F.lit(-clip)), F.lit(clip))
            return joined.select(*codes, g.alias("g"), F.col("h").alias("h"))
        residual = F.col("t") - score.cast("double") * F.lit(2.0**-MODEL_BITS)
        rows = rows.select(*codes, residual.alias("r"))  # r once: the clip reads it thrice
        r = F.col("r")
        if spec.loss == "absolute":
            g = F.signum(r).cast("long") * F.lit(one)
        else:
            clipped = F.when(r < F.lit(-1.0), F.lit(-1.0)).when(r > F.lit(1.0), F.lit(1.0))
            g = F.floor(clipped.otherwise(r) * F.lit(float(one)) + F.lit(0.5)).cast("long")
        return rows.select(*codes, g.alias("g"), F.lit(one).cast("long").alias("h"))

    def _boost_rows(self, spec: BoostingPass) -> Any:
        """The rows a pass uses: the target ``t`` and every feature's code ``c0, c1, ...``.

        A row with no target (an undeclared class, a missing label) is left out;
        with ``drop_missing``, so is a row with a feature's missing code. A fit's
        passes (``spec.fit`` not 0) differ only in the model, so their rows are
        coded once and persisted (memory, then disk; the smallest integer types
        that hold the codes) until :meth:`boosting_done`: the codes' arithmetic
        runs once per fit. The persisted rows are the table's, inside Spark.
        """
        # everything of the spec but the model (the passes of one fit share it)
        key = (spec.fit, repr(replace(spec, intercept=0, shapes=(), keys=())))
        kept = self._row_frames.get(key) if spec.fit else None
        if kept is not None:
            return kept
        rows = self._boost_codes(
            spec.codings, [(self._boost_target(spec), "t")], spec.drop_missing, spec.where
        )
        if not spec.fit:
            return rows
        from pyspark import StorageLevel

        F = self._F
        t = F.col("t").cast("byte" if spec.loss == "logistic" else "double").alias("t")
        typed = [
            F.col(f"c{j}").cast(_code_type(c.missing)).alias(f"c{j}")
            for j, c in enumerate(spec.codings)
        ]
        kept = rows.select(t, *typed).persist(StorageLevel.MEMORY_AND_DISK)
        self._row_frames[key] = kept
        return kept

    def boosting_done(self, fit: int) -> None:
        """Unpersist the coded rows of ``fit`` (:meth:`_boost_rows`); other fits keep theirs."""
        for key in [k for k in self._row_frames if k[0] == fit]:
            frame = self._row_frames.pop(key)
            with contextlib.suppress(Exception):  # Spark raises many types; nothing to report
                frame.unpersist()

    def _boost_target(self, spec: BoostingPass) -> Any:
        """The row's target: 1/0 for the positive/another declared class (else NULL), or
        the finite label clipped to ``target_bounds`` and scaled to [0, 1] (else NULL).

        A class no label value can equal (of another kind, out of the type's
        range) matches nothing, as a category does (``category_value``):
        Spark is never asked to convert the label column.
        """
        from dpkit.tables.values import category_value

        F = self._F
        label = spec.label
        if spec.loss == "logistic":
            kind, type_name = self._kinds[label], self._types[label]
            target = None
            for i, value in enumerate(spec.classes):
                typed = category_value(value, label, kind, type_name)
                items = [] if typed is None else self._in_list([typed], label)
                if items:
                    equal, t = F.col(f"`{label}`") == items[0], F.lit(int(i == spec.positive))
                    target = F.when(equal, t) if target is None else target.when(equal, t)
            return F.lit(None).cast("long") if target is None else target.cast("long")
        assert spec.target_bounds is not None
        lo, hi = (float(b) for b in spec.target_bounds)
        y, missing = self._number(label, False)
        clipped = F.when(y < F.lit(lo), F.lit(lo)).when(y > F.lit(hi), F.lit(hi)).otherwise(y)
        return F.when(~missing, (clipped - F.lit(lo)) / F.lit(hi - lo))

    def _boost_codes(
        self,
        codings: Sequence[GridCoding | Coding],
        carry: Sequence[tuple[Any, str]],
        drop_missing: bool,
        where: Sequence[Condition] = (),
    ) -> Any:
        """The kept rows' feature codes ``c0, c1, ...`` and ``carry`` columns ((Column, name)):
        rows with every carried value present and, with ``drop_missing``, no missing code.

        Categories: :meth:`_code`. Numbers: :class:`GridCoding`'s rule, the grid's
        arithmetic (``FeatureGrid._numeric_codes``), as DuckDB's ``_boost_codes``:
        one step per ``select``, so no expression is repeated (nested, the
        comparisons would copy the guess nine times and overflow Spark's code
        generation): the value (``x``: a missing one replaced by ``lo``, as the
        grid does), the guess ``ceil((clip(x) - lo) / step) - 1`` clipped to
        ``[0, top]``, one exact comparison up and one down with threshold k
        computed as ``lo + k * step`` (Spark neither folds nor reorders double
        arithmetic). The rows are kept or left out on the first step's columns:
        Spark pushes a filter below the steps by copying the expressions it
        reads into it, so a filter on a final code would copy them all.
        """
        F = self._F
        first = [column.alias(name) for column, name in carry]
        keep = [F.col(name).isNotNull() for _, name in carry]
        steps: list[list[Any]] = [[], [], []]
        carried, grids = [name for _, name in carry], []
        for j, coding in enumerate(codings):
            if isinstance(coding, Coding):
                first.append(self._code(coding).cast("long").alias(f"c{j}"))
                carried.append(f"c{j}")
                if drop_missing:
                    keep.append(F.col(f"c{j}") != F.lit(int(coding.missing)))
                continue
            grids.append(j)
            x, missing = self._number(coding.column, coding.coerce)
            lo = F.lit(float(coding.lo))
            first += [missing.alias(f"m{j}"), F.when(missing, lo).otherwise(x).alias(f"x{j}")]
            if drop_missing:
                keep.append(~F.col(f"m{j}"))
            steps[0].append(self._grid_guess(coding, F.col(f"x{j}")).alias(f"g{j}"))
            steps[1].append(self._grid_up(coding, j).alias(f"g{j}"))
            steps[2].append(self._grid_down(coding, j).alias(f"c{j}"))
        source = self._df
        for cond in where:  # the filter first, as a query's (``_base``)
            source = source.filter(self._condition(cond))
        frame = source.select(*first).filter(functools.reduce(operator.and_, keep))
        kept = carried + [name for j in grids for name in (f"m{j}", f"x{j}")]
        for stage in steps[:2]:
            if stage:
                frame = frame.select(*kept, *stage)
        if steps[2]:
            frame = frame.select(*carried, *steps[2])
        names = [name for _, name in carry] + [f"c{j}" for j in range(len(codings))]
        return frame.select(*names)

    def _grid_guess(self, coding: GridCoding, x: Any) -> Any:
        """``ceil((clip(x, lo, hi) - lo) / step) - 1`` clipped to ``[0, top]`` (LONG)."""
        F = self._F
        lo, hi, step = F.lit(float(coding.lo)), F.lit(float(coding.hi)), F.lit(float(coding.step))
        clipped = F.when(x < lo, lo).when(x > hi, hi).otherwise(x)
        guess = F.ceil((clipped - lo) / step).cast("long") - F.lit(1)
        return F.least(F.greatest(guess, F.lit(0)), F.lit(len(coding.thresholds))).cast("long")

    def _threshold(self, coding: GridCoding, k: Any) -> Any:
        """Threshold ``k`` (1-based) as the grid computes it: ``lo + k * step``, two IEEE operations."""
        F = self._F
        return F.lit(float(coding.lo)) + k.cast("double") * F.lit(float(coding.step))

    def _grid_up(self, coding: GridCoding, j: int) -> Any:
        """One step up when ``x`` lies above the threshold after the guess."""
        F = self._F
        g, x = F.col(f"g{j}"), F.col(f"x{j}")
        above = (g < F.lit(len(coding.thresholds))) & (x > self._threshold(coding, g + 1))
        return F.when(above, g + 1).otherwise(g)

    def _grid_down(self, coding: GridCoding, j: int) -> Any:
        """One step down when ``x`` lies on or below the guess's threshold; ``missing`` if missing."""
        F = self._F
        g, x = F.col(f"g{j}"), F.col(f"x{j}")
        below = (g > F.lit(0)) & (x <= self._threshold(coding, g))
        code = F.when(below, g - 1).otherwise(g)
        return F.when(F.col(f"m{j}"), F.lit(int(coding.missing)).cast("long")).otherwise(code)

    def _boost_score(self, spec: BoostingPass) -> Any:
        """The row's score (LONG, units of 2^-MODEL_BITS): the intercept plus each shape's
        value at the row's code (a constant array, written once per pass; ``get`` is 0-based
        and NULL out of range, never an error)."""
        F = self._F
        score = F.lit(int(spec.intercept)).cast("long")
        for j, shape in enumerate(spec.shapes):
            values = ", ".join(f"{int(v)}L" for v in shape) or "CAST(NULL AS BIGINT)"
            array = F.expr(f"array({values})")
            score = score + F.get(array, F.col(f"c{j}").cast("int"))
        return score

    def _logistic_table(self, spec: BoostingPass) -> Any:
        """The public table (u, p, h) of the log loss, u = 0 .. 2 L: one small DataFrame per engine."""
        key = (spec.probabilities, spec.hessians)
        table = self._logistic.get(key)
        if table is None:
            # an inline table is a local relation: Spark broadcasts it with no job of its own
            rows = ", ".join(f"({u}L, {int(p)}L, {int(h)}L)" for u, (p, h) in enumerate(zip(*key)))
            table = self._df.sparkSession.sql(f"SELECT * FROM VALUES {rows} AS logistic(u, p, h)")
            self._logistic[key] = table
        return table

    # -- plumbing ----------------------------------------------------------------

    def interrupt(self) -> None:
        """Cancel this engine's running Spark job (from another thread; a time-out)."""
        self._df.sparkSession.sparkContext.cancelJobGroup(self._job_group)

    def _run(self, action: Any, what: str, cols: Sequence[str] = ()) -> Any:
        try:
            context = self._df.sparkSession.sparkContext
            context.setJobGroup(self._job_group, "dpkit query", interruptOnCancel=True)
            return action()
        except Exception:  # Spark raises many types (Py4J, Analysis, Arithmetic ...)
            pass  # raised below, outside the handler, so the original is not even chained
        where = f" for column(s) {list(cols)}" if cols else ""
        raise DataError(
            f"Spark failed while {what}{where}. Its message is withheld because it can "
            "quote data values. Check that each column's stored type matches how the "
            "query uses it (e.g. numbers stored as text need coerce=True in the schema)."
        )

    def _collect(
        self, frame: Any, what: str, value: Value | None, group_by: Sequence[Value]
    ) -> pd.DataFrame:
        cols = [g.column for g in group_by] + ([value.column] if value is not None else [])
        rows = self._run(frame.collect, what, cols)
        names = list(frame.columns)
        return pd.DataFrame([tuple(r) for r in rows], columns=names)
