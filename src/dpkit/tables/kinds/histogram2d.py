"""2-D histograms over two numeric columns with public bins on each axis.

Privacy (add/remove one row; ``k`` rows per person): a row lies in exactly
one cell (both values clipped into the end bins; rows missing either value
are dropped or replaced by the columns' null policies, decided per row), so
the grid of counts has ℓ1 sensitivity ``k``. The grid goes to the chosen
:mod:`dpkit.histograms` 2-D publisher with ε/k (group privacy: the publishers
are ε-DP for a one-row change), rounded down so the release never spends
more than was charged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpkit.errors import InvalidParameterError
from dpkit.histograms.methods import PUBLISHERS_2D, publisher
from dpkit.release import Release
from dpkit.tables.engines.base import Engine, Value
from dpkit.tables.kinds.base import COMMON, ExpectedError, Kind, parameter
from dpkit.tables.kinds.histogram import unit_epsilon
from dpkit.tables.validation import (
    TableContext,
    ValidatedQuery,
    check_column,
    check_memory,
    numeric_edges,
    numeric_value,
)

__all__ = ["HISTOGRAM2D", "Histogram2DQuery", "expected_error", "release", "validate"]

HISTOGRAM2D_DEFAULT = next(iter(PUBLISHERS_2D))  # auto2d
#: DAWA's partition step is quadratic in the cells: about a minute at this size.
MAX_DAWA2D_CELLS = 1 << 18
_N_RECORDS_METHODS = ("auto2d", "agrid", "ugrid")


@dataclass(frozen=True)
class Histogram2DQuery(ValidatedQuery):
    """A validated 2-D histogram: ``value``/``edges`` are the x axis, ``value2``/``edges2`` y."""

    value2: Value
    edges: tuple[float, ...]
    edges2: tuple[float, ...]
    method: str
    n_records: float | None = None


def validate(spec: Any, ctx: TableContext, common: dict[str, Any]) -> Histogram2DQuery:
    """Two different numeric columns, public bins per axis, a known method and its options."""
    column = spec.column
    y = check_column(ctx, spec.y_column, "histogram2d()'s y_column")
    if y == column:
        raise InvalidParameterError(
            "histogram2d() needs two different columns; use histogram() for one."
        )
    method = HISTOGRAM2D_DEFAULT if spec.method is None else spec.method
    if method not in PUBLISHERS_2D:  # the live registry
        raise InvalidParameterError(f"method must be one of {tuple(PUBLISHERS_2D)}.")
    per_axis: list[tuple[Any, Any]] = []
    for name, key in (("edges", spec.edges), ("bins", spec.bins), ("bounds", spec.bounds)):
        if key is None:
            per_axis.append((None, None))
        elif name == "bins" and isinstance(key, int) and not isinstance(key, bool):
            per_axis.append((key, key))  # one number: the same on both axes
        elif isinstance(key, tuple) and len(key) == 2:
            per_axis.append(key)
        else:
            raise InvalidParameterError(
                f"histogram2d()'s {name}= takes one entry per axis: ({name} of {column!r}, "
                f"{name} of {y!r})" + (", or one integer for both." if name == "bins" else ".")
            )
    (ex, ey), (bx, by), (lx, ly) = per_axis
    x_edges = numeric_edges(ctx, column, ex, bx, lx, f" (axis {column!r})")
    y_edges = numeric_edges(ctx, y, ey, by, ly, f" (axis {y!r})")
    cells = (len(x_edges) - 1) * (len(y_edges) - 1)
    check_memory(None, 64 * cells, "the 2-D histogram's cells")
    if method == "dawa2d" and cells > MAX_DAWA2D_CELLS:
        raise InvalidParameterError(
            f"method='dawa2d' takes at most {MAX_DAWA2D_CELLS:,} unit cells (its partition step "
            "grows with the square of the cells); use fewer bins or method='agrid'."
        )
    if method == "matrix_mechanism2d":
        from dpkit.histograms.matrix_mechanism2d import check_cells

        check_cells(len(x_edges) - 1, len(y_edges) - 1)
    n_records = spec.n_records
    if n_records is not None and (
        isinstance(n_records, bool)
        or not isinstance(n_records, int | float)
        or not (math.isfinite(n_records) and n_records > 0)
    ):
        raise InvalidParameterError("n_records must be a number > 0 (the public number of rows).")
    if n_records is not None and method not in _N_RECORDS_METHODS:
        raise InvalidParameterError(
            "n_records= is used by method='auto2d', 'agrid' and 'ugrid' only."
        )
    return Histogram2DQuery(
        statistic="histogram2d",
        value=numeric_value(ctx, column, (x_edges[0], x_edges[-1])),
        value2=numeric_value(ctx, y, (y_edges[0], y_edges[-1])),
        edges=x_edges,
        edges2=y_edges,
        method=method,
        n_records=None if n_records is None else float(n_records),
        **common,
    )


def release(v: Histogram2DQuery, engine: Engine, rng: Any) -> Release:
    """The published grid; the privacy argument is this module's docstring."""
    assert v.value is not None
    nx, ny = len(v.edges) - 1, len(v.edges2) - 1
    frame = engine.bin_counts_2d(v.rows, v.value, v.value2, v.edges, v.edges2)
    counts = np.zeros((nx, ny))
    if len(frame):
        i = np.clip(frame["bin_x"].to_numpy(dtype=np.int64), 0, nx - 1)
        j = np.clip(frame["bin_y"].to_numpy(dtype=np.int64), 0, ny - 1)
        np.add.at(counts, (i, j), frame["n"].to_numpy(dtype=np.float64))
    eps = unit_epsilon(v.epsilon, v.max_contributions)
    common: dict[str, Any] = {
        "rng": rng,
        "x_edges": np.asarray(v.edges),
        "y_edges": np.asarray(v.edges2),
    }
    if v.method in ("auto2d", "ugrid", "agrid"):
        common["n_records"] = v.n_records
    published = publisher(v.method, dims=2).publish(counts, eps, **common)
    return Release(
        # A cell's count is never negative (post-processing); the unclipped
        # estimates stay in details["published"] for unbiased rectangle queries.
        value=np.maximum(np.asarray(published.estimates), 0.0),
        epsilon=v.epsilon,
        delta=0.0,
        ci=None,
        level=v.level,
        mechanism=v.method,
        details={
            "x_edges": list(v.edges),
            "y_edges": list(v.edges2),
            "columns": (v.value.column, v.value2.column),
            "epsilon_per_row": eps,
            "published": published,
            "clipped": "values beyond the outer edges count in the end cells of their axis",
        },
    )


def expected_error(v: Histogram2DQuery, level: float) -> ExpectedError:
    """No public per-cell bar: the 2-D publishers state errors per rectangle, after the run."""
    return ExpectedError(
        level,
        f"method {v.method!r} states error bars per rectangle with the answer "
        "(no per-cell bar before it runs)",
    )


_PER_AXIS = "one per axis: (x's, y's)"

HISTOGRAM2D = Kind(
    name="histogram2d",
    summary="A private 2-D histogram (a map) of two numeric columns over public bins.",
    doc="""A private 2-D histogram (a map) of numeric columns ``x`` and ``y`` over public bins.

    Bins per axis, each from the query or the schema: ``bins=(nx, ny)``
    (or one integer for both) with ``bounds=((x_lo, x_hi), (y_lo, y_hi))``,
    or ``edges=(x_edges, y_edges)``. ``method`` is one of
    ``dpkit.histograms.methods.PUBLISHERS_2D``: ``"auto2d"`` (the default: AGrid, or 2-D
    Laplace when the counts are large), ``"agrid"``, ``"ugrid"``,
    ``"dawa2d"``, ``"matrix_mechanism2d"`` or ``"laplace2d"`` (see :mod:`dpkit.histograms`);
    ``n_records`` is a public row count for the grid rules (without it
    auto2d/AGrid/UGrid buy a noisy count with 5% of ε).

    Privacy: ε-DP. One engine pass counts every cell; each row lies in
    one cell (values clipped to the outer edges; a row missing either
    value follows the columns' null policies), so the grid of counts has
    ℓ1 sensitivity ``k`` and the publisher runs with ε/k (group privacy).
    ``value`` is the ``(nx, ny)`` array of cell estimates, negative ones
    raised to 0 (a count is never negative; ``docs/queries.md``, "Values and
    intervals"); ``ci`` is ``None`` (the publishers state errors per
    rectangle, not per cell); ``details["published"]`` is the
    :class:`~dpkit.histograms.PublishedGrid` (unclipped, unbiased estimates
    for rectangle queries with error bars, ``.plot()`` for a heat map).
    """,
    parameters=(
        COMMON[0],  # epsilon
        COMMON[1],  # where
        COMMON[5],  # level
        parameter(
            "y",
            "the second numeric column (y axis)",
            "column",
            "str",
            required=True,
            positional=True,
            spec_name="y_column",
        ),
        parameter(
            "edges",
            f"public bin edges, {_PER_AXIS}",
            "[list, list]",
            "tuple[Sequence[float], Sequence[float]] | None",
        ),
        parameter(
            "bins",
            f"the number of bins, {_PER_AXIS} or one for both",
            "integer | [nx, ny]",
            "int | tuple[int, int] | None",
        ),
        parameter(
            "bounds",
            f"(lo, hi) per axis, {_PER_AXIS}",
            "[[lo, hi], [lo, hi]]",
            "tuple[tuple[float, float], tuple[float, float]] | None",
        ),
        parameter(
            "method",
            "a 2-D publisher of dpkit.histograms (" + ", ".join(PUBLISHERS_2D) + ")",
            "string",
            "str | None",
        ),
        parameter(
            "n_records",
            "a public row count for auto2d/agrid/ugrid (else 5% of epsilon buys a noisy one)",
            "number",
            "float | None",
        ),
    ),
    query_type=Histogram2DQuery,
    validate_query=validate,
    error=expected_error,
    release_query=release,
    module_doc=__doc__ or "",
    column="x",
    head=lambda v: f"histogram2d({v.spec.column}, {v.spec.y_column}, {v.method})",
)
