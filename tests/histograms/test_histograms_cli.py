"""The `dpkit histogram` command body and the plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from dpkit import histograms
from dpkit.errors import InvalidParameterError
from dpkit.histograms._cli import METHODS, bin_counts, histogram_command, unit_edges
from dpkit.histograms.plot import plot_comparison, plot_histogram, save


@pytest.fixture
def table(tmp_path: Path) -> Path:
    gen = np.random.default_rng(0)
    ages = np.clip(gen.normal(35, 12, 400), 0, 95).round(1)
    rows = ["age,name"] + [f"{a},p{i}" for i, a in enumerate(ages)] + [",missing"]
    path = tmp_path / "people.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_unit_edges_from_public_parameters() -> None:
    assert unit_edges(bounds=(0, 10), units=5).tolist() == [0, 2, 4, 6, 8, 10]
    assert unit_edges(bounds=(0, 10), width=2.5).tolist() == [0, 2.5, 5, 7.5, 10]
    assert unit_edges(edges=[0, 1, 5]).tolist() == [0, 1, 5]
    with pytest.raises(InvalidParameterError, match="public"):
        unit_edges()
    with pytest.raises(InvalidParameterError):
        unit_edges(bounds=(0, 10), units=5, width=1)
    with pytest.raises(InvalidParameterError):
        unit_edges(edges=[0, 2, 1])
    with pytest.raises(InvalidParameterError):
        unit_edges(bounds=(10, 0), units=3)


def test_bin_counts_clip_out_of_range_values_into_the_end_bins() -> None:
    counts = bin_counts(
        np.array([-5.0, 0.0, 0.5, 1.0, 2.9, 3.0, 99.0]), np.array([0.0, 1.0, 2.0, 3.0])
    )
    assert counts.tolist() == [3, 1, 3]


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_end_to_end(table: Path, tmp_path: Path, method: str) -> None:
    console = Console(record=True, width=100)
    out = tmp_path / f"{method}.png"
    h = histogram_command(
        table,
        "age",
        method,
        1.0,
        bounds=(0, 100),
        width=5,
        max_count=200,
        plot=out,
        seed=1,
        console=console,
        budget=10.0,
        column_type="DOUBLE",
    )
    assert h.n_units == 20 and h.edges[0] == 0 and h.edges[-1] == 100
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"
    text = console.export_text()
    assert "DP histogram of 'age'" in text and "ε = 1" in text
    # The counts were binned from the file: the total is close to 400 rows.
    assert abs(h.answer(0, 19) - 400) < 6 * h.answer_error(0, 19) + 40


def test_command_errors(table: Path) -> None:
    console = Console(record=True)
    with pytest.raises(InvalidParameterError, match="not in"):
        histogram_command(table, "height", "laplace", 1.0, bounds=(0, 1), units=2, console=console)
    with pytest.raises(InvalidParameterError, match="max-count"):
        histogram_command(
            table, "age", "structure_first", 1.0, bounds=(0, 100), units=10, console=console,
            column_type="DOUBLE",
        )  # fmt: skip
    with pytest.raises(InvalidParameterError, match="method"):
        histogram_command(
            table, "age", "wavelet", 1.0, bounds=(0, 100), units=10, console=console,
            column_type="DOUBLE",
        )  # fmt: skip
    with pytest.raises(InvalidParameterError, match="does not exist"):
        histogram_command(
            table.with_name("nope.csv"), "age", "laplace", 1.0, bounds=(0, 1), units=2
        )
    with pytest.raises(InvalidParameterError, match="--budget"):
        histogram_command(
            table, "age", "laplace", 1.0, bounds=(0, 100), units=10, column_type="DOUBLE"
        )


def test_text_entries_are_missing_values_not_a_failure(table: Path) -> None:
    """A text column declared numeric is read entry by entry (TRY_CAST): nothing can fail after the charge."""
    h = histogram_command(
        table, "name", "laplace", 1.0, bounds=(0, 1), units=2, budget=5.0, seed=1,
        console=Console(record=True), column_type="DOUBLE",
    )  # fmt: skip
    assert h.n_units == 2


def test_a_histogram_too_big_for_memory_is_refused_before_anything_is_spent(table: Path) -> None:
    """Issue 11 D: --width 0.001 used to allocate tens of GiB for the partition tables.

    The mean variants now run in O(n) memory per row; the median (SAE) variant
    still builds (n+1)² tables and is refused.
    """
    from dpkit._cli_budget import default_ledger

    with pytest.raises(InvalidParameterError, match="GiB"):
        histogram_command(
            table,
            "age",
            "noise_first",
            1.0,
            bounds=(0, 100),
            width=0.001,
            statistic="median",
            budget=5.0,
            column_type="DOUBLE",
        )
    assert not default_ledger(table).exists()  # refused before the ledger was even opened
    with pytest.raises(InvalidParameterError, match="unit bins"):
        histogram_command(
            table, "age", "laplace", 1.0, bounds=(0, 100), units=10**9, budget=5.0,
            column_type="DOUBLE",
        )  # fmt: skip


def test_plots_render(tmp_path: Path) -> None:
    x = np.array([3.0, 5, 9, 12, 11, 7, 4, 2])
    made = [
        histograms.laplace(x, 1.0, rng=0),
        histograms.hierarchical(x, 1.0, rng=0),
        histograms.noise_first(x, 1.0, rng=0),
        histograms.structure_first(x, 1.0, max_count=20, n_bins=3, rng=0),
    ]
    fig = plot_histogram(made[3], true_counts=x, xlabel="value")
    assert fig.axes[0].get_title(loc="left").startswith("StructureFirst")
    save(fig, tmp_path / "one.png")
    grid = plot_comparison(made, true_counts=x, suptitle="test")
    save(grid, tmp_path / "grid.svg")
    assert (tmp_path / "grid.svg").read_text().startswith("<?xml")
    assert made[0].plot() is not None


def test_bin_labels_read_well_and_the_table_says_how_values_are_clipped(tmp_path: Path) -> None:
    """Issue 11 D: labels such as [4.665e+04, 4.665e+04] told nothing apart."""
    from dpkit.histograms.labels import bin_labels

    assert bin_labels([46650.0, 46650.5, 46651.0]) == ["[46650, 46650.5)", "[46650.5, 46651]"]
    path = tmp_path / "incomes.csv"
    path.write_text("income\n" + "\n".join(str(46650 + i / 10) for i in range(10)) + "\n")
    console = Console(record=True, width=120)
    histogram_command(
        path, "income", "laplace", 1.0, bounds=(46650, 46651), units=2, budget=5.0, seed=1,
        console=console, column_type="DOUBLE",
    )  # fmt: skip
    text = console.export_text()
    assert "[46650, 46650.5)" in text and "e+04" not in text
    assert "counted in the first bin" in text


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("hostile", ["150", "1e308", "nan", "-inf", "abc", "", "2024-02-30"])
def test_cli_transcripts_of_neighbouring_files_differ_only_in_noisy_values(
    table: Path, tmp_path: Path, method: str, hostile: str
) -> None:
    """One more row (a hostile entry): the same charge, ledger row, details, warnings, layout."""
    import re
    import warnings

    from dpkit.accounting import Accountant, Budget

    neighbour = tmp_path / "neighbour.csv"
    neighbour.write_text(table.read_text() + f"{hostile},extra\n")
    seen = []
    for path in (table, neighbour):
        acc = Accountant(Budget(5.0))
        console = Console(record=True, width=120)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            h = histogram_command(
                path,
                "age",
                method,
                1.0,
                bounds=(0, 100),
                width=5,
                max_count=500,
                seed=3,
                console=console,
                accountant=acc,
                column_type="DOUBLE",
            )
        text = console.export_text()
        fixed_structure = method in ("laplace", "hierarchical", "hb")
        seen.append(
            (
                h.method,
                h.epsilon,
                sorted(h.details),
                [(r.label, r.cost, r.scopes) for r in acc.history],
                sorted({type(w.message).__name__ for w in caught}),
                re.sub(r"[-0-9.,e+]+", "#", text)
                if fixed_structure
                else text.count("DP histogram"),
            )
        )
    assert seen[0] == seen[1]


# -- issue 28: the command line reads the file as `dpkit query` does -------------------------

WIDE = {"COLUMNS": "500", "TERMINAL_WIDTH": "500"}


def _cli(path: Path, column: str, *extra: str) -> list[str]:
    return ["histogram", str(path), column, "--method", "laplace", "--bounds", "0", "100",
            "--units", "4", "--epsilon", "0.5", "--seed", "1", *extra]  # fmt: skip


def _paid_once(tmp_path: Path, table: Path) -> tuple[Path, bytes]:
    """A ledger that has paid for one histogram (so 'unchanged' is about bytes, not absence)."""
    from typer.testing import CliRunner

    from dpkit.cli import app

    ledger = tmp_path / "people.ledger"
    ok = CliRunner(env=WIDE).invoke(
        app, _cli(table, "age", "--type", "age=DOUBLE", "--ledger", str(ledger), "--budget", "5")
    )
    assert ok.exit_code == 0, ok.output
    return ledger, ledger.read_bytes()


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        ((), "--type name=DOUBLE"),  # undeclared: never read as all-missing and paid for
        (("--type", "name=VARCHAR"), "--domain"),  # declared text: dpkit query histogram
        (("--type", "age=DOUBLE"), "--type name=DOUBLE"),  # another column's type
    ],
)
def test_a_column_not_declared_numeric_is_refused_before_the_charge(
    table: Path, tmp_path: Path, extra: tuple[str, ...], flag: str
) -> None:
    from typer.testing import CliRunner

    from dpkit.cli import app

    ledger, before = _paid_once(tmp_path, table)
    result = CliRunner(env=WIDE).invoke(app, _cli(table, "name", *extra, "--ledger", str(ledger)))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and flag in result.output
    assert ledger.read_bytes() == before


def test_a_parquet_column_needs_its_type_declared_too(tmp_path: Path) -> None:
    """A Parquet schema is its writer's (often inferred from the rows): declared, as for query."""
    import pandas as pd
    from typer.testing import CliRunner

    from dpkit.cli import app

    path = tmp_path / "people.parquet"
    pd.DataFrame({"age": ["31", "45", "x"]}).to_parquet(path)  # stored as text
    runner = CliRunner(env=WIDE)
    ledger = tmp_path / "l.ledger"
    refused = runner.invoke(app, _cli(path, "age", "--ledger", str(ledger), "--budget", "2"))
    assert refused.exit_code == 2 and "--type age=DOUBLE" in refused.output
    assert not ledger.exists()
    ok = runner.invoke(
        app,
        _cli(
            path, "age", "--type", "age=DOUBLE", "--json", "--ledger", str(ledger), "--budget", "2"
        ),
    )
    assert ok.exit_code == 0, ok.output


def test_a_ragged_csv_is_refused_by_the_strict_reader_before_the_charge(
    table: Path, tmp_path: Path
) -> None:
    """Rows with more fields than the header were read with made-up names (column0..2) and paid for."""
    from typer.testing import CliRunner

    from dpkit.cli import app

    ledger, before = _paid_once(tmp_path, table)
    ragged = tmp_path / "people.csv"  # the same dataset (its ledger), now with a ragged row
    ragged.write_text(table.read_text() + "50,extra,field\n")
    result = CliRunner(env=WIDE).invoke(
        app, _cli(ragged, "age", "--type", "age=DOUBLE", "--ledger", str(ledger))
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "header row" in result.output
    assert "column0" not in result.output
    assert ledger.read_bytes() == before


def test_encoding_reads_a_latin1_file_and_is_offered_when_missing(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from dpkit.cli import app

    path = tmp_path / "villes.csv"
    path.write_bytes("age,ville\n31,Besançon\n45,Orléans\n,Nîmes\n".encode("latin-1"))
    runner = CliRunner(env=WIDE)
    ledger = tmp_path / "villes.ledger"
    line = _cli(path, "age", "--type", "age=DOUBLE", "--ledger", str(ledger), "--budget", "2")
    refused = runner.invoke(app, line)
    assert refused.exit_code == 2 and "--encoding latin-1" in refused.output
    assert "Traceback" not in refused.output and not ledger.exists()
    unknown = runner.invoke(app, [*line, "--encoding", "klingon"])
    assert unknown.exit_code == 2 and "unknown encoding" in unknown.output
    assert not ledger.exists()
    ok = runner.invoke(app, [*line, "--encoding", "latin-1", "--json"])
    assert ok.exit_code == 0, ok.output
    assert '"n_units": 4' in ok.stdout


@pytest.mark.parametrize(
    "entry", ["12", " 12 ", "1e3", "0x10", "1_000", "12abc", "", "nan", "inf", "1e999", "true"]
)
def test_the_histogram_reads_a_value_as_the_query_engine_does(tmp_path: Path, entry: str) -> None:
    """One conversion (TRY_CAST to the declared type): what `dpkit query` reads, histogram bins.

    The old reader (pandas' to_numeric) disagreed with the engine on entries such as
    ``1_000`` and ``0x10``.
    """
    import math

    import duckdb

    import dpkit
    from dpkit.accounting import Accountant, Budget
    from dpkit.histograms._cli import open_column, read_column

    path = tmp_path / "one.csv"
    path.write_text(f'x\n"{entry}"\n')
    session = dpkit.Session.from_csv(path, types={"x": "DOUBLE"}, accountant=Accountant(Budget(1)))
    engine = session.engine
    sql = f"SELECT x FROM {engine._table}"  # type: ignore[attr-defined]
    ((value,),) = engine._connection.sql(sql).fetchall()  # type: ignore[attr-defined]
    with duckdb.connect() as con:
        read = read_column(open_column(con, path, "x", "DOUBLE", "utf-8")).tolist()
    assert read == ([] if value is None or not math.isfinite(value) else [value])


@pytest.mark.filterwarnings("always::dpkit.errors.PrivacyWarning")
@pytest.mark.parametrize("verb", ["histogram", "histogram2d"])
def test_epsilon_is_checked_before_the_charge_and_a_large_one_warns_once(
    tmp_path: Path, verb: str
) -> None:
    """--epsilon 0 was charged (ε = 0) and then failed; ε = 20 warned once per publisher share."""
    from typer.testing import CliRunner

    from dpkit.cli import app

    path = tmp_path / "xy.csv"
    path.write_text("x,y\n" + "".join(f"{i % 50},{i % 7}\n" for i in range(200)))
    ledger = tmp_path / "xy.ledger"
    line = (
        ["histogram", str(path), "x", "--type", "x=DOUBLE", "--method", "auto", "--bounds", "0",
         "50", "--units", "50"]
        if verb == "histogram"
        else ["histogram2d", str(path), "x", "y", "--type", "x=DOUBLE,y=DOUBLE", "--x-bounds", "0", "50", "--y-bounds", "0",
              "7", "--units", "8", "8"]
    )  # fmt: skip
    runner = CliRunner(env=WIDE)
    zero = runner.invoke(app, [*line, "--epsilon", "0", "--ledger", str(ledger), "--budget", "9"])
    assert zero.exit_code == 2 and "--epsilon" in zero.output and "Traceback" not in zero.output
    assert not ledger.exists()
    large = runner.invoke(app, [*line, "--epsilon", "20", "--json", "--ledger", str(ledger),
                                "--budget", "30"])  # fmt: skip
    assert large.exit_code == 0, large.output
    assert large.stderr.count("--epsilon=20 is above 10") == 1, large.stderr
    assert large.stderr.count("--budget 30 is above 10") == 1
    assert large.stderr.count("is above 10") == 2  # not once more per publisher share
