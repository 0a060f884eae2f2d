"""Every message on the command line names CLI flags, never Python arguments (issue 28, CLI).

A table of bad command lines runs through Typer's runner: each must exit with
its code, print no traceback, name a CLI flag, hold no Python-argument syntax
(``bounds=(lo, hi)``, ``keys=[...]``, ``types={...}``, ``infer_types=True``,
``rng=None``) and leave the ledger as it was. Then ``dpkit histogram``: the
library's default method, checks in the order the command reads, text columns
refused before the charge, Parquet read as ``dpkit query`` reads it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from dpkit._cli_options import CLI_WORDS, cli_words
from dpkit._cli_query import QueryOptions
from dpkit.accounting import Accountant
from dpkit.cli import app

runner = CliRunner()
WIDE = {"COLUMNS": "400"}  # one message on one line, as the patterns read it
TYPES = ["--type", "age=DOUBLE", "--type", "name=VARCHAR"]
#: Python-argument syntax that must not reach a command-line user.
PYTHON_WORDS = re.compile(
    r"\w+=\(|\w+=\[|\w+=\{|\w+=True|\w+=False|\w+='|rng=None|Column\(|Traceback|File \"|\.py\b"
)


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "people.csv"
    path.write_text("age,name\n31,ann\n45,bob\n22,cid\n")
    ledger = tmp_path / "ledger.json"
    made = runner.invoke(
        app,
        ["query", str(path), "count", "--epsilon", "0.5", "--ledger", str(ledger),
         "--budget", "5", *TYPES],
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    return path


def _ledger(table: Path) -> Path:
    return table.parent / "ledger.json"


def _charges(table: Path) -> int:
    accountant = Accountant.from_ledger(_ledger(table))
    try:
        return len(accountant.history)
    finally:
        accountant.close()


BAD_LINES = [
    # (command line after TABLE, exit code, a CLI flag the message must name)
    (["query", "{t}", "mean", "age", "--epsilon", "1", *TYPES], 1, "--bounds LO HI"),
    (["query", "{t}", "mean", "age", "--epsilon", "1", *TYPES], 1, "--bounds private"),
    (["query", "{t}", "count", "--group-by", "name", "--epsilon", "1", *TYPES], 1, "--keys"),
    (["query", "{t}", "count", "--group-by", "name", "--epsilon", "1", *TYPES], 1, "--private-keys"),
    (["query", "{t}", "histogram", "name", "--epsilon", "1", *TYPES], 1, "--domain"),
    (["query", "{t}", "histogram", "name", "--epsilon", "1", *TYPES], 1, "--edges"),
    (["query", "{t}", "count", "--where", "age=>3", "--epsilon", "1", *TYPES], 1, "'=>'"),
    (["query", "{t}", "count", "--where", "age=>3", "--epsilon", "1", *TYPES], 1, ">="),
    (["query", "{t}", "count", "--bounds", "private", "--epsilon", "1", *TYPES], 1, "--bounds"),
    (["query", "{t}", "median", "age", "--bounds", "private", "--epsilon", "1", *TYPES], 1,
     "--bounds private is accepted by"),
    (["query", "{t}", "mean", "age", "--epsilon", "1"], 1, "--type COLUMN=TYPE"),
    (["histogram", "{t}", "nope", "--bounds", "0", "1", "--max-count=-1"], 2, "column 'nope'"),
    (["histogram", "{t}", "name", "--type", "name=VARCHAR", "--bounds", "0", "9", "--units", "3"],
     2, "--domain"),
    (["histogram", "{t}", "age", "--type", "age=DOUBLE", "--bounds", "0", "9"], 2, "--units N"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "code", "flag"), BAD_LINES)
def test_a_bad_command_line_is_told_in_cli_flags_and_costs_nothing(
    table: Path, line: list[str], code: int, flag: str
) -> None:
    before = (_ledger(table).read_bytes(), _charges(table))
    args = [str(table) if a == "{t}" else a for a in line]
    args += ["--ledger", str(_ledger(table))]
    result = runner.invoke(app, args, env=WIDE)
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert flag in result.output
    assert not PYTHON_WORDS.search(result.output), result.output
    assert (_ledger(table).read_bytes(), _charges(table)) == before


def test_the_type_inference_warning_names_type_and_no_source_line(table: Path) -> None:
    result = runner.invoke(
        app,
        ["query", str(table), "mean", "age", "--bounds", "0", "100", "--epsilon", "0.5",
         "--infer-types", "--ledger", str(_ledger(table))],
        env=WIDE,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "warning:" in result.stderr and "--type COLUMN=TYPE" in result.stderr
    assert "--infer-types" in result.stderr
    assert not PYTHON_WORDS.search(result.stderr), result.stderr


def test_bounds_private_works_on_the_command_line(table: Path) -> None:
    before = _charges(table)
    result = runner.invoke(
        app,
        ["query", str(table), "mean", "age", "--bounds", "private", "--epsilon", "1",
         "--json", *TYPES, "--ledger", str(_ledger(table))],
        env=WIDE,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert _charges(table) == before + 1
    assert QueryOptions("mean", "age", epsilon=1.0, private_bounds=True).spec().bounds == "private"


def test_the_translation_is_one_table_each_entry_used() -> None:
    """Every entry of the table rewrites something (a dead entry is a defect)."""
    examples = {
        "pass bounds=(lo, hi) to the query": "give --bounds LO HI",
        "declare them in the schema (Column('age', bounds=(lo, hi)))": (
            "declare them in a --schema file"
        ),
        "or pass bounds='private' to": "or pass --bounds private to",
        "bounds='private' found": "--bounds private found",
        "bins= with bounds=(lo, hi)": "--bins N with --bounds LO HI",
        "edges=[...]": "--edges E0,E1,...",
        "domain=[...]": "--domain VALUE (repeatable)",
        "pass keys='private' with delta=...": "pass --private-keys with --delta D",
        "pass keys=[...]": "give --keys KEY (repeatable)",
        "group_by needs": "--group-by needs",
        "(infer_types=True)": "(--infer-types)",
        "declare them with types={...} instead": "declare them with --type COLUMN=TYPE instead",
        "Use rng=None (the operating system's CSPRNG) for": "Leave out --seed (secure randomness) for",
        "with --new-ledger (new_ledger=True);": "with --new-ledger;",
        "ledger (on the command line, leave out --ledger; in Python, ledger='/x/l.json').": (
            "ledger (leave out --ledger)."
        ),
        "numbers stored as text need coerce=True in the schema": (
            'numbers stored as text need "coerce": true in a --schema file'
        ),
    }
    for python, cli in examples.items():
        assert cli_words(python) == cli, python
    assert len(CLI_WORDS) >= len(examples)


def test_histogram_default_method_is_auto_and_needs_no_max_count(table: Path) -> None:
    result = runner.invoke(
        app,
        ["histogram", str(table), "age", "--type", "age=DOUBLE", "--bounds", "0", "100", "--units", "10", "--json",
         "--seed", "1", "--ledger", str(_ledger(table))],
        env=WIDE,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert '"method"' in result.stdout and "structure_first" not in result.stdout


def test_histogram_checks_the_column_before_the_method(table: Path) -> None:
    result = runner.invoke(
        app,
        ["histogram", str(table), "nope", "--method", "structure_first", "--bounds", "0", "9",
         "--units", "3", "--ledger", str(_ledger(table))],
        env=WIDE,
    )  # fmt: skip
    assert result.exit_code == 2
    assert "column 'nope' is not in" in result.output and "--max-count" not in result.output


def test_histogram_refuses_a_declared_text_column_before_the_charge(table: Path) -> None:
    before = _ledger(table).read_bytes()
    result = runner.invoke(
        app,
        ["histogram", str(table), "name", "--type", "name=VARCHAR", "--bounds", "0", "9",
         "--units", "3", "--ledger", str(_ledger(table))],
        env=WIDE,
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--domain" in result.output and "mode name" in result.output
    assert _ledger(table).read_bytes() == before


def test_histogram_reads_parquet_as_query_does(tmp_path: Path) -> None:
    path = tmp_path / "people.parquet"
    pd.DataFrame({"age": [31.0, 45.0, 22.0], "name": ["a", "b", "c"]}).to_parquet(path)
    result = runner.invoke(
        app,
        ["histogram", str(path), "age", "--type", "age=DOUBLE", "--method", "laplace", "--bounds", "0", "100",
         "--units", "4", "--json", "--seed", "1", "--ledger", str(tmp_path / "l.json"),
         "--budget", "2"],
        env=WIDE,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert '"n_units": 4' in result.stdout
