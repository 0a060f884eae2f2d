"""The grouping of a boosting pass in SQL, shared by the engines that run one (DuckDB, Spark).

A pass sums each row's ``g`` and ``h`` per code of every feature in its ``keys``
(:class:`~dpkit.tables.engines.base.BoostingPass`): one grouping set per
feature over one scan, so the score is computed once per row. ``GROUPING(c_k)``
is 0 exactly in feature k's set, which names the feature of each result row;
a code is never NULL (a missing value has a code of its own), so the set's own
column is the only one that is not NULL.
"""

from __future__ import annotations

from collections.abc import Sequence


def boosting_groups(keys: Sequence[int]) -> str:
    """The ``feature`` and ``code`` columns of a pass's result."""
    columns = [f"c{int(k)}" for k in keys]
    if len(columns) == 1:
        return f"{int(keys[0])} AS feature, {columns[0]} AS code"
    whens = " ".join(f"WHEN grouping({c}) = 0 THEN {int(k)}" for k, c in zip(keys, columns))
    return f"CASE {whens} END AS feature, coalesce({', '.join(columns)}) AS code"


def boosting_aggregates(g: str, h: str) -> str:
    """The exact integer sums of g and h (BIGINT) and the row count."""
    return f"CAST(sum({g}) AS BIGINT) AS g, CAST(sum({h}) AS BIGINT) AS h, count(*) AS n"


def boosting_grouping(keys: Sequence[int]) -> str:
    """GROUP BY one key, or GROUPING SETS: one set per feature."""
    columns = [f"c{int(k)}" for k in keys]
    if len(columns) == 1:
        return f"GROUP BY {columns[0]}"
    return "GROUP BY GROUPING SETS (" + ", ".join(f"({c})" for c in columns) + ")"
