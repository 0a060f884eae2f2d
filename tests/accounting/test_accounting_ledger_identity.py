"""Issue 11: a ledger records the dataset it guards, and every corruption is one clear error."""

from __future__ import annotations

import json
import sqlite3
import threading
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

from dpkit.accounting import Accountant, Budget
from dpkit.errors import BudgetExceededError, LedgerCorruptError, LedgerError
from dpkit.tables import Session


def test_a_ledger_refuses_another_dataset_and_names_both(tmp_path: Path) -> None:
    path = tmp_path / "l.ledger"
    Accountant(Budget(1.0), ledger=path, dataset="patients-2024").close()
    again = Accountant(Budget(1.0), ledger=path, dataset="patients-2024")
    assert again.dataset == "patients-2024"
    again.close()
    with pytest.raises(LedgerError, match="'patients-2024', not 'salaries'"):
        Accountant(Budget(1.0), ledger=path, dataset="salaries")
    assert Accountant.from_ledger(path).dataset == "patients-2024"


def test_an_old_ledger_records_the_first_identity_it_is_opened_with(tmp_path: Path) -> None:
    path = tmp_path / "old.ledger"
    old = Accountant(Budget(1.0), ledger=path)  # as written before identities existed
    old.charge(0.25, "earlier query")
    old.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM meta WHERE key = 'dataset'").fetchone() == (0,)
    migrated = Accountant(Budget(1.0), ledger=path, dataset="a.csv")
    assert migrated.spent == Budget(0.25) and migrated.dataset == "a.csv"
    migrated.close()
    with pytest.raises(LedgerError, match=r"guards the dataset 'a\.csv'"):
        Accountant(Budget(1.0), ledger=path, dataset="b.csv")


def test_sessions_on_files_record_the_file_as_the_dataset(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    pd.DataFrame({"x": [1.0, 2.0]}).to_csv(a, index=False)
    pd.DataFrame({"x": [3.0, 4.0]}).to_csv(b, index=False)
    ledger = tmp_path / "a.ledger"
    types = {"x": "DOUBLE"}
    Session.from_csv(a, epsilon=1.0, ledger=ledger, types=types).count(epsilon=0.5)
    with pytest.raises(LedgerError, match="guards the dataset"):
        Session.from_csv(b, epsilon=1.0, ledger=ledger, types=types)
    assert Session.from_csv(a, epsilon=1.0, ledger=ledger, types=types).spent == Budget(0.5)


def _corrupt(path: Path, sql: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("DROP TRIGGER IF EXISTS charges_no_update")
        db.execute(sql)


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(p.read_bytes()[:300]),
        lambda p: p.write_bytes(b"garbage" * 500),
        lambda p: _corrupt(p, "UPDATE charges SET epsilon = '1' || printf('%.5000d', 0)"),
        lambda p: _corrupt(p, "UPDATE charges SET epsilon = 'abc'"),
        lambda p: _corrupt(p, "UPDATE charges SET scope_path = '" + "[" * 100_000 + "'"),
        lambda p: _corrupt(
            p, "UPDATE charges SET scope_path = '" + json.dumps([["s", "x", None]] * 500) + "'"
        ),
        lambda p: _corrupt(p, "UPDATE charges SET created_at = 'yesterday'"),
        lambda p: _corrupt(p, "DROP TABLE meta"),
        lambda p: _corrupt(p, "DELETE FROM meta WHERE key = 'budget_delta'"),
        lambda p: _corrupt(p, "UPDATE meta SET value = '1/0' WHERE key = 'budget_epsilon'"),
    ],
)
def test_every_corruption_is_one_clear_error(tmp_path: Path, damage) -> None:
    path = tmp_path / "c.ledger"
    acc = Accountant(Budget(1.0), ledger=path)
    acc.charge(0.1, "q")
    acc.close()
    damage(path)
    with pytest.raises(LedgerCorruptError, match="corrupt"):
        Accountant(Budget(1.0), ledger=path).history  # noqa: B018 - reading is the test
    with pytest.raises(LedgerError):
        Accountant.from_ledger(path).spent  # noqa: B018


def test_a_refusal_names_the_budget_that_is_short() -> None:
    acc = Accountant(Budget(1.0, 1e-6))
    with pytest.raises(BudgetExceededError, match=r"\(epsilon short\)"):
        acc.charge(Budget(2.0), "big")
    with pytest.raises(BudgetExceededError, match=r"\(delta short\)"):
        acc.charge(Budget(0.1, 1e-5), "private keys")
    with pytest.raises(BudgetExceededError, match=r"\(epsilon and delta short\)"):
        acc.charge(Budget(2.0, 1e-5), "both")


def test_an_accountant_shared_by_threads_never_overspends(tmp_path: Path) -> None:
    acc = Accountant(Budget(3.0), ledger=tmp_path / "t.ledger")
    refused: list[int] = []

    def spend() -> None:
        for _ in range(10):
            try:
                acc.charge(0.1, "q")
            except BudgetExceededError:
                refused.append(1)

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert acc.spent.epsilon_exact == Fraction(3) and len(refused) == 50
