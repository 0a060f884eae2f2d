"""Nothing that can fail on public input runs after the charge, on the command line.

Every output of a releasing verb is checked before the charge (refusals leave
the ledger as it was, and read nothing: the same transcript on a dataset and
its hostile neighbour); every release can be saved in full (``--out``,
``--json``); and if saving fails after the charge anyway, the release is
printed in full as JSON with exit code 3, never lost.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import dpkit._cli_output as cli_output
from dpkit._cli_budget import default_ledger
from dpkit.cli import app

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


def _write(path: Path, extra: list[Any] | None = None) -> Path:
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"x": rng.uniform(0, 80, 300), "y": rng.uniform(0, 10, 300)})
    if extra:
        frame = pd.concat([frame, pd.DataFrame(extra)], ignore_index=True)
    frame.to_csv(path, index=False)
    return path


@pytest.fixture
def table(tmp_path: Path) -> Path:
    return _write(tmp_path / "t.csv")


def histogram(path: Path, *extra: str) -> list[str]:
    return ["histogram", str(path), "x", "--type", "x=DOUBLE", "--method", "laplace", "--bounds", "0", "80",
            "--units", "80", "--epsilon", "0.5", "--budget", "5", "--seed", "4", *extra]  # fmt: skip


def histogram2d(path: Path, *extra: str) -> list[str]:
    return ["histogram2d", str(path), "x", "y", "--type", "x=DOUBLE,y=DOUBLE", "--method",
            "laplace2d", "--x-bounds", "0", "80",
            "--y-bounds", "0", "10", "--units", "8", "4", "--epsilon", "0.5", "--budget", "5",
            "--seed", "4", *extra]  # fmt: skip


def query(path: Path, *extra: str) -> list[str]:
    return ["query", str(path), "histogram", "x", "--type", "x=DOUBLE,y=DOUBLE", "--bounds",
            "0", "80", "--bins", "80", "--epsilon", "0.5", "--budget", "5", *extra]  # fmt: skip


VERBS = [histogram, histogram2d, query]


def charges(table: Path) -> int:
    ledger = default_ledger(table)
    if not ledger.exists():
        return 0
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM charges").fetchone()[0])


def bad_outputs(tmp: Path) -> list[list[str]]:
    return [
        ["--out", str(tmp / "missing-dir" / "r.json")],
        ["--out", str(tmp / "r.txt")],
        ["--out", str(tmp)],
    ]


def bad_plots(tmp: Path) -> list[list[str]]:
    return [["--plot", "/nonexistent/x.png"], ["--plot", str(tmp / "out.txt")]]


@pytest.mark.parametrize("verb", VERBS)
def test_unwritable_outputs_are_refused_before_the_charge(verb, table: Path, tmp_path: Path):
    assert runner.invoke(app, verb(table), env=WIDE).exit_code == 0  # the ledger exists, 1 charge
    cases = bad_outputs(tmp_path) + ([] if verb is query else bad_plots(tmp_path))
    for extra in cases:
        result = runner.invoke(app, verb(table, *extra), env=WIDE)
        assert result.exit_code in (1, 2), (extra, result.output)
        assert "Traceback" not in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert extra[0] in result.output  # names the option
        assert charges(table) == 1, extra  # nothing charged


@pytest.mark.parametrize("verb", VERBS)
def test_a_refused_output_reads_nothing(verb, tmp_path: Path) -> None:
    """The refusal's transcript is the same on a dataset and its hostile neighbours."""
    hostile = [
        {"x": float("nan"), "y": None},
        {"x": 1e308, "y": -1e308},
        {"x": "not a number", "y": "2026-02-30"},
        {"x": float("-inf"), "y": float("inf")},
    ]
    transcripts = set()
    for i, row in enumerate([None, *hostile]):
        (tmp_path / f"n{i}").mkdir()
        path = _write(tmp_path / f"n{i}" / "t.csv", None if row is None else [row])
        result = runner.invoke(
            app, verb(path, "--out", str(tmp_path / "nope" / "r.json")), env=WIDE
        )
        transcripts.add((result.exit_code, result.output.replace(str(path.parent), "DIR")))
        assert charges(path) == 0
    assert len(transcripts) == 1


@pytest.mark.parametrize("verb", [histogram, histogram2d])
def test_the_whole_release_is_saved_and_printed_as_json(verb, table: Path, tmp_path: Path):
    out = tmp_path / "r.json"
    result = runner.invoke(app, verb(table, "--out", str(out)), env=WIDE)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    printed = runner.invoke(app, verb(table, "--json"), env=WIDE)
    assert printed.exit_code == 0, printed.output
    again = json.loads(printed.stdout)
    assert again["estimates"] == saved["estimates"]  # seeded: the same release, in full
    if verb is histogram:
        assert len(saved["estimates"]) == 80 and len(saved["unit_edges"]) == 81
        assert {"bins", "errors", "bin_estimates", "method", "epsilon", "remaining"} <= set(saved)
        assert "60 more bins" not in result.output and "21 more bins" in result.output
        assert "--out FILE.json or --json" in " ".join(result.output.split())
    else:
        assert np.asarray(saved["estimates"]).shape == (8, 4)
        assert {"x_edges", "y_edges", "cells", "method", "epsilon", "remaining"} <= set(saved)
    assert saved["remaining"]["epsilon"] == pytest.approx(4.5)


def test_a_query_release_is_saved_in_full(table: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.json"
    result = runner.invoke(app, query(table, "--out", str(out)), env=WIDE)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert len(saved["results"][0]["value"]) == 80
    printed = runner.invoke(app, query(table, "--json"), env=WIDE)
    assert json.loads(printed.stdout)["query"] == "histogram"


def _json_tail(stdout: str) -> dict[str, Any]:
    lines = stdout.splitlines()
    start = lines.index("{")
    return json.loads("\n".join(lines[start:]))


@pytest.mark.parametrize("verb", VERBS)
def test_a_disk_failure_after_the_charge_prints_the_release_in_full(
    verb, table: Path, tmp_path: Path, monkeypatch
) -> None:
    def broken(path: Path, write: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli_output, "atomic_write", broken)
    extra = ["--out", str(tmp_path / "r.json")]
    if verb is not query:
        extra += ["--plot", str(tmp_path / "r.png")]
    result = runner.invoke(app, verb(table, *extra), env=WIDE)
    assert result.exit_code == cli_output.NOT_SAVED, result.output
    assert "Traceback" not in result.output
    assert "No space left on device" in result.stderr and "printed in full" in result.stderr
    release = _json_tail(result.stdout)
    assert "estimates" in release or "results" in release
    assert charges(table) == 1
    # the same with --json: printed once, in full
    result = runner.invoke(app, verb(table, "--json", *extra), env=WIDE)
    assert result.exit_code == cli_output.NOT_SAVED
    json.loads(result.stdout)


def test_a_plot_that_fails_to_render_after_the_charge_is_not_a_traceback(
    table: Path, tmp_path: Path, monkeypatch
) -> None:
    import dpkit.histograms.plot as plot

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("renderer failed")

    monkeypatch.setattr(plot, "save", broken)
    result = runner.invoke(app, histogram(table, "--plot", str(tmp_path / "h.png")), env=WIDE)
    assert result.exit_code == cli_output.NOT_SAVED
    assert len(_json_tail(result.stdout)["estimates"]) == 80
    assert not (tmp_path / "h.png").exists()
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_local_verbs_check_their_outputs_first(tmp_path: Path) -> None:
    spec = tmp_path / "survey.json"
    spec.write_text("{}")
    result = runner.invoke(app, ["survey", "estimate", str(spec), str(spec), "--plot", "p.txt"])
    assert result.exit_code == 2 and "--plot" in result.output
    result = runner.invoke(app, ["survey", "simulate", str(spec), "--out", "/nonexistent/r.csv"])
    assert result.exit_code == 2 and "--out" in result.output
    places = tmp_path / "places.csv"
    places.write_text("Latitude,Longitude\n21.0,105.8\n")
    result = runner.invoke(
        app,
        ["location", "obfuscate", str(places), "--out", "/nonexistent/r.csv", "--epsilon", "1",
         "--area", "20", "105", "22", "106"],
    )  # fmt: skip
    assert result.exit_code == 2 and "does not exist" in result.output


@pytest.mark.parametrize("verb", [histogram, histogram2d])
def test_after_the_charge_the_transcript_does_not_depend_on_the_data(
    verb, tmp_path: Path, monkeypatch
) -> None:
    """Dataset vs hostile neighbour, noise seeded, the disk failing after the charge:
    the same exit code, stderr, fields and shapes; only the noisy values differ."""

    def broken(path: Path, write: Any) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(cli_output, "atomic_write", broken)
    seen = []
    for i, row in enumerate([None, {"x": 1e308, "y": float("nan")}, {"x": "x", "y": "-inf"}]):
        (tmp_path / f"d{i}").mkdir()
        path = _write(tmp_path / f"d{i}" / "t.csv", None if row is None else [row])
        result = runner.invoke(app, verb(path, "--json", "--out", str(tmp_path / "r.json")))
        release = json.loads(result.stdout)
        shapes = {k: np.shape(v) for k, v in release.items() if k != "details"}
        seen.append((result.exit_code, result.stderr, sorted(release["details"]), shapes))
    assert seen[0][0] == cli_output.NOT_SAVED
    assert all(s == seen[0] for s in seen)
