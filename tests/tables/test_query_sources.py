"""Session.from_polars with a LazyFrame, Session.from_duckdb with a SQL query (issue 28)."""

from __future__ import annotations

import duckdb
import pandas as pd
import polars as pl
import pytest

from dpkit import Session
from dpkit.errors import DataError, InvalidParameterError
from dpkit.tables.engines import Rows

TYPES = {"age": "BIGINT", "sex": "VARCHAR"}


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"age": [30, 41, 52, 63], "sex": ["f", "m", "f", "m"]})


def test_a_lazy_frame_is_collected_once_with_the_declared_types() -> None:
    calls = []

    def counted(ages: pl.Series) -> pl.Series:
        calls.append(len(ages))
        return ages

    lazy = (
        pl.from_pandas(_frame())
        .lazy()
        .with_columns(pl.col("age").map_batches(counted, return_dtype=pl.Int64))
    )
    s = Session.from_polars(lazy, types={"age": "DOUBLE", "sex": "VARCHAR"}, epsilon=1.0)
    assert s.columns == {"age": "DOUBLE", "sex": "VARCHAR"}
    s.count(epsilon=0.1)
    s.mean("age", bounds=(0, 100), epsilon=0.1)
    assert len(calls) == 1  # collected once, when the session is made


def test_a_failing_lazy_plan_withholds_its_message() -> None:
    lazy = pl.from_pandas(_frame()).lazy().select(pl.col("sex").cast(pl.Int64, strict=True))
    with pytest.raises(DataError, match="could not collect the LazyFrame") as info:
        Session.from_polars(lazy, types={"sex": "BIGINT"}, epsilon=1.0)
    assert '"f"' not in str(info.value) and "'f'" not in str(info.value)
    with pytest.raises(InvalidParameterError, match="no declared type"):
        Session.from_polars(pl.from_pandas(_frame()).lazy(), types={"age": "BIGINT"}, epsilon=1.0)


def test_a_sql_query_on_a_connection_and_on_the_default_one() -> None:
    con = duckdb.connect()
    con.register("people", _frame())
    s = Session.from_duckdb(
        "SELECT age, sex FROM people WHERE age > 35", connection=con, types=TYPES, epsilon=1.0
    )
    assert s.columns == TYPES
    assert int(s.engine.moments(_rows(), None, ())["n"].iloc[0]) == 3
    by_name = Session.from_duckdb("people", connection=con, types=TYPES, epsilon=1.0)
    assert int(by_name.engine.moments(_rows(), None, ())["n"].iloc[0]) == 4

    default = duckdb.default_connection()
    default.execute("CREATE OR REPLACE TABLE dpkit_test_people AS SELECT 1 AS age, 'f' AS sex")
    try:
        for source in ("FROM dpkit_test_people", "dpkit_test_people"):
            s = Session.from_duckdb(source, types=TYPES, epsilon=1.0)
            assert int(s.engine.moments(_rows(), None, ())["n"].iloc[0]) == 1
    finally:
        default.execute("DROP TABLE dpkit_test_people")


def test_a_statement_that_is_not_one_select_is_refused_before_it_runs() -> None:
    con = duckdb.connect()
    con.register("people", _frame())
    for text in (
        "CREATE TABLE evil AS SELECT * FROM people",
        "SELECT 1; CREATE TABLE evil AS SELECT 1",
    ):
        with pytest.raises(InvalidParameterError, match="one SQL SELECT query"):
            Session.from_duckdb(text, connection=con, types=TYPES, epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="could not parse"):
        Session.from_duckdb("SELEC age FROM people", connection=con, types=TYPES, epsilon=1.0)
    assert con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'evil'"
    ).fetchone() == (0,)
    with pytest.raises(InvalidParameterError, match="got int"):
        Session.from_duckdb(3, types=TYPES, epsilon=1.0)


def _rows() -> Rows:
    return Rows()
