"""One budget per dataset: the dataset -> ledger registry, in the library.

A ledger refuses another dataset (test_accounting_ledger_identity.py); here the
other direction: a dataset that has a ledger is refused a second one, in a file
or in memory, unless the owner passes ``new_ledger=True``; a byte-for-byte copy
of a data file is the same dataset. The command line uses the same registry
(tests/test_cli_one_budget.py).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
from pathlib import Path

import pandas as pd
import pytest

import dpkit
from dpkit.accounting import Accountant, Budget
from dpkit.accounting.registry import REGISTRY_NAME, DatasetRegistry, ledger_directory
from dpkit.errors import LedgerError

TYPES = {"age": "DOUBLE"}


def _refused(err: pytest.ExceptionInfo[LedgerError]) -> str:
    message = str(err.value)
    assert "--new-ledger" in message and "new_ledger=True" in message  # names the override
    # ... as the owner's decision, never as the way out
    for suggestion in ("use a new ledger", "or a new ledger", "name a new ledger", "another path"):
        assert suggestion not in message
    return message


def test_a_second_ledger_for_a_dataset_is_refused_before_any_file_is_made(tmp_path: Path) -> None:
    first, second = tmp_path / "first.ledger", tmp_path / "second.ledger"
    with Accountant(1.0, first, dataset="clinic") as acc:
        acc.charge(0.75, "q")
    with pytest.raises(LedgerError) as err:
        Accountant(1.0, second, dataset="clinic")
    message = _refused(err)
    assert str(first.resolve()) in message  # points at the dataset's own ledger
    assert not second.exists()
    # the dataset's ledger still works, with what was spent
    with Accountant(1.0, first, dataset="clinic") as acc:
        assert acc.remaining == Budget(0.25)
    # an existing ledger file made before the registry existed is refused too
    old = tmp_path / "old.ledger"
    Accountant(1.0, old).close()  # no dataset: not registered
    with pytest.raises(LedgerError):
        Accountant(1.0, old, dataset="clinic")
    assert Accountant.from_ledger(old).dataset is None  # and it was left as it was


def test_a_budget_in_memory_for_a_dataset_with_a_ledger_is_refused(tmp_path: Path) -> None:
    Accountant(1.0, tmp_path / "clinic.ledger", dataset="clinic").close()
    with pytest.raises(LedgerError) as err:
        Accountant(1.0, dataset="clinic")
    assert "in memory" in _refused(err)
    Accountant(1.0, dataset="another dataset")  # no ledger anywhere: a memory budget is fine
    Accountant(1.0)  # no identity: nothing to check


def test_the_owner_can_start_a_second_budget_explicitly_and_it_is_recorded(tmp_path: Path) -> None:
    first, second = tmp_path / "first.ledger", tmp_path / "second.ledger"
    Accountant(1.0, first, dataset="clinic").close()
    with Accountant(2.0, second, dataset="clinic", new_ledger=True) as acc:
        acc.charge(0.5, "q")
    registry = DatasetRegistry()
    assert registry.ledger_of("clinic") == second.resolve()
    with pytest.raises(LedgerError):  # the old one is now the "other" ledger
        Accountant(1.0, first, dataset="clinic")
    with sqlite3.connect(registry.path) as conn:
        history = conn.execute(
            "SELECT ledger, second_budget FROM history WHERE key = 'name:clinic' ORDER BY id"
        ).fetchall()
    assert history == [(str(first.resolve()), 0), (str(second.resolve()), 1)]
    Accountant(1.0, dataset="clinic", new_ledger=True)  # in memory, explicitly
    with pytest.raises(dpkit.InvalidParameterError):
        Accountant(1.0, dataset="clinic", new_ledger="yes")  # type: ignore[arg-type]


def test_a_copy_of_a_data_file_shares_the_originals_budget(tmp_path: Path) -> None:
    original = tmp_path / "a.csv"
    pd.DataFrame({"age": [31.0, 45.0, 52.0]}).to_csv(original, index=False)
    copy = tmp_path / "renamed.csv"
    shutil.copyfile(original, copy)
    Accountant(1.0, tmp_path / "a.ledger", dataset=str(original.resolve())).close()
    with pytest.raises(LedgerError) as err:
        Accountant(1.0, tmp_path / "b.ledger", dataset=str(copy.resolve()))
    assert "same contents" in _refused(err)
    with pytest.raises(LedgerError):
        Accountant(1.0, dataset=str(copy.resolve()))
    # a file whose bytes differ is another dataset (documented: not covered)
    pd.DataFrame({"age": [31.0, 45.0]}).to_csv(copy, index=False)
    Accountant(1.0, tmp_path / "b.ledger", dataset=str(copy.resolve())).close()
    # the original, changed in place, keeps its ledger and its new contents are recorded
    pd.DataFrame({"age": [31.0, 45.0, 52.0, 60.0]}).to_csv(original, index=False)
    Accountant(1.0, tmp_path / "a.ledger", dataset=str(original.resolve())).close()
    third = tmp_path / "third.csv"
    shutil.copyfile(original, third)
    with pytest.raises(LedgerError):
        Accountant(1.0, tmp_path / "c.ledger", dataset=str(third.resolve()))


def test_sessions_go_through_the_same_registry(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    pd.DataFrame({"age": [31.0, 45.0, 52.0, 18.0]}).to_csv(path, index=False)
    session = dpkit.Session.from_csv(path, types=TYPES, epsilon=1.0, ledger=tmp_path / "p.ledger")
    session.count(epsilon=0.25)
    with pytest.raises(LedgerError):
        dpkit.Session.from_csv(path, types=TYPES, epsilon=1.0, ledger=tmp_path / "other.ledger")
    with pytest.raises(LedgerError):
        dpkit.Session.from_csv(path, types=TYPES, epsilon=1.0)  # a fresh budget in memory
    again = dpkit.Session.from_csv(path, types=TYPES, epsilon=1.0, ledger=tmp_path / "p.ledger")
    assert again.remaining == Budget(0.75)
    # the owner's explicit override, through an accountant
    owner = Accountant(1.0, dataset=str(path.resolve()), new_ledger=True)
    assert dpkit.Session.from_csv(path, types=TYPES, accountant=owner).remaining == Budget(1.0)


def test_concurrent_claims_give_a_dataset_exactly_one_ledger(tmp_path: Path) -> None:
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def claim(i: int) -> None:
        start.wait()
        try:
            Accountant(1.0, tmp_path / f"l{i}.ledger", dataset="raced").close()
            result = "ok"
        except LedgerError:
            result = "refused"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] + ["refused"] * 7
    assert len(list(tmp_path.glob("l*.ledger"))) == 1


def test_a_foreign_file_at_the_registry_path_is_never_overwritten(tmp_path: Path) -> None:
    directory = ledger_directory()
    directory.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(directory / REGISTRY_NAME) as conn:
        conn.execute("CREATE TABLE mine (x)")
    before = (directory / REGISTRY_NAME).read_bytes()
    with pytest.raises(LedgerError, match="registry"):
        Accountant(1.0, tmp_path / "x.ledger", dataset="d")
    assert (directory / REGISTRY_NAME).read_bytes() == before
    assert not (tmp_path / "x.ledger").exists()


def test_the_registry_lives_in_the_ledger_directory(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DPKIT_LEDGER_DIR", str(tmp_path / "here"))
    Accountant(1.0, tmp_path / "x.ledger", dataset="d").close()
    assert (tmp_path / "here" / REGISTRY_NAME).is_file()
    monkeypatch.delenv("DPKIT_LEDGER_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert ledger_directory() == tmp_path / "xdg" / "dpkit" / "ledgers"
    assert os.environ.get("DPKIT_LEDGER_DIR") is None


def test_a_ledger_that_cannot_be_created_leaves_no_claim(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="does not exist"):
        Accountant(1.0, tmp_path / "typo" / "x.ledger", dataset="clinic")
    Accountant(1.0, tmp_path / "x.ledger", dataset="clinic").close()  # not blocked by the typo
    assert DatasetRegistry().ledger_of("clinic") == (tmp_path / "x.ledger").resolve()
