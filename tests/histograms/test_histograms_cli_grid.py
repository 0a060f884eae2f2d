"""``dpkit histogram2d``: end to end, errors before the charge, transcripts of neighbouring files."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from dpkit.accounting import Accountant, Budget
from dpkit.cli import app
from dpkit.errors import DataError, InvalidParameterError
from dpkit.histograms._cli_grid import METHODS, cell_counts, histogram2d_command

BOUNDS = {"x_bounds": (0.0, 10.0), "y_bounds": (0.0, 5.0), "units": (16, 8)}


@pytest.fixture
def table(tmp_path: Path) -> Path:
    gen = np.random.default_rng(0)
    xs, ys = gen.normal(4, 1.5, 300).round(2), gen.normal(2, 1, 300).round(2)
    rows = ["lon,lat,name"] + [f"{x},{y},p{i}" for i, (x, y) in enumerate(zip(xs, ys))]
    rows += ["3.0,,missing", ",1.0,missing"]
    path = tmp_path / "places.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


TYPES = {"lon": "DOUBLE", "lat": "DOUBLE"}


def test_cell_counts_clip_into_the_outer_cells() -> None:
    edges_x, edges_y = np.array([0.0, 1.0, 2.0]), np.array([0.0, 10.0])
    counts = cell_counts(np.array([-5.0, 0.5, 1.0, 2.0, 99.0]), np.zeros(5), edges_x, edges_y)
    assert counts.tolist() == [[2.0], [3.0]]


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_end_to_end(table: Path, tmp_path: Path, method: str) -> None:
    acc = Accountant(Budget(5.0))
    console = Console(record=True, width=140)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grid = histogram2d_command(
            table, "lon", "lat", method, 2.0, **BOUNDS, seed=1, accountant=acc, types=TYPES,
            console=console, plot=tmp_path / "map.png",
        )  # fmt: skip
    assert grid.shape == (16, 8) and grid.method == method
    assert grid.answer(0, 15, 0, 7) == pytest.approx(300, rel=0.15)  # rows missing a value: out
    assert (tmp_path / "map.png").stat().st_size > 10_000
    assert "DP 2-D histogram" in console.export_text() and acc.spent == Budget(2.0)


def test_command_line(table: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "histogram2d", str(table), "lon", "lat", "--type", "lon=DOUBLE,lat=DOUBLE", "--x-bounds", "0", "10", "--y-bounds", "0",
            "5", "--units", "16", "8", "--epsilon", "0.5", "--budget", "2",
            "--ledger", str(tmp_path / "ledger.db"), "--seed", "1",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "auto2d" in result.output or "AGrid" in result.output


def test_errors_are_raised_before_the_charge(table: Path) -> None:
    acc = Accountant(Budget(1.0))
    bad = [
        ({"method": "quadtree"}, "--method"),
        ({"x_bounds": None}, "must be public"),
        ({"n_records": -3.0}, "--n-records"),
        ({"method": "laplace2d", "n_records": 100.0}, "auto2d, agrid and ugrid only"),
        ({"units": (1024, 1024), "method": "dawa2d"}, "at most"),
    ]
    for change, message in bad:
        kwargs = {**BOUNDS, "method": "agrid", **change}
        method = kwargs.pop("method")
        with pytest.raises(InvalidParameterError, match=message):
            histogram2d_command(
                table, "lon", "lat", method, 0.5, accountant=acc, types=TYPES, **kwargs
            )
    with pytest.raises(InvalidParameterError, match="not in"):
        histogram2d_command(
            table, "lon", "height", "agrid", 0.5, accountant=acc, types=TYPES, **BOUNDS
        )
    assert acc.spent == Budget(0.0)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "hostile", ["150,2", "1e308,-1e308", "nan,1", "-inf,inf", "abc,", ",", "2024-02-30,3"]
)
def test_cli_transcripts_of_neighbouring_files_differ_only_in_noisy_values(
    table: Path, tmp_path: Path, method: str, hostile: str
) -> None:
    """One more row (hostile entries): the same charge, ledger row, details, warnings, layout."""
    neighbour = tmp_path / "neighbour.csv"
    neighbour.write_text(table.read_text() + f"{hostile},extra\n")
    seen = []
    for path in (table, neighbour):
        acc = Accountant(Budget(5.0))
        console = Console(record=True, width=140)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            g = histogram2d_command(
                path, "lon", "lat", method, 1.0, **BOUNDS, n_records=300.0 if method in (
                    "auto2d", "agrid", "ugrid") else None, seed=3, console=console, accountant=acc,
                types=TYPES,
            )  # fmt: skip
        text = console.export_text()
        seen.append(
            (
                g.method,
                g.epsilon,
                g.shape,
                sorted(g.details),
                [(r.label, r.cost, r.scopes) for r in acc.history],
                sorted({type(w.message).__name__ for w in caught}),
                # Which cells are densest is noisy; the table's layout is not.
                len(re.sub(r"[-0-9.,e+\[\)]+", "#", text).splitlines()),
            )
        )
    assert seen[0] == seen[1]


@pytest.mark.parametrize(
    ("types", "message"),
    [
        ({}, "column 'lon' has no declared type, and dpkit histogram2d bins numbers"),
        ({"lon": "DOUBLE"}, "column 'lat' has no declared type"),
        ({"lon": "DOUBLE", "lat": "VARCHAR"}, "column 'lat' is declared text, not numeric"),
    ],
)
def test_both_columns_must_be_declared_numeric_before_the_charge(
    table: Path, tmp_path: Path, types: dict[str, str], message: str
) -> None:
    """An undeclared or text column used to be read as all-missing and still be paid for."""
    ledger = tmp_path / "l.ledger"
    runner = CliRunner(env={"COLUMNS": "500", "TERMINAL_WIDTH": "500"})
    line = ["histogram2d", str(table), "lon", "lat", "--x-bounds", "0", "10", "--y-bounds", "0",
            "5", "--epsilon", "0.5", "--budget", "2", "--ledger", str(ledger)]  # fmt: skip
    for column, type_name in types.items():
        line += ["--type", f"{column}={type_name}"]
    result = runner.invoke(app, line)
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert message in result.output.replace("\n", " ")
    assert "--type" in result.output or "--domain" in result.output
    assert not ledger.exists()


def test_files_are_read_as_dpkit_query_reads_them(table: Path, tmp_path: Path) -> None:
    """Parquet works; a ragged or mis-encoded CSV is refused before the charge, naming the fix."""
    import pandas as pd

    parquet = tmp_path / "places.parquet"
    pd.read_csv(table).to_parquet(parquet)
    acc = Accountant(Budget(5.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grid = histogram2d_command(
            parquet, "lon", "lat", "laplace2d", 2.0, **BOUNDS, seed=1, accountant=acc, types=TYPES
        )
    assert grid.answer(0, 15, 0, 7) == pytest.approx(300, rel=0.15)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("lon,lat\n1,2\n3,4,5\n")
    latin = tmp_path / "latin.csv"
    latin.write_bytes("lon,lat,name\n1,2,Jos\xe9\n".encode("latin-1"))
    acc = Accountant(Budget(5.0))
    for path, message in [(ragged, "exactly as many fields"), (latin, "--encoding")]:
        with pytest.raises(DataError, match=message):
            histogram2d_command(
                path, "lon", "lat", "laplace2d", 1.0, **BOUNDS, accountant=acc, types=TYPES
            )
    assert acc.spent == Budget(0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        histogram2d_command(
            latin, "lon", "lat", "laplace2d", 1.0, **BOUNDS, accountant=acc, types=TYPES,
            encoding="latin-1",
        )  # fmt: skip
    assert acc.spent == Budget(1.0)
