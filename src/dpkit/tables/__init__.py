"""Private aggregate queries over tables: ``dpkit.Session`` on DuckDB (default) or Spark.

    >>> import dpkit
    >>> session = dpkit.Session.from_csv("patients.csv", epsilon=1.0, ledger="patients.ledger")
    >>> r = session.mean("age", bounds=(0, 120), epsilon=0.1)
    >>> r.value, r.ci, session.remaining

See ``docs/queries.md`` for the privacy argument of every query.
"""

from __future__ import annotations

from dpkit.tables.batch import Parallel, Plan, Query
from dpkit.tables.engines.base import Condition
from dpkit.tables.results import GroupedRelease
from dpkit.tables.schema import Column, Schema
from dpkit.tables.session import HISTOGRAM_METHODS, Session

__all__ = [
    "HISTOGRAM_METHODS",
    "Column",
    "Condition",
    "GroupedRelease",
    "Parallel",
    "Plan",
    "Query",
    "Schema",
    "Session",
]
