"""Latency of the query service (docs/service.md) against the same queries run in-process.

    .venv/bin/python benchmarks/service_latency.py                    # 1 M rows, 300 requests
    .venv/bin/python benchmarks/service_latency.py --rows 100000 --requests 50   # smoke run

1. Data: the generated patients table (``dpkit.demo.patients``) written as Parquet to a
   temporary directory, its public schema (age in [0, 120], weight in [30, 200], the
   districts as a domain) and service configurations for it (``min_response_seconds =
   0``, one analyst with a grant of ε = 10; every query costs ε = 1e-3).
2. Four ways to answer a count, a mean and a group-by mean (district, keys from the
   schema's domain), ``--requests`` times each:

   * in-process: a :class:`dpkit.Session` over the same file (the baseline);
   * ``Runtime.query`` in this process: the service's query path without HTTP (store
     on disk);
   * the service over HTTP (httpx on loopback to Uvicorn in a subprocess, started as
     ``dpkit serve --config`` does; a fresh ``Idempotency-Key`` per query, as
     :mod:`dpkit.client` sends), once with the SQLite store in memory
     (``/dev/shm``: no fsync) and once on disk, where ``dpkit serve`` puts it by default
     (``service.db`` next to the configuration). Both servers run at once.

   Sequential requests are interleaved in blocks of 25 across the four, so that a
   machine shared with other work slows them alike; then each runs ``--requests``
   requests from ``--threads`` threads. ``/health`` (no key, no work) and a ``dry-run``
   (key, validation, a budget read; no data, no charge) give the HTTP floor.
3. Where the time goes: the service in-process (FastAPI's TestClient, store on disk)
   with a timer around each step of a query; the times are exclusive (a step's nested
   steps are subtracted) and sum to the request's time.

Writes ``--out`` (JSON) and the same tables as Markdown next to it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import dpkit
from dpkit.demo import DISTRICTS, PATIENT_TYPES, patients
from dpkit.service.demo import SCHEMA
from dpkit.service.store import hash_key, make_key
from dpkit.tables import Session

ROOT = Path(__file__).resolve().parent.parent
EPSILON = 1e-3
GRANT = 10.0  # or more, if --requests asks for more queries than it pays for
TARGET_MS = 5.0
BLOCK = 25  # sequential requests in a row before the next contender's turn
# The query kinds measured: (name, the HTTP spec, the same call on an in-process Session).
KINDS: list[tuple[str, dict[str, Any], Callable[[Session], Any]]] = [
    ("count", {"kind": "count", "epsilon": EPSILON}, lambda s: s.count(epsilon=EPSILON)),
    (
        "mean",
        {"kind": "mean", "column": "age", "bounds": [0, 120], "epsilon": EPSILON},
        lambda s: s.mean("age", bounds=(0, 120), epsilon=EPSILON),
    ),
    (
        "group-by mean",
        {
            "kind": "mean",
            "column": "weight",
            "bounds": [30, 200],
            "group_by": ["district"],
            "epsilon": EPSILON,
        },
        lambda s: s.mean("weight", bounds=(30, 200), group_by="district", epsilon=EPSILON),
    ),
]
IN_PROCESS = "in-process Session"
RUNTIME = "Runtime.query, no HTTP (disk)"
MEMORY = "service, store in memory"
DISK = "service, store on disk"
SERVE = (
    "import sys, uvicorn\n"
    "from dpkit.service.app import create_app\n"
    "from dpkit.service.config import load_config\n"
    "uvicorn.run(create_app(load_config(sys.argv[1])), host='127.0.0.1', "
    "port=int(sys.argv[2]), log_level='warning', access_log=False)\n"
)
CONFIG = """\
[service]
store = "{store}"
min_response_seconds = 0
requests_per_minute = 100000000

[datasets.patients]
description = "dpkit.demo.patients, {rows} rows"
source = "patients.parquet"
types = {{ age = "DOUBLE", weight = "DOUBLE", condition = "BOOLEAN", district = "VARCHAR" }}
schema = "patients.schema.toml"

[analysts.bench]
key_hash = "{key_hash}"

[[grants]]
analyst = "bench"
dataset = "patients"
epsilon = {grant}
"""
Call = Callable[[], Any]


# ------------------------------------------------------------------------------- timing


def stats(latencies: list[float], busy: float) -> dict[str, float]:
    """Percentiles in milliseconds, and requests per second of busy time."""
    ms = np.asarray(latencies) * 1e3
    return {
        "n": len(ms),
        "p50_ms": float(np.percentile(ms, 50)),
        "p95_ms": float(np.percentile(ms, 95)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
        "qps": len(ms) / busy,
    }


def interleaved(calls: dict[str, Call], n: int) -> dict[str, dict[str, float]]:
    """``n`` sequential calls of each, taking turns in blocks of BLOCK (after a warm-up)."""
    for call in calls.values():
        for _ in range(10):
            call()  # connections, caches, DuckDB's first plans
    latencies: dict[str, list[float]] = {name: [] for name in calls}
    busy = dict.fromkeys(calls, 0.0)
    for start in range(0, n, BLOCK):
        for name, call in calls.items():
            began = time.perf_counter()
            for _ in range(min(BLOCK, n - start)):
                t = time.perf_counter()
                call()
                latencies[name].append(time.perf_counter() - t)
            busy[name] += time.perf_counter() - began
    return {name: stats(latencies[name], busy[name]) for name in calls}


def concurrent(make_call: Callable[[], Call], n: int, threads: int) -> dict[str, float]:
    """``n`` calls shared by ``threads`` threads, each with its own ``make_call()``."""
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)

    def worker(count: int) -> None:
        try:
            call = make_call()
            call()  # warm-up (its own connection)
            start.wait()
            mine = []
            for _ in range(count):
                t = time.perf_counter()
                call()
                mine.append(time.perf_counter() - t)
            with lock:
                latencies.extend(mine)
        except BaseException as err:
            errors.append(err)
            start.abort()

    shares = [n // threads + (i < n % threads) for i in range(threads)]
    workers = [threading.Thread(target=worker, args=(k,)) for k in shares]
    for w in workers:
        w.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        start.wait()
    started = time.perf_counter()
    for w in workers:
        w.join()
    wall = time.perf_counter() - started
    if errors:
        raise errors[0]
    return stats(latencies, wall)


def fsync_ms(directory: Path, reps: int = 50) -> float:
    """Median time of one fsync of a small write in ``directory`` (what a commit waits for)."""
    path = directory / ".fsync-probe"
    times = []
    with open(path, "wb") as f:
        for _ in range(reps):
            f.write(b"x" * 4096)
            f.flush()
            t = time.perf_counter()
            os.fsync(f.fileno())
            times.append(time.perf_counter() - t)
    path.unlink()
    return float(np.median(times) * 1e3)


# ------------------------------------------------------------------------------- set-up


def build(directory: Path, rows: int) -> tuple[Path, Path, str]:
    """The table, its schema, and the analyst's key."""
    table = directory / "patients.parquet"
    patients(n=rows, seed=11).to_parquet(table, index=False)
    districts = ", ".join(json.dumps(d) for d in DISTRICTS)
    schema = directory / "patients.schema.toml"
    schema.write_text(SCHEMA.format(districts=districts))
    return table, schema, make_key()


def grant_for(n: int, threads: int) -> float:
    """GRANT, or twice what the queries on one store cost if that is more."""
    kinds = len(KINDS)
    queries = kinds * (2 * n + 20 + threads) + kinds * (min(n, 200) + 10)  # + phases
    return max(GRANT, 2 * queries * EPSILON)


def write_config(path: Path, store: str, key: str, rows: int, grant: float) -> Path:
    path.write_text(CONFIG.format(store=store, key_hash=hash_key(key), grant=grant, rows=rows))
    return path


@contextlib.contextmanager
def servers(configs: list[Path]) -> Iterator[list[str]]:
    """Uvicorn in one subprocess per configuration, all started at once; their URLs."""
    started = []
    try:
        for config in configs:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            process = subprocess.Popen([sys.executable, "-c", SERVE, str(config), str(port)])
            started.append((process, f"http://127.0.0.1:{port}"))
        for process, url in started:
            deadline = time.monotonic() + 120
            while True:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the service did not start")
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{url}/api/v1/health").status_code == 200:
                        break
                time.sleep(0.1)
        yield [url for _, url in started]
    finally:
        for process, _ in started:
            process.terminate()
        for process, _ in started:
            process.wait(30)


def asker(url: str, key: str, spec: dict[str, Any], path: str = "query") -> Call:
    """A call that sends one query (its own connection) and checks the answer is a 200."""
    client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120)

    def ask() -> Any:
        # a fresh Idempotency-Key per query, as dpkit.client sends
        headers = {"Idempotency-Key": uuid.uuid4().hex} if path == "query" else {}
        response = client.post(
            f"/api/v1/datasets/patients/{path}", json={"query": spec}, headers=headers
        )
        if response.status_code != 200:
            raise RuntimeError(f"the service answered {response.status_code}: {response.text}")
        return response

    return ask


def session_query(session: Session, call: Callable[[Session], Any]) -> Call:
    """A call of the same query on an in-process Session (the baseline)."""
    return lambda: call(session)


def runtime_query(runtime: Any, spec: dict[str, Any]) -> Call:
    """A call of the service's query path in this process, with a fresh request key."""
    return lambda: runtime.query("bench", "patients", spec, request_key=uuid.uuid4().hex)


# ------------------------------------------------------------------------------- phases


class Phases:
    """Exclusive time per step of a request: each timer subtracts the timers nested in it."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.requests: list[dict[str, float]] = []
        self.missing: list[str] = []
        self._stack = threading.local()
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, name: str, phase: str) -> None:
        """Time ``owner.name`` (a function or property of a class, or a module's global)."""
        original = vars(owner).get(name)
        if original is None:  # the code moved on: say so rather than fail
            self.missing.append(f"{getattr(owner, '__name__', owner)}.{name}")
            return
        getter = original.fget if isinstance(original, property) else original
        assert getter is not None

        def timed(*args: Any, **kwargs: Any) -> Any:
            stack = self._stack.__dict__.setdefault("frames", [])
            stack.append(0.0)
            started = time.perf_counter()
            try:
                return getter(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - started
                nested = stack.pop()
                self.current[phase] = self.current.get(phase, 0.0) + elapsed - nested
                if stack:
                    stack[-1] += elapsed

        setattr(owner, name, property(timed) if isinstance(original, property) else timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def undo(self) -> None:
        for undo in reversed(self._undo):
            undo()

    def request(self, call: Call) -> None:
        self.current = {}
        started = time.perf_counter()
        call()
        total = time.perf_counter() - started
        self.current[HTTP_STEP] = total - sum(self.current.values())
        self.current["total"] = total
        self.requests.append(self.current)


HTTP_STEP = "HTTP: FastAPI, Starlette, TestClient (in-process)"


def phases(config_path: Path, key: str, n: int) -> dict[str, Any]:
    """The service in-process (TestClient) with a timer around each step of a query."""
    from fastapi.testclient import TestClient

    import dpkit.tables.session as session_module
    from dpkit.accounting import Accountant
    from dpkit.service import runtime as runtime_module
    from dpkit.service.app import create_app
    from dpkit.service.config import load_config
    from dpkit.service.store import Store

    glue = "runtime glue (Runtime.query, Session.answer, locks)"
    steps = [
        (Store, "authenticate", "authenticate (Store.authenticate: 1 read)"),
        (runtime_module.Runtime, "accountant", "grant lookup (Runtime.accountant)"),
        (Store, "find_answer", "stored-answer lookup (Store.find_answer: 1 read)"),
        (Store, "charge_label", "charge lookup (Store.charge_label: 1 read)"),
        (Session, "prepare", "validate and cost (Session.prepare)"),
        (Accountant, "_charge_rows", "charge transaction (BEGIN IMMEDIATE … COMMIT)"),
        (session_module, "execute", "execution (DuckDB scan + noise)"),
        (Accountant, "remaining", "remaining budget (Accountant.remaining: ledger read)"),
        (runtime_module.Runtime, "_body", "response body (release_json)"),
        (Store, "save_answer", "store the answer (1 write transaction)"),
        (runtime_module.Runtime, "query", glue),
        (Session, "answer", glue),
    ]
    timers = Phases()
    for owner, name, phase in steps:
        timers.wrap(owner, name, phase)
    try:
        http = TestClient(create_app(load_config(config_path)))
        out: dict[str, Any] = {}
        for kind, spec, _ in KINDS:
            headers = {"Authorization": f"Bearer {key}"}

            def ask(s: dict[str, Any] = spec, h: dict[str, str] = headers) -> None:
                response = http.post(
                    "/api/v1/datasets/patients/query",
                    json={"query": s},
                    headers={**h, "Idempotency-Key": uuid.uuid4().hex},
                )
                assert response.status_code == 200, response.text

            for _ in range(10):
                ask()  # warm-up
            timers.requests = []
            for _ in range(n):
                timers.request(ask)
            names = list(dict.fromkeys(p for r in timers.requests for p in r))
            out[kind] = {
                p: {
                    "median_ms": float(np.median([r.get(p, 0.0) for r in timers.requests]) * 1e3),
                    "mean_ms": float(np.mean([r.get(p, 0.0) for r in timers.requests]) * 1e3),
                }
                for p in names
            }
            print(f"phases, {kind}: {out[kind]['total']['median_ms']:.2f} ms", flush=True)
        if timers.missing:
            out["not timed (renamed?)"] = timers.missing
        return out
    finally:
        timers.undo()


# ------------------------------------------------------------------------------- report


def _cell(s: dict[str, float]) -> str:
    return f"{s['p50_ms']:.2f} / {s['p95_ms']:.2f} / {s['p99_ms']:.2f} ({s['qps']:.0f}/s)"


def markdown(result: dict[str, Any]) -> str:
    n, threads = result["requests"], result["threads"]
    machine = result["machine"]
    fsync = ", ".join(f"{k} {v:.2f} ms" for k, v in result["fsync_ms"].items())
    lines = [
        "# Query service latency",
        "",
        f"`benchmarks/service_latency.py --rows {result['rows']} --requests {n}` (dpkit "
        f"{result['dpkit']}, {machine['cpus']} CPUs shared with other work, Python "
        f"{machine['python']}, Uvicorn on {machine['http']}, httpx client on loopback). "
        f"min_response_seconds = 0; ε = {EPSILON:g} per query. Each cell: p50 / p95 / p99 "
        "latency in ms (requests per second). Overhead = service p50 − in-process p50 "
        f"(target ≤ {TARGET_MS:g} ms). Median fsync of a small write: {fsync}.",
        "",
    ]
    modes = [
        ("sequential", f"{n} requests each, one at a time (interleaved in blocks of {BLOCK})"),
        ("concurrent", f"{n} requests each from {threads} threads"),
    ]
    for mode, title in modes:
        contenders = list(next(iter(result[mode].values())))
        lines += [
            f"## {title[0].upper()}{title[1:]}",
            "",
            "| query | " + " | ".join(contenders) + " | overhead p50, memory / disk |",
            "|---|" + "---:|" * (len(contenders) + 1),
        ]
        for kind, _, _ in KINDS:
            row = result[mode][kind]
            base = row[IN_PROCESS]["p50_ms"]
            over = f"{row[MEMORY]['p50_ms'] - base:+.2f} / {row[DISK]['p50_ms'] - base:+.2f}"
            lines.append(
                f"| {kind} | " + " | ".join(_cell(row[c]) for c in contenders) + f" | {over} |"
            )
        lines.append("")
    seq = result["sequential"]
    lines += [
        "Overhead of the service over the in-process Session, p50 ms (sequential): the store's "
        "bookkeeping = Runtime.query − Session; HTTP = service (disk) − Runtime.query; of which "
        "the disk = service with its store on disk − in memory (the commits' fsync).",
        "",
        "| query | in-process | store bookkeeping | HTTP | total, disk | of which the disk |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind, _, _ in KINDS:
        p50 = {name: s["p50_ms"] for name, s in seq[kind].items()}
        lines.append(
            f"| {kind} | {p50[IN_PROCESS]:.2f} | {p50[RUNTIME] - p50[IN_PROCESS]:+.2f} | "
            f"{p50[DISK] - p50[RUNTIME]:+.2f} | {p50[DISK] - p50[IN_PROCESS]:+.2f} | "
            f"{p50[DISK] - p50[MEMORY]:+.2f} |"
        )
    lines.append("")
    servers_measured = list(next(iter(result["reference"].values())))
    lines += [
        "HTTP floor (sequential, interleaved):",
        "",
        "| request | " + " | ".join(servers_measured) + " |",
        "|---|" + "---:|" * len(servers_measured),
    ]
    for what, by in result["reference"].items():
        lines.append(f"| {what} | " + " | ".join(_cell(s) for s in by.values()) + " |")
    lines += [
        "",
        "## Where the time goes",
        "",
        "The service in-process (FastAPI's TestClient, store on disk), "
        f"{result['phases_requests']} requests per query; median ms of each step's exclusive "
        "time (nested steps subtracted), so the medians add up to about the total. The "
        "TestClient's HTTP row is larger than Uvicorn's: over real HTTP, compare the "
        f"`{RUNTIME}` and `{DISK}` columns above.",
        "",
        "| step | " + " | ".join(k for k, _, _ in KINDS) + " |",
        "|---|" + "---:|" * len(KINDS),
    ]
    phase_rows = {k: v for k, v in result["phases"].items() if isinstance(v, dict)}
    steps = list(dict.fromkeys(p for kind in phase_rows.values() for p in kind))
    for step in steps:
        cells = [phase_rows[k].get(step, {"median_ms": 0.0})["median_ms"] for k, _, _ in KINDS]
        lines.append(f"| {step} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    if result["phases"].get("not timed (renamed?)"):
        lines += ["", f"Not timed (renamed?): {result['phases']['not timed (renamed?)']}"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=300, help="per query kind and mode")
    parser.add_argument("--threads", type=int, default=8, help="client threads, concurrent run")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "service_latency.json"
    )
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the Markdown from --out's JSON"
    )
    args = parser.parse_args(argv)
    if args.report_only:
        return report(args.out)
    n, threads = args.requests, args.threads
    grant = grant_for(n, threads)
    fast = importlib.util.find_spec("httptools") and importlib.util.find_spec("uvloop")
    result: dict[str, Any] = {
        "rows": args.rows,
        "requests": n,
        "threads": threads,
        "epsilon_per_query": EPSILON,
        "grant": grant,
        "dpkit": dpkit.__version__,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "http": "httptools + uvloop" if fast else "h11 + asyncio",
        },
    }
    from dpkit.service.config import load_config
    from dpkit.service.runtime import Runtime

    with contextlib.ExitStack() as cleanup:
        directory = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="dpkit-")))
        shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else directory
        memory = Path(cleanup.enter_context(tempfile.TemporaryDirectory(dir=shm)))
        result["fsync_ms"] = {
            f"{shm} (memory)": fsync_ms(memory),
            f"{tempfile.gettempdir()} (disk)": fsync_ms(directory),
        }
        table, schema, key = build(directory, args.rows)
        configs = {
            MEMORY: f"sqlite:///{memory / 'service.db'}",
            DISK: "service.db",  # dpkit serve's default: next to the configuration
            RUNTIME: "runtime.db",
        }
        paths = {
            name: write_config(directory / f"{i}.toml", store, key, args.rows, grant)
            for i, (name, store) in enumerate(configs.items())
        }
        session = Session.from_parquet(table, types=PATIENT_TYPES, epsilon=grant, schema=schema)
        runtime = Runtime(load_config(paths[RUNTIME]))
        result["sequential"], result["concurrent"] = {}, {}
        with servers([paths[MEMORY], paths[DISK]]) as (memory_url, disk_url):
            urls = {MEMORY: memory_url, DISK: disk_url}
            health = {name: httpx.Client(base_url=url) for name, url in urls.items()}
            result["reference"] = {
                "health (no key, no work)": interleaved(
                    {
                        name: functools.partial(c.get, "/api/v1/health")
                        for name, c in health.items()
                    },
                    n,
                ),
                "dry-run of the mean (key, validation, budget read)": interleaved(
                    {name: asker(url, key, KINDS[1][1], "dry-run") for name, url in urls.items()},
                    n,
                ),
            }
            for kind, spec, call in KINDS:
                contenders: dict[str, Callable[[], Call]] = {
                    IN_PROCESS: functools.partial(session_query, session, call),
                    RUNTIME: functools.partial(runtime_query, runtime, spec),
                    MEMORY: functools.partial(asker, memory_url, key, spec),
                    DISK: functools.partial(asker, disk_url, key, spec),
                }
                result["sequential"][kind] = interleaved(
                    {name: make() for name, make in contenders.items()}, n
                )
                result["concurrent"][kind] = {
                    name: concurrent(make, n, threads) for name, make in contenders.items()
                }
                p50 = {k: round(v["p50_ms"], 2) for k, v in result["sequential"][kind].items()}
                print(f"{kind}: p50 ms {p50}", flush=True)
        runtime.store.close()
        result["phases_requests"] = min(n, 200)
        result["phases"] = phases(paths[DISK], key, result["phases_requests"])
    result["overhead_p50_ms"] = {
        kind: {
            name: result["sequential"][kind][name]["p50_ms"]
            - result["sequential"][kind][IN_PROCESS]["p50_ms"]
            for name in (RUNTIME, MEMORY, DISK)
        }
        for kind, _, _ in KINDS
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return report(args.out)


def report(out: Path) -> int:
    """Write the Markdown next to the JSON ``out`` (``--report-only`` redoes just this)."""
    text = markdown(json.loads(out.read_text()))
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
