"""The service's store: keys stored as hashes only, grants that only grow, exact amounts,
the audit log, stored answers, and the per-grant ledger under concurrent processes.

Most tests run on SQLite and on a throwaway PostgreSQL server (``url`` is
parametrised; the PostgreSQL half is skipped without PostgreSQL binaries unless
``DPKIT_REQUIRE_POSTGRES=1``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import multiprocessing
import sqlite3
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import dpkit.service.store.answers as answers_module
import dpkit.service.store.keys as keys_module
from dpkit.accounting import Accountant, Budget
from dpkit.accounting.ledger import NewRow
from dpkit.errors import (
    BudgetExceededError,
    InvalidParameterError,
    LedgerCorruptError,
    LedgerError,
)
from dpkit.service.store import (
    REQUEST_KEY,
    Analyst,
    ConflictError,
    DuplicateRequestError,
    Store,
    UnknownAnalystError,
    hash_key,
    make_key,
)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'service.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, sqlite_url: str) -> str:
    if request.param == "sqlite":
        return sqlite_url
    return str(request.getfixturevalue("fresh_postgres_url"))


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    s = Store(url)
    s.create()
    yield s
    s.close()


def _raw(url: str, sql: str, **params: Any) -> list[Any]:
    """Run SQL straight on the database, behind the store's back."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(sql), params)
            return list(result) if result.returns_rows else []
    finally:
        engine.dispose()


# ------------------------------------------------------------------ keys and analysts


def test_a_key_is_stored_as_a_hash_only(sqlite_url: str, tmp_path: Path) -> None:
    s = Store(sqlite_url)
    s.create()
    key = s.add_analyst("alice", actor="admin")
    assert key.startswith("dpk_") and len(key) == 4 + 8 + 1 + 43
    secret = key[13:]
    assert s.authenticate(key) == Analyst("alice", True, s.analysts()[0].created_at)
    s.close()
    files = list(tmp_path.glob("service.db*"))  # the database, its WAL and shared memory
    assert files
    for f in files:
        data = f.read_bytes()
        assert secret.encode() not in data and key.encode() not in data
    digest = hash_key(key).split(":")[1]
    assert any(digest.encode() in f.read_bytes() for f in files)


def test_keys_rotate_and_revoke(store: Store, url: str) -> None:
    old = store.add_analyst("alice", actor="admin")
    with pytest.raises(ConflictError, match="exists already"):
        store.add_analyst("alice", actor="admin")
    new = store.rotate_key("alice", actor="admin")
    assert new != old
    assert store.authenticate(old) is None
    assert store.authenticate(new) is not None
    store.revoke("alice", actor="admin")
    assert store.authenticate(new) is None
    with pytest.raises(ConflictError, match="revoked, for good"):
        store.rotate_key("alice", actor="admin")
    assert store.analysts() == [Analyst("alice", False, store.analysts()[0].created_at)]
    with pytest.raises(UnknownAnalystError):
        store.rotate_key("bob", actor="admin")
    with pytest.raises(UnknownAnalystError):
        store.revoke("bob", actor="admin")
    # the records shown never carry the key or its hash
    assert {f.name for f in dataclasses.fields(Analyst)} == {"name", "active", "created_at"}
    secrets_in_db = _raw(url, "SELECT key_id, key_hash FROM analysts")
    assert all(new[13:] not in str(row) for row in secrets_in_db)


@pytest.mark.parametrize(
    "key",
    [
        "",
        "dpk_",
        "not a key",
        "Bearer dpk_",
        None,
        12345,
        b"dpk_bytes",
        "dpk_short_secret",
        "dpk_" + "A" * 8 + "_" + "é" * 43,
        "dpk_" + "A" * 8 + "_" + "B" * 43 + "\n",
        "dpk_" + "A" * 8 + "_" + "B" * 10_000,
    ],
)
def test_malformed_keys_are_refused_quietly(store: Store, key: Any) -> None:
    store.add_analyst("alice", actor="admin")
    assert store.authenticate(key) is None


def test_wrong_secrets_and_unknown_ids_are_refused(store: Store) -> None:
    key = store.add_analyst("alice", actor="admin")
    other = "B" if key[13] != "B" else "C"
    assert store.authenticate(key[:13] + other + key[14:]) is None  # right id, wrong secret
    assert store.authenticate(make_key()) is None  # unknown id
    assert store.authenticate(key + "x") is None


def test_an_unknown_key_id_costs_one_digest_compare(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add_analyst("alice", actor="admin")
    calls: list[int] = []
    compare = keys_module.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(1)
        return compare(a, b)

    monkeypatch.setattr(keys_module.hmac, "compare_digest", counting)
    assert store.authenticate(make_key()) is None
    assert calls == [1]  # the same work as for a known key id


@pytest.mark.parametrize("name", ["", "a" * 65, "al ice", "ali/ce", "é", "a;b", None, 7])
def test_names_are_checked(store: Store, name: Any) -> None:
    with pytest.raises(InvalidParameterError, match="1-64 letters"):
        store.add_analyst(name, actor="admin")
    store.add_analyst("alice", actor="admin")
    with pytest.raises(InvalidParameterError, match="1-64 letters"):
        store.add_grant("alice", name, 1.0, 0, actor="admin")


def test_config_analysts_and_key_hashes(store: Store) -> None:
    key = make_key()
    hashed = hash_key(key)
    assert hashed.split(":")[0] == key[4:12] and len(hashed) == 8 + 1 + 64
    store.ensure_analyst("carol", hashed)
    store.ensure_analyst("carol", hashed)  # idempotent
    assert store.authenticate(key) is not None
    store.ensure_analyst("dave")  # declared without a key: cannot log in yet
    assert [a.name for a in store.analysts()] == ["carol", "dave"]
    later = make_key()
    store.ensure_analyst("dave", hash_key(later))  # a key given later in the config
    assert store.authenticate(later) is not None
    rotated = store.rotate_key("dave", actor="admin")
    store.ensure_analyst("dave", hash_key(later))  # a restart does not bring the old key back
    assert store.authenticate(later) is None and store.authenticate(rotated) is not None
    with pytest.raises(ConflictError, match="another analyst"):
        store.ensure_analyst("erin", hashed)
    with pytest.raises(InvalidParameterError, match="hash-key"):
        store.ensure_analyst("frank", "plain-text-key")
    with pytest.raises(InvalidParameterError) as err:
        hash_key("dpk_secret-looking-but-wrong")
    assert "secret-looking" not in str(err.value)


# ------------------------------------------------------------------ grants


def test_grants_only_grow_in_exact_fractions(store: Store, url: str) -> None:
    store.add_analyst("alice", actor="admin")
    assert store.grant("alice", "patients") is None
    assert store.add_grant("alice", "patients", 0.1, 0, actor="admin") == Budget(0.1)
    total = store.add_grant("alice", "patients", 0.2, 1e-6, actor="admin")
    assert total.epsilon_exact == Fraction(3, 10)  # not 0.30000000000000004
    assert store.grant("alice", "patients") == Budget(Fraction(3, 10), Fraction(1, 10**6))
    assert _raw(url, "SELECT epsilon, delta, version FROM grants") == [("3/10", "1/1000000", 2)]
    store.add_grant("alice", "visits", 2, 0, actor="admin")
    assert store.grants("alice") == {
        "patients": Budget(Fraction(3, 10), Fraction(1, 10**6)),
        "visits": Budget(2),
    }
    assert store.grants("bob") == {}
    with pytest.raises(InvalidParameterError):
        store.add_grant("alice", "patients", -0.1, 0, actor="admin")
    with pytest.raises(InvalidParameterError, match="delta"):
        store.add_grant("alice", "patients", 0, 0.9999999, actor="admin")
    with pytest.raises(InvalidParameterError, match="epsilon > 0"):
        store.add_grant("alice", "new", 0, 0, actor="admin")
    with pytest.raises(UnknownAnalystError):
        store.add_grant("bob", "patients", 1.0, 0, actor="admin")
    # refusals changed nothing
    assert _raw(url, "SELECT epsilon, version FROM grants WHERE dataset = 'patients'") == [
        ("3/10", 2)
    ]


# ------------------------------------------------------------------ audit and answers


def test_the_audit_log(store: Store, url: str) -> None:
    key = store.add_analyst("alice", actor="admin")
    store.add_grant("alice", "patients", 1.0, 0, actor="config")
    store.rotate_key("alice", actor="admin")
    store.revoke("alice", actor="admin")
    store.audit("anonymous", "auth_failed", reason="unknown key", path="/api/v1/budget")
    log = store.audit_log()
    assert [e["action"] for e in log] == [
        "auth_failed",
        "revoke",
        "rotate_key",
        "add_grant",
        "add_analyst",
    ]
    assert log[0]["detail"] == {"reason": "unknown key", "path": "/api/v1/budget"}
    assert log[3]["actor"] == "config" and log[3]["detail"]["epsilon"] == 1.0
    assert [e["action"] for e in store.audit_log(limit=2)] == ["auth_failed", "revoke"]
    assert key[13:] not in json.dumps(log) and hash_key(key)[9:] not in json.dumps(log)
    with pytest.raises(InvalidParameterError):
        store.audit_log(limit=0)
    with pytest.raises(sa.exc.DBAPIError, match="append-only"):
        _raw(url, "DELETE FROM audit")


def test_answers_and_history(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(1_000, 2_000))
    monkeypatch.setattr(answers_module.time, "time", lambda: float(next(clock)))
    store.add_analyst("alice", actor="admin")
    store.add_analyst("bob", actor="admin")
    query = {"kind": "mean", "column": "age", "epsilon": 0.1, "bounds": [0, 120]}
    response = {"release": {"type": "release", "value": 41.7}, "charged": True}

    def save(key: str, dataset: str = "patients", status: str = "answered", **kw: Any) -> None:
        store.save_answer(
            kw.get("who", "alice"),
            key,
            dataset=dataset,
            query=query,
            status=status,
            response=response if status == "answered" else None,
            epsilon=0.1,
            delta=0,
        )

    save("k1")
    save("k2", dataset="visits")
    save("k3", status="failed")
    save("k1", status="failed")  # a failure never replaces an answer
    save("k4", status="timeout")
    save("k4")  # the answer that arrives after a timeout replaces it
    save("k5", who="bob")
    found = store.find_answer("alice", "k1")
    assert found is not None
    assert found["status"] == "answered" and found["query"] == query
    assert found["response"] == response and found["epsilon"] == 0.1
    assert store.find_answer("bob", "k1") is None and store.find_answer("alice", "zz") is None
    assert [h["query_id"] for h in store.history("alice")] == ["k4", "k3", "k2", "k1"]
    assert [h["status"] for h in store.history("alice")] == [
        "answered",
        "failed",
        "answered",
        "answered",
    ]
    assert [h["query_id"] for h in store.history("alice", "patients", limit=2)] == ["k4", "k3"]
    assert [h["query_id"] for h in store.history("bob")] == ["k5"]
    with pytest.raises(InvalidParameterError, match="Idempotency-Key"):
        save("bad key with spaces")
    with pytest.raises(InvalidParameterError, match="status"):
        save("k9", status="maybe")


# ------------------------------------------------------------------ the ledger of a grant


def _grant(store: Store, analyst: str = "alice", dataset: str = "patients") -> None:
    if analyst not in {a.name for a in store.analysts()}:
        store.add_analyst(analyst, actor="admin")
    store.add_grant(analyst, dataset, 1.0, 0, actor="admin")


def test_an_accountant_on_a_grant_refuses_overspend_and_survives_reopening(
    store: Store, url: str
) -> None:
    _grant(store)
    acct = Accountant(Budget(1.0, 0), ledger=store.ledger("alice", "patients"))
    assert acct.dataset == "patients"
    acct.charge(0.4, "mean of age")
    acct.charge(0.6, "count")
    with pytest.raises(BudgetExceededError):
        acct.charge(0.1, "one more")
    assert acct.spent == Budget(1.0)
    # a new store on the same database (another process, or a restart) sees the spend
    again = Store(url)
    reopened = Accountant(Budget(1.0, 0), ledger=again.ledger("alice", "patients"))
    assert reopened.spent == Budget(1.0)
    assert [r.label for r in reopened.history] == ["mean of age", "count"]
    with pytest.raises(BudgetExceededError):
        reopened.charge(0.1, "still no")
    assert len(_raw(url, "SELECT id FROM charges")) == 2
    again.close()


def test_grants_have_independent_ledgers(store: Store) -> None:
    _grant(store, "alice", "patients")
    _grant(store, "alice", "visits")
    _grant(store, "bob", "patients")
    a = Accountant(Budget(1.0), ledger=store.ledger("alice", "patients"))
    a.charge(1.0, "all of it")
    for analyst, dataset in [("alice", "visits"), ("bob", "patients")]:
        other = Accountant(Budget(1.0), ledger=store.ledger(analyst, dataset))
        assert other.spent == Budget.zero()
        other.charge(0.5, "half")
    assert a.spent == Budget(1.0) and len(a.history) == 1
    with pytest.raises(LedgerError, match="no grant"):
        store.ledger("bob", "visits")
    with pytest.raises(LedgerError, match="guards the dataset"):
        Accountant(1.0, ledger=store.ledger("alice", "patients"), dataset="visits")
    with pytest.raises(InvalidParameterError, match="file path or None"):
        Accountant(1.0, ledger=object())  # type: ignore[arg-type]


def test_charges_record_their_request_once(store: Store, url: str) -> None:
    _grant(store)
    acct = Accountant(Budget(1.0), ledger=store.ledger("alice", "patients"))
    token = REQUEST_KEY.set("req-1")
    try:
        acct.charge(0.1, "mean")
        assert store.charge_for_request("alice", "req-1")
        assert store.charge_label("alice", "req-1") == "mean"
        with pytest.raises(DuplicateRequestError, match="charged already"):
            acct.charge(0.1, "mean again")
        # even when the budget could no longer pay: a retry learns it was charged
        with pytest.raises(DuplicateRequestError):
            acct.charge(5.0, "mean")
    finally:
        REQUEST_KEY.reset(token)
    assert not store.charge_for_request("alice", "req-2")
    assert not store.charge_for_request("bob", "req-1")
    token = REQUEST_KEY.set("req-2")
    try:
        acct.charge_parallel([0.2, 0.3], "by district")  # one charge, two rows
    finally:
        REQUEST_KEY.reset(token)
    acct.charge(0.1, "no key")
    rows = _raw(url, "SELECT label, request_key FROM charges ORDER BY id")
    assert [key for _, key in rows] == ["req-1", "req-2", None, None]
    labels = [label.split("[")[0] for label, _ in rows]  # parallel parts: "by district[0]"
    assert labels == ["mean", "by district", "by district", "no key"]
    fresh = Accountant(Budget(1.0), ledger=store.ledger("alice", "patients"))
    assert fresh.spent == Budget(Fraction(5, 10))  # 0.1 + max(0.2, 0.3) + 0.1


def test_config_grants_are_raised_at_least_once(store: Store, url: str) -> None:
    store.ensure_analyst("alice")
    other = Store(url)  # a second process starting on the same store
    try:
        for s in (store, other, store):
            total = s.add_grant("alice", "patients", 2.0, 0.0, actor="config", at_least=True)
            assert total == Budget(2.0)
        store.add_grant("alice", "patients", 1.0, 0.0, actor="admin")
        assert other.add_grant(
            "alice", "patients", 2.0, 0, actor="config", at_least=True
        ) == Budget(3.0)
    finally:
        other.close()


def test_a_write_that_raises_commits_nothing(store: Store) -> None:
    _grant(store)
    ledger = store.ledger("alice", "patients")
    with pytest.raises(RuntimeError), ledger.write(0) as txn:
        txn.append([NewRow("lost", Budget(0.5), ())])
        raise RuntimeError("the accountant refused")
    assert ledger.read(0) == []
    with ledger.write(0) as txn:
        (row,) = txn.append([NewRow("kept", Budget(0.5), ())])
    assert [r.id for r in ledger.read(0)] == [row.id]
    assert ledger.read(row.id) == []


def test_the_ledger_is_append_only_and_checked(store: Store, url: str) -> None:
    _grant(store)
    acct = Accountant(Budget(1.0), ledger=store.ledger("alice", "patients"))
    acct.charge(0.5, "half")
    for sql in ("UPDATE charges SET epsilon = '0'", "DELETE FROM charges"):
        with pytest.raises(sa.exc.DBAPIError, match="append-only"):
            _raw(url, sql)
    _raw(
        url,
        "INSERT INTO charges (analyst, dataset, label, epsilon, delta, scope_path, created_at) "
        "VALUES ('alice', 'patients', 'forged', 'lots', '0', '[]', 0)",
    )
    with pytest.raises(LedgerCorruptError, match="unreadable") as err:
        Accountant(Budget(1.0), ledger=store.ledger("alice", "patients"))
    assert "lots" not in str(err.value)


def _schema(path: Path) -> list[Any]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = db.execute("SELECT * FROM sqlite_master").fetchall()
        return [*tables, db.execute("PRAGMA journal_mode").fetchone()]


def test_database_errors_name_no_sql(tmp_path: Path) -> None:
    missing = Store(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}")
    with pytest.raises(LedgerError) as err:
        missing.create()
    text = str(err.value)
    assert "CREATE" not in text and "SELECT" not in text and "[SQL" not in text
    assert err.value.__cause__ is None and err.value.__suppress_context__
    # a dpkit ledger file is not a service store: refused, and left as it was
    Accountant(1.0, ledger=tmp_path / "ledger.db").close()
    before = _schema(tmp_path / "ledger.db")
    with pytest.raises(LedgerError, match="not a dpkit service store"):
        Store(f"sqlite:///{tmp_path / 'ledger.db'}").create()
    assert _schema(tmp_path / "ledger.db") == before
    for bad in ("service.db", "mysql://user@host/db", 3):
        with pytest.raises(InvalidParameterError):
            Store(bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------ concurrent processes

_WORKERS = 3


def _charge_until_refused(url: str, barrier: Any, results: Any) -> None:
    """One process: its own Store, charging 0.1 until the grant refuses."""
    charged, errors = 0, []
    try:
        store = Store(url)
        store.create()  # every process creates the schema at start-up, at once
        acct = Accountant(Budget(1.0), ledger=store.ledger("alice", "patients"))
        barrier.wait(timeout=60)
        for i in range(20):
            token = REQUEST_KEY.set(f"{multiprocessing.current_process().pid}-{i}")
            try:
                acct.charge(0.1, "mean")
                charged += 1
            except BudgetExceededError:
                break
            finally:
                REQUEST_KEY.reset(token)
        store.close()
    except Exception as err:  # reported to the parent, which fails the test
        errors.append(repr(err))
    results.put((charged, errors))


def _race(url: str) -> None:
    setup = Store(url)
    setup.create()
    _grant(setup)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(_WORKERS), ctx.Queue()
    procs = [
        ctx.Process(target=_charge_until_refused, args=(url, barrier, results))
        for _ in range(_WORKERS)
    ]
    for p in procs:
        p.start()
    try:
        outcomes = [results.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
    assert [e for _, errors in outcomes for e in errors] == []
    assert sum(charged for charged, _ in outcomes) == 10  # 10 x 0.1 is exactly 1.0
    assert len(_raw(url, "SELECT id FROM charges")) == 10
    final = Accountant(Budget(1.0), ledger=setup.ledger("alice", "patients"))
    assert final.spent == Budget(1.0)
    assert len({r.id for r in final.history}) == 10
    setup.close()


def test_processes_never_overspend_a_grant_on_sqlite(sqlite_url: str) -> None:
    started = time.monotonic()
    _race(sqlite_url)
    assert time.monotonic() - started < 60


def test_processes_never_overspend_a_grant_on_postgresql(fresh_postgres_url: str) -> None:
    _race(fresh_postgres_url)
