"""The SQLite ledger: persistence, concurrency, and refusal of corrupt or foreign files."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from dpkit.accounting import Accountant, Budget
from dpkit.errors import (
    BudgetExceededError,
    LedgerCorruptError,
    LedgerError,
    LedgerLockedError,
)

# A child process that opens (creating if needed) a ledger, waits for a start
# signal so that all children overlap, charges, and reports its successes.
CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from dpkit.accounting import Accountant, Budget
    from dpkit.errors import BudgetExceededError
    path, budget, cost, n, name, go = sys.argv[1:7]
    acc = Accountant(Budget(float(budget)), path)
    open(path + "." + name + ".ready", "w").close()
    while go != "-" and not os.path.exists(go):
        time.sleep(0.002)
    ok = refused = 0
    for i in range(int(n)):
        try:
            acc.charge(float(cost), f"{name}-{i}")
            ok += 1
        except BudgetExceededError:
            refused += 1
    print(json.dumps({"ok": ok, "refused": refused}))
    """
)


def _child(
    path: Path, budget: float, cost: float, n: int, name: str, go: str = "-"
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(budget), str(cost), str(n), name, go],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, int]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out)


def _rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM charges").fetchone()[0]


# --- persistence --------------------------------------------------------------------------
def test_restart_does_not_reset_what_was_spent(tmp_path: Path) -> None:
    path = tmp_path / "study.dpkit-ledger"
    with Accountant(1.0, path) as acc:
        acc.charge(0.25, "mean")
        with acc.parallel("hist") as scope:
            scope.charge(0.5, "bin a")
            scope.charge(0.25, "bin b")
    with Accountant(1.0, path) as again:
        assert again.spent == Budget(0.75)
        assert [r.label for r in again.history] == ["mean", "bin a", "bin b"]
        assert again.history[1].scopes == (("hist", None),)
        again.charge(0.25, "last")
        with pytest.raises(BudgetExceededError):
            again.charge(0.01, "beyond")
    reopened = Accountant.from_ledger(path)
    assert reopened.budget == Budget(1.0) and reopened.composition == "basic"
    assert reopened.remaining == Budget.zero()
    reopened.close()


def test_another_process_sees_and_respects_the_charges(tmp_path: Path) -> None:
    path = tmp_path / "shared.dpkit-ledger"
    assert _result(_child(path, 1.0, 0.3, 1, "child")) == {"ok": 1, "refused": 0}
    acc = Accountant(1.0, path)
    assert acc.spent == Budget(0.3)
    assert acc.history[0].label == "child-0"
    acc.charge(0.6, "parent")
    # the child, restarted, can only afford one more 0.1
    assert _result(_child(path, 1.0, 0.1, 3, "child2")) == {"ok": 1, "refused": 2}
    assert acc.remaining == Budget.zero()  # the parent sees the child's charge too
    acc.close()


def test_refused_charge_leaves_the_ledger_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "l.dpkit-ledger"
    acc = Accountant(1.0, path)
    acc.charge(0.9, "most")
    size = _rows(path)
    with pytest.raises(BudgetExceededError):
        acc.charge(0.2, "too much")
    with pytest.raises(BudgetExceededError):
        acc.charge_parallel([0.05, 0.2], "parallel too much")
    assert _rows(path) == size == 1
    acc.close()


def test_budget_cannot_be_changed_by_reopening(tmp_path: Path) -> None:
    path = tmp_path / "l.dpkit-ledger"
    Accountant(Budget(1.0, 1e-6), path).close()
    for budget in (Budget(2.0, 1e-6), Budget(1.0), Budget(1.0, 1e-6, rho=0.1)):
        with pytest.raises(LedgerError, match="was created for the budget ε=1, δ=1e-06") as info:
            Accountant(budget, path)
        assert not isinstance(info.value, LedgerCorruptError)
    with pytest.raises(LedgerError, match="uses composition='basic', not 'tightest'"):
        Accountant(Budget(1.0, 1e-6), path, composition="tightest")


def test_missing_directory_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="does not exist"):
        Accountant(1.0, tmp_path / "no" / "such.dpkit-ledger")
    with pytest.raises(LedgerError, match="there is no ledger"):
        Accountant.from_ledger(tmp_path / "absent.dpkit-ledger")


def test_ledger_is_append_only(tmp_path: Path) -> None:
    path = tmp_path / "l.dpkit-ledger"
    Accountant(1.0, path).charge(0.5, "x")
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM charges")


# --- corrupt, foreign and locked files -------------------------------------------------------
def _assert_corrupt(path: Path) -> None:
    before = path.read_bytes()
    with pytest.raises(LedgerCorruptError, match="restore the file from a backup"):
        Accountant(1.0, path)
    assert path.read_bytes() == before  # never repaired or overwritten


def test_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "l.dpkit-ledger"
    path.write_text("epsilon spent: 0.3\n" * 200)
    _assert_corrupt(path)


def test_empty_and_truncated_files(tmp_path: Path) -> None:
    path = tmp_path / "l.dpkit-ledger"
    acc = Accountant(1.0, path)
    acc.charge_parallel([0.001] * 300, "many rows")  # one commit, several pages
    acc.close()
    data = path.read_bytes()
    for cut in (len(data) // 2, 4096, 100, 0):
        path.write_bytes(data[:cut])
        _assert_corrupt(path)


def test_another_sqlite_database(tmp_path: Path) -> None:
    path = tmp_path / "l.dpkit-ledger"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE charges (id INTEGER, amount REAL)")
    _assert_corrupt(path)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("epsilon", "abc"),
        ("epsilon", "-1/10"),
        ("delta", "1/0"),
        ("delta", "3/2"),
        ("epsilon", "0.1e5"),
        ("scope_path", "{not json"),
        ("scope_path", '[["id", "label"]]'),
    ],
)
def test_unreadable_amounts(tmp_path: Path, column: str, value: str) -> None:
    path = tmp_path / "l.dpkit-ledger"
    Accountant(1.0, path).charge(0.1, "fine")
    row = {"label": "bad", "epsilon": "1/10", "delta": "0", "scope_path": "[]", "created_at": 0.0}
    row[column] = value
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO charges(label, epsilon, delta, scope_path, created_at) VALUES (?,?,?,?,?)",
            tuple(row.values()),
        )
    _assert_corrupt(path)


def test_corruption_after_opening_stops_charging(tmp_path: Path) -> None:
    path = tmp_path / "l.dpkit-ledger"
    acc = Accountant(1.0, path)
    acc.charge(0.1, "fine")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO charges(label, epsilon, delta, scope_path, created_at) "
            "VALUES ('x', 'NaN', '0', '[]', 0)"
        )
    with pytest.raises(LedgerCorruptError):
        acc.charge(0.1, "next")
    assert _rows(path) == 2  # nothing was added
    acc.close()


def test_newer_schema_is_refused_without_calling_it_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "l.dpkit-ledger"
    Accountant(1.0, path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(LedgerError, match="newer dpkit") as info:
        Accountant(1.0, path)
    assert not isinstance(info.value, LedgerCorruptError)


def test_locked_ledger(tmp_path: Path) -> None:
    path = tmp_path / "l.dpkit-ledger"
    acc = Accountant(1.0, path, timeout=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        start = time.monotonic()
        with pytest.raises(LedgerLockedError, match="another process"):
            acc.charge(0.1, "waits")
        assert 0.15 < time.monotonic() - start < 5
        with pytest.raises(LedgerLockedError):
            Accountant(1.0, path, timeout=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    acc.charge(0.1, "after the lock is gone")
    assert acc.spent == Budget(0.1)
    acc.close()


# --- concurrency ------------------------------------------------------------------------------
def test_eight_processes_never_overspend_and_never_lose_a_charge(tmp_path: Path) -> None:
    """8 processes × 100 charges of 0.01 against 5.0: exactly 500 succeed.

    The processes also race to create the ledger file.
    """
    path = tmp_path / "race.dpkit-ledger"
    go = str(tmp_path / "go")
    procs = [_child(path, 5.0, 0.01, 100, f"p{i}", go) for i in range(8)]
    deadline = time.monotonic() + 60
    while not all(Path(f"{path}.p{i}.ready").exists() for i in range(8)):
        assert time.monotonic() < deadline, "children did not start"
        assert all(p.poll() is None for p in procs), procs[0].communicate()
        time.sleep(0.01)
    Path(go).touch()
    results = [_result(p) for p in procs]
    assert sum(r["ok"] for r in results) == 500
    assert sum(r["refused"] for r in results) == 300
    assert _rows(path) == 500
    acc = Accountant.from_ledger(path)
    assert acc.spent == Budget(5)
    assert len({r.label for r in acc.history}) == 500
    acc.close()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".new")]
    assert leftovers == []


def test_threads_with_separate_connections_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "threads.dpkit-ledger"
    Accountant(2.0, path).close()
    successes = [0] * 8

    def worker(i: int) -> None:
        with Accountant(2.0, path) as acc:
            for j in range(50):
                try:
                    acc.charge(0.01, f"t{i}-{j}")
                    successes[i] += 1
                except BudgetExceededError:
                    pass

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(successes) == 200
    assert _rows(path) == 200


def test_threads_sharing_a_file_backed_accountant(tmp_path: Path) -> None:
    acc = Accountant(0.5, tmp_path / "l.dpkit-ledger")
    done = [0] * 4

    def worker(i: int) -> None:
        for j in range(25):
            try:
                acc.charge(0.01, f"t{i}-{j}")
                done[i] += 1
            except BudgetExceededError:
                pass

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(done) == 50 and acc.spent == Budget(0.5)
    acc.close()


def test_a_fork_child_uses_its_own_connection(tmp_path: Path) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    acc = Accountant(1.0, tmp_path / "l.dpkit-ledger")
    acc.charge(0.1, "parent before fork")
    pid = os.fork()
    if pid == 0:  # child: must not reuse the parent's SQLite connection
        code = 1
        try:
            acc.charge(0.2, "child")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert acc.spent == Budget(0.3)
    acc.close()
