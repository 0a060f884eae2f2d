"""The Spark engine returns the same exact aggregates as DuckDB (PySpark local mode).

One Spark session for the module (start-up costs ~10 s); skipped only when
PySpark or a Java runtime is missing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.tables._declared import types_of

from dpkit.errors import DataError
from dpkit.tables import Session
from dpkit.tables.engines import Condition, Contribution, DuckDBEngine, Rows, Value
from dpkit.tables.engines.duckdb_engine import connect

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def data() -> pd.DataFrame:
    rng = np.random.default_rng(17)
    n = 3000
    x = np.round(rng.normal(40, 25, n), 2)
    x[:10] = np.nan
    return pd.DataFrame(
        {
            "x": x,
            "g": rng.choice(["a", "b", "c"], n),
            "pid": rng.integers(0, 200, n),
            "t": np.where(
                rng.random(n) < 0.1, "bad", np.round(rng.uniform(0, 5, n), 1).astype(str)
            ),
        }
    )


@pytest.fixture(scope="module")
def engines(spark: Any, data: pd.DataFrame) -> tuple[Any, DuckDBEngine]:
    from dpkit.tables.engines.spark_engine import SparkEngine

    con = connect()
    con.register("t", data)
    return SparkEngine(spark.createDataFrame(data)), DuckDBEngine(con, "t")


def _same(a: pd.DataFrame, b: pd.DataFrame, keys: list[str]) -> None:
    a = a.sort_values(keys).reset_index(drop=True)
    b = b.sort_values(keys).reset_index(drop=True)
    assert list(a.columns) == list(b.columns)
    for c in a.columns:
        assert a[c].tolist() == b[c].tolist()  # exact: counts and integer sums


def test_same_exact_aggregates_before_noise(engines: tuple[Any, DuckDBEngine]) -> None:
    spark_engine, duck = engines
    assert spark_engine.column_kinds() == duck.column_kinds()
    rows = Rows(where=(Condition("g", "in", ("a", "b")), Condition("x", ">=", -10.0)))
    value = Value("x", numeric=True, bounds=(0.0, 100.0))
    replace = Value("x", numeric=True, nulls="replace", replacement=50.0, bounds=(0.0, 100.0))
    group = (Value("g", numeric=False),)
    for eng_a, eng_b in [(spark_engine, duck)]:
        _same(
            eng_a.moments(rows, value, group, 50.0, [2.0**-14, 2.0**-8]),
            eng_b.moments(rows, value, group, 50.0, [2.0**-14, 2.0**-8]),
            ["_g0"],
        )
        _same(
            eng_a.moments(Rows(), replace, (), 0.0, [2.0**-14]),
            eng_b.moments(Rows(), replace, (), 0.0, [2.0**-14]),
            ["n"],
        )
        _same(eng_a.moments(Rows(), None, group), eng_b.moments(Rows(), None, group), ["_g0"])
        _same(
            eng_a.grid_counts(rows, value, group, 0.0, 0.5, 201),
            eng_b.grid_counts(rows, value, group, 0.0, 0.5, 201),
            ["_g0", "code"],
        )
        _same(  # ungrouped: DuckDB counts the streamed codes in NumPy
            eng_a.grid_counts(rows, value, (), 0.0, 0.5, 201),
            eng_b.grid_counts(rows, value, (), 0.0, 0.5, 201),
            ["code"],
        )
        # the aligned grid of an integer column (queries.aligned_grid): every value on a point
        for bounds, step, size in [((0.0, 199.0), 0.5, 399), ((-3.0, 150.0), 16.0, 11)]:
            ids = Value("pid", numeric=True, bounds=bounds)
            _same(
                eng_a.grid_counts(rows, ids, group, bounds[0], step, size),
                eng_b.grid_counts(rows, ids, group, bounds[0], step, size),
                ["_g0", "code"],
            )
        edges = [0.0, 10.0, 25.5, 40.0, 100.0]
        _same(
            eng_a.bin_counts(rows, value, group, edges),
            eng_b.bin_counts(rows, value, group, edges),
            ["_g0", "bin"],
        )
        coerced_y = Value("t", numeric=True, coerce=True, bounds=(0.0, 5.0))
        _same(
            eng_a.bin_counts_2d(rows, value, coerced_y, edges, [0.0, 1.0, 2.5, 5.0]),
            eng_b.bin_counts_2d(rows, value, coerced_y, edges, [0.0, 1.0, 2.5, 5.0]),
            ["bin_x", "bin_y"],
        )
        cat = Value("g", numeric=False)
        _same(
            eng_a.value_counts(Rows(), cat, (), ["a", "c"]),
            eng_b.value_counts(Rows(), cat, (), ["a", "c"]),
            ["value"],
        )
        coerced = Value("t", numeric=True, coerce=True, bounds=(0.0, 5.0))
        _same(
            eng_a.moments(Rows(), coerced, (), 0.0, [2.0**-14]),
            eng_b.moments(Rows(), coerced, (), 0.0, [2.0**-14]),
            ["n"],
        )


def test_contribution_bounding_on_spark(
    engines: tuple[Any, DuckDBEngine], data: pd.DataFrame
) -> None:
    spark_engine, duck = engines
    rows = Rows(contribution=Contribution("pid", 4, salt=123))
    n_spark = int(spark_engine.moments(rows, None, ())["n"].iloc[0])
    n_duck = int(duck.moments(rows, None, ())["n"].iloc[0])
    expected = int(np.minimum(data.groupby("pid").size(), 4).sum())
    assert n_spark == n_duck == expected
    per_person = spark_engine.value_counts(rows, Value("pid", numeric=False), ())
    assert per_person["n"].max() == 4
    # A count keeps min(rows, k) per person after the filter (no window on either engine).
    where = (Condition("g", "in", ("a", "b")),)
    filtered = Rows(where=where, contribution=Contribution("pid", 2, salt=9))
    kept = data[data["g"].isin(["a", "b"])].groupby("pid").size()
    n_spark = int(spark_engine.moments(filtered, None, ())["n"].iloc[0])
    assert n_spark == int(duck.moments(filtered, None, ())["n"].iloc[0])
    assert n_spark == int(np.minimum(kept, 2).sum())


def test_both_engines_treat_values_beyond_the_valid_range_as_missing(spark: Any) -> None:
    from dpkit.tables.engines.spark_engine import SparkEngine

    df = pd.DataFrame({"x": [3.0, 1e9, -1e9, 1e20, -1e20, 7.5, np.nan]})
    con = connect()
    con.register("t", df)
    duck, spark_engine = DuckDBEngine(con, "t"), SparkEngine(spark.createDataFrame(df))
    for value in [
        Value("x", numeric=True, bounds=(0.0, 10.0)),
        Value("x", numeric=True, nulls="replace", replacement=-5.0, bounds=(0.0, 10.0)),
    ]:
        _same(
            spark_engine.moments(Rows(), value, (), 5.0, [2.0**-20, 2.0**-14]),
            duck.moments(Rows(), value, (), 5.0, [2.0**-20, 2.0**-14]),
            ["n"],
        )
    n = duck.moments(Rows(), Value("x", numeric=True, bounds=(0.0, 10.0)), ())["n"].iloc[0]
    assert int(n) == 4


def test_spark_errors_withhold_the_message(engines: tuple[Any, DuckDBEngine]) -> None:
    spark_engine, _ = engines
    with pytest.raises(DataError) as info:
        spark_engine.moments(
            Rows(), Value("t", numeric=True, bounds=(0.0, 1.0)), (), 0.0, [1.0]
        )  # ANSI cast of 'bad'
    assert "bad" not in str(info.value) and info.value.__context__ is None


def test_a_session_on_spark(spark: Any, data: pd.DataFrame) -> None:
    s = Session.from_spark(
        spark.createDataFrame(data), types=types_of(data), epsilon=10.0, delta=1e-6, rng=5
    )
    r = s.mean("x", epsilon=2.0, bounds=(0, 100), group_by="g", keys=["a", "b", "c"])
    truth = data.assign(x=data["x"].clip(0, 100)).groupby("g")["x"].mean()
    for k in ("a", "b", "c"):
        assert abs(r.value[k] - truth[k]) < 5
    med = s.median("x", epsilon=2.0, bounds=(0, 100))
    assert abs(med.value - data["x"].clip(0, 100).median()) < 5
    sel = s.count(epsilon=1.0, group_by="g", keys="private", delta=1e-6)
    assert sel.keys == ("a", "b", "c")
    assert s.spent.epsilon == pytest.approx(5.0)
