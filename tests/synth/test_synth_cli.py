"""``dpkit synth``: a synthetic table from the command line, paid once from the file's ledger.

What is checked: the happy path writes a table of the declared columns and
``--rows`` rows and its report, and charges the ledger once (the same charge
``--cost`` announces); every refusal — bad input, undeclared domain, an output
that exists or cannot be written, a ledger that cannot pay, the missing
``synth`` extra — exits non-zero, leaves the ledger as it was (or creates
none) and writes no output; the progress hook hears the same public steps on
neighbouring tables.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.synth._tables import dependent
from tests.synth._tables import session as synth_session
from typer.testing import CliRunner

from dpkit._cli_budget import default_ledger
from dpkit.accounting import Accountant
from dpkit.cli import app
from dpkit.synth import mst
from dpkit.synth.domain import discretise

runner = CliRunner()

TYPES = "colour=VARCHAR,size=DOUBLE,ok=VARCHAR"
DECLARED = [
    "--type", TYPES, "--bounds", "size=0,100", "--domain", "colour=red,green,blue",
    "--domain", "ok=yes,no",
]  # fmt: skip


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    dependent(300, seed=1).to_csv(path, index=False)
    return path


def _invoke(*args: Any) -> Any:
    return runner.invoke(app, ["synth", *map(str, args)])


def _ledger_state(table: Path) -> tuple[int, Any] | None:
    """The file's ledger: how many charges and what is left (None: no ledger)."""
    path = default_ledger(table)
    if not path.exists():
        return None
    accountant = Accountant.from_ledger(path)
    try:
        return len(accountant.history), accountant.remaining
    finally:
        accountant.close()


def _pay_once(table: Path) -> tuple[int, Any]:
    """Create the file's ledger with one query on it (as ``dpkit query`` does)."""
    result = runner.invoke(
        app,
        ["query", str(table), "count", "--epsilon", "0.1", "--type", TYPES,
         "--budget", "5", "--budget-delta", "1e-6"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    state = _ledger_state(table)
    assert state is not None and state[0] == 1
    return state


def test_synth_writes_the_declared_columns_and_rows_and_charges_the_ledger_once(
    table: Path, tmp_path: Path
) -> None:
    out = tmp_path / "synthetic.parquet"
    before = _pay_once(table)
    dry = _invoke(table, *DECLARED, "--rows", 40, "--epsilon", 1, "--delta", 1e-9,
                  "--out", out, "--cost")  # fmt: skip
    assert dry.exit_code == 0, dry.output
    announced = json.loads(dry.stdout)
    assert _ledger_state(table) == before and not out.exists()  # a dry run charges nothing

    result = _invoke(table, *DECLARED, "--rows", 40, "--epsilon", 1, "--delta", 1e-9,
                     "--column", "colour,size", "--column", "ok", "--out", out, "--seed", 3)  # fmt: skip
    assert result.exit_code == 0, result.output
    frame = pd.read_parquet(out)
    assert list(frame.columns) == ["colour", "size", "ok"] and len(frame) == 40
    # each column's declared cells, or its missing cell (None / NaN: the null policy "drop")
    assert set(frame["colour"].dropna()) <= {"red", "green", "blue"}
    assert set(frame["ok"].dropna()) <= {"yes", "no"}
    assert frame["size"].dropna().between(0, 100).all()

    accountant = Accountant.from_ledger(default_ledger(table))
    try:
        history = accountant.history
        assert len(history) == 2 and history[-1].label == announced["label"]
        assert history[-1].label.startswith("synthesize mst")
        assert float(history[-1].cost.epsilon) == pytest.approx(announced["epsilon"])
        assert float(history[-1].cost.delta) == pytest.approx(announced["delta"])
    finally:
        accountant.close()

    report = json.loads((tmp_path / "synthetic.report.json").read_text())
    assert report["method"] == "mst" and report["rows"] == 40
    assert report["privacy"]["delta"] == pytest.approx(1e-9)
    assert len(report["marginals"]) == 3 + 2  # every column, then d - 1 selected pairs
    assert all(m["sigma"] > 0 for m in report["marginals"])
    # progress and the report go to stderr; stdout names the files written
    steps = (
        "one-way marginals",
        "pair counts",
        "selection",
        "pair marginals",
        "model fit and sampling",
    )
    for step in steps:
        assert f"{step}: " in result.stderr
    assert "guarantee: rho=" in result.stderr and "sigma=" in result.stderr
    assert result.stdout.split() == [str(out), str(tmp_path / "synthetic.report.json")]


#: Refusals: every one is decided by public input, before the ledger is opened.
REFUSED = {
    "undeclared domain": (["--type", TYPES, "--bounds", "size=0,100"], "no declared domain"),
    "unknown column": ([*DECLARED, "--column", "colour,height"], "unknown column 'height'"),
    "no rows": ([*DECLARED, "--rows", "0"], "--rows must be"),
    "epsilon and rho": ([*DECLARED, "--rho", "0.1"], "exactly one of --epsilon"),
    "MST workload": ([*DECLARED, "--workload", "colour,ok"], "--method aim"),
    "unknown method": ([*DECLARED, "--method", "gan"], "--method must be one of"),
    "AIM workload column": (
        [*DECLARED, "--method", "aim", "--workload", "colour,height"],
        "--workload names",
    ),
    "one bin": ([*DECLARED, "--bins", "1"], "--bins must be"),
    "budget too small for the shares": ([*DECLARED, "--epsilon", "1e-9"], "too small"),
}


def _args(extra: list[str]) -> list[str]:
    """``extra`` after the defaults, so that an option given there wins (Click keeps the last)."""
    return ["--rows", "20", "--epsilon", "1", "--delta", "1e-9", *extra]


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refusal_spends_nothing_and_writes_nothing(
    case: str, table: Path, tmp_path: Path
) -> None:
    extra, said = REFUSED[case]
    before = _pay_once(table)
    out = tmp_path / "o.csv"
    result = _invoke(table, *_args(extra), "--out", out)
    assert result.exit_code != 0
    assert said in result.stderr, result.stderr
    assert "Traceback" not in result.output
    assert _ledger_state(table) == before
    assert not out.exists() and not (tmp_path / "o.report.json").exists()


def test_a_refusal_creates_no_ledger(table: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    result = _invoke(table, "--type", TYPES, "--rows", 20, "--epsilon", 1, "--delta", 1e-9,
                     "--out", out, "--budget", 5, "--budget-delta", 1e-6)  # fmt: skip
    assert result.exit_code != 0 and "no declared domain" in result.stderr
    assert _ledger_state(table) is None and not out.exists()


def test_a_ledger_that_cannot_pay_delta_refuses_before_it_is_created(
    table: Path, tmp_path: Path
) -> None:
    out = tmp_path / "o.parquet"
    result = _invoke(table, *_args(DECLARED), "--out", out, "--budget", 5)  # δ = 0: cannot pay
    assert result.exit_code != 0 and "--budget-delta" in result.stderr
    assert _ledger_state(table) is None and not out.exists()


@pytest.mark.parametrize("existing", ["o.csv", "o.report.json"])
def test_an_existing_output_is_refused_without_force(
    existing: str, table: Path, tmp_path: Path
) -> None:
    before = _pay_once(table)
    (tmp_path / existing).write_text("mine\n")
    result = _invoke(table, *_args(DECLARED), "--out", tmp_path / "o.csv")
    assert result.exit_code != 0 and "--force" in result.stderr
    assert _ledger_state(table) == before
    assert (tmp_path / existing).read_text() == "mine\n"


@pytest.mark.parametrize(
    ("out", "said"),
    [("o.json", "must end in .parquet, .csv"), ("missing/o.csv", "does not exist")],
)
def test_an_output_that_cannot_be_written_is_refused(
    out: str, said: str, table: Path, tmp_path: Path
) -> None:
    before = _pay_once(table)
    result = _invoke(table, *_args(DECLARED), "--out", tmp_path / out)
    assert result.exit_code != 0 and said in result.stderr
    assert _ledger_state(table) == before


def test_without_the_synth_extra_it_says_how_to_install_it(
    table: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec

    def without_mbi(name: str, *args: Any) -> Any:
        return None if name == "mbi" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_mbi)
    before = _pay_once(table)
    result = _invoke(table, *_args(DECLARED), "--out", tmp_path / "o.csv")
    assert result.exit_code != 0
    assert "pip install 'dpkit[synth]'" in result.stderr
    assert _ledger_state(table) == before and not (tmp_path / "o.csv").exists()


# -- the progress hook ---------------------------------------------------------------------


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """MST without its (slow, post-processing) fit: the steps before it are what is compared."""
    monkeypatch.setattr(mst, "fit_model", lambda *args, **kwargs: None)
    monkeypatch.setattr(
        mst,
        "sample_model",
        lambda model, attributes, rows, seed: {
            a.name: np.zeros(rows, np.int64) for a in attributes
        },
    )
    yield


def _steps(frame: pd.DataFrame) -> list[tuple[str, int, int]]:
    session = synth_session(frame)
    attributes = discretise(session.schema, session.column_kinds, ["colour", "size", "ok"], 8)
    heard: list[tuple[str, int, int]] = []
    mst.run_mst(
        session.guarded_engine, attributes, 10, Fraction(1, 10), 1e-9, np.random.default_rng(5),
        progress=lambda *event: heard.append(event),
    )  # fmt: skip
    return heard


def test_the_progress_hook_hears_the_same_public_steps_on_neighbouring_tables(
    no_model: None,
) -> None:
    """Transcript: a table and its neighbour (one hostile row added) give the same progress."""
    frame = dependent(200, seed=2)
    hostile = pd.DataFrame({"colour": ["blue"], "size": [1e9], "ok": [None]})
    here, there = _steps(frame), _steps(pd.concat([frame, hostile], ignore_index=True))
    assert here == there
    assert [e for e in here if e[1] == e[2]] == [
        ("one-way marginals", 3, 3), ("pair counts", 3, 3), ("selection", 2, 2),
        ("pair marginals", 2, 2), ("model fit and sampling", 1, 1),
    ]  # fmt: skip
