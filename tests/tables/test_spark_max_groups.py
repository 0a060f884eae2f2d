"""``max_groups`` on Spark: the same rule as DuckDB's, checked against the same reference.

The two engines hash group keys differently (DuckDB ``hash``, Spark
``xxhash64``), so they may keep different groups of a person; what must agree
is the rule: removing a person changes the counts by exactly ``min(k, rows)``
in ``min(G, groups)`` of their groups, and nothing else
(:func:`tests.tables.test_max_groups.check_rule`), on the same tables.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from tests.tables.test_max_groups import SETTINGS, _duckdb, check_rule, tables

pytestmark = pytest.mark.spark


def _spark_engine(spark: Any) -> Any:
    from dpkit.tables.engines.spark_engine import SparkEngine

    def make(frame: pd.DataFrame) -> Any:
        df = spark.createDataFrame(frame, "pid long, g string, h double, rowid long")
        return SparkEngine(df)

    return make


@settings(SETTINGS, max_examples=2)
@given(case=tables())
def test_spark_and_duckdb_follow_the_same_group_rule(
    spark: Any, case: tuple[pd.DataFrame, int, int, int]
) -> None:
    frame, k, g, salt = case
    check_rule(_spark_engine(spark), frame, k, g, salt)
    check_rule(_duckdb, frame, k, g, salt)


def test_spark_groups_minus_zero_with_zero_in_the_bound(spark: Any) -> None:
    frame = pd.DataFrame(
        {"pid": [0] * 6, "g": ["a", "A", "é", "e\u0301", "a", "A"],
         "h": [0.0, -0.0, 0.0, -0.0, 0.0, -0.0], "rowid": range(6)}
    )  # fmt: skip
    check_rule(_spark_engine(spark), frame, 1, 2, 11)
    check_rule(_spark_engine(spark), frame, 6, 1, 11)
