"""The synthetic twin: public metadata in, a table with the real column kinds out."""

from __future__ import annotations

import datetime as dt
import math
import warnings
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from dpkit.errors import InvalidParameterError, PrivacyWarning
from dpkit.service.twin import PLACEHOLDER_DATES, synthetic_twin
from dpkit.tables import Column, Schema, Session

TYPES = {
    "pid": "BIGINT",
    "age": "DOUBLE",
    "income": "DECIMAL(10,2)",
    "visits": "INTEGER",
    "score": "FLOAT",
    "ward": "SMALLINT",
    "district": "VARCHAR",
    "smoker": "BOOLEAN",
    "day": "DATE",
    "seen": "TIMESTAMP",
    "note": "VARCHAR",
    "code": "VARCHAR",
}
SCHEMA = Schema.of(
    [
        Column("age", bounds=(0, 120), nulls="replace", replacement=40),
        Column("income", bounds=(0, 1e5)),
        Column("visits", bounds=(0, 50)),
        Column("score", bounds=(0, 1)),
        Column("ward", domain=[1, 2, 3]),
        Column("district", domain=["A", "B", "C"], nulls="replace", replacement="A"),
        Column("smoker", domain=[True, False]),
        Column("day", domain=["2019-01-01", "2019-07-01", "2020-01-01"]),
        Column("code", coerce=True, bounds=(0, 10)),
    ]
)
OPTIONS: dict[str, Any] = {"privacy_unit": "pid", "max_contributions": 2, "rng": 7}


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Session:
    """A CSV-backed session with every column's type declared (no inference)."""
    rng = np.random.default_rng(3)
    n = 60
    frame = pd.DataFrame(
        {
            "pid": rng.integers(1, 25, n),
            "age": rng.integers(18, 90, n),
            "income": np.round(rng.uniform(0, 9e4, n), 2),
            "visits": rng.integers(0, 30, n),
            "score": np.round(rng.random(n), 3),
            "ward": rng.integers(1, 4, n),
            "district": rng.choice(["A", "B", "C"], n),
            "smoker": rng.random(n) < 0.3,
            "day": rng.choice(["2019-01-01", "2019-07-01", "2020-01-01"], n),
            "seen": "2020-03-04 05:06:07",
            "note": "private remark",
            "code": rng.integers(0, 10, n).astype(str),
        }
    )
    path = tmp_path_factory.mktemp("twin") / "people.csv"
    frame.to_csv(path, index=False)
    return Session.from_csv(path, epsilon=1000.0, types=TYPES, schema=SCHEMA, **OPTIONS)


@pytest.fixture(scope="module")
def twin() -> Session:
    frame = synthetic_twin(TYPES, SCHEMA, rows=300, seed=1, privacy_unit="pid")
    return Session.from_pandas(frame, types=TYPES, epsilon=1000.0, schema=SCHEMA, **OPTIONS)


def test_twin_has_the_real_column_kinds_and_types(real: Session, twin: Session) -> None:
    assert twin.column_kinds == real.column_kinds
    assert twin.columns == real.columns  # the very DuckDB types, DECIMAL(10,2) and DATE included


def test_twin_dtypes_are_the_declared_types() -> None:
    """Read by its own dtypes (infer_types=True), the twin has the declared types."""
    frame = synthetic_twin(TYPES, SCHEMA, rows=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        own = Session.from_pandas(frame, infer_types=True, epsilon=1.0, schema=SCHEMA)
    assert own.columns == Session.from_pandas(frame, types=TYPES, epsilon=1.0).columns


E = 0.5
QUERIES: dict[str, Callable[[Session], Any]] = {
    "count": lambda s: s.count(epsilon=E),
    "count column": lambda s: s.count("age", epsilon=E),
    "count where date": lambda s: s.count(epsilon=E, where={"day": (">=", "2019-06-01")}),
    "sum": lambda s: s.sum("age", epsilon=E),
    "sum decimal": lambda s: s.sum("income", epsilon=E),
    "sum coerced text": lambda s: s.sum("code", epsilon=E),
    "mean": lambda s: s.mean("visits", epsilon=E),
    "quantile": lambda s: s.quantile("score", q=0.25, epsilon=E),
    "median": lambda s: s.median("age", epsilon=E),
    "mode": lambda s: s.mode("district", epsilon=E),
    "mode numeric domain": lambda s: s.mode("ward", epsilon=E),
    "histogram edges": lambda s: s.histogram("age", edges=[0, 18, 65, 120], epsilon=E),
    "histogram domain": lambda s: s.histogram("district", epsilon=E),
    "group-by count": lambda s: s.count(epsilon=E, group_by="district", keys=["A", "B", "C"]),
    "group-by mean": lambda s: s.mean(
        "age", epsilon=E, group_by="smoker", keys=[True, False], where={"ward": [1, 2]}
    ),
    "group-by dates": lambda s: s.count(
        epsilon=E, group_by="day", keys=["2019-01-01", "2019-07-01", "2020-01-01"]
    ),
}


@pytest.mark.parametrize("query", QUERIES.values(), ids=QUERIES.keys())
def test_every_query_of_the_real_session_runs_on_the_twin(
    query: Callable[[Session], Any], real: Session, twin: Session
) -> None:
    query(real)  # the query is valid on the real data ...
    query(twin)  # ... and so, without error, on the twin


@pytest.mark.parametrize(
    "type_name",
    [
        *("INT", "int4", "NUMERIC(12,3)", "decimal", "TEXT", "STRING", "bool", "DATETIME"),
        *("timestamp_ms", "TIMESTAMP_NS", "TIMESTAMPTZ", "REAL", "float8", "UBIGINT", "TINYINT"),
        "HUGEINT",
    ],
)
def test_type_aliases_give_the_real_kind(type_name: str, tmp_path: Path) -> None:
    path = tmp_path / "one.csv"
    path.write_text("x\n\n", encoding="utf-8")  # one row, missing
    real = Session.from_csv(path, epsilon=1.0, types={"x": type_name})
    twin = Session.from_pandas(  # read by the twin's own dtypes
        synthetic_twin({"x": type_name}, Schema(), rows=20), infer_types=True, epsilon=1.0
    )
    assert twin.column_kinds == real.column_kinds
    if type_name != "HUGEINT":  # pandas has no 128-bit integers: BIGINT, also numeric
        assert twin.columns == real.columns


@pytest.mark.parametrize("type_name", ["TIME", "UUID", "BLOB", "INTERVAL", "INTEGER[]", "nonsense"])
def test_other_types_become_text(type_name: str) -> None:
    frame = synthetic_twin({"x": type_name}, Schema(), rows=40)
    assert Session.from_pandas(frame, infer_types=True, epsilon=1.0).column_kinds == {"x": "text"}
    assert set(frame["x"].dropna()) <= {f"value_{i}" for i in range(1, 21)}


def test_placeholders_say_they_are_made_up() -> None:
    types = {"n": "DOUBLE", "i": "INTEGER", "t": "VARCHAR", "d": "DATE", "ts": "TIMESTAMP"}
    frame = synthetic_twin({**types, "b": "BOOLEAN"}, Schema(), rows=2000, seed=5)
    assert frame["n"].min() >= 0 and frame["n"].max() <= 100
    assert set(frame["i"].dropna()) == set(range(101))  # 2000 draws hit all 101 values
    assert set(frame["t"].dropna()) == {f"value_{i}" for i in range(1, 21)}
    first, last = PLACEHOLDER_DATES
    days = frame["d"].dropna().tolist()
    assert first <= min(days) and max(days) <= last
    stamps = frame["ts"].dropna()
    assert stamps.min() >= pd.Timestamp(first) and stamps.max() < pd.Timestamp(2021, 1, 1)
    assert set(frame["b"].dropna()) == {True, False}
    # fair coin: 1900 draws, mean 0.5 ± 4.5 standard deviations (0.0115 each)
    assert abs(frame["b"].dropna().mean() - 0.5) < 0.052


def test_domains_keep_their_value_types() -> None:
    types = {"w": "BIGINT", "x": "DOUBLE", "c": "VARCHAR", "b": "BOOLEAN", "d": "DATE"}
    schema = Schema.of(
        [
            Column("w", domain=[10, 20]),
            Column("x", domain=[0.5, 1.5]),
            Column("c", domain=["red", "blue"]),
            Column("b", domain=[True]),
            Column("d", domain=["2021-03-04", "2022-05-06"]),
        ]
    )
    frame = synthetic_twin(types, schema, rows=200)
    assert set(frame["w"].dropna().tolist()) == {10, 20}
    assert all(type(v) is int for v in frame["w"].dropna().tolist())
    assert set(frame["x"].dropna().tolist()) == {0.5, 1.5}
    assert set(frame["c"].dropna().tolist()) == {"red", "blue"}
    assert set(frame["b"].dropna().tolist()) == {True}
    assert set(frame["d"].dropna().tolist()) == {dt.date(2021, 3, 4), dt.date(2022, 5, 6)}


def test_numbers_follow_public_bounds_edges_and_decimal_scale() -> None:
    types = {"i": "INTEGER", "e": "DOUBLE", "m": "DECIMAL(6,2)", "f": "FLOAT", "g": "FLOAT"}
    schema = Schema.of(
        [
            Column("i", bounds=(-3.5, 2.5)),
            Column("e", edges=[10, 20, 30]),
            Column("m", bounds=(0.001, 0.029)),
            Column("f", bounds=(0.1, 0.3)),
            # one float32 lies within: 0.3 rounded up; the one below 0.3 would be out of bounds
            Column("g", bounds=(0.29999999, 0.30000002)),
        ]
    )
    frame = synthetic_twin(types, schema, rows=500)
    assert set(frame["i"].dropna()) == {-3, -2, -1, 0, 1, 2}
    assert frame["e"].min() >= 10 and frame["e"].max() <= 30
    assert set(frame["m"].dropna()) == {Decimal("0.01"), Decimal("0.02")}
    assert frame["f"].min() >= 0.1 and frame["f"].max() <= 0.3
    assert set(frame["g"].dropna()) == {float(np.float32(0.3))}


def test_coerced_text_holds_numbers_within_bounds() -> None:
    frame = synthetic_twin({"c": "VARCHAR"}, Schema.of([Column("c", coerce=True, bounds=(2, 3))]))
    numbers = frame["c"].dropna().astype(float)
    assert numbers.min() >= 2 and numbers.max() <= 3


def test_missing_entries_are_a_public_five_percent_except_the_privacy_unit() -> None:
    frame = synthetic_twin(TYPES, SCHEMA, rows=1000, privacy_unit="pid")
    counts = frame.isna().sum().to_dict()
    assert counts == {c: 0 if c == "pid" else 50 for c in TYPES}


@pytest.mark.parametrize("id_type", ["BIGINT", "VARCHAR", "DOUBLE", "DECIMAL(8,2)", "TINYINT"])
def test_privacy_unit_gives_each_person_one_to_three_rows(id_type: str) -> None:
    frame = synthetic_twin({"id": id_type, "x": "DOUBLE"}, Schema(), rows=100, privacy_unit="id")
    rows_per_person = frame["id"].value_counts()
    assert rows_per_person.between(1, 3).all() and rows_per_person.sum() == 100
    assert rows_per_person.size >= 34  # 100 rows, at most 3 each


def test_privacy_unit_ids_of_a_small_type_are_shared() -> None:
    frame = synthetic_twin({"id": "UTINYINT"}, Schema(), rows=2000, privacy_unit="id")
    ids = frame["id"]
    assert ids.min() >= 1 and ids.max() <= 255 and not ids.isna().any()


def test_deterministic_for_a_seed_and_columns_independent() -> None:
    one = synthetic_twin(TYPES, SCHEMA, rows=200, seed=11, privacy_unit="pid")
    pd.testing.assert_frame_equal(
        one, synthetic_twin(TYPES, SCHEMA, rows=200, seed=11, privacy_unit="pid")
    )
    other = synthetic_twin(TYPES, SCHEMA, rows=200, seed=12, privacy_unit="pid")
    assert not one["age"].equals(other["age"])
    # A column depends on its own name and metadata only: dropping others changes nothing.
    alone = synthetic_twin({"age": "DOUBLE"}, Schema.of([SCHEMA.get("age")]), rows=200, seed=11)
    pd.testing.assert_series_equal(alone["age"], one["age"])


@pytest.mark.parametrize(
    ("types", "schema", "options", "message"),
    [
        ({"a": "DOUBLE"}, Schema.of([Column("b", bounds=(0, 1))]), {}, "'b'"),
        ({"a": "DOUBLE"}, Schema(), {"privacy_unit": "pid"}, "'pid'"),
        ({"a": "DOUBLE"}, Schema(), {"rows": 0}, "rows"),
        ({"a": "DOUBLE"}, Schema(), {"rows": True}, "rows"),
        ({"a": "DOUBLE"}, Schema(), {"seed": -1}, "seed"),
        ({"a": 3}, Schema(), {}, "types"),
        ({"a": "INTEGER"}, Schema.of([Column("a", bounds=(0.2, 0.8))]), {}, "'a'"),
        ({"a": "TINYINT"}, Schema.of([Column("a", bounds=(200, 300))]), {}, "TINYINT"),
        ({"a": "INTEGER"}, Schema.of([Column("a", domain=["x"])]), {}, "'a'"),
        ({"a": "INTEGER"}, Schema.of([Column("a", domain=[1.5])]), {}, "'a'"),
        ({"a": "DECIMAL(5,1)"}, Schema.of([Column("a", domain=[0.25])]), {}, "DECIMAL(5,1)"),
        ({"a": "DATE"}, Schema.of([Column("a", domain=["2020-01-01T10:00"])]), {}, "'a'"),
        ({"a": "DATE"}, Schema.of([Column("a", domain=["soon"])]), {}, "ISO"),
        ({"a": "BOOLEAN"}, Schema(), {"privacy_unit": "a"}, "BOOLEAN"),
    ],
)
def test_refusals_name_the_metadata(
    types: Any, schema: Schema, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(
        InvalidParameterError, match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        synthetic_twin(types, schema, **options)


# ----------------------------------------------------------------------------- property

_INTEGERS = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "INTEGER": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "UBIGINT": (0, 2**64 - 1),
}
_TEXT = st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=8
)


@st.composite
def _numeric_bounds(draw: st.DrawFn, type_name: str) -> tuple[float, float]:
    if type_name in _INTEGERS:
        low, high = _INTEGERS[type_name]
        a, b = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2, unique=True)))
        lo = a - draw(st.sampled_from([0.0, 0.25, 0.75]))
        hi = b + draw(st.sampled_from([0.0, 0.25, 0.75]))
    else:
        width = 32 if type_name == "FLOAT" else 64
        finite = st.floats(allow_nan=False, allow_infinity=False, width=width)
        lo, hi = sorted(draw(st.lists(finite, min_size=2, max_size=2)))
    if type_name.startswith("DECIMAL"):
        precision, scale = (int(p) for p in type_name[8:-1].split(","))
        lo, hi = (
            max(min(v, 10.0 ** (precision - scale)), -(10.0 ** (precision - scale)))
            for v in (lo, hi)
        )
        units = 10**scale
        assume(math.ceil(Fraction(lo) * units) <= math.floor(Fraction(hi) * units))
    assume(lo < hi)
    return lo, hi


@st.composite
def _domain(draw: st.DrawFn, type_name: str) -> list[Any]:
    if type_name in _INTEGERS:
        values: st.SearchStrategy[Any] = st.integers(*_INTEGERS[type_name])
    elif type_name == "DOUBLE":
        values = st.floats(allow_nan=False, allow_infinity=False)
    elif type_name == "FLOAT":
        values = st.floats(allow_nan=False, allow_infinity=False, width=32)
    elif type_name.startswith("DECIMAL"):
        precision, scale = (int(p) for p in type_name[8:-1].split(","))
        units = st.integers(-(10**precision - 1), 10**precision - 1)
        values = units.map(lambda u: u / 10**scale if scale else u)
    elif type_name == "BOOLEAN":
        return draw(st.sampled_from([[True], [False], [True, False]]))
    elif type_name == "DATE":
        values = st.dates().map(dt.date.isoformat)
    elif type_name == "TIMESTAMP":
        period = st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2100, 1, 1))
        values = period.map(dt.datetime.isoformat)
    else:
        values = _TEXT
    return draw(st.lists(values, min_size=1, max_size=5, unique=True))


@st.composite
def _schemas(draw: st.DrawFn) -> tuple[dict[str, str], Schema]:
    numeric = [*_INTEGERS, "DOUBLE", "FLOAT"]
    decimals = st.integers(1, 15).flatmap(
        lambda p: st.integers(0, p).map(lambda s: f"DECIMAL({p},{s})")
    )
    other = st.sampled_from(["VARCHAR", "BOOLEAN", "DATE", "TIMESTAMP"])
    kinds = st.one_of(st.sampled_from(numeric), decimals, other)
    types: dict[str, str] = {}
    columns = []
    for i in range(draw(st.integers(1, 4))):
        name = f"c{i}"
        types[name] = type_name = draw(kinds)
        has_bounds = type_name in numeric or type_name.startswith("DECIMAL")
        what = draw(
            st.sampled_from(["bounds", "domain", "none"] if has_bounds else ["domain", "none"])
        )
        if what == "bounds":
            columns.append(Column(name, bounds=draw(_numeric_bounds(type_name))))
        elif what == "domain":
            columns.append(Column(name, domain=draw(_domain(type_name))))
    return types, Schema.of(columns)


def _twin_value(value: Any, type_name: str) -> Any:
    """A declared domain value as the twin stores it."""
    if type_name == "DATE":
        return dt.date.fromisoformat(value)
    if type_name == "TIMESTAMP":
        return pd.Timestamp(dt.datetime.fromisoformat(value))
    if type_name.startswith("DECIMAL"):
        return Decimal(repr(value))
    return value


@given(_schemas(), st.integers(1, 60), st.integers(0, 2**32))
def test_twin_values_stay_within_declared_bounds_and_domains(
    declared: tuple[dict[str, str], Schema], rows: int, seed: int
) -> None:
    types, schema = declared
    frame = synthetic_twin(types, schema, rows=rows, seed=seed)
    assert list(frame.columns) == list(types) and len(frame) == rows
    for name, type_name in types.items():
        column = schema.get(name)
        values = frame[name].dropna().tolist()
        assert len(values) == rows - int(0.05 * rows + 0.5)
        if column.domain is not None:
            allowed = {_twin_value(v, type_name) for v in column.domain}
            assert set(values) <= allowed, name
        elif column.bounds is not None:
            lo, hi = (Fraction(b) for b in column.bounds)
            assert all(lo <= Fraction(v) <= hi for v in values), name
