"""A file has one budget on the command line.

``dpkit query FILE --ledger other.ledger --budget 1`` used to give a spent file
a fresh budget, and the refusal suggested it. Now the dataset registry (the one
the library uses) refuses a second ledger for a file that has one, and a copy
of the file; only ``--new-ledger`` starts one, and no message suggests it as a
way out.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import dpkit
from dpkit._cli_budget import default_ledger
from dpkit.cli import app

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


@pytest.fixture
def ages(tmp_path: Path) -> Path:
    path = tmp_path / "ages.csv"
    ages = np.random.default_rng(0).integers(0, 80, 200).astype(float)
    pd.DataFrame({"age": ages}).to_csv(path, index=False)
    return path


def query(path: Path, *extra: str) -> list[str]:
    return ["query", str(path), "count", "--type", "age=DOUBLE", "--epsilon", "0.5", *extra]


def histogram(path: Path, *extra: str) -> list[str]:
    return ["histogram", str(path), "age", "--type", "age=DOUBLE", "--method", "laplace", "--bounds", "0", "80",
            "--units", "8", "--epsilon", "0.5", *extra]  # fmt: skip


def spent(ledger: Path) -> int:
    with sqlite3.connect(ledger) as conn:
        return int(conn.execute("SELECT count(*) FROM charges").fetchone()[0])


def assert_one_budget_refusal(output: str) -> None:
    text = " ".join(output.split())
    assert "already has a ledger" in text or "same contents" in text
    assert "--new-ledger" in text  # names the owner's flag ...
    # ... but never suggests a fresh ledger as the way out
    for suggestion in ("name a new ledger", "or a new ledger", "use a new ledger"):
        assert suggestion not in text
    assert "Traceback" not in output


@pytest.mark.parametrize("verb", [query, histogram])
def test_a_spent_file_gets_no_fresh_budget_from_another_ledger(
    ages: Path, tmp_path: Path, verb
) -> None:
    first = runner.invoke(app, verb(ages, "--budget", "1"), env=WIDE)
    assert first.exit_code == 0, first.output
    own = default_ledger(ages)
    assert spent(own) == 1
    assert runner.invoke(app, verb(ages), env=WIDE).exit_code == 0  # spends the rest
    exhausted = runner.invoke(app, verb(ages), env=WIDE)
    assert exhausted.exit_code != 0
    assert "--ledger" not in exhausted.output and "--budget" not in exhausted.output
    other = tmp_path / "other.ledger"
    refused = runner.invoke(app, verb(ages, "--ledger", str(other), "--budget", "1"), env=WIDE)
    assert refused.exit_code != 0
    assert_one_budget_refusal(refused.output)
    assert not other.exists() and spent(own) == 2
    # a byte-for-byte copy under another name is the same dataset
    copy = tmp_path / "copy.csv"
    shutil.copyfile(ages, copy)
    for args in (verb(copy, "--budget", "1"), verb(copy)):
        refused = runner.invoke(app, args, env=WIDE)
        assert refused.exit_code != 0
        assert_one_budget_refusal(refused.output)
    assert not default_ledger(copy).exists()


def test_the_owner_can_start_a_second_budget_explicitly(ages: Path, tmp_path: Path) -> None:
    assert runner.invoke(app, query(ages, "--budget", "1"), env=WIDE).exit_code == 0
    new = tmp_path / "second.ledger"
    for wrong in (query(ages, "--new-ledger"), query(ages, "--new-ledger", "--ledger", str(new))):
        result = runner.invoke(app, wrong, env=WIDE)  # needs --ledger NEW and --budget
        assert result.exit_code != 0 and "--new-ledger" in result.output
        assert not new.exists()
    result = runner.invoke(
        app, query(ages, "--ledger", str(new), "--budget", "2", "--new-ledger"), env=WIDE
    )
    assert result.exit_code == 0, result.output
    assert spent(new) == 1
    # from now on the file's one ledger is the new one, on the command line and in Python
    assert runner.invoke(app, query(ages), env=WIDE).exit_code == 0
    assert spent(new) == 2
    session = dpkit.Session.from_csv(ages, types={"age": "DOUBLE"}, epsilon=2.0, ledger=new)
    assert session.remaining == dpkit.Budget(1.0)


def test_a_ledger_made_in_python_is_the_files_ledger_on_the_command_line(
    ages: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "ages.ledger"
    session = dpkit.Session.from_csv(ages, types={"age": "DOUBLE"}, epsilon=1.0, ledger=ledger)
    session.count(epsilon=0.25)
    result = runner.invoke(app, histogram(ages), env=WIDE)  # no --ledger, no --budget
    assert result.exit_code == 0, result.output
    assert spent(ledger) == 2
    result = runner.invoke(app, ["budget", str(ledger)], env=WIDE)
    assert "remaining: ε=0.25" in result.output
