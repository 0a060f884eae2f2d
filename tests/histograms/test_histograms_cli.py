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
            table, "age", "structure_first", 1.0, bounds=(0, 100), units=10, console=console
        )
    with pytest.raises(InvalidParameterError, match="method"):
        histogram_command(table, "age", "wavelet", 1.0, bounds=(0, 100), units=10, console=console)
    with pytest.raises(InvalidParameterError, match="readable"):
        histogram_command(
            table.with_name("nope.csv"), "age", "laplace", 1.0, bounds=(0, 1), units=2
        )
    with pytest.raises(InvalidParameterError, match="--budget"):
        histogram_command(table, "age", "laplace", 1.0, bounds=(0, 100), units=10)


def test_text_entries_are_missing_values_not_a_failure(table: Path) -> None:
    """A text column is read entry by entry (TRY_CAST): nothing about it can fail after the charge."""
    h = histogram_command(
        table, "name", "laplace", 1.0, bounds=(0, 1), units=2, budget=5.0, seed=1,
        console=Console(record=True),
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
        )
    assert not default_ledger(table).exists()  # refused before the ledger was even opened
    with pytest.raises(InvalidParameterError, match="unit bins"):
        histogram_command(table, "age", "laplace", 1.0, bounds=(0, 100), units=10**9, budget=5.0)


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
        console=console,
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
