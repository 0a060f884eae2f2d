"""``--accountant`` and ``--noise`` on the command line (issue 29, item 6).

A ledger's composition rule is chosen with ``--accountant basic | zcdp | rdp``
when the ledger is created (by ``dpkit query``, ``dpkit histogram`` or
``dpkit histogram2d``), recorded in it and kept; another rule later is refused
before anything is charged, and so are the rules valid only for queries fixed
in advance (``pld``, ``tightest``). ``dpkit budget`` shows the rule.
``--noise`` reaches the session (Gaussian noise under zcdp/rdp ledgers).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dpkit._cli_budget import open_cli_accountant
from dpkit.accounting import Accountant
from dpkit.accounting.events import RepeatedEvent
from dpkit.cli import app
from dpkit.tables import costing
from dpkit.tables.session import Session
from dpkit.tables.specs import QuerySpec

runner = CliRunner()
WIDE = {"COLUMNS": "400"}
TYPES = ["--type", "age=DOUBLE,name=VARCHAR"]
RDP = ["--budget", "1", "--budget-delta", "1e-6", "--accountant", "rdp"]


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "people.csv"
    path.write_text("age,name\n" + "".join(f"{20 + i % 60},p{i}\n" for i in range(40)))
    return path


def _query(table: Path, ledger: Path, *args: str, epsilon: str = "0.1") -> Any:
    return runner.invoke(
        app,
        [
            "query",
            str(table),
            "count",
            "--epsilon",
            epsilon,
            "--ledger",
            str(ledger),
            *TYPES,
            *args,
        ],
        env=WIDE,
    )


def _rule_and_charges(ledger: Path) -> tuple[str, int]:
    accountant = Accountant.from_ledger(ledger)
    try:
        return accountant.composition, len(accountant.history)
    finally:
        accountant.close()


def test_a_new_ledger_records_the_accountant_given(table: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "people.ledger"
    made = _query(table, ledger, *RDP)
    assert made.exit_code == 0, made.output
    assert _rule_and_charges(ledger) == ("rdp", 1)
    # later commands keep paying from it, with or without the same flag
    for extra in ([], ["--accountant", "rdp"]):
        again = _query(table, ledger, *extra)
        assert again.exit_code == 0, again.output
    assert _rule_and_charges(ledger) == ("rdp", 3)


def test_without_the_flag_a_ledger_is_basic_as_before(table: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "people.ledger"
    assert _query(table, ledger, "--budget", "1").exit_code == 0
    assert _rule_and_charges(ledger) == ("basic", 1)


def test_another_rule_for_an_existing_ledger_is_refused_before_the_charge(
    table: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "people.ledger"
    assert _query(table, ledger, "--budget", "1", "--budget-delta", "1e-6").exit_code == 0
    refused = _query(table, ledger, "--accountant", "zcdp")
    assert refused.exit_code == 1
    assert "composes its charges with --accountant basic, not --accountant zcdp" in refused.output
    assert "Drop --accountant (or give --accountant basic)" in refused.output
    assert _rule_and_charges(ledger) == ("basic", 1)  # nothing charged


@pytest.mark.parametrize("rule", ["pld", "tightest"])
def test_rules_for_queries_fixed_in_advance_are_refused(
    table: Path, tmp_path: Path, rule: str
) -> None:
    ledger = tmp_path / "people.ledger"
    refused = _query(table, ledger, "--budget", "1", "--budget-delta", "1e-6", "--accountant", rule)
    assert refused.exit_code == 1
    text = " ".join(refused.output.split())
    assert (
        f"--accountant {rule} is valid only for a sequence of queries whose noise is fixed" in text
    )
    assert "the command line answers one query at a time" in text
    assert "Use --accountant rdp" in text
    assert "Traceback" not in text and "composition=" not in text
    assert not ledger.exists()  # refused before any ledger is created


def test_an_unknown_rule_and_a_pure_budget_under_rdp_are_refused(
    table: Path, tmp_path: Path
) -> None:
    ledger = tmp_path / "people.ledger"
    unknown = _query(table, ledger, "--budget", "1", "--accountant", "renyi")
    assert unknown.exit_code == 1
    assert "--accountant must be one of basic, zcdp or rdp; got 'renyi'" in unknown.output
    pure = _query(table, ledger, "--budget", "1", "--accountant", "rdp")
    assert pure.exit_code == 1
    assert "--accountant rdp needs a budget with delta > 0" in pure.output
    assert "add --budget-delta" in pure.output
    assert not ledger.exists()


def test_histogram_creates_its_ledger_with_the_accountant(table: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "people.ledger"
    made = runner.invoke(
        app,
        ["histogram", str(table), "age", "--type", "age=DOUBLE", "--bounds", "0", "100",
         "--units", "10", "--epsilon", "0.1", "--ledger", str(ledger), *RDP[:4],
         "--accountant", "zcdp"],
        env=WIDE,
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    assert _rule_and_charges(ledger) == ("zcdp", 1)


def test_budget_shows_the_accountant(table: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "people.ledger"
    assert _query(table, ledger, *RDP).exit_code == 0
    shown = runner.invoke(app, ["budget", str(ledger)], env=WIDE)
    assert shown.exit_code == 0, shown.output
    assert (
        "accountant: rdp (a Renyi-DP filter; valid for adaptively chosen queries)" in shown.output
    )
    assert "remaining:" in shown.output


def test_an_rdp_ledger_pays_for_more_small_queries_than_basic(table: Path, tmp_path: Path) -> None:
    """ε = 0.02 a query out of (1, 1e-6): basic composition pays for 50, the Rényi filter 113."""
    for rule, before, admitted in (("basic", 49, True), ("basic", 50, False), ("rdp", 100, True)):
        copy = tmp_path / f"{rule}-{before}.csv"  # a dataset of its own: a ledger of its own
        copy.write_text(table.read_text() + f"{before},{rule}\n")
        ledger = tmp_path / f"{rule}-{before}.ledger"
        flags = ["--budget", "1", "--budget-delta", "1e-6", "--accountant", rule]
        first = _query(copy, ledger, *flags, epsilon="0.02")
        assert first.exit_code == 0, first.output
        # the same query's charges, made at once in this process on the file's ledger
        payer = open_cli_accountant(copy, ledger, None, None)
        session = Session.from_csv(
            copy, types={"age": "DOUBLE", "name": "VARCHAR"}, accountant=payer
        )
        planned = session.prepare(QuerySpec("count", epsilon=0.02)).query
        earlier = RepeatedEvent(costing.event(planned), before - 1)  # composes as that many
        payer.charge(earlier.budget(), "earlier counts", event=earlier)
        payer.close()
        last = _query(copy, ledger, epsilon="0.02")
        assert (last.exit_code == 0) is admitted, last.output
        if not admitted:
            assert "privacy budget exceeded" in last.output


_TAKES_NOISE = "noise" in inspect.signature(Session.__init__).parameters


@pytest.mark.skipif(not _TAKES_NOISE, reason="Session(noise=...) is not in this tree yet")
def test_noise_reaches_the_session(table: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "people.ledger"
    made = _query(table, ledger, *RDP, "--noise", "gaussian", "--json")
    assert made.exit_code == 0, made.output
    release = json.loads(made.output)
    assert "aussian" in release["mechanism"]
    assert release["delta"] == pytest.approx(1e-6)
    # a basic ledger refuses Gaussian noise before the charge, in CLI words
    basic = tmp_path / "basic.ledger"
    assert (
        _query(table, basic, "--budget", "1", "--budget-delta", "1e-6", "--new-ledger").exit_code
        == 0
    )
    refused = _query(table, basic, "--noise", "gaussian")
    assert refused.exit_code == 1
    assert "--noise gaussian needs a ledger that composes by zCDP or Renyi DP" in refused.output
    assert _rule_and_charges(basic) == ("basic", 1)


def test_noise_is_checked_before_anything_is_opened(table: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "people.ledger"
    bad = _query(table, ledger, *RDP, "--noise", "cauchy")
    assert bad.exit_code == 1
    assert "--noise must be one of laplace, gaussian or auto; got 'cauchy'" in bad.output
    assert not ledger.exists()
    # Gaussian noise on a file without a ledger and no budget: what to give
    nobudget = _query(table, ledger, "--noise", "gaussian", "--cost")
    assert nobudget.exit_code == 1
    assert "--budget-delta and --accountant zcdp or rdp" in " ".join(nobudget.output.split())
