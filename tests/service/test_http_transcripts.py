"""Transcript tests of the query service: over HTTP, neighbours look alike but for the noise.

The session layer's transcript tests (``tests/tables/test_transcripts.py``)
repeated through the service. Hypothesis draws a table and the same table
with one hostile person added (``tests/tables/_neighbours.py``); each is
written as a CSV file and served by its own service whose configuration
differs from the other's only in the CSV path (same declared types, schema,
keys, grant and ``[service] seed``, so the noise is fixed; each has its own
SQLite store). The same requests go to both services, and what the hostile
analyst of ``docs/service-attack-model.md`` reads must be equal:

* the status code and every header but ``date`` and ``content-length`` (the
  length of a noisy number is noise);
* error bodies, exactly;
* in answers, every field but the noisy ones: ``value`` and the CI's
  position are replaced by their JSON shape, the CI half-width of additive
  mechanisms is kept, ``details`` go through :func:`public_details` (which
  says which entries are releases), ``keys`` of a private-key group-by are a
  release (what is public about each released key must not vary between
  keys); ε, δ, level, mechanism, type, group_by, ``remaining``, ``charged``,
  ``replayed``, ``twin`` and any field the service may add are compared as
  they are. Twin answers are compared whole (the twin holds no real data);
* dry runs, dataset descriptions, the budget, the history (each stored
  answer viewed like a live one) and the admin views, with timestamps
  ignored and ``query_id`` compared where the client chose it
  (``Idempotency-Key``).

:func:`differences` is the comparison; ``test_the_comparison_sees_*`` check
that it catches deliberately leaky services. The statistical audits at the
end check the one claim the transcripts cannot: that the answers an analyst
gets through HTTP are as noisy as the ε they asked for and were charged.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from tests.tables._neighbours import (
    CSV_TYPES,
    GROUPS,
    NEW_GROUP,
    SCHEMA,
    Options,
    Pair,
    additive_interval,
    neighbours,
    public_details,
    write_csv,
)

from dpkit.audit import AuditResult, audit_samples
from dpkit.errors import InvalidParameterError, PrivacyWarning
from dpkit.service.app import create_app
from dpkit.service.config import ServiceConfig, parse_config
from dpkit.service.runtime import Runtime
from dpkit.service.store import hash_key, make_key
from dpkit.tables.specs import QUERY_KINDS, QuerySpec
from dpkit.tables.validation import HISTOGRAM2D_METHODS, HISTOGRAM_METHODS

SEED = 20261124
ANALYST = "ana"
DATASET = "people"
GRANT = (1000.0, 0.01)
B = (0.0, 100.0)
KEYS = list(GROUPS)
D = 1e-6  # delta of private-key queries
GRID = 257
ADD = Options(additive=True)
PLAIN = Options()
#: Headers whose value follows the noise (the length of a noisy number) or the clock.
UNCOMPARED_HEADERS = frozenset({"date", "content-length"})
_SEED_WARNING = "the service runs with a fixed noise seed"
#: Where the services' files go: tmpfs when there is one (SQLite syncs every charge to disk).
_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _pk(opts: Options) -> Options:
    return Options(additive=opts.additive, private_keys=True)


def _pb(opts: Options) -> Options:
    return Options(additive=opts.additive, private_bounds=True)


def _spec(kind: str, column: str | None = None, **params: Any) -> dict[str, Any]:
    """A query spec as a client sends it (``QuerySpec.to_dict``)."""
    return QuerySpec(kind, column, **params).to_dict()


# ------------------------------------------------------------------------------ services


@dataclass(frozen=True)
class Keys:
    """The keys both services of a pair accept (only their hashes are in the configs)."""

    analyst: str = field(default_factory=make_key)
    admin: str = field(default_factory=make_key)


def _toml(value: Any) -> str:
    """A TOML value: JSON's strings, numbers, booleans and arrays are TOML too."""
    return json.dumps(value)


def service_config(
    source: Path,
    directory: Path,
    keys: Keys,
    *,
    types: Mapping[str, str],
    columns: Mapping[str, Mapping[str, Any]],
    seed: int | None = SEED,
    grant: tuple[float, float] = GRANT,
    service: Mapping[str, Any] | None = None,
    dataset: Mapping[str, Any] | None = None,
) -> ServiceConfig:
    """One dataset, one analyst with a grant, an admin key; the store in ``directory``."""
    lines = [
        "[service]",
        'store = "service.db"',
        f"admin_key_hash = {_toml(hash_key(keys.admin))}",
        "twin_rows = 10",
    ]
    if seed is not None:
        lines.append(f"seed = {seed}")
    lines += [f"{k} = {_toml(v)}" for k, v in (service or {}).items()]
    lines += [
        "",
        f"[datasets.{DATASET}]",
        f"source = {_toml(str(source))}",
        "types = { " + ", ".join(f"{c} = {_toml(t)}" for c, t in types.items()) + " }",
        *(f"{k} = {_toml(v)}" for k, v in (dataset or {}).items()),
    ]
    for column, declared in columns.items():
        lines.append(f"[datasets.{DATASET}.columns.{column}]")
        lines += [f"{k} = {_toml(v)}" for k, v in declared.items()]
    lines += [
        "",
        f"[analysts.{ANALYST}]",
        f"key_hash = {_toml(hash_key(keys.analyst))}",
        "",
        "[[grants]]",
        f"analyst = {_toml(ANALYST)}",
        f"dataset = {_toml(DATASET)}",
        f"epsilon = {grant[0]!r}",
        f"delta = {grant[1]!r}",
    ]
    return parse_config("\n".join(lines) + "\n", base=directory, name="test service")


@contextmanager
def serve(config: ServiceConfig) -> Iterator[TestClient]:
    """A TestClient on the service; its store is closed afterwards."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _SEED_WARNING, PrivacyWarning)
        app = create_app(config)
    try:
        with TestClient(app) as client:  # one event loop for all requests
            yield client
    finally:
        app.state.runtime.store.close()


@contextmanager
def serve_pair(
    smaller: list[dict[str, Any]], bigger: list[dict[str, Any]], keys: Keys, **options: Any
) -> Iterator[tuple[TestClient, TestClient]]:
    """Two services over the transcript tables ``smaller`` and ``bigger`` (``_neighbours`` rows)."""
    with ExitStack() as stack:
        clients = []
        for rows in (smaller, bigger):
            directory = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="dpkit-http-", dir=_TMP))
            )
            write_csv(rows, directory / "table.csv")
            config = service_config(
                directory / "table.csv",
                directory,
                keys,
                types=CSV_TYPES,
                columns=SCHEMA["columns"],
                **options,
            )
            clients.append(stack.enter_context(serve(config)))
        yield clients[0], clients[1]


# ------------------------------------------------------------------------------ requests


@dataclass(frozen=True)
class Step:
    """One request. ``body`` is sent as JSON text (NaN and Infinity allowed: hostile input)."""

    id: str
    method: str
    path: str
    body: Any = None
    raw: bytes | None = None
    auth: str = "analyst"  # analyst | admin | none | bad
    idempotency: str | None = None
    opts: Options = PLAIN  # what of a query's answer is noisy


def _query(
    id: str,
    spec: Mapping[str, Any],
    opts: Options = PLAIN,
    *,
    idempotency: str | None = None,
    keyless: bool = False,
    twin: bool = False,
) -> Step:
    """A query sent with ``Idempotency-Key: idempotency`` (default: its id; ``keyless``: none,
    the service then picks a random query id)."""
    body: dict[str, Any] = {"query": dict(spec)}
    if twin:
        body["twin"] = True
    key = None if keyless else idempotency or id
    return Step(id, "POST", f"/api/v1/datasets/{DATASET}/query", body, idempotency=key, opts=opts)


def _raw_query(id: str, text: str, opts: Options = PLAIN) -> Step:
    """A query body written by hand (JSON with NaN or Infinity, or not JSON at all)."""
    path = f"/api/v1/datasets/{DATASET}/query"
    return Step(id, "POST", path, raw=text.encode(), idempotency=id, opts=opts)


def _dry_run(id: str, spec: Mapping[str, Any]) -> Step:
    return Step(id, "POST", f"/api/v1/datasets/{DATASET}/dry-run", {"query": dict(spec)})


def _get(id: str, path: str, auth: str = "analyst") -> Step:
    return Step(id, "GET", path, auth=auth)


def _count_where(*conditions: list[Any]) -> dict[str, Any]:
    return {"kind": "count", "column": None, "epsilon": 1.0, "where": [list(c) for c in conditions]}


#: Every query kind and option the session supports, as the session transcripts run them.
QUERIES: list[Step] = [
    # -- no grouping
    _query("count", _spec("count", epsilon=1.0), ADD),
    _query("count-column", _spec("count", "x", epsilon=1.0), ADD),
    _query("sum-float", _spec("sum", "x", epsilon=1.0, bounds=B), ADD),
    _query("sum-int", _spec("sum", "cnt", epsilon=1.0, bounds=B), ADD),
    _query("sum-text-coerced", _spec("sum", "t", epsilon=1.0, bounds=B), ADD),
    _query("sum-bool", _spec("sum", "flag", epsilon=1.0, bounds=(0, 1)), ADD),
    _query("mean", _spec("mean", "x", epsilon=1.0, bounds=B)),
    _query("mean-text-coerced", _spec("mean", "t", epsilon=1.0, bounds=B)),
    _query("variance", _spec("variance", "x", epsilon=1.0, bounds=B)),
    _query("std-int", _spec("std", "cnt", epsilon=1.0, bounds=B)),
    _query("quantile", _spec("quantile", "x", q=0.3, epsilon=1.0, bounds=B, grid_size=GRID)),
    _query("median", _spec("median", "cnt", epsilon=1.0, bounds=B, grid_size=GRID)),
    _query("min", _spec("min", "x", epsilon=1.0, bounds=B, grid_size=GRID)),
    _query("max", _spec("max", "t", epsilon=1.0, bounds=B, grid_size=GRID)),
    _query("mode", _spec("mode", "g", epsilon=1.0, domain=KEYS)),
    _query("mode-bool", _spec("mode", "flag", epsilon=1.0, domain=[True, False])),
    _query("histogram-bins", _spec("histogram", "x", epsilon=1.0, bins=5, bounds=B), ADD),
    _query("histogram-edges", _spec("histogram", "cnt", epsilon=1.0, edges=[0, 1, 5, 100]), ADD),
    _query("histogram-domain", _spec("histogram", "g", epsilon=1.0, domain=KEYS), ADD),
    _query("histogram-schema-domain", _spec("histogram", "g", epsilon=1.0), ADD),
    *[
        _query(
            f"histogram-{m}",
            _spec("histogram", "x", epsilon=1.0, bins=8, bounds=B, method=m)
            | ({"max_count": 10_000} if m in ("structure_first", "auto") else {}),
        )
        for m in HISTOGRAM_METHODS
    ],
    *[
        _query(
            f"histogram2d-{m}",
            _spec(
                "histogram2d", "x", y_column="t", epsilon=1.0, bins=(6, 5), bounds=(B, B), method=m
            ),
        )
        for m in HISTOGRAM2D_METHODS
    ],
    _query(
        "histogram2d-edges-rows",
        _spec(
            "histogram2d",
            "cnt",
            y_column="x",
            epsilon=1.0,
            edges=([0, 1, 5, 100], [0, 50, 100]),
            n_records=50,
            where={"flag": True},
        ),
    ),
    # -- bounds="private"
    _query("sum-private-bounds", _spec("sum", "x", epsilon=1.0, bounds="private"), _pb(ADD)),
    _query("mean-private-bounds", _spec("mean", "x", epsilon=1.0, bounds="private"), _pb(PLAIN)),
    _query("std-private-bounds", _spec("std", "t", epsilon=1.0, bounds="private"), _pb(PLAIN)),
    # -- public keys
    _query("count-by-public", _spec("count", epsilon=1.0, group_by="g", keys=KEYS), ADD),
    _query("count-by-schema-domain", _spec("count", epsilon=1.0, group_by="g"), ADD),
    _query("sum-by-public", _spec("sum", "x", epsilon=1.0, bounds=B, group_by="g", keys=KEYS), ADD),
    _query("mean-by-public", _spec("mean", "x", epsilon=1.0, bounds=B, group_by="g", keys=KEYS)),
    _query(
        "median-by-public",
        _spec("median", "x", epsilon=1.0, bounds=B, grid_size=GRID, group_by="g", keys=KEYS),
    ),
    _query(
        "mode-by-public",
        _spec("mode", "flag", epsilon=1.0, domain=[True, False], group_by="g", keys=KEYS),
    ),
    _query(
        "histogram-by-public",
        _spec("histogram", "x", epsilon=1.0, bins=4, bounds=B, group_by="g", keys=KEYS),
        ADD,
    ),
    _query(
        "count-by-two-public",
        _spec("count", epsilon=1.0, group_by=["g", "flag"], keys=[("a", True), ("b", False)]),
        ADD,
    ),
    _query(
        "count-by-hostile-public-keys",
        _spec("count", epsilon=1.0, group_by="g", keys=["a", NEW_GROUP, "'; DROP TABLE x; --"]),
        ADD,
    ),
    # -- private keys
    _query(
        "count-by-private",
        _spec("count", epsilon=1.0, group_by="g", keys="private", delta=D),
        _pk(ADD),
    ),
    _query(
        "sum-by-private",
        _spec("sum", "x", epsilon=1.0, bounds=B, group_by="g", keys="private", delta=D),
        _pk(ADD),
    ),
    _query(
        "mean-by-private",
        _spec("mean", "x", epsilon=1.0, bounds=B, group_by="g", keys="private", delta=D),
        _pk(PLAIN),
    ),
    _query(
        "quantile-by-private",
        _spec(
            "quantile",
            "x",
            q=0.5,
            epsilon=1.0,
            bounds=B,
            grid_size=GRID,
            group_by="g",
            keys="private",
            delta=D,
        ),
        _pk(PLAIN),
    ),
    _query(
        "histogram-by-private",
        _spec(
            "histogram", "x", epsilon=1.0, bins=4, bounds=B, group_by="g", keys="private", delta=D
        ),
        _pk(ADD),
    ),
    _query(
        "count-by-private-day",
        _spec("count", epsilon=1.0, group_by="day", keys="private", delta=D),
        _pk(ADD),
    ),
    # -- filters on every column type
    _query("count-where-numeric", _spec("count", epsilon=1.0, where={"x": (">=", 50)}), ADD),
    _query("count-where-int-in", _spec("count", epsilon=1.0, where={"cnt": [1, 2, 3]}), ADD),
    _query("sum-where-text", _spec("sum", "x", epsilon=1.0, bounds=B, where={"g": "a"}), ADD),
    _query("count-where-text-null", _spec("count", epsilon=1.0, where={"t": None}), ADD),
    _query("mean-where-bool", _spec("mean", "x", epsilon=1.0, bounds=B, where={"flag": True})),
    _query(
        "count-where-date",
        _count_where(["day", ">=", {"$date": "2000-01-01"}]),
        ADD,
    ),
    _query(
        "count-where-date-text",
        _spec("count", epsilon=1.0, where={"day": ("between", "2000-01-01", "2020-12-31")}),
        ADD,
    ),
    _query(
        "count-where-timestamp",
        _count_where(["ts", "<", {"$datetime": "2010-06-01T12:00:00"}]),
        ADD,
    ),
    _query(
        "median-where-timestamp-not-null",
        _spec("median", "x", epsilon=1.0, bounds=B, grid_size=GRID, where={"ts": ("not null",)}),
    ),
]

#: Filters with hostile literals: valid ones are answered, the others refused; alike either way.
HOSTILE_FILTERS: list[Step] = [
    _query("where-new-group", _count_where(["g", "==", NEW_GROUP]), ADD),
    _query("where-injection", _count_where(["g", "==", "a'; DROP TABLE people; --"]), ADD),
    _query(
        "where-odd-text-in", _count_where(["g", "in", ["a", "A", "a ", "", "ü", "\u202e"]]), ADD
    ),
    _query("where-nul", _count_where(["g", "==", "a\x00"]), ADD),
    _query("where-long-text", _count_where(["g", "==", "a" * 5000]), ADD),
    _query("where-huge-double", _count_where(["x", ">=", 1e308]), ADD),
    _query("where-negative-zero", _count_where(["x", "==", -0.0]), ADD),
    _raw_query(
        "where-nan",
        '{"query": {"kind": "count", "epsilon": 1.0, "where": [["x", "==", NaN]]}}',
        ADD,
    ),
    _raw_query(
        "where-infinity",
        '{"query": {"kind": "count", "epsilon": 1.0, "where": [["x", "<", -Infinity]]}}',
        ADD,
    ),
    _query("where-int-max", _count_where(["cnt", "==", 2**63 - 1]), ADD),
    _query("where-int-min", _count_where(["cnt", ">=", -(2**63)]), ADD),
    _query("where-int-overflow", _count_where(["cnt", "==", 2**80]), ADD),
    _query("where-coerced-text", _count_where(["t", "==", "abc"]), ADD),
    _query("where-coerced-huge", _count_where(["t", ">=", 1e308]), ADD),
    _query("where-year-9999", _count_where(["day", "==", {"$date": "9999-12-31"}]), ADD),
    _query("where-year-1", _count_where(["day", ">=", {"$date": "0001-01-01"}]), ADD),
    _query("where-ts-9999", _count_where(["ts", "==", {"$datetime": "9999-12-31T23:59:59"}]), ADD),
    _query("where-date-text-bad", _count_where(["day", "==", "not-a-date"]), ADD),
    _query("where-date-tag-bad", _count_where(["day", "==", {"$date": "31/12/2020"}]), ADD),
    _query("where-bool-null", _count_where(["flag", "==", None]), ADD),
    _query("where-bool-text", _count_where(["flag", "==", "maybe"]), ADD),
    _query("where-text-number", _count_where(["g", "==", 5]), ADD),
    _query("where-tagged-nan", _count_where(["g", "==", {"$float": "nan"}]), ADD),
    _query("where-unknown-op", _count_where(["g", "LIKE", "%"]), ADD),
    _query("where-injection-column", _count_where(['x" OR 1=1 --', "==", 1]), ADD),
]

#: Queries that do not fit the schema, the API or the budget.
INVALID: list[Step] = [
    _query("unknown-column", {"kind": "sum", "column": "nope", "epsilon": 1.0, "bounds": [0, 1]}),
    _query("unknown-kind", {"kind": "drop table", "epsilon": 1.0}),
    _query("no-kind", {"epsilon": 1.0}),
    _query("no-epsilon", {"kind": "count"}),
    _query("negative-epsilon", {"kind": "count", "epsilon": -1.0}),
    _query("text-epsilon", {"kind": "count", "epsilon": "1"}),
    _query("bounds-reversed", {"kind": "sum", "column": "x", "epsilon": 1.0, "bounds": [100, 0]}),
    _raw_query(
        "bounds-infinite",
        '{"query": {"kind": "sum", "column": "x", "epsilon": 1.0, "bounds": [0, Infinity]}}',
    ),
    _query(
        "histogram-bad-method",
        _spec("histogram", "x", epsilon=1.0, bins=4, bounds=B) | {"method": "bogus"},
    ),
    _query(
        "histogram-no-bins",
        {"kind": "histogram", "column": "x", "epsilon": 1.0, "bins": 0, "bounds": [0, 1]},
    ),
    _query(
        "quantile-q-out",
        {"kind": "quantile", "column": "x", "epsilon": 1.0, "q": 1.5, "bounds": [0, 1]},
    ),
    _query(
        "private-keys-no-delta",
        {"kind": "count", "epsilon": 1.0, "group_by": "g", "keys": "private"},
    ),
    _query("keys-odd-word", {"kind": "count", "epsilon": 1.0, "group_by": "g", "keys": "secret"}),
    _query("level-out", {"kind": "count", "epsilon": 1.0, "level": 1.5}),
    _query("group-by-unknown", {"kind": "count", "epsilon": 1.0, "group_by": "nope", "keys": [1]}),
    _query("mode-no-domain", {"kind": "mode", "column": "x", "epsilon": 1.0}),
    _query("over-budget", _spec("count", epsilon=1e6)),
    _dry_run("dry-run-over-budget", _spec("count", epsilon=1e6)),
    _dry_run("dry-run-invalid", {"kind": "sum", "column": "nope", "epsilon": 1.0}),
    _raw_query("not-json", "{not json"),
    _raw_query("query-not-object", '{"query": 5}'),
    _raw_query("no-query", '{"qry": {}}'),
    _raw_query(
        "too-large", '{"query": {"kind": "count", "epsilon": 1.0, "pad": "' + "x" * 70_000 + '"}}'
    ),
]

#: The other endpoints, replays, keys and authentication.
OTHERS: list[Step] = [
    _get("health", "/api/v1/health", auth="none"),
    _get("datasets", "/api/v1/datasets"),
    _get("dataset", f"/api/v1/datasets/{DATASET}"),
    _get("dataset-unknown", "/api/v1/datasets/other"),
    _get("twin-rows", f"/api/v1/datasets/{DATASET}/twin?rows=5"),
    _query("twin-answer", _spec("mean", "x", epsilon=1.0, bounds=B), twin=True),
    _query(
        "twin-private-keys",
        _spec("count", epsilon=1.0, group_by="g", keys="private", delta=D),
        twin=True,
    ),
    _dry_run("dry-run", _spec("mean", "x", epsilon=0.5, bounds=B, where={"g": "a"})),
    _query("count-replayed", _spec("count", epsilon=1.0), ADD, idempotency="count"),
    _query("key-reused", _spec("sum", "x", epsilon=1.0, bounds=B), idempotency="count"),
    _query("no-key-1", _spec("sum", "x", epsilon=1.0, bounds=B), ADD, keyless=True),
    _query("no-key-2", _spec("median", "x", epsilon=1.0, bounds=B, grid_size=GRID), keyless=True),
    _query("bad-key", _spec("count", epsilon=1.0), idempotency="not a key!"),
    Step(
        "no-auth",
        "POST",
        f"/api/v1/datasets/{DATASET}/query",
        {"query": _spec("count", epsilon=1.0)},
        auth="none",
    ),
    Step(
        "bad-auth",
        "POST",
        f"/api/v1/datasets/{DATASET}/query",
        {"query": _spec("count", epsilon=1.0)},
        auth="bad",
    ),
    _get("wrong-method", f"/api/v1/datasets/{DATASET}/query"),
    _get("no-endpoint", "/api/v1/nope"),
    _get("admin-as-analyst", "/api/v1/admin/analysts"),
    _get("budget", "/api/v1/budget"),
    _get("history-some", f"/api/v1/history?dataset={DATASET}&limit=7"),
    _get("history-other", "/api/v1/history?dataset=other"),
]

#: After everything: what the analyst and the admin can read about the sequence.
AFTERWARDS: list[Step] = [
    _get("budget-after", "/api/v1/budget"),
    _get("dataset-after", f"/api/v1/datasets/{DATASET}"),
    _get("history-after", "/api/v1/history?limit=1000"),
    _get("admin-analysts", "/api/v1/admin/analysts", auth="admin"),
    _get("admin-audit", "/api/v1/admin/audit?limit=1000", auth="admin"),
]

STEPS = [*QUERIES, *HOSTILE_FILTERS, *INVALID, *OTHERS, *AFTERWARDS]


def send(client: TestClient, step: Step, keys: Keys) -> Any:
    headers: dict[str, str] = {}
    key = {"analyst": keys.analyst, "admin": keys.admin, "bad": "dpk_AAAAAAAA_" + "x" * 43}
    if step.auth in key:
        headers["Authorization"] = f"Bearer {key[step.auth]}"
    if step.idempotency is not None:
        headers["Idempotency-Key"] = step.idempotency
    content = step.raw
    if step.body is not None:
        content = json.dumps(step.body).encode()  # allow_nan: hostile literals go through
    if content is not None:
        headers["Content-Type"] = "application/json"
    return client.request(step.method, step.path, content=content, headers=headers)


# ------------------------------------------------------------------------------ views


def _shape(v: Any) -> Any:
    """A JSON value with its numbers and strings replaced by their types (tags kept)."""
    if isinstance(v, list):
        return [_shape(x) for x in v]
    if isinstance(v, dict):
        if set(v) == {"$float"}:
            return f"$float:{v['$float']}"  # nan or ±inf on one side only would be a leak
        if len(v) == 1 and next(iter(v)) in ("$date", "$datetime"):
            return next(iter(v))
        return {k: _shape(x) for k, x in v.items()}
    return None if v is None else type(v).__name__


def _numbers(v: Any) -> np.ndarray:
    def number(x: Any) -> float:
        if isinstance(x, dict) and set(x) == {"$float"}:
            return float(x["$float"])
        return math.nan if x is None else float(x)

    if isinstance(v, list):
        return np.array([number(x) for x in np.ravel(np.array(v, dtype=object))])
    return np.array([number(v)])


def _half_width(value: Any, ci: Any, half_width: Any) -> Any:
    """An additive interval's public part: it follows from the value and ``h`` (counts: at 0)."""
    if not isinstance(ci, list) or len(ci) != 2:
        return None
    try:
        value_n, lo, hi = _numbers(value), _numbers(ci[0]), _numbers(ci[1])
    except (TypeError, ValueError):
        return "not numbers"
    view = additive_interval(value_n, (lo, hi), half_width)
    if isinstance(view, tuple):
        return view
    return ["nan" if math.isnan(w) else w for w in view]


def release_view(release: Mapping[str, Any], opts: Options) -> dict[str, Any]:
    """A release without its noise: every field as it is but value, CI and noisy details."""
    out: dict[str, Any] = {}
    for k, v in release.items():
        if k in ("value", "ci"):
            continue
        if k == "details" and isinstance(v, dict):
            out[k] = public_details(v, opts)
        elif k == "keys" and opts.private_keys:
            out[k] = "<noisy>"
        else:
            out[k] = v
    additive = opts.additive and not opts.private_bounds
    value, ci = release.get("value"), release.get("ci")
    details = release.get("details")
    h = details.get("half_width") if isinstance(details, dict) else None
    if release.get("type") == "grouped" and isinstance(value, list) and isinstance(ci, list):
        per_key = [
            repr((_shape(v), c is None, _half_width(v, c, h) if additive else None))
            for v, c in zip(value, ci, strict=False)
        ]
        if opts.private_keys:
            # How many keys were released is noise; what is public about each must not vary.
            out["per_key_public"] = sorted(set(per_key))
        else:
            out["per_key"] = per_key
            out["lengths"] = (len(value), len(ci))
    else:
        out["value"] = _shape(value)
        out["ci"] = _shape(ci)
        if additive:
            out["ci_half_width"] = _half_width(value, ci, h)
    return out


def body_view(value: Any, opts: Callable[[str | None], Options], chosen: set[str]) -> Any:
    """A response body without noise, timestamps or random ids (see the module docstring).

    ``opts(query_id)`` says what of an answer is noisy; ``chosen`` holds the query ids
    the client chose (Idempotency-Key), the others are random.
    """
    if isinstance(value, list):
        return [body_view(v, opts, chosen) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k == "created_at":
            out[k] = "<time>" if isinstance(v, int | float) else v
        elif k == "query_id":
            out[k] = v if v is None or v in chosen else ("<random>", type(v).__name__)
        elif k == "release" and isinstance(v, dict) and "remaining" in value:
            twin = value.get("twin") is True
            out[k] = v if twin else release_view(v, opts(value.get("query_id")))
        else:
            out[k] = body_view(v, opts, chosen)
    return out


def response_view(
    response: Any, opts: Callable[[str | None], Options], chosen: set[str]
) -> dict[str, Any]:
    """What an analyst reads in one response, without noise."""
    try:
        body: Any = response.json()
    except ValueError:
        body = ("text", response.text)
    return {
        "status": response.status_code,
        "headers": {
            # Retry-After counts seconds of wall clock from each service's own request: its
            # presence is compared, its value (a rounding of two different instants) is not.
            k: ("present" if k == "retry-after" else v)
            for k, v in sorted(response.headers.items())
            if k not in UNCOMPARED_HEADERS
        },
        "body": body_view(body, opts, chosen),
    }


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two views differ, field by field (empty when they are alike)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            where = f"{path}.{k}"
            if k not in a or k not in b:
                out.append(f"{where}: present on one side only")
            elif k == "per_key_public":
                if len(a[k]) > 1 or len(b[k]) > 1:
                    out.append(f"{where}: released keys differ in their public fields")
                elif a[k] and b[k] and a[k] != b[k]:
                    out.append(f"{where}: {a[k]!r:.200} != {b[k]!r:.200}")
            else:
                out += differences(a[k], b[k], where)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r:.200} != {b!r:.200}"]


def transcript_differences(
    a: TestClient, b: TestClient, steps: list[Step], keys: Keys
) -> list[str]:
    """Send ``steps`` to both services in turn; every difference of what the analyst reads."""
    chosen = {s.idempotency for s in steps if s.idempotency is not None}
    by_id = {
        s.idempotency: s.opts for s in steps if s.idempotency is not None and s.id == s.idempotency
    }
    found = []
    for step in steps:

        def opts(query_id: str | None, step: Step = step) -> Options:
            if step.path.endswith("/query"):
                return step.opts
            return by_id.get(query_id, PLAIN) if query_id is not None else PLAIN

        va = response_view(send(a, step, keys), opts, chosen)
        vb = response_view(send(b, step, keys), opts, chosen)
        found += [f"{step.id}: {d}" for d in differences(va, vb)]
    return found


# ------------------------------------------------------------------------------ transcripts

_SETTINGS = settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _check(pair: Pair, steps: list[Step], **options: Any) -> None:
    keys = Keys()
    with serve_pair(pair.smaller, pair.bigger, keys, **options) as (a, b):
        found = transcript_differences(a, b, steps, keys)
    assert not found, "the service's answers differ between neighbours:\n" + "\n".join(found)


@_SETTINGS
@given(pair=neighbours())
def test_neighbours_look_alike_over_http(pair: Pair) -> None:
    _check(pair, STEPS)


#: Person-level datasets: ``privacy_unit = "pid"``, people with several rows.
UNIT_STEPS: list[Step] = [
    s
    for s in QUERIES
    if s.id
    in {
        "count",
        "sum-float",
        "mean",
        "quantile",
        "mode",
        "histogram-bins",
        "histogram-hierarchical",
        "histogram2d-auto2d",
        "count-by-public",
        "count-by-private",
        "sum-by-private",
        "mean-private-bounds",
        "count-where-date",
    }
] + AFTERWARDS


@pytest.mark.slow
@settings(_SETTINGS, max_examples=5)
@given(pair=neighbours(max_rows_per_person=4))
def test_people_look_alike_over_http(pair: Pair) -> None:
    _check(
        pair,
        UNIT_STEPS,
        dataset={"privacy_unit": "pid", "max_contributions": 2},
    )


# ------------------------------------------------------------------------------ power


def _fixed_pair() -> Pair:
    """Five ordinary people, and the same with a sixth."""

    def row(pid: int, x: float, g: str) -> dict[str, Any]:
        return {
            "pid": pid,
            "x": x,
            "cnt": pid,
            "t": f"{x:.1f}",
            "flag": pid % 2 == 0,
            "day": dt.date(2000 + pid, 1, 1),
            "ts": dt.datetime(2000 + pid, 1, 1, 12),
            "g": g,
        }

    smaller = [row(i, 10.0 * i, GROUPS[i % 3]) for i in range(5)]
    return Pair(smaller=smaller, bigger=[*smaller, row(5, 99.0, "a")], person_rows=1)


#: A few steps that show each kind of field: an additive answer, a description, an error.
SMALL = [
    s for s in STEPS if s.id in {"count", "sum-float", "dataset", "unknown-column", "history-after"}
]


def _rows_in(rt: Runtime, dataset: str) -> int:
    """The exact number of rows: what no response may depend on."""
    with open(rt.config.datasets[dataset].source, encoding="utf-8") as f:
        return sum(1 for _ in f) - 1


def _leak_details(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Runtime._body

    def body(self: Runtime, dataset: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        out = real(self, dataset, *args, **kwargs)
        out["release"]["details"]["rows"] = _rows_in(self, dataset)
        return out

    monkeypatch.setattr(Runtime, "_body", body)


def _leak_field(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Runtime._body

    def body(self: Runtime, dataset: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {**real(self, dataset, *args, **kwargs), "rows_scanned": _rows_in(self, dataset)}

    monkeypatch.setattr(Runtime, "_body", body)


def _leak_ci_width(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Runtime._body

    def body(self: Runtime, dataset: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        out = real(self, dataset, *args, **kwargs)
        ci = out["release"]["ci"]
        if isinstance(ci, list) and isinstance(ci[1], int | float):
            ci[1] += 0.01 * _rows_in(self, dataset)  # a CI that widens with the table
        return out

    monkeypatch.setattr(Runtime, "_body", body)


def _leak_description(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Runtime.describe

    def describe(self: Runtime, analyst: str, dataset: str) -> dict[str, Any]:
        return {**real(self, analyst, dataset), "rows": _rows_in(self, dataset)}

    monkeypatch.setattr(Runtime, "describe", describe)


def _leak_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Runtime.query

    def query(self: Runtime, analyst: str, dataset: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return real(self, analyst, dataset, *args, **kwargs)
        except InvalidParameterError as err:
            raise InvalidParameterError(f"{err} ({_rows_in(self, dataset)} rows)") from None

    monkeypatch.setattr(Runtime, "query", query)


LEAKS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], str]] = {
    "details": (_leak_details, "count: .body.release.details.rows"),
    "field": (_leak_field, "count: .body.rows_scanned"),
    "ci-width": (_leak_ci_width, "count: .body.release.ci_half_width"),
    "description": (_leak_description, "dataset: .body.rows"),
    "error": (_leak_error, "unknown-column: .body.error.message"),
}


def test_the_comparison_passes_an_honest_service() -> None:
    pair = _fixed_pair()
    keys = Keys()
    with serve_pair(pair.smaller, pair.bigger, keys) as (a, b):
        assert transcript_differences(a, b, SMALL, keys) == []


@pytest.mark.parametrize("leak", sorted(LEAKS))
def test_the_comparison_sees_a_leaky_service(leak: str, monkeypatch: pytest.MonkeyPatch) -> None:
    patch, expected = LEAKS[leak]
    patch(monkeypatch)
    pair = _fixed_pair()
    keys = Keys()
    with serve_pair(pair.smaller, pair.bigger, keys) as (a, b):
        found = transcript_differences(a, b, SMALL, keys)
    assert any(d.startswith(expected) for d in found), found


def test_every_query_kind_is_answered() -> None:
    """The transcripts compare answers, not the same refusal twice: every kind gets a 200."""
    pair = _fixed_pair()
    keys = Keys()
    with serve_pair(pair.smaller, pair.bigger, keys) as (a, _):
        statuses = {s.id: send(a, s, keys).status_code for s in QUERIES}
    assert {s.body["query"]["kind"] for s in QUERIES} == set(QUERY_KINDS)
    assert {k: v for k, v in statuses.items() if v != 200} == {}


def test_refusals_before_the_data_look_alike() -> None:
    """The rate limit's 429 and its Retry-After are the same on both services."""
    pair = _fixed_pair()
    keys = Keys()
    count = _spec("count", epsilon=1.0)
    steps = [
        _query("first", count, ADD),
        _query("second", count, ADD),
        _query("limited", count, ADD),
        _query("limited-again", count, ADD),
    ]
    with serve_pair(pair.smaller, pair.bigger, keys, service={"requests_per_minute": 2}) as (a, b):
        assert transcript_differences(a, b, steps, keys) == []
        limited = send(a, _query("third", count), keys)
    assert limited.status_code == 429 and "retry-after" in limited.headers


# ------------------------------------------------------------------------------ audits

AUDIT_EPS = 0.5
AUDIT_COUNT = {"kind": "count", "epsilon": AUDIT_EPS, "where": [["g", "==", "a"]]}
AUDIT_TYPES = {"key": "VARCHAR", "g": "VARCHAR", "x": "DOUBLE"}
#: The table: two rows pass the filter; the neighbour adds a third that does.
AUDIT_ROWS = [("a", 1.0), ("a", 2.0), ("b", 3.0)]
AUDIT_EXTRA = ("a", 100.0)


def _audit_table(path: Path, *, neighbour: bool, copies: int) -> None:
    """``copies`` copies of the table (or its neighbour), copy ``i`` under key ``k{i}``."""
    rows = AUDIT_ROWS + ([AUDIT_EXTRA] if neighbour else [])
    frame = pd.DataFrame(
        [(f"k{i:05d}", g, x) for i in range(copies) for g, x in rows], columns=["key", "g", "x"]
    )
    frame.to_csv(path, index=False)


@contextmanager
def _audit_services(
    copies: int, seeds: tuple[int | None, int | None]
) -> Iterator[tuple[TestClient, TestClient, Keys]]:
    keys = Keys()
    with ExitStack() as stack:
        clients = []
        for neighbour, seed in zip((False, True), seeds, strict=True):
            directory = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="dpkit-audit-", dir=_TMP))
            )
            _audit_table(directory / "table.csv", neighbour=neighbour, copies=copies)
            config = service_config(
                directory / "table.csv",
                directory,
                keys,
                types=AUDIT_TYPES,
                columns={},
                seed=seed,
                grant=(1e6, 0.0),
                service={"requests_per_minute": 1_000_000},  # thousands of requests in a row
            )
            clients.append(stack.enter_context(serve(config)))
        yield clients[0], clients[1], keys


def _thirty_times_epsilon(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken service: the runtime hands the session 30 × the ε the analyst asked for."""
    real = Runtime.query

    def query(self: Runtime, analyst: str, dataset: str, spec: Any, **kwargs: Any) -> Any:
        return real(self, analyst, dataset, {**spec, "epsilon": 30 * spec["epsilon"]}, **kwargs)

    monkeypatch.setattr(Runtime, "query", query)


def _values(client: TestClient, keys: Keys, query: Mapping[str, Any], requests: int) -> np.ndarray:
    step = _query("audit", query, keyless=True)
    out: list[float] = []
    for _ in range(requests):
        response = send(client, step, keys)
        assert response.status_code == 200, response.text
        value = response.json()["release"]["value"]
        out += value if isinstance(value, list) else [value]
    return np.asarray(out, dtype=np.float64)


def _audit_http(requests: int, copies: int, seeds: tuple[int | None, int | None]) -> AuditResult:
    """Empirical ε of the filtered count between the table and its neighbour, over HTTP."""
    query: dict[str, Any] = dict(AUDIT_COUNT)
    if copies > 1:  # one sample per copy: parallel composition over disjoint groups
        query.update(group_by="key", keys=[f"k{i:05d}" for i in range(copies)])
    with _audit_services(copies, seeds) as (a, b, keys):
        samples_a = _values(a, keys, query, requests)
        samples_b = _values(b, keys, query, requests)
    return audit_samples(samples_a, samples_b, epsilon=AUDIT_EPS, confidence=0.99)


def test_fast_audit_over_http(monkeypatch: pytest.MonkeyPatch) -> None:
    """Geometric noise of a filtered count through HTTP: empirical ε ≤ 0.5 (99% confidence).

    Three requests of a count grouped by 1,000 public keys, each key a copy of the
    table (or of its neighbour), give 3,000 independent draws per side; the services
    are seeded (11 and 12) so the test is reproducible. The broken service must fail.
    """
    honest = _audit_http(3, 1000, (11, 12))
    assert honest.passed, f"empirical ε ≥ {honest.epsilon_lower_bound:.3f} > {AUDIT_EPS}"
    _thirty_times_epsilon(monkeypatch)
    broken = _audit_http(3, 1000, (11, 12))
    assert not broken.passed, f"the audit missed a 30 × ε service: {broken.epsilon_lower_bound}"


AUDIT_REQUESTS = 3000


@pytest.mark.audit
def test_audit_over_http(monkeypatch: pytest.MonkeyPatch) -> None:
    """One filtered count per request, fresh noise (no seed), 3,000 requests per neighbour.

    Claim: the answers are (0.5, 0)-DP for adding one row that passes the filter;
    the 99%-confidence lower bound on the empirical ε must not exceed 0.5. The same
    audit must refute a service whose runtime multiplies ε by 30.
    """
    honest = _audit_http(AUDIT_REQUESTS, 1, (None, None))
    print(
        f"HTTP count with a filter: ε lower bound {honest.epsilon_lower_bound:.3f}, "
        f"estimate {honest.epsilon_estimate:.3f} (claimed {AUDIT_EPS})"
    )
    assert honest.passed, f"empirical ε ≥ {honest.epsilon_lower_bound:.3f} > {AUDIT_EPS}"
    _thirty_times_epsilon(monkeypatch)
    broken = _audit_http(AUDIT_REQUESTS, 1, (None, None))
    print(f"HTTP count, service with 30 × ε: ε lower bound {broken.epsilon_lower_bound:.3f}")
    assert not broken.passed, f"the audit missed a 30 × ε service: {broken.epsilon_lower_bound}"
