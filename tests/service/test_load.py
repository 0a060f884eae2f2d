"""The service under load, across processes and through a crash: no overspend, no lost charge.

Each test runs the real server as a separate OS process (``_serve.py``, Uvicorn on
loopback), makes 50 analysts with the admin API, each with a grant of ε = 1 on the
demo patients table, and sends 50 × 20 queries of ε = 0.07 from 100 client threads
(two per analyst, so that one grant is charged by concurrent requests): 14 of
each analyst's 20 fit the grant (14 × 0.07 = 0.98), the other 6 must be refused.
The ledger is then read straight from the store's tables, not through the
service, and checked by :func:`_audit_ledger`:

* **no overspend**: each grant's charges sum (exactly, as fractions) to at most
  the grant. Without the lock that serialises the check and the insert of a
  charge, two requests of one analyst that both see 0.98 spent both pass the
  check and the grant ends at 1.05 — ``test_the_audit_catches_*`` shows it;
* **no lost charge**: every answer a client received (a 200 with its
  ``query_id``) has exactly one charge row with that request key, and every
  stored answer has one. Were the charge written after the answer, a refused
  query would leave a stored (replayable) answer with no charge, and a crash
  between sending and charging would leave a received answer with none: both
  are caught here (see ``test_the_audit_catches_an_answer_stored_before_its_charge``);
* **no double charge**: no request key is charged twice, also after retries
  with the same ``Idempotency-Key`` across a restart;
* a charge without a stored answer exists only for a request that was in flight
  when the server was killed (``test_kill_9_mid_load``), and is reported.

Then ``GET /api/v1/budget`` must say what the ledger says: remaining = grant −
the sum of the charges.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from dpkit.accounting import Accountant, Budget
from dpkit.errors import BudgetExceededError
from dpkit.service import runtime as runtime_module
from dpkit.service.demo import build_demo
from dpkit.service.encoding import budget_json, release_json
from dpkit.service.store import REQUEST_KEY, GrantLedger, Store
from dpkit.tables.specs import QuerySpec

pytestmark = pytest.mark.slow

SERVE = Path(__file__).with_name("_serve.py")
ANALYSTS = 50
QUERIES = 20  # per analyst
THREADS_PER_ANALYST = 2  # so that one grant is charged by concurrent requests
GRANT = Fraction(1)
EPSILON = 0.07
AFFORDABLE = 14  # 14 × 0.07 = 0.98 <= 1 < 15 × 0.07
QUERY_MIX = (
    {"kind": "count", "epsilon": EPSILON},
    {"kind": "mean", "column": "age", "bounds": [0, 120], "epsilon": EPSILON},
    {
        "kind": "mean",
        "column": "weight",
        "bounds": [30, 200],
        "group_by": ["district"],
        "epsilon": EPSILON,
    },
)


# ------------------------------------------------------------------------------- servers


class _Server:
    """One service process on a free loopback port, its stderr kept in a file."""

    def __init__(self, config: Path, log: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        with open(log, "ab") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(SERVE), str(config), str(self.port)],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the service exited at start-up:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/api/v1/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.05)
        pytest.fail(f"the service did not come up in {timeout} s:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def servers() -> Iterator[list[_Server]]:
    """Every server a test starts is stopped at its end, whatever happened."""
    started: list[_Server] = []
    yield started
    for server in started:
        server.stop()


def _start(servers: list[_Server], config: Path, count: int = 1) -> list[_Server]:
    new = [_Server(config, config.with_name(f"server{len(servers) + i}.log")) for i in range(count)]
    servers.extend(new)
    for server in new:
        server.wait_ready()
    return new


def _demo(directory: Path, store: str | None = None) -> tuple[Path, str, str]:
    """The demo service's config (on another store if given), its store URL and admin key."""
    config, keys = build_demo(directory, rows=2000)
    path = directory / "service.toml"
    if store is not None:
        text = path.read_text()
        assert 'store = "service.db"' in text
        path.write_text(text.replace('store = "service.db"', f'store = "{store}"'))
    return path, store or config.store, keys["admin"]


def _analysts(url: str, admin_key: str) -> dict[str, str]:
    """ANALYSTS new analysts, each with a grant of GRANT on patients: name -> key."""
    keys = {}
    headers = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as admin:
        for i in range(ANALYSTS):
            name = f"load{i:02d}"
            made = admin.post("/api/v1/admin/analysts", json={"name": name})
            assert made.status_code == 201, made.text
            keys[name] = made.json()["key"]
            body = {"analyst": name, "dataset": "patients", "epsilon": float(GRANT)}
            granted = admin.post("/api/v1/admin/grants", json=body)
            assert granted.status_code == 200, granted.text
    return keys


# ------------------------------------------------------------------------------- load


@dataclass
class _Request:
    analyst: str
    key: str  # the Idempotency-Key, fixed by the client before the first attempt
    query: dict[str, Any]
    status: int | None = None  # None: not sent yet, or its outcome is unknown
    code: str | None = None
    query_id: str | None = None
    replayed: bool = False
    unknown: bool = False  # a connection error hid its outcome once


@dataclass
class _Load:
    requests: list[_Request] = field(default_factory=list)

    @classmethod
    def plan(cls, keys: dict[str, str]) -> _Load:
        load = cls()
        for name in keys:
            for j in range(QUERIES):
                key = f"{name}-{j}-{uuid.uuid4().hex[:8]}"
                load.requests.append(_Request(name, key, QUERY_MIX[j % len(QUERY_MIX)]))
        return load

    def lanes(self) -> list[list[_Request]]:
        """THREADS_PER_ANALYST interleaved lanes of each analyst's requests."""
        by: dict[tuple[str, int], list[_Request]] = {}
        seen: Counter[str] = Counter()
        for r in self.requests:
            by.setdefault((r.analyst, seen[r.analyst] % THREADS_PER_ANALYST), []).append(r)
            seen[r.analyst] += 1
        return list(by.values())

    def answered(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for r in self.requests:
            if r.status == 200:
                assert r.query_id is not None
                out.setdefault(r.analyst, set()).add(r.query_id)
        return out

    def counts(self) -> Counter[tuple[int | None, str | None]]:
        return Counter((r.status, r.code) for r in self.requests)


def _send(client: httpx.Client, key: str, r: _Request) -> None:
    """One request with the documented retry: 503 and 429 again with the same key.

    A transport error propagates (the caller decides what an unknown outcome means).
    """
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": r.key}
    for attempt in range(20):
        response = client.post(
            "/api/v1/datasets/patients/query", json={"query": r.query}, headers=headers
        )
        code = response.json().get("error", {}).get("code") if response.status_code >= 400 else None
        if response.status_code in (429, 503) and attempt < 19:
            time.sleep(0.1 * (attempt + 1))
            continue
        r.status, r.code = response.status_code, code
        if response.status_code == 200:
            body = response.json()
            r.query_id, r.replayed = body["query_id"], body["replayed"]
            assert body["query_id"] == r.key
            assert body["release"]["epsilon"] == pytest.approx(EPSILON)
        return


def _run(
    load: _Load,
    keys: dict[str, str],
    urls: list[str],
    *,
    seed: int = 0,
    stop_on_transport_error: bool = False,
    after_start: Any = None,
) -> float:
    """Send every request not answered yet, lane by lane in threads; the seconds it took.

    With several ``urls`` each request goes to one of them at random. With
    ``stop_on_transport_error`` a lane stops at its first connection error and
    marks that request ``unknown`` (its outcome is for the retry to find out).
    """
    errors: list[BaseException] = []

    def lane(requests: list[_Request], index: int) -> None:
        pick = random.Random(seed * 1_000_003 + index)
        clients = [httpx.Client(base_url=u, timeout=120) for u in urls]
        try:
            for r in requests:
                if r.status is not None:
                    continue  # settled before a crash
                try:
                    _send(pick.choice(clients), keys[r.analyst], r)
                except httpx.TransportError:
                    if not stop_on_transport_error:
                        raise
                    r.unknown, r.status = True, None
                    return
        except BaseException as err:  # reported by the main thread
            errors.append(err)
        finally:
            for c in clients:
                c.close()

    started = time.perf_counter()
    threads = [
        threading.Thread(target=lane, args=(requests, i), daemon=True)
        for i, requests in enumerate(load.lanes())
    ]
    for t in threads:
        t.start()
    if after_start is not None:
        after_start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a client thread hung"
    if errors:
        raise errors[0]
    return time.perf_counter() - started


# ------------------------------------------------------------------------------- the audit


@dataclass
class _Audit:
    spent: dict[str, Fraction]
    charges: Counter[str]  # per analyst
    overspent: dict[str, Fraction]
    received_without_charge: list[str]
    charged_twice: list[str]
    charges_without_request_key: int
    charged_without_answer: set[str]
    answer_without_charge: set[str]

    def assert_consistent(self, *, may_lack_answer: frozenset[str] = frozenset()) -> None:
        assert not self.overspent, f"grants overspent: {self.overspent}"
        assert not self.received_without_charge, (
            f"answers sent with no charge: {self.received_without_charge[:5]}"
        )
        assert not self.charged_twice, f"request keys charged twice: {self.charged_twice[:5]}"
        assert self.charges_without_request_key == 0
        assert not self.answer_without_charge, (
            f"stored answers with no charge: {sorted(self.answer_without_charge)[:5]}"
        )
        unexplained = self.charged_without_answer - may_lack_answer
        assert not unexplained, f"charges with no stored answer: {sorted(unexplained)[:5]}"


def _audit_ledger(store_url: str, received: dict[str, set[str]], analysts: list[str]) -> _Audit:
    """Read the store's tables directly and cross-check them with what clients received."""
    engine = sa.create_engine(store_url)
    try:
        with engine.connect() as conn:
            grants = {
                a: Fraction(e)
                for a, e in conn.execute(
                    sa.text("SELECT analyst, epsilon FROM grants WHERE dataset = 'patients'")
                )
            }
            charges = conn.execute(
                sa.text("SELECT analyst, epsilon, request_key FROM charges")
            ).all()
            answers = conn.execute(
                sa.text("SELECT analyst, request_key, status FROM answers")
            ).all()
    finally:
        engine.dispose()
    mine = set(analysts)
    spent = {a: Fraction(0) for a in analysts}
    per_key: Counter[tuple[str, str]] = Counter()
    count: Counter[str] = Counter()
    no_key = 0
    for analyst, epsilon, request_key in charges:
        if analyst not in mine:
            continue
        spent[analyst] += Fraction(epsilon)
        count[analyst] += 1
        if request_key is None:
            no_key += 1
        else:
            per_key[(analyst, request_key)] += 1
    stored = {(a, k) for a, k, status in answers if a in mine and status == "answered"}
    return _Audit(
        spent=spent,
        charges=count,
        overspent={a: s for a, s in spent.items() if s > grants[a]},
        received_without_charge=[
            k for a, ks in received.items() for k in ks if per_key[(a, k)] != 1
        ],
        charged_twice=[k for (_, k), n in per_key.items() if n > 1],
        charges_without_request_key=no_key,
        charged_without_answer={k for (a, k) in per_key if (a, k) not in stored},
        answer_without_charge={k for (a, k) in stored if per_key[(a, k)] == 0},
    )


def _check_budgets(url: str, keys: dict[str, str], audit: _Audit) -> None:
    """What the service reports is what the ledger holds: remaining = grant − Σ charges."""
    with httpx.Client(base_url=url, timeout=30) as client:
        for name, key in keys.items():
            body = client.get("/api/v1/budget", headers={"Authorization": f"Bearer {key}"})
            (grant,) = [g for g in body.json()["grants"] if g["dataset"] == "patients"]
            assert grant["spent"]["epsilon"] == float(audit.spent[name])
            assert grant["remaining"]["epsilon"] == float(GRANT - audit.spent[name])


def _check_full_load(load: _Load, audit: _Audit) -> None:
    """Every analyst got exactly AFFORDABLE answers and budget_exceeded for the rest."""
    assert load.counts() == {
        (200, None): ANALYSTS * AFFORDABLE,
        (403, "budget_exceeded"): ANALYSTS * (QUERIES - AFFORDABLE),
    }
    per_analyst = Counter(r.analyst for r in load.requests if r.status == 200)
    assert set(per_analyst.values()) == {AFFORDABLE}
    assert set(audit.charges.values()) == {AFFORDABLE}
    assert set(audit.spent.values()) == {AFFORDABLE * Fraction(7, 100)}


def _report(what: str, load: _Load, audit: _Audit, seconds: float) -> None:
    counts = ", ".join(f"{s} {c}: {n}" if c else f"{s}: {n}" for (s, c), n in load.counts().items())
    print(
        f"\n{what}: {len(load.requests)} requests in {seconds:.1f} s ({counts}); "
        f"{sum(audit.charges.values())} charges, max spent per grant "
        f"{float(max(audit.spent.values())):.2f}; charged without a stored answer: "
        f"{len(audit.charged_without_answer)}"
    )


# ------------------------------------------------------------------------------- the tests


def test_50_concurrent_analysts_on_one_process(tmp_path: Path, servers: list[_Server]) -> None:
    config, store_url, admin = _demo(tmp_path)
    (server,) = _start(servers, config)
    keys = _analysts(server.url, admin)
    load = _Load.plan(keys)
    seconds = _run(load, keys, [server.url])
    audit = _audit_ledger(store_url, load.answered(), list(keys))
    _report("one process, SQLite", load, audit, seconds)
    audit.assert_consistent()
    _check_full_load(load, audit)
    _check_budgets(server.url, keys, audit)


def test_two_processes_share_one_postgresql_store(
    tmp_path: Path, servers: list[_Server], fresh_postgres_url: str
) -> None:
    config, store_url, admin = _demo(tmp_path, store=fresh_postgres_url)
    # Started together on a fresh store: both write the config's analysts and grants at
    # start-up (serialised by the store; a grant is raised to the config's value once).
    first, second = _start(servers, config, count=2)
    keys = _analysts(first.url, admin)
    load = _Load.plan(keys)
    seconds = _run(load, keys, [first.url, second.url], seed=1)
    audit = _audit_ledger(store_url, load.answered(), list(keys))
    _report("two processes, PostgreSQL", load, audit, seconds)
    audit.assert_consistent()
    _check_full_load(load, audit)
    _check_budgets(second.url, keys, audit)


def test_kill_9_mid_load(tmp_path: Path, servers: list[_Server]) -> None:
    config, store_url, admin = _demo(tmp_path)
    (server,) = _start(servers, config)
    keys = _analysts(server.url, admin)
    load = _Load.plan(keys)

    def kill_soon() -> None:
        # ~1 s into the load, and not before some answers are out (a slow, shared machine)
        time.sleep(1.0)
        deadline = time.monotonic() + 30
        while sum(r.status is not None for r in load.requests) < 10:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        server.kill()

    first = _run(load, keys, [server.url], stop_on_transport_error=True, after_start=kill_soon)
    unknown = {r.key for r in load.requests if r.unknown}
    settled = sum(r.status is not None for r in load.requests)
    assert unknown, "the kill came after the load"
    assert settled, "the kill came before any answer"
    assert len(unknown) <= ANALYSTS * THREADS_PER_ANALYST  # one in flight per client thread

    (restarted,) = _start(servers, config)
    # The same requests again, same Idempotency-Keys: the unknown ones first in each lane.
    second = _run(load, keys, [restarted.url])
    audit = _audit_ledger(store_url, load.answered(), list(keys))
    _report("kill -9 mid-load, SQLite", load, audit, first + second)

    # Charged before the kill, never answered: the retry gets 409 pending for good (the
    # answer cannot appear, its process died), and the charge stands.
    pending = {r.key for r in load.requests if r.status == 409}
    assert {r.code for r in load.requests if r.status == 409} <= {"pending"}
    assert pending <= unknown
    assert audit.charged_without_answer == pending
    print(
        f"in flight at the kill: {len(unknown)} requests; charged but never answered: "
        f"{len(pending)}; answered before the kill and replayed: "
        f"{sum(r.replayed for r in load.requests)}; settled before the kill: {settled}"
    )
    audit.assert_consistent(may_lack_answer=frozenset(pending))
    # A replay is only ever the answer of a request whose first response was lost.
    assert {r.key for r in load.requests if r.replayed} <= unknown
    statuses = Counter((r.status, r.code) for r in load.requests)
    assert set(statuses) <= {(200, None), (403, "budget_exceeded"), (409, "pending")}
    # Every request was tried, so each grant holds exactly the charges that fit it.
    assert set(audit.charges.values()) == {AFFORDABLE}
    for name in keys:
        mine = [r for r in load.requests if r.analyst == name]
        answered = sum(r.status == 200 for r in mine)
        assert answered + sum(r.status == 409 for r in mine) == AFFORDABLE
        assert sum(r.status == 403 for r in mine) == QUERIES - AFFORDABLE
    _check_budgets(restarted.url, keys, audit)


# ------------------------------------------------------------------------------- the audit's teeth


def _store_with_grant(tmp_path: Path, epsilon: float) -> tuple[Store, str]:
    tmp_path.mkdir(exist_ok=True)
    url = f"sqlite:///{tmp_path / 'teeth.db'}"
    store = Store(url)
    store.create()
    store.ensure_analyst("eve")
    store.add_grant("eve", "patients", epsilon, 0.0, actor="test")
    return store, url


def _charge_in_two_threads(store: Store, *, epsilon: float, rounds: int) -> None:
    """Two accountants on one grant (two processes' worth), each charging ``rounds`` times."""
    start = threading.Barrier(2)

    def spend(who: str) -> None:
        acct = Accountant(Budget(1.0), ledger=store.ledger("eve", "patients"))
        start.wait()
        for i in range(rounds):
            token = REQUEST_KEY.set(f"{who}-{i}")
            try:
                acct.charge(Budget(epsilon), "q")
            except BudgetExceededError:
                pass
            finally:
                REQUEST_KEY.reset(token)

    threads = [threading.Thread(target=spend, args=(w,)) for w in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


def test_the_audit_catches_a_ledger_without_its_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Check and insert in two transactions: both writers see the same spent total."""
    store, url = _store_with_grant(tmp_path, 1.0)
    _charge_in_two_threads(store, epsilon=0.3, rounds=4)
    audit = _audit_ledger(url, {}, ["eve"])
    assert audit.spent["eve"] == Fraction(9, 10)  # the real ledger: 3 charges fit, no more
    audit.assert_consistent(may_lack_answer=frozenset(audit.charged_without_answer))

    both_read = threading.Barrier(2, timeout=10)
    locked_write = GrantLedger.write

    @contextlib.contextmanager
    def unlocked_write(self: GrantLedger, after: int) -> Iterator[Any]:
        rows = self.read(after)  # the spent total, read outside the grant's lock
        both_read.wait()

        class Later:
            new_rows = rows  # what the accountant checks the new charge against

            def append(self_, new: Any) -> Any:
                with locked_write(self, after) as txn:  # the insert alone, checked against nothing
                    return txn.append(new)

        yield Later()

    monkeypatch.setattr(GrantLedger, "write", unlocked_write)
    store, url = _store_with_grant(tmp_path / "broken", 1.0)
    _charge_in_two_threads(store, epsilon=0.3, rounds=4)
    audit = _audit_ledger(url, {}, ["eve"])
    assert audit.spent["eve"] >= Fraction(12, 10)  # two rounds of two fit any view: 1.2
    with pytest.raises(AssertionError, match="overspent"):
        audit.assert_consistent(may_lack_answer=frozenset(audit.charged_without_answer))


def test_the_audit_catches_an_answer_stored_before_its_charge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answer, store, then charge: a refused query leaves a stored answer nobody paid for."""
    from fastapi.testclient import TestClient

    from dpkit.service.app import create_app

    def answer_then_charge(
        self: Any, analyst: str, dataset: str, query: Any, **kw: Any
    ) -> runtime_module.Answer:
        acct = self.accountant(analyst, dataset)
        spec = QuerySpec.from_dict(query)
        key = kw.get("request_key") or uuid.uuid4().hex
        free = Accountant(runtime_module._UNMETERED)
        result = self.sessions[dataset].answer(spec, accountant=free)
        body = {
            "query_id": key,
            "dataset": dataset,
            "twin": False,
            "charged": True,
            "replayed": False,
            "release": release_json(result),
            "remaining": budget_json(acct.remaining),
        }
        self.store.save_answer(
            analyst,
            key,
            dataset=dataset,
            query=spec.to_dict(),
            status="answered",
            response=body,
            epsilon=spec.epsilon,
            delta=0.0,
        )
        token = REQUEST_KEY.set(key)
        try:
            acct.charge(Budget(spec.epsilon), str(spec))
        finally:
            REQUEST_KEY.reset(token)
        return runtime_module.Answer(body, charged=True)

    config, keys = build_demo(tmp_path, rows=300)
    monkeypatch.setattr(runtime_module.Runtime, "query", answer_then_charge)
    http = TestClient(create_app(config))
    headers = {"Authorization": f"Bearer {keys['alice']}"}
    load = _Load([_Request("alice", f"k{j}", QUERY_MIX[0]) for j in range(QUERIES)])
    for r in load.requests:
        response = http.post(
            "/api/v1/datasets/patients/query",
            json={"query": r.query},
            headers={**headers, "Idempotency-Key": r.key},
        )
        r.status = response.status_code
        r.query_id = response.json().get("query_id")
    assert Counter(r.status for r in load.requests) == {200: AFFORDABLE, 403: QUERIES - AFFORDABLE}
    audit = _audit_ledger(config.store, load.answered(), ["alice"])
    assert len(audit.answer_without_charge) == QUERIES - AFFORDABLE
    with pytest.raises(AssertionError, match="stored answers with no charge"):
        audit.assert_consistent()
