"""Issue 28: every command-line flag that sets a total budget warns above ε = 10, once a run.

As a query's epsilon and a service grant above 10 already do: a ledger created with
``--budget`` (``dpkit query``, ``dpkit histogram``, ``dpkit histogram2d``), a ledger shown
by ``dpkit budget``, and the grants a ``dpkit serve --config`` file gives.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from dpkit.cli import app

runner = CliRunner(env={"COLUMNS": "500", "TERMINAL_WIDTH": "500"})
# Shown every time (pyproject ignores this warning elsewhere): "once" must be the code's doing.
pytestmark = pytest.mark.filterwarnings("always::dpkit.errors.PrivacyWarning")
WEAK = "warning: --budget {} is above 10: the guarantee is weak"


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "people.csv"
    pd.DataFrame({"x": [1.0, 5.0, 30.0, 61.0], "y": [2.0, 7.0, 40.0, 70.0]}).to_csv(
        path, index=False
    )
    return path


def query(path: Path, *extra: str) -> list[str]:
    return ["query", str(path), "mean", "x", "--type", "x=DOUBLE,y=DOUBLE", "--bounds", "0",
            "80", "--epsilon", "0.5", *extra]  # fmt: skip


def histogram(path: Path, *extra: str) -> list[str]:
    return ["histogram", str(path), "x", "--type", "x=DOUBLE", "--method", "laplace",
            "--bounds", "0", "80", "--units", "8", "--epsilon", "0.5", *extra]  # fmt: skip


def histogram2d(path: Path, *extra: str) -> list[str]:
    return ["histogram2d", str(path), "x", "y", "--type", "x=DOUBLE,y=DOUBLE", "--method",
            "laplace2d", "--x-bounds", "0",
            "80", "--y-bounds", "0", "80", "--units", "4", "4", "--epsilon", "0.5",
            *extra]  # fmt: skip


@pytest.mark.parametrize("verb", [query, histogram, histogram2d])
def test_a_ledger_created_with_a_budget_above_10_warns_once(
    table: Path, tmp_path: Path, verb: object
) -> None:
    ledger = tmp_path / "people.ledger"
    result = runner.invoke(app, verb(table, "--ledger", str(ledger), "--budget", "50"))  # type: ignore[operator]
    assert result.exit_code == 0, result.output
    assert result.stderr.count(WEAK.format(50)) == 1, result.stderr
    assert "--budget" in result.stderr and "Traceback" not in result.output
    assert "warnings.warn" not in result.stderr and ".py" not in result.stderr  # CLI words
    # Paying from it later sets no budget: nothing more is said.
    again = runner.invoke(app, verb(table, "--ledger", str(ledger)))  # type: ignore[operator]
    assert again.exit_code == 0, again.output
    assert "is above 10" not in again.stderr


@pytest.mark.parametrize("budget", ["10", "5"])
def test_a_budget_up_to_10_is_quiet(table: Path, tmp_path: Path, budget: str) -> None:
    result = runner.invoke(
        app, histogram(table, "--ledger", str(tmp_path / "l.ledger"), "--budget", budget)
    )
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr


def test_dpkit_budget_warns_about_a_weak_ledger(table: Path, tmp_path: Path) -> None:
    weak, fine = tmp_path / "weak.ledger", tmp_path / "fine.ledger"
    other = tmp_path / "other.csv"
    other.write_bytes(table.read_bytes() + b"3.0,4.0\n")
    assert (
        runner.invoke(app, histogram(table, "--ledger", str(weak), "--budget", "50")).exit_code == 0
    )
    assert (
        runner.invoke(app, histogram(other, "--ledger", str(fine), "--budget", "2")).exit_code == 0
    )
    shown = runner.invoke(app, ["budget", str(weak)])
    assert shown.exit_code == 0, shown.output
    assert shown.stderr.count("warning: this ledger's budget ε = 50 is above 10") == 1
    assert "cannot be lowered" in shown.stderr
    quiet = runner.invoke(app, ["budget", str(fine)])
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr


def test_serve_warns_once_about_a_config_grant_above_10(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn

    from dpkit.service.demo import build_demo

    build_demo(tmp_path)
    config = tmp_path / "service.toml"
    if not config.exists():
        config = next(tmp_path.glob("*.toml"))
    text = config.read_text()
    config.write_text(re.sub(r"epsilon = 1\.0", "epsilon = 20.0", text, count=1))
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    result = runner.invoke(app, ["serve", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("is above 10: the guarantee is weak") == 1, result.stderr
    assert "warnings.warn" not in result.stderr and "Traceback" not in result.output


def test_dpkit_budget_given_the_data_file_names_its_ledger(
    table: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DPKIT_LEDGER_DIR", str(tmp_path / "ledgers"))
    result = runner.invoke(app, ["budget", str(table)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "looks like a data file, not a ledger" in result.stderr
    assert "corrupt" not in result.stderr
    assert runner.invoke(app, query(table, "--budget", "2")).exit_code == 0
    again = runner.invoke(app, ["budget", str(table)])
    assert "its default ledger is" in again.stderr and ".ledger" in again.stderr


def test_an_absurd_epsilon_is_shown_short(table: Path, tmp_path: Path) -> None:
    ledger = str(tmp_path / "l.ledger")
    assert runner.invoke(app, query(table, "--ledger", ledger, "--budget", "2")).exit_code == 0
    line = query(table, "--ledger", ledger)
    line[line.index("--epsilon") + 1] = "1e300"
    result = runner.invoke(app, line)
    assert result.exit_code != 0
    assert "ε=1e+300" in result.output and "0" * 30 not in result.output
