"""A new user's first hour, end to end on the command line (issue 28).

Two halves. The README's CLI lines run as written, in order, in a fresh
directory prepared as the README's Python tour leaves it (``patients.csv`` and
its ledger ``patients.ledger``); the few that need data outside the repository
or run a server are in :data:`NOT_RUN`, each with its reason. Then a scripted
set of mistakes a newcomer makes (bad paths, encodings, ragged and empty files,
wrong columns, bounds, ε, budget, kinds, filters, types, outputs, survey
files): each must exit non-zero with no traceback, name the flag to fix (or,
for a positional argument, the file, column or kind at fault), hold no Python
syntax, and leave every ledger byte for byte as it was.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import dpkit
from dpkit._cli_options import cli_words
from dpkit.cli import app
from dpkit.demo import patients

ROOT = Path(__file__).resolve().parents[1]
# Wide enough that Rich never wraps a message (or a temporary path) inside its error box.
runner = CliRunner(env={"COLUMNS": "500", "TERMINAL_WIDTH": "500"})
TYPES = "age=DOUBLE,weight=DOUBLE,condition=BOOLEAN,district=VARCHAR"

#: README lines not run here (matched by their start), and why.
NOT_RUN = {
    "dpkit walkthrough titanic --data ../shared/data/": "needs a real data set outside the repo",
    "dpkit reproduce regression-paper --data ../shared/": "needs a real data set; runs minutes",
    "dpkit serve": "starts a server that runs until stopped",
    "dpkit remote query": "needs a running service and an analyst's key",
}

#: Python-argument syntax that must not reach a command-line user.
PYTHON_WORDS = re.compile(
    r"\w+=\(|\w+=\[|\w+=\{|\w+=True|\w+=False|\w+='|rng=None|Column\(|\(Python\)|File \"|\.py\b"
)


# --------------------------------------------------------------------------
# The README's command lines
# --------------------------------------------------------------------------


def readme_cli_lines(text: str) -> list[list[str]]:
    """Every ``dpkit ...`` line of the ```bash blocks, as argv after ``dpkit``.

    Continuation lines are joined, comments dropped, shell variables set on a
    line of their own (``T=...``) substituted; ``VAR=... dpkit ...`` keeps the
    command. Lines of other programs (``make``) are left out.
    """
    variables: dict[str, str] = {}
    lines: list[list[str]] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                name, _, value = words.pop(0).partition("=")
                if not words:
                    variables[name] = value
            if words and words[0] == "dpkit":
                lines.append([re.sub(r"\$(\w+)", lambda m: variables[m[1]], w) for w in words])
    return lines


def _not_run(argv: list[str]) -> str | None:
    line = " ".join(argv)
    return next((why for start, why in NOT_RUN.items() if line.startswith(start)), None)


def test_the_readme_cli_lines_are_found() -> None:
    lines = [" ".join(a) for a in readme_cli_lines((ROOT / "README.md").read_text("utf-8"))]
    assert any(line.startswith("dpkit query patients.csv mean age --type age=") for line in lines)
    assert any(line.startswith("dpkit histogram titanic.csv Age") for line in lines), lines
    for start in NOT_RUN:  # the allow-list names only lines the README has
        assert any(line.startswith(start) for line in lines), start


def test_readme_parsing_joins_continuations_and_substitutes_variables() -> None:
    text = "```bash\nT=a=X,b=Y  # types\ndpkit query f.csv count --type $T \\\n   --epsilon 1\n"
    text += "make demo\nKEY=k dpkit remote x  # a comment\n```\n"
    assert readme_cli_lines(text) == [
        ["dpkit", "query", "f.csv", "count", "--type", "a=X,b=Y", "--epsilon", "1"],
        ["dpkit", "remote", "x"],
    ]


def _titanic(path: Path) -> None:
    """A stand-in for the README's titanic.csv: 891 passengers, ages 0-80, some unknown."""
    ages = np.random.default_rng(7).uniform(0.4, 80, 891).round(1).astype(object)
    ages[::5] = ""
    pd.DataFrame({"PassengerId": np.arange(1, 892), "Age": ages}).to_csv(path, index=False)


def test_the_readme_cli_lines_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # As the README's Python tour leaves the directory: patients.csv and its ledger.
    patients().to_csv("patients.csv", index=False)
    types = dict(t.split("=") for t in TYPES.split(","))
    dpkit.Session.from_csv("patients.csv", types=types, epsilon=1.0, ledger="patients.ledger")
    _titanic(tmp_path / "titanic.csv")
    ran = []
    for argv in readme_cli_lines((ROOT / "README.md").read_text("utf-8")):
        if _not_run(argv):
            continue
        result = runner.invoke(app, argv[1:])
        shown = " ".join(argv)
        assert result.exit_code == 0, f"{shown}\n{result.output}"
        assert "Traceback" not in result.output, shown
        ran.append(argv[1])
    assert {"demo", "query", "budget", "histogram"} <= set(ran)
    assert (tmp_path / "median.json").is_file() and (tmp_path / "ages.png").is_file()


# --------------------------------------------------------------------------
# A newcomer's mistakes
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of good and bad files; patients.csv has a ledger, spent.csv a spent one."""
    here = tmp_path_factory.mktemp("newcomer")
    registry = here / "registry"
    with pytest.MonkeyPatch.context() as m:
        m.setenv("DPKIT_LEDGER_DIR", str(registry))
        m.chdir(here)
        table = patients()
        table.to_csv("patients.csv", index=False)
        table.head(40).to_csv("spent.csv", index=False)
        table.head(40).to_parquet("parquet.csv")  # Parquet under a .csv name
        Path("latin1.csv").write_bytes("age,city\n30,Montr\xe9al\n40,Z\xfcrich\n".encode("latin-1"))
        Path("ragged.csv").write_bytes(b"age,city\n30,a\n40,b,extra\n")
        Path("empty.csv").write_bytes(b"")
        Path("folder.csv").mkdir()
        Path("broken.json").write_text('{"questions": [')
        Path("negative.json").write_text(
            '{"questions": [{"name": "age", "kind": "number", "epsilon": -1, "bounds": [0, 9]}]}'
        )
        Path("reports.csv").write_text("age\n3\n")
        types = dict(t.split("=") for t in TYPES.split(","))
        dpkit.Session.from_csv("patients.csv", types=types, epsilon=1.0, ledger="patients.ledger")
        spent = dpkit.Session.from_csv("spent.csv", types=types, epsilon=0.1, ledger="spent.ledger")
        spent.count(epsilon=0.1)
    return here


@pytest.fixture
def workspace(_prepared: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DPKIT_LEDGER_DIR", str(_prepared / "registry"))
    monkeypatch.chdir(_prepared)
    yield _prepared


def _ledgers(here: Path) -> dict[str, bytes]:
    """Every ledger and registry file, byte for byte (nothing may be charged or created)."""
    files = [*here.glob("*.ledger"), *(here / "registry").rglob("*")]
    return {str(p): p.read_bytes() for p in files if p.is_file()}


Q = ["query", "patients.csv"]
MEAN = [*Q, "mean", "age", "--type", TYPES]
OK = ["--bounds", "0", "120", "--epsilon", "0.1"]

#: (case, argv after ``dpkit``, what the message must name: a flag, or the argument at fault;
#: optionally a known defect, run as a strict xfail)
MISTAKES = [
    ("missing file", ["query", "nope.csv", "count", "--epsilon", "0.1"], "nope.csv"),
    ("directory", ["query", "folder.csv", "count", "--epsilon", "0.1"], "is a directory"),
    ("latin-1 file", ["query", "latin1.csv", "count", "--epsilon", "0.1", "--budget", "1",
                      "--type", "age=DOUBLE,city=VARCHAR"], "--encoding latin-1"),
    ("unknown encoding", ["query", "latin1.csv", "count", "--epsilon", "0.1", "--budget", "1",
                          "--type", "age=DOUBLE,city=VARCHAR", "--encoding", "klingon"],
     "--encoding"),
    ("ragged CSV", ["query", "ragged.csv", "count", "--epsilon", "0.1", "--budget", "1",
                    "--type", "age=DOUBLE,city=VARCHAR"], "ragged.csv"),
    ("empty file", ["query", "empty.csv", "count", "--epsilon", "0.1", "--budget", "1"],
     "empty.csv"),
    ("Parquet named .csv", ["query", "parquet.csv", "count", "--epsilon", "0.1", "--budget", "1",
                            "--type", TYPES], ".parquet"),
    ("unknown column", [*Q, "mean", "height", "--type", TYPES, *OK], "'height'"),
    ("text column", [*Q, "mean", "district", "--type", TYPES, *OK], "--schema"),
    ("no bounds", [*MEAN, "--epsilon", "0.1"], "--bounds LO HI"),
    ("reversed bounds", [*MEAN, "--bounds", "120", "0", "--epsilon", "0.1"], "--bounds"),
    ("infinite bounds", [*MEAN, "--bounds", "0", "inf", "--epsilon", "0.1"], "--bounds"),
    ("one bound", [*MEAN, "--bounds", "0", "--epsilon", "0.1"], "--bounds"),
    ("negative epsilon", [*MEAN, "--bounds", "0", "120", "--epsilon", "-1"], "--epsilon"),
    ("zero epsilon", [*MEAN, "--bounds", "0", "120", "--epsilon", "0"], "--epsilon"),
    ("NaN epsilon", [*MEAN, "--bounds", "0", "120", "--epsilon", "nan"], "--epsilon"),
    ("word epsilon", [*MEAN, "--bounds", "0", "120", "--epsilon", "lots"], "--epsilon"),
    ("more than the budget", [*MEAN, "--bounds", "0", "120", "--epsilon", "5"], "--epsilon"),
    ("budget spent", ["query", "spent.csv", "count", "--type", TYPES, "--epsilon", "0.01"],
     "--epsilon"),
    ("unknown kind", [*Q, "average", "age", "--type", TYPES, *OK], "'average'"),
    ("bad --where", [*Q, "count", "--type", TYPES, "--epsilon", "0.1", "--where", "age~~3"],
     "--where"),
    ("--where on no column", [*Q, "count", "--type", TYPES, "--epsilon", "0.1",
                              "--where", "height==3"], "--where"),
    ("--where value of the wrong type", [*Q, "count", "--type", TYPES, "--epsilon", "0.1",
                                         "--where", "age>=old"], "--where"),
    ("unknown type", [*Q, "count", "--type", "age=NUMBER", "--epsilon", "0.1"], "--type"),
    ("--schema file missing", [*Q, "count", "--type", TYPES, "--schema", "nope.json",
                               "--epsilon", "0.1"], "nope.json"),
    ("--keys without --group-by", [*Q, "count", "--type", TYPES, "--keys", "A",
                                   "--epsilon", "0.1"], "--group-by"),
    ("--group-by, no keys", [*Q, "count", "--type", TYPES, "--group-by", "district",
                             "--epsilon", "0.1"], "--keys"),
    ("unknown --privacy-unit", [*Q, "count", "--type", TYPES, "--privacy-unit", "pid",
                                "--epsilon", "0.1"], "--privacy-unit"),
    ("zero --max-contributions", [*Q, "count", "--type", TYPES, "--privacy-unit", "district",
                                  "--max-contributions", "0", "--epsilon", "0.1"],
     "--max-contributions"),
    ("mode without --domain", [*Q, "mode", "district", "--type", TYPES, "--epsilon", "0.1"],
     "--domain"),
    ("zero --bins", [*Q, "histogram", "age", "--type", TYPES, "--bounds", "0", "120",
                     "--bins", "0", "--epsilon", "0.1"], "--bins"),
    ("tiny --grid-size", [*MEAN[:2], "median", "age", "--type", TYPES, *OK, "--grid-size", "1"],
     "--grid-size"),
    ("--budget again", [*Q, "count", "--type", TYPES, "--epsilon", "0.1", "--budget", "5"],
     "--budget"),
    ("no types", [*Q, "count", "--epsilon", "0.1"], "--type COLUMN=TYPE"),
    ("quantile out of range", [*Q, "quantile", "age", "--q", "1.5", "--type", TYPES, *OK], "--q"),
    ("negative delta", [*MEAN, *OK, "--delta", "-1"], "--delta"),
    ("level above 1", [*MEAN, *OK, "--level", "2"], "--level"),
    ("--out not JSON", [*MEAN, *OK, "--out", "result.txt"], "--out"),
    ("histogram, no bins", ["histogram", "patients.csv", "age", "--type", TYPES,
                            "--epsilon", "0.1"], "--width"),
    ("histogram of text", ["histogram", "patients.csv", "district", "--type", TYPES,
                           "--bounds", "0", "1", "--units", "2", "--epsilon", "0.1"], "--domain"),
    ("histogram, zero epsilon", ["histogram", "patients.csv", "age", "--type", TYPES,
                                 "--bounds", "0", "120", "--units", "12", "--epsilon", "0"],
     "--epsilon"),
    ("budget of no ledger", ["budget", "nope.ledger"], "nope.ledger"),
    ("survey file not JSON", ["survey", "estimate", "reports.csv", "broken.json"], '"questions"'),
    ("survey question's epsilon", ["survey", "estimate", "reports.csv", "negative.json"],
     "question 1 of the survey file: epsilon"),
    ("survey reports missing", ["survey", "estimate", "nope.csv", "negative.json"], "nope.csv"),
]  # fmt: skip


def _cases() -> list[object]:
    """The mistakes as pytest params; a known defect is a strict xfail with its reason."""
    return [
        pytest.param(
            argv,
            names,
            id=case,
            marks=[pytest.mark.xfail(strict=True, reason=bug[0])] if bug else [],
        )
        for case, argv, names, *bug in MISTAKES
    ]


@pytest.mark.parametrize(("argv", "names"), _cases())
def test_a_mistake_is_told_plainly_and_costs_nothing(
    workspace: Path, argv: list[str], names: str
) -> None:
    before = _ledgers(workspace)
    result = runner.invoke(app, argv)
    output = " ".join(result.output.split())
    assert result.exit_code != 0, output
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    assert "Traceback" not in output
    assert names in output, output
    assert not PYTHON_WORDS.search(output), output
    assert _ledgers(workspace) == before
    assert not (workspace / "result.txt").exists()


def test_there_are_at_least_twenty_mistakes_and_most_name_a_flag() -> None:
    assert len(MISTAKES) >= 20
    assert sum(m[2].startswith("--") for m in MISTAKES) >= 20


def test_cli_words_name_the_flag_of_a_parameter_error() -> None:
    """The translations this file relies on, each shown to rewrite what the library says."""
    examples = {
        "epsilon must be a finite number > 0, got -1.0.": "--epsilon must be",
        "delta must be in [0, 1), got -1.0.": "--delta must be",
        "level must be in (0, 1), e.g. 0.95; got 2.0.": "--level must be",
        "q must be a number in [0, 1].": "--q must be",
        "bounds must satisfy lo < hi, got (1.0, 0.0)": "--bounds LO HI must satisfy LO < HI",
        "bounds must be finite, got (0.0, inf).": "--bounds must be finite",
        "unknown column 'x' in where=; the": "unknown column 'x' in --where;",
        "cannot read the filter 'a~~3'; write": "cannot read the --where filter",
        "types declares column 'age' as 'NUMBER'": "--type declares column",
        "declare coerce=True for it in the schema to": '"coerce": true for it in a --schema file',
        "Give its encoding: --encoding latin-1 (command line) or encoding='latin-1' (Python), or": (
            "Give its encoding: --encoding latin-1, or"
        ),
        "ask for less (a smaller epsilon) or stop.": "(a smaller --epsilon)",
        "unknown encoding 'klingon': give": "unknown encoding 'klingon' for --encoding: give",
        "bins must be an integer >= 1.": "--bins must be",
        "max_contributions must be an integer >= 1": "--max-contributions must be",
        "grid_size must be an integer from 2": "--grid-size must be",
        "unknown column 'pid' in privacy_unit; the": "in --privacy-unit;",
        "the filter on numeric column 'age' needs a number.": "the --where filter on",
        "mode() needs the public list of values of column 'd': pass domain=[...] or declare it "
        "in the schema (Column('d', domain=[...])). It": (
            "mode needs the public list of values of column 'd': pass --domain VALUE "
            "(repeatable) or declare it in a --schema file. It"
        ),
    }
    for python, cli in examples.items():
        assert cli in cli_words(python), python
    # Inside a sentence (a survey file's question) the words stay the file's own.
    assert cli_words("question 1: epsilon must be > 0") == "question 1: epsilon must be > 0"
