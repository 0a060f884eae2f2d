"""SQL text for the DuckDB engine: quoting, literals and the query skeleton.

Identifiers are always double-quoted (and checked against the table's columns
by the session before they get here); literals come only from public
parameters (filter values, bounds, replacements) and are rendered from a
closed set of Python types, so no user string is ever spliced into SQL
unescaped.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence

from dpkit.errors import InvalidParameterError
from dpkit.tables import queries as Q
from dpkit.tables.engines.base import Condition, Contribution, Rows, Value, check_literal

V = "__dpkit_v"
PID = "__dpkit_pid"
POS = "__dpkit_pos"
ROW = "__dpkit_row"


def quote(name: str) -> str:
    """A double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def binary_text(expr: str) -> str:
    """``expr`` (VARCHAR) compared and grouped by exact bytes, whatever collation it carried.

    UTF-8 bytes order and equal exactly as Python's code points do, so this is
    dpkit's one text rule in DuckDB: a column ``COLLATE NOCASE`` (or NOACCENT,
    NFC, an ICU locale) or a connection's ``default_collation`` cannot merge
    'A' with 'a' or 'é' with 'e\\u0301'.
    """
    return f'({expr} COLLATE "binary")'


def sql_type(type_name: str) -> str:
    """The declared numeric type as SQL (known names only; anything else reads as DOUBLE)."""
    from dpkit.tables.values import numeric_type

    rep = numeric_type(type_name)
    if rep.family == "decimal":
        return f"DECIMAL({rep.precision},{rep.scale})"
    if rep.family == "float64":
        return "DOUBLE"
    return type_name.strip().upper()  # a name from values._INT_BITS or values._FLOAT32


def literal(value: object, column: str = "value", type_name: str | None = None) -> str:
    """A SQL literal for a public scalar (str, int, float, bool, date, datetime).

    With the column's declared numeric ``type_name``, a number is written as
    ``CAST('<exact spelling>' AS <that type>)``: the engine then compares the
    column with exactly the value :func:`dpkit.tables.values.canonical` reasoned
    about (no implicit cast of the column to DOUBLE or of the literal to FLOAT).
    A fractional number for an integer column stays a DOUBLE: it equals no
    integer, and ordering comparisons with it are exact.
    """
    v = check_literal(value, column)
    if type_name is not None and isinstance(v, int | float) and not isinstance(v, bool):
        from dpkit.tables.values import numeric_type

        rep = numeric_type(type_name)
        if not (rep.family == "integer" and isinstance(v, float)):
            return f"CAST('{v!r}' AS {sql_type(type_name)})"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float):
        # repr round-trips exactly; the cast keeps it DOUBLE (not DECIMAL).
        return f"CAST('{v!r}' AS DOUBLE)"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, _dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, _dt.date):
        return f"DATE '{v.isoformat()}'"
    raise InvalidParameterError(
        f"cannot use a {type(v).__name__} as a filter value."
    )  # pragma: no cover


def condition_sql(cond: Condition, types: Mapping[str, str] | None = None) -> str:
    """SQL for one filter; literals typed as the column's declared type (``types``)."""
    col = quote(cond.column)
    type_name = (types or {}).get(cond.column)
    op = cond.op
    if op == "is null":
        return f"{col} IS NULL"
    if op == "not null":
        return f"{col} IS NOT NULL"
    if op in ("in", "not in"):
        items = in_list(cond.value, cond.column, type_name)
        if not items:
            # nothing to match: an empty list, or only fractions for an integer column
            # (NOT IN of those is true exactly for the non-missing rows, as SQL has it)
            if op == "in":
                return "FALSE"
            return "TRUE" if not cond.value else f"{col} IS NOT NULL"
        return f"{col} {'IN' if op == 'in' else 'NOT IN'} ({', '.join(items)})"
    sql_op = {"==": "=", "!=": "<>"}.get(op, op)
    return f"{col} {sql_op} {literal(cond.value, cond.column, type_name)}"


def in_list(values: Sequence[object], column: str, type_name: str | None) -> list[str]:
    """The items of IN / NOT IN, each typed as the column.

    For an integer column, fractional numbers are left out: they equal no
    integer, and a DOUBLE in the list would make DuckDB compare every item
    (and the column) as DOUBLE, where 2**60 + 1 equals 2**60.
    """
    from dpkit.tables.values import numeric_type

    integer = type_name is not None and numeric_type(type_name).family == "integer"
    items = [
        literal(v, column, type_name)
        for v in values
        if not (integer and isinstance(v, float) and not v.is_integer())
    ]
    return items


def value_sql(
    value: Value, clip: bool = True, types: Mapping[str, str] | None = None
) -> tuple[str, str | None]:
    """(expression, keep-condition) reading ``value`` under its null policy and bounds.

    A bounded number is present when it lies in :func:`queries.valid_range`
    (which excludes NULL, NaN and ±inf too); it is then clipped to the bounds
    unless ``clip`` is false (the caller clips, as :meth:`moments` does).
    """
    col = quote(value.column)
    if value.numeric:
        # concat(col, '') keeps the TRY_CAST in the query: DuckDB 2.0's type_pushdown
        # would otherwise turn a TRY_CAST over a CSV scan into a strict conversion in the
        # reader, failing (and quoting the entry) when some row holds text.
        x = f"TRY_CAST(concat({col}, '') AS DOUBLE)" if value.coerce else f"CAST({col} AS DOUBLE)"
        if value.bounds is not None:
            w_lo, w_hi = (literal(b) for b in Q.valid_range(value.bounds))
            # NaN sorts above every number in DuckDB, so BETWEEN rejects it as well.
            present = f"({x} BETWEEN {w_lo} AND {w_hi})"
        else:
            # isfinite is NULL for NULL and false for NaN and ±inf: one test for "present".
            present = f"isfinite({x})"
        if value.nulls == "drop":
            expr, keep = x, present
        else:
            fill = literal(value.numeric_fill())
            expr, keep = f"(CASE WHEN {present} THEN {x} ELSE {fill} END)", None
        if value.bounds is not None and clip:
            expr = clip_sql(expr, value.bounds)
        return expr, keep
    if value.nulls == "drop":
        return col, f"{col} IS NOT NULL"
    fill = literal(value.replacement, value.column, (types or {}).get(value.column))
    return f"coalesce({col}, {fill})", None


def clip_sql(expr: str, bounds: tuple[float, float]) -> str:
    lo, hi = (literal(float(b)) for b in bounds)
    # CASE is several times faster than least(greatest(...)) in DuckDB.
    return f"(CASE WHEN {expr} < {lo} THEN {lo} WHEN {expr} > {hi} THEN {hi} ELSE {expr} END)"


def base_query(
    rows: Rows,
    value: Value | None,
    group_by: Sequence[Value],
    table: str,
    clip: bool = True,
    types: Mapping[str, str] | None = None,
    part: tuple[int, int] | None = None,
) -> str:
    """Rows to aggregate: group keys ``_g0..``, the value ``__dpkit_v``, bounded per person.

    The filter and null policies apply first, then the contribution bound
    (so a person's ``k`` kept rows are among the rows the query uses).
    ``clip=False`` leaves the value unclipped (but in its valid range).
    ``types`` (the declared storage types) types the literals; ``table``
    should present text columns with :func:`binary_text` (the engine does).
    ``part=(j, parts)`` (with a contribution bound) keeps only the persons of
    part ``j`` of ``parts`` (see :func:`person_part`).
    """
    select: list[str] = []
    where: list[str] = [condition_sql(c, types) for c in rows.where]
    for i, g in enumerate(group_by):
        expr, keep = value_sql(g, types=types)
        select.append(f"{as_text(expr) if g.temporal else expr} AS _g{i}")
        if keep:
            where.append(keep)
    if value is not None:
        expr, keep = value_sql(value, clip, types)
        select.append(f"{expr} AS {V}")
        if keep:
            where.append(keep)
    contribution = rows.contribution
    if contribution is not None:
        select.append(f"{quote(contribution.column)} AS {PID}")
        if group_by or value is not None:
            # The rank key hashes the row's own content with the query's salt: never its
            # position, which other people's rows (or the filter) would shift.
            select.append(f"hash({ROW}, {int(contribution.salt)}) AS {POS}")
        where.append(f"{quote(contribution.column)} IS NOT NULL")
        if part is not None and part[1] > 1:
            where.append(person_part(quote(contribution.column), *part))
    if not select:
        select.append("1 AS __dpkit_one")
    sql = f"SELECT {', '.join(select)} FROM {table} AS {ROW}"
    if where:
        sql += " WHERE " + " AND ".join(f"({w})" for w in where)
    if contribution is not None:
        if not group_by:
            return first_rows(sql, contribution, value is not None)
        sql = f"SELECT * FROM ({sql}) QUALIFY " + bounded(contribution, group_list(group_by))
    return sql


def first_rows(rows: str, contribution: Contribution, valued: bool) -> str:
    """A person's first ``max_rows`` rows of ``rows`` by the row hash, for an ungrouped query.

    The same rows as :func:`bounded`'s window (its selection and proof are
    :class:`~dpkit.tables.engines.base.Contribution`'s), found by a hash
    aggregate per person instead of a window over the table: DuckDB's
    ``min_by(v, hash, k)`` keeps the values of the ``k`` rows with the
    smallest hashes (ties are identical rows, so identical values). It never
    sorts the table, and it keeps at most ``k`` values per person. ``v`` is
    never NULL here (:func:`value_sql` drops or fills every missing value),
    so ``min_by``, which skips NULL values, drops no row. Without a value
    (a count) the rows' content does not matter, only how many a person
    keeps: ``min(rows, k)``, with no hash at all.
    """
    k = int(contribution.max_rows)
    if valued:
        kept = f"unnest(min_by({V}, {POS}, {k})) AS {V}"
    else:
        kept = f"unnest(range(least(count(*), {k}))) AS __dpkit_one"
    return f"SELECT {kept} FROM ({rows}) GROUP BY {PID}"


def person_part(person: str, j: int, parts: int) -> str:
    """The condition that the person id ``person`` falls in part ``j`` of ``parts`` (by its hash).

    A person's rows all lie in one part, so the contribution bound, whose
    choice of a person's rows looks at that person's rows only (see
    :class:`~dpkit.tables.engines.base.Contribution`), keeps exactly the rows
    in a part that it keeps in the whole table; the parts are disjoint and
    cover every person, so counts and sums over the parts add up to the
    whole. The split changes how much the engine holds at once, never which
    rows are kept. The hash is of the id as the bound partitions it (the
    same ``PARTITION BY`` value), unsalted: the split is no secret.
    """
    return f"hash({person}) % {int(parts)} = {int(j)}"


def bounded(contribution: Contribution, groups: Sequence[str]) -> str:
    """The QUALIFY condition of the contribution bound over the query's group keys ``groups``.

    Without ``max_groups`` (or without groups): a person's first ``max_rows``
    rows by the row hash. With it: the person's first ``max_groups`` groups
    by ``hash(group key, salt)`` (ties broken by the key), then the first
    ``max_rows`` rows of each by the row hash. ``groups`` are the selected
    ``_g`` columns, the values the aggregation groups by (text binary-collated,
    dates as text, numbers as DOUBLE: DuckDB's ``hash`` and ``GROUP BY`` both
    take -0.0 for 0.0). The proof is :class:`~dpkit.tables.engines.base.Contribution`'s.
    """
    k = int(contribution.max_rows)
    if contribution.max_groups is None or not groups:
        return f"row_number() OVER (PARTITION BY {PID} ORDER BY {POS}) <= {k}"
    keys = ", ".join(groups)
    rank = f"hash({keys}, {int(contribution.salt)})"
    return (
        f"row_number() OVER (PARTITION BY {PID}, {keys} ORDER BY {POS}) <= {k} AND "
        f"dense_rank() OVER (PARTITION BY {PID} ORDER BY {rank}, {keys}) "
        f"<= {int(contribution.max_groups)}"
    )


def as_text(expr: str) -> str:
    """A date/time expression as ISO text (``_dates.from_engine`` reads it back), binary-collated."""
    return binary_text(f"CAST({expr} AS VARCHAR)")


def group_list(group_by: Sequence[Value]) -> list[str]:
    return [f"_g{i}" for i in range(len(group_by))]


def equal_width(edges: Sequence[float]) -> float | None:
    """The bin width if ``edges`` are exactly ``lo + i*width`` (as ``numpy.linspace`` makes them)."""
    import numpy as np

    arr = np.asarray(edges, dtype=np.float64)
    n = arr.size - 1
    if n < 2:
        return None
    width = (arr[-1] - arr[0]) / n
    if not (np.isfinite(width) and width > 0):
        return None
    if np.array_equal(arr[:-1], np.arange(n) * width + arr[0]):
        return float(width)
    return None


def bin_index(x: str, edges: Sequence[float]) -> str:
    """SQL for the bin of an unclipped value ``x``; values beyond the outer edges go to the end bins.

    Equal-width edges (``lo + i*w``, as ``numpy.linspace`` makes them): the
    first and last bins are decided by exact comparisons with their inner
    edges, the rest by ``floor((x - lo) / w)`` in double precision — one
    division instead of a search, so a histogram of thousands of bins costs
    about a plain ``GROUP BY``. A value within rounding error (a few units in
    the last place) of an inner edge may land in the bin next to the one an
    exact comparison gives; the rule is the same IEEE arithmetic in every
    engine, and a deterministic function of the row, so the one-row
    sensitivity is unchanged. Other edges: an exact binary search of CASEs.
    """
    width = equal_width(edges)
    n = len(edges) - 1
    if width is None:
        clipped = clip_sql(x, (float(edges[0]), float(edges[-1])))
        return bin_tree(clipped, edges, 0, n - 1)
    first, last = literal(float(edges[1])), literal(float(edges[-2]))
    lo, w = literal(float(edges[0])), literal(width)
    return (
        f"(CASE WHEN {x} < {first} THEN 0 WHEN {x} >= {last} THEN {n - 1} "
        f"ELSE CAST(floor(({x} - {lo}) / {w}) AS BIGINT) END)"
    )


def bin_tree(x: str, edges: Sequence[float], first: int, last: int) -> str:
    """Nested CASE giving the bin of ``x`` among bins ``first..last`` (binary search)."""
    if first == last:
        return str(first)
    mid = (first + last + 1) // 2
    return (
        f"CASE WHEN {x} < {literal(float(edges[mid]))} THEN {bin_tree(x, edges, first, mid - 1)} "
        f"ELSE {bin_tree(x, edges, mid, last)} END"
    )
