"""Issue 26 A3: column types come from the data owner's declaration, for every source.

Every constructor takes ``types=`` (every column), reads the source through one
per-value conversion to those types (a value that does not fit is missing),
refuses undeclared columns with a message that says how to declare them, and
takes a source's own types only on ``infer_types=True`` (with a
``PrivacyWarning``). The transcript tests add one hostile row (NULL, text in a
number column, a number beyond the type, an impossible date, NaN/inf, a BLOB)
and check that everything the analyst sees is the same, noisy values aside,
including the published column types; the property tests check that the
per-value conversion is what DuckDB itself computes for each stored value.
"""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.tables._neighbours import Options, assert_same, record

from dpkit.errors import InvalidParameterError, PrivacyWarning
from dpkit.tables import Session
from dpkit.tables.engines.duckdb_engine import connect

TYPES = {"id": "BIGINT", "x": "DOUBLE", "n": "BIGINT", "day": "DATE", "g": "VARCHAR"}
BASE: list[dict[str, Any]] = [
    {"id": i, "x": 1.5 * i, "n": 10 * i, "day": dt.date(2020, 1, 1 + i), "g": "ab"[i % 2]}
    for i in range(1, 7)
]
# One hostile row each: the neighbour is BASE plus that row.
HOSTILE: dict[str, dict[str, Any]] = {
    "null": {"id": None, "x": None, "n": None, "day": None, "g": None},
    "text-in-numbers": {"id": "seven", "x": "oops", "n": "12abc", "day": "not a date", "g": "c"},
    "huge": {"id": 2**63 - 1, "x": 1e308, "n": "1" * 40, "day": "9999-12-31", "g": "b" * 500},
    "odd-dates": {"id": 8, "x": 2.0, "n": 3, "day": "2024-02-30", "g": "a"},
    "nan-inf": {"id": 9, "x": math.inf, "n": math.nan, "day": "0000-00-00", "g": "a"},
    "new-group": {"id": 10, "x": -math.inf, "n": -(2**63), "day": "1677-09-21", "g": "zz"},
}
SEED = 17
CALLS: list[tuple[str, Callable[[Session], Any], Options]] = [
    ("count", lambda s: s.count(epsilon=1.0), Options(additive=True)),
    ("count-x", lambda s: s.count("x", epsilon=1.0), Options(additive=True)),
    ("mean-x", lambda s: s.mean("x", bounds=(0, 20), epsilon=1.0), Options()),
    ("sum-n", lambda s: s.sum("n", bounds=(0, 100), epsilon=1.0), Options(additive=True)),
    (
        "count-by-g",
        lambda s: s.count(epsilon=1.0, group_by="g", keys=["a", "b", "zz"]),
        Options(additive=True),
    ),
    (
        "count-where-day",
        lambda s: s.count(epsilon=1.0, where={"day": ("<", dt.date(2020, 1, 4))}),
        Options(additive=True),
    ),
]


def _typed_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": pd.array([r["id"] for r in rows], dtype="Int64"),
            "x": pd.array([r["x"] for r in rows], dtype="float64"),
            "n": pd.array([r["n"] for r in rows], dtype="Int64"),
            "day": pd.array([r["day"] for r in rows], dtype=pd.ArrowDtype(pa.date32())),
            "g": pd.array([r["g"] for r in rows], dtype="string"),
        }
    )


def _text(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.isoformat() if isinstance(v, dt.date) else str(v)


def _text_table(rows: list[dict[str, Any]]) -> pa.Table:
    """The rows as an all-text Arrow table: what a writer produces for mixed columns."""
    return pa.table({c: pa.array([_text(r[c]) for r in rows], pa.string()) for c in TYPES})


# How each source holds the table and the neighbour: the table typed as its writer would
# type clean data, the neighbour as its writer types a column with a hostile value.
def _pandas(rows: list[dict[str, Any]], hostile: bool, tmp: Path, types: Any = TYPES) -> Session:
    frame = pd.DataFrame(rows, dtype=object) if hostile else _typed_frame(rows)
    return Session.from_pandas(frame, types=types, epsilon=100.0, rng=SEED)


def _csv(rows: list[dict[str, Any]], hostile: bool, tmp: Path, types: Any = TYPES) -> Session:
    path = tmp / f"t{int(hostile)}.csv"
    pd.DataFrame({c: [_text(r[c]) for r in rows] for c in TYPES}).to_csv(path, index=False)
    return Session.from_csv(path, types=types, epsilon=100.0, rng=SEED)


def _parquet(rows: list[dict[str, Any]], hostile: bool, tmp: Path, types: Any = TYPES) -> Session:
    path = tmp / f"t{int(hostile)}.parquet"
    table = _text_table(rows) if hostile else pa.Table.from_pandas(_typed_frame(rows))
    pq.write_table(table, path)
    return Session.from_parquet(path, types=types, epsilon=100.0, rng=SEED)


def _arrow(rows: list[dict[str, Any]], hostile: bool, tmp: Path, types: Any = TYPES) -> Session:
    table = _text_table(rows) if hostile else pa.Table.from_pandas(_typed_frame(rows))
    return Session.from_arrow(table, types=types, epsilon=100.0, rng=SEED)


def _polars(rows: list[dict[str, Any]], hostile: bool, tmp: Path, types: Any = TYPES) -> Session:
    import polars as pl

    table = _text_table(rows) if hostile else pa.Table.from_pandas(_typed_frame(rows))
    return Session.from_polars(pl.from_arrow(table), types=types, epsilon=100.0, rng=SEED)


def _duckdb(rows: list[dict[str, Any]], hostile: bool, tmp: Path, types: Any = TYPES) -> Session:
    table = _text_table(rows) if hostile else pa.Table.from_pandas(_typed_frame(rows))
    con = connect()
    con.register("source", table)
    con.execute("CREATE TABLE t AS SELECT * FROM source")
    return Session.from_duckdb("t", connection=con, types=types, epsilon=100.0, rng=SEED)


def _polars_lazy(
    rows: list[dict[str, Any]], hostile: bool, tmp: Path, types: Any = TYPES
) -> Session:
    import polars as pl

    table = _text_table(rows) if hostile else pa.Table.from_pandas(_typed_frame(rows))
    lazy = pl.from_arrow(table).lazy().select(list(TYPES))  # type: ignore[union-attr]
    return Session.from_polars(lazy, types=types, epsilon=100.0, rng=SEED)


def _duckdb_query(
    rows: list[dict[str, Any]], hostile: bool, tmp: Path, types: Any = TYPES
) -> Session:
    table = _text_table(rows) if hostile else pa.Table.from_pandas(_typed_frame(rows))
    con = connect()
    con.register("source", table)
    con.execute("CREATE TABLE t AS SELECT * FROM source")
    query = "SELECT * FROM t WHERE true"
    return Session.from_duckdb(query, connection=con, types=types, epsilon=100.0, rng=SEED)


def _sqlite_value(v: Any) -> Any:
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, str) and len(v) == 40 and set(v) == {"1"}:
        return v  # stored as text: SQLite integers are 64-bit
    return v


def _sqlite(rows: list[dict[str, Any]], hostile: bool, tmp: Path, types: Any = TYPES) -> Session:
    path = tmp / f"t{int(hostile)}.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (id INTEGER, x REAL, n BIGINT, day DATE, g TEXT)")
        db.executemany(
            "INSERT INTO t VALUES (?, ?, ?, ?, ?)",
            [tuple(_sqlite_value(r[c]) for c in TYPES) for r in rows],
        )
    db.close()
    return Session.from_sql(path, "t", types=types, epsilon=100.0, rng=SEED)


SOURCES = {
    "pandas": _pandas,
    "csv": _csv,
    "parquet": _parquet,
    "arrow": _arrow,
    "polars": _polars,
    "polars-lazy": _polars_lazy,
    "duckdb": _duckdb,
    "duckdb-query": _duckdb_query,
    "sqlite": _sqlite,
}


@pytest.mark.parametrize("hostile", sorted(HOSTILE))
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_hostile_row_changes_nothing_but_noisy_values(
    source: str, hostile: str, tmp_path: Path
) -> None:
    make = SOURCES[source]
    table = make(BASE, False, tmp_path)
    neighbour = make([*BASE, HOSTILE[hostile]], True, tmp_path)
    assert table.columns == neighbour.columns == TYPES  # the published schema
    assert table.column_kinds == neighbour.column_kinds
    for _, call, opts in CALLS:
        assert_same(record(table, call, opts), record(neighbour, call, opts))


@pytest.mark.spark
def test_spark_reads_a_hostile_row_into_the_declared_types(spark: Any) -> None:
    from pyspark.sql import types as T

    strings = T.StructType([T.StructField(c, T.StringType()) for c in TYPES])
    kinds = {"id": T.LongType(), "x": T.DoubleType(), "n": T.LongType(), "day": T.DateType()}
    typed_schema = T.StructType([T.StructField(c, kinds.get(c, T.StringType())) for c in TYPES])
    typed = spark.createDataFrame([tuple(r[c] for c in TYPES) for r in BASE], typed_schema)
    spark.conf.set("spark.sql.ansi.enabled", "true")  # CAST would raise; try_cast must not
    try:
        for name in ("text-in-numbers", "huge", "nan-inf", "odd-dates"):
            table = Session.from_spark(typed, types=TYPES, epsilon=100.0, rng=SEED)
            rows = [[_text(r[c]) for c in TYPES] for r in [*BASE, HOSTILE[name]]]
            neighbour = Session.from_spark(
                spark.createDataFrame(rows, schema=strings), types=TYPES, epsilon=100.0, rng=SEED
            )
            assert neighbour.columns == table.columns
            assert neighbour.column_kinds == table.column_kinds
            for _, call, opts in CALLS[:4]:
                assert_same(record(table, call, opts), record(neighbour, call, opts))
    finally:
        spark.conf.unset("spark.sql.ansi.enabled")


# ---------------------------------------------------------------- declarations


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_undeclared_columns_are_refused_naming_them(source: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError) as info:
        SOURCES[source](BASE, False, tmp_path, {"id": "BIGINT", "x": "DOUBLE"})
    message = str(info.value)
    assert "['n', 'day', 'g']" in message and "types=" in message and "infer_types" in message


def test_inference_is_an_explicit_opt_in_that_warns(tmp_path: Path) -> None:
    frame = _typed_frame(BASE)
    with pytest.raises(InvalidParameterError, match="no declared type"):
        Session.from_pandas(frame, epsilon=1.0)
    with pytest.warns(PrivacyWarning, match=r"\['day', 'g'\].*dtypes"):
        s = Session.from_pandas(
            frame,
            types={"id": "BIGINT", "x": "DOUBLE", "n": "BIGINT"},
            infer_types=True,
            epsilon=1.0,
        )
    assert s.columns["x"] == "DOUBLE" and s.columns["day"] == "DATE"
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        Session.from_pandas(frame, types=TYPES, infer_types=True, epsilon=1.0)  # all declared


@pytest.mark.parametrize(
    ("types", "match"),
    [
        ({"id": "NOT_A_TYPE"}, "not a DuckDB type"),
        ({"id": "BIGINT; DROP TABLE t"}, "not a DuckDB type"),
        ({"id": 3}, "DuckDB type names"),
        ("BIGINT", "DuckDB type names"),
        ({**TYPES, "missing": "DOUBLE"}, "does not have"),
    ],
)
def test_bad_declarations_are_refused_without_quoting_data(types: Any, match: str) -> None:
    frame = _typed_frame(BASE).assign(g="SECRET-41")
    with pytest.raises(InvalidParameterError, match=match) as info:
        Session.from_pandas(frame, types=types, epsilon=1.0)
    assert "SECRET" not in str(info.value)


def test_declared_type_names_are_canonical() -> None:
    frame = _typed_frame(BASE)
    aliases = {"id": "int8", "x": "float8", "n": "LONG", "day": "date", "g": "TEXT"}
    assert Session.from_pandas(frame, types=aliases, epsilon=1.0).columns == TYPES


def test_infer_types_must_be_a_bool() -> None:
    with pytest.raises(InvalidParameterError, match="infer_types"):
        Session.from_pandas(_typed_frame(BASE), types=TYPES, infer_types="yes", epsilon=1.0)  # type: ignore[arg-type]


def test_sqlite_inference_uses_the_declared_affinity_never_the_rows(tmp_path: Path) -> None:
    """One NULL or one text value in a BIGINT column used to change its (pandas) type."""
    columns = []
    for name, extra in (("clean", []), ("null", [(None,)]), ("text", [("abc",)])):
        path = tmp_path / f"{name}.sqlite"
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE t (n BIGINT)")
            db.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), *extra])
        db.close()
        with pytest.warns(PrivacyWarning, match="affinity"):
            columns.append(Session.from_sql(path, "t", infer_types=True, epsilon=1.0).columns)
    assert columns == [{"n": "BIGINT"}] * 3


# ---------------------------------------------------------------- engine agreement

_STORED = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=2.0**52, max_value=2.0**54),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    st.sampled_from(["1e400", "  12 ", "0x10", "2024-02-29", "2023-02-29", "NaN", "-inf"]),
    st.binary(max_size=8),
)


CAST_TYPES = {"a": "BIGINT", "b": "DOUBLE", "c": "VARCHAR", "d": "DATE"}


def _read_back(s: Session) -> list[tuple[Any, ...]]:
    con: Any = s.engine._connection  # type: ignore[attr-defined]
    return con.execute(f"SELECT * FROM {s.engine._table}").fetchall()  # type: ignore[attr-defined]


def _sqlite_values(tmp: Path, values: list[Any]) -> list[tuple[Any, ...]]:
    """The values stored in four untyped SQLite columns, read as CAST_TYPES by dpkit."""
    path = tmp / "v.sqlite"
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (a, b, c, d)")
        db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(v, v, v, v) for v in values])
    db.close()
    return _read_back(Session.from_sql(path, "t", types=CAST_TYPES, epsilon=1.0))


def _same(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    def key(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and math.isnan(v) else v

    return [tuple(map(key, r)) for r in a] == [tuple(map(key, r)) for r in b]


def _stored(v: Any) -> Any:
    """What SQLite hands back for a value it stored (NaN is stored as NULL)."""
    return None if isinstance(v, float) and math.isnan(v) else v


def _duckdb_cast(v: Any, type_name: str) -> Any:
    """DuckDB's own TRY_CAST of the value's text (the rule dpkit applies)."""
    if isinstance(v, bytes):
        try:
            v = v.decode("utf-8")
        except UnicodeDecodeError:
            return None
    text = None if v is None else repr(v) if isinstance(v, float) else str(v)
    return duckdb.execute(f"SELECT TRY_CAST(?::VARCHAR AS {type_name})", [text]).fetchone()[0]  # type: ignore[index]


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(values=st.lists(_STORED, min_size=1, max_size=12))
def test_sqlite_values_become_the_declared_type_as_duckdb_casts_them(
    values: list[Any], tmp_path: Path
) -> None:
    stored = [_stored(v) for v in values]
    got = _sqlite_values(tmp_path, values)
    expected = [tuple(_duckdb_cast(v, t) for t in CAST_TYPES.values()) for v in stored]
    assert _same(got, expected)
    # and what the declared type can hold exactly, it holds exactly
    for v, (_, double, text, _) in zip(stored, got):
        if isinstance(v, float):
            assert double == v
        if isinstance(v, str):
            assert text == v
        if isinstance(v, int):
            assert double == float(v)


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(values=st.lists(_STORED, min_size=1, max_size=12))
def test_pandas_object_columns_agree_with_the_sqlite_reading(values: list[Any]) -> None:
    """One rule per value, whatever the source: an object column reads like SQLite's."""
    stored = [_stored(v) for v in values]
    column = pd.Series(stored, dtype=object)
    frame = pd.DataFrame(dict.fromkeys(CAST_TYPES, column))
    got = _read_back(Session.from_pandas(frame, types=CAST_TYPES, epsilon=1.0))
    expected = [tuple(_duckdb_cast(v, t) for t in CAST_TYPES.values()) for v in stored]
    assert _same(got, expected)
