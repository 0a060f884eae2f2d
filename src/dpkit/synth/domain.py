"""Public discretisation: every column of a synthetic table as integer codes, from the schema only.

A column with a declared ``domain`` (categories) is coded by the position of
its value in that tuple; a numeric column with declared ``edges`` or
``bounds`` by its bin (``bins`` equal-width bins over the bounds when no edges
are declared). A value beyond the outer edges is clamped into the end bin (as
``Session.histogram`` bins). A missing value (NULL; for numbers also NaN and
±inf; for a coerced text column, text that is no number) and a category not in
the declared domain go to the column's *missing* cell: one more cell, last,
under the null policy ``"drop"`` — dropping the row instead would make the
marginals of different column sets count different rows — and the cell of
the public ``replacement`` under ``"replace"`` (when the replacement is a
declared category, or a number to bin). Nothing here reads the data: the
codes, the cells and their labels are functions of the schema, the column
kinds and ``bins``; the engine computes each row's code in SQL
(:meth:`DuckDBEngine.coded_counts <dpkit.tables.engines.duckdb_engine.DuckDBEngine.coded_counts>`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit.errors import InvalidParameterError
from dpkit.tables import Schema
from dpkit.tables.engines.base import Coding

__all__ = ["MAX_BINS", "Attribute", "discretise"]

#: The most bins a numeric column may be cut into.
MAX_BINS = 1024


@dataclass(frozen=True)
class Attribute:
    """One discretised column: its coding, its number of cells and what each cell decodes to.

    ``labels[i]``: the category, or the bin's midpoint, of code ``i``; ``None``
    for the missing cell. ``intervals[i]``: a numeric bin's ``(lo, hi)``
    (``None`` for categories and the missing cell).
    """

    name: str
    coding: Coding
    labels: tuple[Any, ...]
    intervals: tuple[tuple[float, float] | None, ...]
    numeric: bool

    @property
    def size(self) -> int:
        return len(self.labels)


def check_bins(bins: object) -> int:
    """``bins`` as an int in [2, MAX_BINS]."""
    if (
        isinstance(bins, bool)
        or not isinstance(bins, int | np.integer)
        or not 2 <= bins <= MAX_BINS
    ):
        raise InvalidParameterError(
            f"bins must be an integer from 2 to {MAX_BINS} (the equal-width bins of each numeric "
            "column with declared bounds and no declared edges)."
        )
    return int(bins)


def discretise(
    schema: Schema, kinds: Mapping[str, str], columns: Sequence[str], bins: int
) -> tuple[Attribute, ...]:
    """Each column's public coding; a clear error for a column with no declared domain or bounds."""
    return tuple(_attribute(schema, kinds, name, bins) for name in columns)


def _attribute(schema: Schema, kinds: Mapping[str, str], name: str, bins: int) -> Attribute:
    column = schema.get(name)
    replace = column.nulls == "replace"
    if column.domain is not None:
        categories = tuple(column.domain)
        if replace and column.replacement in categories:
            missing, shown = categories.index(column.replacement), categories
        else:
            missing, shown = len(categories), (*categories, None)
        coding = Coding(name, missing, categories=categories)
        return Attribute(name, coding, shown, (None,) * len(shown), numeric=False)
    if column.edges is None and column.bounds is None:
        raise InvalidParameterError(
            f"column {name!r} has no declared domain or bounds, so it cannot be discretised "
            "without reading the data; declare domain=[...] (categories) or bounds=(lo, hi) "
            "(numbers) for it in the schema, or leave it out with columns=[...]."
        )
    if str(kinds.get(name)) != "numeric" and not column.coerce:
        raise InvalidParameterError(
            f"column {name!r} has numeric bounds but is not stored as numbers; declare its "
            "categories with domain=[...] instead, or coerce=True to read its text as numbers."
        )
    if column.edges is not None:
        edges = tuple(float(e) for e in column.edges)
    else:
        lo, hi = column.bounds  # type: ignore[misc]
        edges = tuple(float(e) for e in np.linspace(float(lo), float(hi), bins + 1))
    n = len(edges) - 1
    intervals: list[tuple[float, float] | None] = [(edges[i], edges[i + 1]) for i in range(n)]
    labels: list[Any] = [(a + b) / 2 for a, b in intervals]  # type: ignore[misc]  # no None yet
    if (
        replace
        and isinstance(column.replacement, int | float)
        and not isinstance(column.replacement, bool)
    ):
        r = min(max(float(column.replacement), edges[0]), edges[-1])
        missing = min(int(np.searchsorted(edges, r, side="right")) - 1, n - 1)
    else:
        missing = n
        labels.append(None)
        intervals.append(None)
    coding = Coding(name, missing, edges=edges, coerce=column.coerce)
    return Attribute(name, coding, tuple(labels), tuple(intervals), numeric=True)
