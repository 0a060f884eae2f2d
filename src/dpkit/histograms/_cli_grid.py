"""``dpkit histogram2d TABLE X Y``: publish a private 2-D histogram (a map) of two CSV columns.

The unit cells come from PUBLIC bounds and cell counts per axis, never from the
data. Values beyond the bounds are clipped into the outer cells and rows with
either value missing or not a number are left out, so every row adds 1 to
exactly one unit cell: the neighbouring relation the publishers assume.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._cli_budget import cli_payer
from dpkit.accounting import Budget, charge_and_run
from dpkit.errors import InvalidParameterError
from dpkit.histograms._cli import check_epsilon_once, epsilon_warned, open_columns, unit_edges
from dpkit.histograms._grid import PublishedGrid
from dpkit.histograms.methods import PUBLISHERS_2D, publisher

#: The publishers ``--method`` names, as registered (:data:`dpkit.histograms.methods.PUBLISHERS_2D`).
METHODS = tuple(PUBLISHERS_2D)
#: Unit cells the command accepts (DAWA-2D fewer, see ``MAX_DAWA2D_CELLS``).
MAX_UNIT_CELLS = 1 << 22
MAX_DAWA2D_CELLS = 1 << 18


def read_points(points: Any) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The finite ``(x, y)`` pairs of :func:`~dpkit.histograms._cli.open_columns`' relation.

    Call it only after the release is paid for; every entry was converted on its
    own (``TRY_CAST``) and the file parsed when it was opened, so nothing here can
    fail because of an entry.
    """
    data = points.fetchnumpy()
    return np.asarray(data["v0"], dtype=np.float64), np.asarray(data["v1"], dtype=np.float64)


def cell_counts(
    xs: NDArray[np.float64],
    ys: NDArray[np.float64],
    x_edges: NDArray[np.float64],
    y_edges: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Unit-cell counts over public edges; values outside are clipped into the end cells."""
    nx, ny = x_edges.size - 1, y_edges.size - 1
    i = np.clip(np.searchsorted(x_edges, xs, side="right") - 1, 0, nx - 1)
    j = np.clip(np.searchsorted(y_edges, ys, side="right") - 1, 0, ny - 1)
    return np.bincount(i * ny + j, minlength=nx * ny).reshape(nx, ny).astype(np.float64)


def check_options(name: str, n_cells: int, n_records: float | None) -> None:
    """The method, its size limit and ``--n-records`` (before anything is charged or read)."""
    if name not in METHODS:
        raise InvalidParameterError(f"--method must be one of {', '.join(METHODS)}.")
    if n_cells > MAX_UNIT_CELLS:
        raise InvalidParameterError(
            f"the grid has more than {MAX_UNIT_CELLS:,} unit cells; use fewer --units."
        )
    if name == "dawa2d" and n_cells > MAX_DAWA2D_CELLS:
        raise InvalidParameterError(
            f"dawa2d takes at most {MAX_DAWA2D_CELLS:,} unit cells (a bound on its work and "
            "memory); use fewer --units or --method agrid."
        )
    if n_records is not None:
        if not (np.isfinite(n_records) and n_records > 0):
            raise InvalidParameterError("--n-records must be a finite number > 0.")
        if "n_records" not in PUBLISHERS_2D[name].options:
            raise InvalidParameterError("--n-records is used by auto2d, agrid and ugrid only.")


def render_summary(grid: PublishedGrid, x: str, y: str, top: int = 10) -> Any:
    """A Rich table: the densest published unit cells and the whole map, with ±2 s.d."""
    from rich.table import Table

    from dpkit.histograms.plot import GRID_LABELS

    nx, ny = grid.shape
    table = Table(
        title=(
            f"DP 2-D histogram of ({x!r}, {y!r}): {GRID_LABELS.get(grid.method, grid.method)}, "
            f"ε = {grid.epsilon:g}, {nx} × {ny} unit cells, {grid.n_cells:,} published cells"
        ),
        caption=(
            "± is 2 standard deviations of the noise (spreading a cell evenly adds an unknown "
            "error). Values beyond the bounds count in the outer cells; rows with either value "
            f"missing or not a number are left out. The {min(top, nx * ny)} densest of "
            f"{nx * ny:,} unit cells are shown: --out FILE.json or --json has every cell."
        ),
    )
    table.add_column(x, justify="left")
    table.add_column(y, justify="left")
    table.add_column("estimate", justify="right")
    table.add_column("±", justify="right", style="dim")
    flat = np.argsort(-grid.estimates, axis=None, kind="stable")[: min(top, nx * ny)]
    i, j = np.divmod(flat, ny)
    spreads = 2.0 * np.asarray(grid.answer_error(i, i, j, j))
    ex, ey = grid.x_edges, grid.y_edges
    for a, b, s in zip(i, j, spreads):
        table.add_row(
            f"[{ex[a]:g}, {ex[a + 1]:g})",
            f"[{ey[b]:g}, {ey[b + 1]:g})",
            f"{grid.estimates[a, b]:,.1f}",
            f"{s:,.1f}",
        )
    table.add_section()
    total, spread = grid.answer(0, nx - 1, 0, ny - 1), 2.0 * grid.answer_error(0, nx - 1, 0, ny - 1)
    table.add_row("all", "", f"{total:,.1f}", f"{spread:,.1f}")
    return table


def histogram2d_command(
    table: Path,
    x: str,
    y: str,
    method: str = "auto2d",
    epsilon: float = 1.0,
    *,
    x_bounds: tuple[float, float] | None = None,
    y_bounds: tuple[float, float] | None = None,
    units: tuple[int, int] = (128, 128),
    n_records: float | None = None,
    plot: Path | None = None,
    seed: int | None = None,
    accountant: Any = None,
    console: Any = None,
    ledger: Path | None = None,
    budget: float | None = None,
    budget_delta: float | None = None,
    out_file: Path | None = None,
    as_json: bool = False,
    new_ledger: bool = False,
    composition: str | None = None,
    types: dict[str, str] | None = None,
    encoding: str = "utf-8",
) -> PublishedGrid:
    """Publish a DP 2-D histogram of columns ``x`` and ``y`` of ``table`` (CSV or Parquet).

    Privacy: epsilon-DP (add/remove one row), as the chosen publisher of
    :mod:`dpkit.histograms` states; the unit cells come from the public
    bounds and ``units`` only. Order: every option is checked, both columns
    are looked up in the header and must be declared numeric (``types``:
    ``--type COLUMN=TYPE``, public metadata, never inferred from the rows), the
    release is charged (``accountant``, else the file's ledger), and only then
    are the columns read — as ``dpkit query`` reads them (the strict CSV
    reader with ``encoding``, or Parquet; each entry converted on its own by
    ``TRY_CAST``), so no entry can make it fail. The outputs
    (``plot``, ``out_file``: JSON with every cell) are checked before the
    charge; after it the release is printed (the densest cells, or all of it
    as JSON with ``as_json``) and saved, and if saving fails anyway it is
    printed in full as JSON with exit code 3. ``seed`` is for tests only
    (None = secure randomness).
    """
    import duckdb
    from rich.console import Console

    from dpkit._cli_options import one_spelling
    from dpkit._cli_output import (
        JSON_SUFFIXES,
        NOT_SAVED,
        PLOT_SUFFIXES,
        check_output,
        deliver,
    )
    from dpkit.histograms.plot import plot_grid

    out = console if console is not None else Console()
    declared = types or {}
    if x == y:
        raise InvalidParameterError("give two different columns; use `dpkit histogram` for one.")
    with duckdb.connect() as con:
        # In the order the command reads: the file and its columns (with their types), the
        # method, the cells, the outputs; the charge; then the values.
        points = open_columns(
            con, table, {x: declared.get(x), y: declared.get(y)}, encoding, "dpkit histogram2d"
        )
        name = one_spelling(method, METHODS, "--method")
        if x_bounds is None or y_bounds is None:
            raise InvalidParameterError(
                "the map's cells must be public: give --x-bounds LO HI and --y-bounds LO HI "
                "(e.g. a region's bounding box). dpkit never derives bounds from the data."
            )
        x_edges = unit_edges(bounds=x_bounds, units=int(units[0]))
        y_edges = unit_edges(bounds=y_bounds, units=int(units[1]))
        check_options(name, (x_edges.size - 1) * (y_edges.size - 1), n_records)
        entry = publisher(name, dims=2)
        check_output(plot, "--plot", PLOT_SUFFIXES)
        check_output(out_file, "--out", JSON_SUFFIXES)
        check_epsilon_once(epsilon)  # a bad --epsilon must not be charged, then fail
        payer = cli_payer(table, accountant, ledger, budget, budget_delta, new_ledger, composition)

        def release() -> PublishedGrid:
            counts = cell_counts(*read_points(points), x_edges, y_edges)
            kwargs: dict[str, Any] = {"rng": seed, "x_edges": x_edges, "y_edges": y_edges}
            if "n_records" in entry.options:
                kwargs["n_records"] = n_records
            with epsilon_warned():
                grid: PublishedGrid = entry.publish(counts, epsilon, **kwargs)
            return grid

        label = f"histogram2d({x}, {y}, {name}, {x_edges.size - 1}x{y_edges.size - 1} cells)"
        grid = charge_and_run(payer, Budget(epsilon), label, release)
    code = deliver(
        grid_payload(grid, x, y, label, payer.remaining_seen),
        console=out,
        render=lambda: render_summary(grid, x, y),
        out=out_file,
        as_json=as_json,
        plot=plot,
        make_figure=lambda: plot_grid(grid, xlabel=x, ylabel=y),
    )
    if code == NOT_SAVED:
        import typer

        raise typer.Exit(code)
    return grid


def grid_payload(
    grid: PublishedGrid, x: str, y: str, label: str, remaining: Budget | None
) -> dict[str, Any]:
    """Every field of a published 2-D histogram (all public), as saved by ``--out`` / ``--json``."""
    return {
        "release": "histogram2d",
        "label": label,
        "x": x,
        "y": y,
        "method": grid.method,
        "epsilon": grid.epsilon,
        "delta": 0.0,
        "shape": list(grid.shape),
        "x_edges": grid.x_edges,
        "y_edges": grid.y_edges,
        "estimates": grid.estimates,
        "cells": grid.cells,
        "details": {k: v for k, v in grid.details.items() if not callable(v)},
        "remaining": None
        if remaining is None
        else {"epsilon": remaining.epsilon, "delta": remaining.delta},
    }
