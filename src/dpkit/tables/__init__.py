"""Private aggregate queries over tables: ``dpkit.Session`` on DuckDB (default) or Spark.

    >>> import dpkit
    >>> types = {"age": "DOUBLE", "weight": "DOUBLE", "condition": "BOOLEAN", "district": "VARCHAR"}
    >>> session = dpkit.Session.from_csv(
    ...     "patients.csv", types=types, epsilon=1.0, ledger="patients.ledger"
    ... )
    >>> r = session.mean("age", bounds=(0, 120), epsilon=0.1)
    >>> r.value, r.ci, session.remaining

A query is data (:class:`QuerySpec`), and every query goes through the same
steps, each in its own module: :mod:`~dpkit.tables.validation` (public checks),
:mod:`~dpkit.tables.costing` (the privacy event), the charge, then
:mod:`~dpkit.tables.execution` with one module per kind under
:mod:`dpkit.tables.kinds`. See ``docs/queries.md`` and ``docs/threat-model.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._lazy import lazy_exports

if TYPE_CHECKING:
    from dpkit.tables.engines.base import Condition
    from dpkit.tables.plans import Plan
    from dpkit.tables.results import GroupedRelease
    from dpkit.tables.schema import Column, Schema
    from dpkit.tables.session import Session
    from dpkit.tables.specs import QUERY_KINDS, Parallel, Query, QuerySpec
    from dpkit.tables.validation import HISTOGRAM2D_METHODS, HISTOGRAM_METHODS

__all__ = [
    "HISTOGRAM2D_METHODS",
    "HISTOGRAM_METHODS",
    "QUERY_KINDS",
    "Column",
    "Condition",
    "GroupedRelease",
    "Parallel",
    "Plan",
    "Query",
    "QuerySpec",
    "Schema",
    "Session",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Column": "dpkit.tables.schema",
        "Condition": "dpkit.tables.engines.base",
        "GroupedRelease": "dpkit.tables.results",
        "HISTOGRAM2D_METHODS": "dpkit.tables.validation",
        "HISTOGRAM_METHODS": "dpkit.tables.validation",
        "Parallel": "dpkit.tables.specs",
        "Plan": "dpkit.tables.plans",
        "QUERY_KINDS": "dpkit.tables.specs",
        "Query": "dpkit.tables.specs",
        "QuerySpec": "dpkit.tables.specs",
        "Schema": "dpkit.tables.schema",
        "Session": "dpkit.tables.session",
    },
)
