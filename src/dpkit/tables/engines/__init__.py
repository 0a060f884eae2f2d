"""Table engines: thin adapters that compute exact aggregates inside DuckDB or Spark.

:class:`DuckDBEngine` is the default (embedded, no setup). :class:`SparkEngine`
runs the same aggregations on a PySpark DataFrame. Every name is imported on
first use, so PySpark is only needed when it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._lazy import lazy_exports

if TYPE_CHECKING:
    from dpkit.tables.engines.base import (
        ColumnKind,
        Condition,
        Contribution,
        Engine,
        Rows,
        Value,
    )
    from dpkit.tables.engines.duckdb_engine import DuckDBEngine
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

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ColumnKind": "dpkit.tables.engines.base",
        "Condition": "dpkit.tables.engines.base",
        "Contribution": "dpkit.tables.engines.base",
        "DuckDBEngine": "dpkit.tables.engines.duckdb_engine",
        "Engine": "dpkit.tables.engines.base",
        "Rows": "dpkit.tables.engines.base",
        "SparkEngine": "dpkit.tables.engines.spark_engine",
        "Value": "dpkit.tables.engines.base",
    },
)
