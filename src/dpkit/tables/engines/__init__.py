"""Table engines: thin adapters that compute exact aggregates inside DuckDB or Spark.

:class:`DuckDBEngine` is the default (embedded, no setup). :class:`SparkEngine`
runs the same aggregations on a PySpark DataFrame and is imported lazily, so
PySpark is only needed when it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dpkit.tables.engines.base import (
    ColumnKind,
    Condition,
    Contribution,
    Engine,
    Rows,
    Value,
)
from dpkit.tables.engines.duckdb_engine import DuckDBEngine

if TYPE_CHECKING:
    from dpkit.tables.engines.spark_engine import SparkEngine

__all__ = [
    "ColumnKind",
    "Condition",
    "Contribution",
    "DuckDBEngine",
    "Engine",
    "Rows",
    "SparkEngine",
    "Value",
]


def __getattr__(name: str) -> Any:
    if name == "SparkEngine":
        from dpkit.tables.engines.spark_engine import SparkEngine

        return SparkEngine
    raise AttributeError(name)
