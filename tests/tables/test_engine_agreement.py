"""Engine agreement: dpkit's canonical values decide equality exactly as the engine does.

The privacy argument of filters, public keys and ``Parallel`` disjointness is
made in Python, on values read by :func:`dpkit.tables.values.canonical`; it
holds only if the engine, running dpkit's SQL, sees the same values. For each
declared type × source setting (column collations, a connection's
``default_collation``) these hypothesis properties check, on the engine itself:

* **filters**: the rows ``column == literal`` selects are exactly the stored
  values equal (in Python) to ``canonical(literal)``; an ``in`` list selects
  the union of its members' rows — so literals that are different canonical
  values never select a common row (what disjointness assumes);
* **grouping**: the engine's groups are exactly the Python-distinct stored
  values, each returned as the stored value itself (its own spelling) with
  its count.

The stored value of an inserted Python value ``v`` is ``canonical(v)``: the
declared type's representation (a REAL holds float32, a DATE a midnight).
``test_the_properties_detect_*`` run the same checks on deliberately broken
engines (collation left on, literals left to DuckDB's implicit casts) and
require a failure: the properties can fail.
"""

from __future__ import annotations

import datetime as dt
import math
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpkit.errors import InvalidParameterError
from dpkit.tables.engines import _sql
from dpkit.tables.engines.base import Condition, Rows, Value
from dpkit.tables.engines.duckdb_engine import DuckDBEngine, connect
from dpkit.tables.values import canonical, from_engine

SETTINGS = settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# --------------------------------------------------------------------- values per type

#: Spellings that collations, case folding or Unicode normalisation merge.
SPELLINGS = [
    "a", "A", "é", "e\u0301", "É", "E\u0301", "e", "E", "ß", "ss", "SS", "ẞ", "İ", "i",
    "I", "ı", "i\u0307", "ﬁ", "fi", "Å", "A\u030a", "Å", "a ", " a", "", "Ω", "Ω",
]  # fmt: skip
_text = st.one_of(
    st.sampled_from(SPELLINGS),
    st.text(alphabet=st.sampled_from("aAeEéÉ\u0301 ßs"), max_size=3),
)
_big = [2**53 - 1, 2**53, 2**53 + 1, 2**60, 2**60 + 1, 2**60 + 2, 2**63 - 1, -(2**63)]
_bigint = st.one_of(st.sampled_from(_big), st.integers(-3, 3))
_integer = st.one_of(st.sampled_from([2**31 - 1, -(2**31), 2**24, 2**24 + 1]), st.integers(-3, 3))
_near_2_53 = [float(2**53), float(2**53) + 2, float(2**53) - 1, 2.0**60, 0.1, 0.5, -0.0, 1e300]
_double = st.one_of(st.sampled_from(_near_2_53), st.integers(-3, 3).map(float))
_real = st.one_of(
    st.sampled_from([0.1, 0.10000000149011612, 0.1000000001, 16777216.0, 16777217.0, 1e30]),
    st.integers(-3, 3).map(float),
)
_date = st.one_of(
    st.sampled_from([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2020, 2, 29)]),
    st.dates(dt.date(2020, 1, 1), dt.date(2020, 1, 4)),
)
_timestamp = st.one_of(
    st.sampled_from([dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, 0, 0, 0, 1)]),
    st.datetimes(dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, 0, 0, 2)),
)

#: declared type -> (stored values, literal values: other spellings of the same values too)
TYPES: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
    "VARCHAR": (_text, _text),
    "BIGINT": (_bigint, st.one_of(_bigint, _bigint.map(float), st.sampled_from([1.5, -0.5]))),
    "INTEGER": (_integer, st.one_of(_integer, _integer.map(float), st.just(2.5))),
    "DOUBLE": (_double, st.one_of(_double, st.sampled_from([2**53, 2**53 + 1, 2**60, 3]))),
    "REAL": (_real, st.one_of(_real, st.sampled_from([3, 2**24, 2**24 + 1, 0.1]))),
    "BOOLEAN": (st.booleans(), st.booleans()),
    "DATE": (_date, st.one_of(_date, _date.map(str), st.just(dt.datetime(2020, 1, 1, 12)))),
    "TIMESTAMP": (
        _timestamp,
        st.one_of(_timestamp, _timestamp.map(lambda v: v.isoformat()), _date),
    ),
}
KIND = {
    "VARCHAR": "text",
    "BOOLEAN": "boolean",
    "DATE": "temporal",
    "TIMESTAMP": "temporal",
}

#: How a DuckDB source can declare text comparison: (column clause, connection setting).
COLLATIONS = [
    ("", None),
    ("COLLATE NOCASE", None),
    ("COLLATE NOACCENT", None),
    ("COLLATE NFC", None),
    ("COLLATE NOCASE.NOACCENT.NFC", None),
    ("", "nocase"),
    ("COLLATE NFC", "noaccent"),
]


def _canon(value: Any, type_name: str) -> Any:
    """dpkit's value, or ``None`` when dpkit refuses the literal for this type."""
    try:
        return canonical(value, "c", KIND.get(type_name, "numeric"), type_name, "value")  # type: ignore[arg-type]
    except InvalidParameterError:
        return None


# --------------------------------------------------------------------- engines


_CONNECTION: list[Any] = []


@contextmanager
def duckdb_table(
    type_name: str, stored: list[Any], clause: str = "", default: str | None = None
) -> Iterator[DuckDBEngine]:
    """A fresh table ``t(id, c)`` on one shared connection (connecting costs ~0.1 s)."""
    if not _CONNECTION:
        _CONNECTION.append(connect())
    con = _CONNECTION[0]
    con.execute(f"SET default_collation = '{default}'" if default else "RESET default_collation")
    con.execute(f"CREATE OR REPLACE TABLE t (id INTEGER, c {type_name} {clause})")
    if stored:
        con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(stored)))
    try:
        yield DuckDBEngine(con, "t")
    finally:
        con.execute("RESET default_collation")


def _count(engine: Any, cond: Condition) -> int:
    frame = engine.moments(Rows(where=(cond,)), None, [])
    return int(frame["n"].iloc[0]) if len(frame) else 0


def _matched(engine: Any, *conds: Condition) -> set[int]:
    """The row ids the engine's filter selects (ids are 0..n-1, in insertion order)."""
    frame = engine.moments(Rows(where=conds), None, [Value("id", numeric=False)])
    return {int(v) for v in frame["_g0"]}


def _groups(engine: Any, type_name: str) -> Counter[Any]:
    temporal = KIND.get(type_name) == "temporal"
    frame = engine.value_counts(Rows(), Value("c", numeric=False, temporal=temporal), [])
    out: Counter[Any] = Counter()
    for v, n in zip(frame["value"], frame["n"]):
        v = from_engine(v) if temporal else (v.item() if hasattr(v, "item") else v)
        out[v] += int(n)
    return out


# --------------------------------------------------------------------- the properties


def check_agreement(engine: Any, type_name: str, stored: list[Any], literals: list[Any]) -> None:
    truth = [_canon(v, type_name) for v in stored]
    assert all(t is not None for t in truth)
    # grouping: one group per Python-distinct stored value, named by that value
    expected = Counter(truth)  # Python equality: exact code points, 3 == 3.0
    got = _groups(engine, type_name)
    assert got == expected, f"groups differ for {type_name}"  # keys: the data's spelling
    # filters: == and in select exactly the rows whose stored value is Python-equal, so
    # literals that are different values select disjoint rows (what Parallel assumes)
    canon = [c for c in (_canon(v, type_name) for v in literals) if c is not None]
    for c in canon:
        want = {i for i, t in enumerate(truth) if t == c}
        assert _matched(engine, Condition("c", "==", c)) == want, f"== {c!r} on {type_name}"
    if canon:
        union = {i for i, t in enumerate(truth) if any(t == c for c in canon)}
        assert _matched(engine, Condition("c", "in", tuple(canon))) == union, "in"


@pytest.mark.parametrize("type_name", sorted(TYPES))
@SETTINGS
@given(data=st.data())
def test_duckdb_agrees_with_canonical_values(type_name: str, data: st.DataObject) -> None:
    stored_s, literal_s = TYPES[type_name]
    stored = data.draw(st.lists(stored_s, max_size=8))
    stored = [v for v in stored if _canon(v, type_name) is not None]
    literals = data.draw(st.lists(literal_s, min_size=1, max_size=4))
    with duckdb_table(type_name, stored) as engine:
        check_agreement(engine, type_name, stored, literals)


@pytest.mark.parametrize(("clause", "default"), COLLATIONS)
@SETTINGS
@given(stored=st.lists(_text, max_size=10), literals=st.lists(_text, min_size=1, max_size=4))
def test_duckdb_text_follows_code_points_whatever_the_collation(
    clause: str, default: str | None, stored: list[str], literals: list[str]
) -> None:
    with duckdb_table("VARCHAR", stored, clause, default) as engine:
        check_agreement(engine, "VARCHAR", stored, literals)


def test_a_relation_on_a_nocase_connection_follows_code_points() -> None:
    stored = ["A", "a", "a", "é", "e\u0301", "E\u0301"]
    con = connect()
    con.execute("SET default_collation = 'nocase'")
    con.execute("CREATE TABLE t (id INTEGER, c VARCHAR COLLATE NOACCENT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(stored)))
    engine = DuckDBEngine(con, con.table("t"))
    check_agreement(engine, "VARCHAR", stored, ["a", "A", "é", "e\u0301", "e"])


def test_unicode_forms_stay_different_values() -> None:
    assert unicodedata.normalize("NFC", "e\u0301") == "é"
    assert _canon("e\u0301", "VARCHAR") != _canon("é", "VARCHAR")
    with duckdb_table("VARCHAR", ["é", "e\u0301"], "COLLATE NFC") as engine:
        assert _count(engine, Condition("c", "==", "é")) == 1
        assert _groups(engine, "VARCHAR") == Counter({"é": 1, "e\u0301": 1})


def test_nan_is_never_matched_by_a_literal() -> None:
    # DuckDB says NaN = NaN; dpkit refuses NaN as a literal, so no filter selects it.
    assert _canon(math.nan, "DOUBLE") is None
    with duckdb_table("DOUBLE", [math.nan, 1.0]) as engine:
        assert _count(engine, Condition("c", "in", (1.0, 2.0))) == 1


def test_large_integer_literals_are_typed_as_the_column() -> None:
    with duckdb_table("BIGINT", [2**60, 2**60 + 1]) as engine:
        assert _count(engine, Condition("c", "==", 2**60 + 1)) == 1
        # a fractional float in the list must not turn the comparison into DOUBLE
        assert _count(engine, Condition("c", "in", (2**60 + 1, 1.5))) == 1
        assert _count(engine, Condition("c", "not in", (1.5,))) == 2
        assert _count(engine, Condition("c", "<", 2.5)) == 0
    assert _canon(2**60 + 1, "DOUBLE") is None  # a DOUBLE cannot hold it: refused
    assert _canon(float(2**60), "BIGINT") == 2**60  # one value, whatever the spelling
    assert _canon(0.1, "REAL") == _canon(0.10000000149011612, "REAL")


@pytest.mark.parametrize(
    ("type_name", "stored", "literals"),
    [
        ("DECIMAL(10,2)", [0.13, 0.1, 3], [0.13, 0.1, 3, 3.0, 0.125, 1e9]),
        ("DECIMAL(38,0)", [2**60, 2**60 + 1], [2**60, 2**60 + 1, float(2**60)]),
        ("UBIGINT", [2**64 - 1, 0], [2**64 - 1, -1, 0.0]),
        ("HUGEINT", [2**100, 2**100 + 1], [2**100, 2**100 + 1]),
        ("SMALLINT", [7, -7], [7, 7.0, 7.5, 40000]),
    ],
)
def test_other_numeric_types_filter_as_declared(
    type_name: str, stored: list[Any], literals: list[Any]
) -> None:
    truth = [_canon(v, type_name) for v in stored]
    canon = [c for c in (_canon(v, type_name) for v in literals) if c is not None]
    with duckdb_table(type_name, stored) as engine:
        for c in canon:
            want = {i for i, t in enumerate(truth) if t == c}
            assert _matched(engine, Condition("c", "==", c)) == want, f"== {c!r}"


# --------------------------------------------------------------------- the checks can fail


def _fails(check: Callable[[], None]) -> bool:
    try:
        check()
    except AssertionError:
        return True
    return False


def test_the_properties_detect_an_engine_that_keeps_the_source_collation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_sql, "binary_text", lambda expr: expr)  # the broken variant
    stored = ["A", "a", "é", "e\u0301"]

    def run(clause: str, default: str | None) -> None:
        with duckdb_table("VARCHAR", stored, clause, default) as engine:
            check_agreement(engine, "VARCHAR", stored, ["a", "é"])

    assert _fails(lambda: run("COLLATE NOCASE", None))
    assert _fails(lambda: run("", "nocase"))
    assert _fails(lambda: run("COLLATE NFC", None))
    run("", None)  # without a collation the broken engine happens to agree


def test_the_properties_detect_literals_left_to_implicit_casts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = _sql.literal
    # the broken variant: numbers as untyped literals, as DuckDB's implicit casts read them
    monkeypatch.setattr(
        _sql, "literal", lambda value, column="value", type_name=None: original(value, column)
    )
    monkeypatch.setattr(
        _sql, "in_list", lambda values, column, type_name: [original(v, column) for v in values]
    )
    stored = [2**60, 2**60 + 1]

    def run() -> None:
        with duckdb_table("BIGINT", stored) as engine:
            check_agreement(engine, "BIGINT", stored, [2**60 + 1, 1.5])

    assert _fails(run)


# --------------------------------------------------------------------- Spark


@pytest.mark.spark
@pytest.mark.parametrize("collation", ["UTF8_LCASE", "UNICODE_CI", "UTF8_BINARY"])
def test_spark_text_follows_code_points_whatever_the_collation(spark: Any, collation: str) -> None:
    from pyspark.sql import functions as F

    from dpkit.tables.engines.spark_engine import SparkEngine

    if not hasattr(F, "collate"):
        pytest.skip("this PySpark has no collations")
    stored = ["A", "a", "a", "é", "e\u0301", "É", "b"]
    frame = spark.createDataFrame(list(enumerate(stored)), "id int, c string").select(
        "id", F.col("c").cast(f"string collate {collation}").alias("c")
    )
    engine = SparkEngine(frame)
    assert engine.column_kinds()["c"] == "text"
    check_agreement(engine, "VARCHAR", stored, ["a", "A", "é", "e\u0301", "B"])


@pytest.mark.spark
def test_spark_numbers_and_dates_agree(spark: Any) -> None:
    from pyspark.sql import types as T

    from dpkit.tables.engines.spark_engine import SparkEngine

    schema = T.StructType(
        [
            T.StructField("id", T.IntegerType()),
            T.StructField("b", T.LongType()),
            T.StructField("r", T.FloatType()),
            T.StructField("d", T.DateType()),
        ]
    )
    rows = [(0, 2**60, 0.1, dt.date(2020, 1, 1)), (1, 2**60 + 1, 3.0, dt.date(2020, 1, 2))]
    frame = spark.createDataFrame(rows, schema)
    for column, type_name, literals in [
        ("b", "BIGINT", [2**60, 2**60 + 1, float(2**60), 1.5]),
        ("r", "REAL", [0.1, 3, 0.10000000149011612]),
        ("d", "DATE", ["2020-01-01", dt.date(2020, 1, 2), dt.datetime(2020, 1, 1, 1)]),
    ]:
        engine = SparkEngine(frame.select("id", frame[column].alias("c")))
        stored = [r[["id", "b", "r", "d"].index(column)] for r in rows]
        check_agreement(engine, type_name, stored, literals)
