"""dpkit logs through ``logging`` (the "dpkit" logger), silently by default, and never data.

Checks: the ledger's opening, each charge (label and cost, both public) and each
refusal are logged; nothing reaches stderr unless the application configures
logging; a release's log records are the same on neighbouring datasets.
"""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

import dpkit
from dpkit.accounting import Accountant
from dpkit.errors import BudgetExceededError


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("dpkit")]


def test_ledger_opened_charges_and_refusals_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="dpkit")
    acc = Accountant(1.0)
    acc.charge(0.25, "mean age")
    acc.charge_parallel({"a": 0.5, "b": 0.25}, "counts by region")
    with pytest.raises(BudgetExceededError) as refused:
        acc.charge(0.5, "too much")
    messages = _messages(caplog)
    assert messages[0].startswith("ledger opened: memory, budget ")
    assert "charged 'mean age': " in messages[1] and "0.25" in messages[1]
    assert sum("charged 'counts by region[" in m for m in messages) == 2
    refusals = [r for r in caplog.records if r.getMessage().startswith("charge refused")]
    assert len(refusals) == 1 and refusals[0].levelno == logging.WARNING
    assert str(refused.value) in refusals[0].getMessage()


def test_the_dpkit_logger_is_silent_by_default() -> None:
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("dpkit").handlers)
    # A refusal logs a WARNING; without the NullHandler Python's last-resort
    # handler would print it to stderr.
    code = (
        "import dpkit\n"
        "acc = dpkit.Accountant(1.0)\n"
        "try:\n"
        "    acc.charge(2.0, 'too much')\n"
        "except dpkit.BudgetExceededError:\n"
        "    pass\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr == "" and done.stdout == ""


def test_a_release_logs_the_same_on_neighbouring_datasets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Transcript: what a mean logs does not depend on the rows (even a hostile one)."""
    pd = pytest.importorskip("pandas")
    caplog.set_level(logging.DEBUG, logger="dpkit")

    def logged(rows: list[float]) -> list[tuple[str, int, str]]:
        caplog.clear()
        session = dpkit.Session.from_pandas(
            pd.DataFrame({"age": rows}), types={"age": "DOUBLE"}, epsilon=1.0, rng=0
        )
        caplog.clear()
        session.mean("age", epsilon=0.5, bounds=(0, 120))
        return [
            (r.name, r.levelno, r.getMessage())
            for r in caplog.records
            if r.name.startswith("dpkit")
        ]

    base = logged([30.0, 40.0, 50.0])
    assert len(base) == 1
    assert any(m.startswith("charged ") for _, _, m in base)
    assert logged([30.0, 40.0, 50.0, 1e308]) == base
    assert logged([30.0, 40.0]) == base
