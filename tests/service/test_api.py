"""The HTTP API end to end (FastAPI's TestClient, the real runtime and a SQLite store)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from fastapi.testclient import TestClient

import dpkit
from dpkit.accounting import Budget
from dpkit.client import AdminClient, Client, ServiceError
from dpkit.errors import BudgetExceededError, InvalidParameterError
from dpkit.service.app import create_app
from dpkit.service.demo import build_demo
from dpkit.service.store import REQUEST_KEY
from dpkit.tables import GroupedRelease

MEAN = {"kind": "mean", "column": "age", "epsilon": 0.1, "bounds": [0, 120]}


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Any, dict[str, str]]:
    return build_demo(tmp_path, rows=600)


@pytest.fixture
def http(demo: tuple[Any, dict[str, str]]) -> TestClient:
    config, _ = demo
    return TestClient(create_app(config))


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _ask(http: TestClient, key: str, query: dict[str, Any], **extra: Any) -> Any:
    return http.post(
        "/api/v1/datasets/patients/query", json={"query": query, **extra}, headers=_auth(key)
    )


def test_health_needs_no_key_and_data_endpoints_do(http: TestClient) -> None:
    assert http.get("/api/v1/health").json()["status"] == "ok"
    for method, path in [
        ("GET", "/api/v1/datasets"),
        ("GET", "/api/v1/datasets/patients"),
        ("POST", "/api/v1/datasets/patients/query"),
        ("POST", "/api/v1/datasets/patients/dry-run"),
        ("GET", "/api/v1/datasets/patients/twin"),
        ("GET", "/api/v1/budget"),
        ("GET", "/api/v1/history"),
        ("GET", "/api/v1/admin/audit"),
    ]:
        response = http.request(method, path, json={"query": MEAN})
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
        bad = http.request(method, path, json={"query": MEAN}, headers=_auth("dpk_nope_nope"))
        assert bad.status_code == 401


def test_datasets_show_public_schema_and_budget(http: TestClient, demo: Any) -> None:
    _, keys = demo
    body = http.get("/api/v1/datasets", headers=_auth(keys["alice"])).json()
    (patients,) = body["datasets"]
    assert patients["name"] == "patients"
    assert patients["columns"]["age"] == {
        "type": "DOUBLE",
        "bounds": [0, 120],
        "domain": None,
        "nulls": "drop",
    }
    assert patients["columns"]["district"]["domain"][0] == "Ba Dinh"
    assert patients["budget"]["epsilon"] == 1.0
    assert patients["budget"]["remaining"] == {"epsilon": 1.0, "delta": 1e-6}


def test_a_query_is_charged_answered_and_in_the_history(http: TestClient, demo: Any) -> None:
    _, keys = demo
    response = _ask(http, keys["alice"], MEAN)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["charged"] is True and body["replayed"] is False and body["twin"] is False
    release = body["release"]
    assert release["type"] == "release" and 20 < release["value"] < 80
    lo, hi = release["ci"]
    assert lo < release["value"] < hi
    assert body["remaining"]["epsilon"] == pytest.approx(0.9)
    assert response.headers["cache-control"] == "no-store"
    history = http.get("/api/v1/history", headers=_auth(keys["alice"])).json()["queries"]
    assert len(history) == 1 and history[0]["status"] == "answered"
    # bob's budget and history are his own
    bob = http.get("/api/v1/budget", headers=_auth(keys["bob"])).json()
    assert bob["grants"][0]["remaining"]["epsilon"] == 0.5
    assert http.get("/api/v1/history", headers=_auth(keys["bob"])).json()["queries"] == []


def test_idempotency_key_replays_without_a_second_charge(http: TestClient, demo: Any) -> None:
    _, keys = demo
    headers = {**_auth(keys["alice"]), "Idempotency-Key": "req-1"}
    first = http.post("/api/v1/datasets/patients/query", json={"query": MEAN}, headers=headers)
    again = http.post("/api/v1/datasets/patients/query", json={"query": MEAN}, headers=headers)
    assert first.json()["release"] == again.json()["release"]
    assert again.json()["replayed"] is True and again.json()["charged"] is False
    assert again.json()["remaining"]["epsilon"] == pytest.approx(0.9)
    other = {**MEAN, "epsilon": 0.2}
    reused = http.post("/api/v1/datasets/patients/query", json={"query": other}, headers=headers)
    assert reused.status_code == 400 and "Idempotency-Key" in reused.json()["error"]["message"]
    # without a key, the same query is a new release, charged again
    assert _ask(http, keys["alice"], MEAN).json()["remaining"]["epsilon"] == pytest.approx(0.8)


def test_overspending_is_refused_before_any_charge(http: TestClient, demo: Any) -> None:
    _, keys = demo
    response = _ask(http, keys["bob"], {**MEAN, "epsilon": 0.6})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "budget_exceeded"
    assert http.get("/api/v1/history", headers=_auth(keys["bob"])).json()["queries"] == []
    for _ in range(5):
        assert _ask(http, keys["bob"], MEAN).status_code == 200
    refused = _ask(http, keys["bob"], MEAN)
    assert refused.status_code == 403  # ε = 0.5 spent: access to the data has ended
    left = http.get("/api/v1/budget", headers=_auth(keys["bob"])).json()["grants"][0]
    assert left["remaining"]["epsilon"] == pytest.approx(0.0, abs=1e-12)


def test_dry_run_costs_without_charging(http: TestClient, demo: Any) -> None:
    _, keys = demo
    body = http.post(
        "/api/v1/datasets/patients/dry-run", json={"query": MEAN}, headers=_auth(keys["alice"])
    ).json()
    assert body["epsilon"] == 0.1 and body["affordable"] is True and "mean" in body["label"]
    assert body["remaining"]["epsilon"] == 1.0
    bar = body["expected_error"]  # the error bar, said before spending (public parameters only)
    assert bar["per_row"] > 0 and bar["level"] == 0.95 and "/n for n rows (95%)" in bar["text"]


def test_twin_is_free_and_marked(http: TestClient, demo: Any) -> None:
    _, keys = demo
    body = _ask(http, keys["alice"], MEAN, twin=True).json()
    assert body["twin"] is True and body["charged"] is False
    assert body["remaining"]["epsilon"] == 1.0
    rows = http.get("/api/v1/datasets/patients/twin?rows=5", headers=_auth(keys["alice"])).json()
    assert rows["synthetic"] is True and len(rows["rows"]) == 5
    assert set(rows["rows"][0]) == {"age", "weight", "condition", "district"}


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ({**MEAN, "column": "salary"}, "unknown column"),
        ({**MEAN, "bounds": [10, 5]}, "bounds"),
        ({"kind": "mean", "column": "age", "bounds": [0, 120]}, "epsilon"),
        ({"kind": "drop table", "epsilon": 0.1}, "unknown query"),
        ({**MEAN, "where": [["district", "==", 3]]}, "district"),
    ],
)
def test_invalid_queries_are_400_and_free(
    http: TestClient, demo: Any, query: dict[str, Any], fragment: str
) -> None:
    _, keys = demo
    response = _ask(http, keys["alice"], query)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_query"
    assert fragment in response.json()["error"]["message"]
    assert (
        http.get("/api/v1/budget", headers=_auth(keys["alice"])).json()["grants"][0]["remaining"][
            "epsilon"
        ]
        == 1.0
    )


HOSTILE = [
    "age; DROP TABLE charges; --",
    'age" FROM patients; SELECT * FROM "x',
    "' OR '1'='1",
    "age)) UNION SELECT sqlite_version() --",
    "ageé\u0000",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_and_literals_cannot_inject_sql(
    http: TestClient, demo: Any, name: str, tmp_path: Path
) -> None:
    config, keys = demo
    as_column = _ask(http, keys["alice"], {**MEAN, "column": name})
    assert as_column.status_code == 400
    assert as_column.headers["content-type"] == "application/json"  # never rendered as HTML
    in_filter = _ask(http, keys["alice"], {**MEAN, "where": [[name, "==", "A"]]})
    assert in_filter.status_code == 400
    as_literal = _ask(http, keys["alice"], {**MEAN, "where": [["district", "==", name]]})
    assert as_literal.status_code in (200, 400)
    as_dataset = http.post(
        f"/api/v1/datasets/{quote(name, safe='')}/query",
        json={"query": MEAN},
        headers=_auth(keys["alice"]),
    )
    assert as_dataset.status_code in (404, 400)
    # the store is intact: every table is still there and the ledger adds up
    db = sqlite3.connect(config.store.removeprefix("sqlite:///"))
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"analysts", "grants", "charges"} <= tables


def test_unknown_dataset_and_no_grant_look_the_same(http: TestClient, demo: Any) -> None:
    _, keys = demo
    admin = _auth(keys["admin"])
    carol = http.post("/api/v1/admin/analysts", json={"name": "carol"}, headers=admin).json()
    no_grant = _ask(http, carol["key"], MEAN)
    missing = http.post(
        "/api/v1/datasets/secret_table/query", json={"query": MEAN}, headers=_auth(carol["key"])
    )
    assert no_grant.status_code == missing.status_code == 404
    assert no_grant.json() == missing.json()


def test_admin_lifecycle(http: TestClient, demo: Any) -> None:
    _, keys = demo
    admin = _auth(keys["admin"])
    assert http.get("/api/v1/admin/audit", headers=_auth(keys["alice"])).status_code == 403
    new = http.post("/api/v1/admin/analysts", json={"name": "carol"}, headers=admin)
    assert new.status_code == 201
    carol = new.json()["key"]
    assert (
        http.post("/api/v1/admin/analysts", json={"name": "carol"}, headers=admin).status_code
        == 409
    )
    grant = {"analyst": "carol", "dataset": "patients", "epsilon": 0.3, "delta": 0}
    assert http.post("/api/v1/admin/grants", json=grant, headers=admin).json()["epsilon"] == 0.3
    assert _ask(http, carol, MEAN).status_code == 200
    rotated = http.post("/api/v1/admin/analysts/carol/rotate", headers=admin).json()["key"]
    assert _ask(http, carol, MEAN).status_code == 401
    assert _ask(http, rotated, MEAN).status_code == 200
    http.post("/api/v1/admin/analysts/carol/revoke", headers=admin)
    assert _ask(http, rotated, MEAN).status_code == 401
    listed = http.get("/api/v1/admin/analysts", headers=admin).json()["analysts"]
    assert {a["name"]: a["active"] for a in listed}["carol"] is False
    assert "key" not in json.dumps(listed).replace("key_", "")
    events = http.get("/api/v1/admin/audit", headers=admin).json()["events"]
    assert {"add_analyst", "rotate_key", "revoke"} <= {e["action"] for e in events}


def test_limits(demo: Any) -> None:
    config, keys = demo
    small = dataclasses.replace(
        config,
        limits=dataclasses.replace(config.limits, requests_per_minute=3, max_request_bytes=1024),
    )
    http = TestClient(create_app(small))
    big = {"query": {**MEAN, "keys": ["x" * 50] * 100}}
    too_large = http.post("/api/v1/datasets/patients/query", json=big, headers=_auth(keys["alice"]))
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == "too_large"
    forged = "_".join(keys["bob"].split("_")[:2]) + "_not-the-secret"  # bob's public key id
    assert {http.get("/api/v1/budget", headers=_auth(forged)).status_code for _ in range(5)} == {
        401
    }
    codes = [http.get("/api/v1/budget", headers=_auth(keys["bob"])).status_code for _ in range(5)]
    assert codes[:2] == [200, 200] and codes[-1] == 429
    limited = http.get("/api/v1/budget", headers=_auth(keys["bob"]))
    assert int(limited.headers["retry-after"]) >= 1


def test_response_time_is_padded_to_the_floor(demo: Any) -> None:
    config, keys = demo
    padded = dataclasses.replace(
        config, limits=dataclasses.replace(config.limits, min_response_seconds=0.3)
    )
    http = TestClient(create_app(padded))
    for query in (MEAN, {**MEAN, "column": "nope"}):
        started = time.monotonic()
        _ask(http, keys["alice"], query)
        assert time.monotonic() - started >= 0.3


def test_unknown_routes_and_bad_bodies_use_the_error_format(http: TestClient, demo: Any) -> None:
    _, keys = demo
    assert http.get("/api/v1/nope").json()["error"]["code"] == "not_found"
    bad = http.post(
        "/api/v1/datasets/patients/query", json={"nope": 1}, headers=_auth(keys["alice"])
    )
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"


def test_client_mirrors_the_session(http: TestClient, demo: Any) -> None:
    _, keys = demo
    client = Client("http://testserver", keys["alice"], http=http)
    patients = client.dataset("patients")
    r = patients.mean("age", bounds=(0, 120), epsilon=0.1)
    assert isinstance(r, dpkit.Release) and r.ci is not None
    assert r.remaining.epsilon == pytest.approx(0.9)
    h = patients.histogram("age", bounds=(0, 120), bins=4, epsilon=0.1)
    assert isinstance(h.value, np.ndarray) and h.value.shape == (4,)
    g = patients.mean("weight", bounds=(30, 200), group_by="district", epsilon=0.1)
    assert isinstance(g, GroupedRelease) and g["Ba Dinh"].ci is not None
    q = patients.quantile("age", 0.9, bounds=(0, 120), epsilon=0.1)
    assert 0 <= q.value <= 120
    free = patients.twin.count(epsilon=0.5)
    assert free.remaining.epsilon == pytest.approx(0.6)  # the twin charged nothing
    assert client.budget()["patients"].epsilon == pytest.approx(0.6)
    with pytest.raises(BudgetExceededError):
        patients.count(epsilon=5.0)
    with pytest.raises(InvalidParameterError, match="unknown column"):
        patients.mean("nope", bounds=(0, 1), epsilon=0.1)
    assert len(client.history()) == 4
    with pytest.raises(ServiceError) as err:
        Client("http://testserver", "dpk_bad", http=http).datasets()
    assert err.value.status == 401


def test_admin_client(http: TestClient, demo: Any) -> None:
    _, keys = demo
    admin = AdminClient("http://testserver", keys["admin"], http=http)
    key = admin.add_analyst("dana")
    assert admin.grant("dana", "patients", 0.2).epsilon == 0.2
    assert admin.grant("dana", "patients", 0.1).epsilon == pytest.approx(0.3)
    assert Client("http://testserver", key, http=http).budget()[
        "patients"
    ].epsilon == pytest.approx(0.3)
    assert any(a["name"] == "dana" for a in admin.analysts())
    assert admin.audit(5)


def test_spent_budget_survives_a_restart(demo: Any) -> None:
    config, keys = demo
    first = TestClient(create_app(config))
    for _ in range(5):
        assert _ask(first, keys["bob"], MEAN).status_code == 200
    again = TestClient(create_app(config))  # a new process on the same store
    assert _ask(again, keys["bob"], MEAN).status_code == 403


def test_the_whole_api_on_a_postgresql_store(demo: Any, fresh_postgres_url: str) -> None:
    config, keys = demo
    http = TestClient(create_app(dataclasses.replace(config, store=fresh_postgres_url)))
    for _ in range(5):
        assert _ask(http, keys["bob"], MEAN).status_code == 200
    assert _ask(http, keys["bob"], MEAN).json()["error"]["code"] == "budget_exceeded"
    history = http.get("/api/v1/history", headers=_auth(keys["bob"])).json()["queries"]
    assert [h["status"] for h in history] == ["answered"] * 5
    again = TestClient(create_app(dataclasses.replace(config, store=fresh_postgres_url)))
    assert _ask(again, keys["bob"], MEAN).status_code == 403  # spent stays spent


def test_a_query_past_the_time_limit_is_504_and_its_answer_comes_later(
    demo: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, keys = demo
    quick = dataclasses.replace(
        config, limits=dataclasses.replace(config.limits, query_timeout_seconds=0.2)
    )
    app = create_app(quick)
    runtime = app.state.runtime
    slow_once = {"left": 1}
    original = runtime.sessions["patients"].answer

    def slow_answer(spec: Any, **kwargs: Any) -> Any:
        result = original(spec, **kwargs)  # charged and computed ...
        if slow_once["left"]:
            slow_once["left"] -= 1
            time.sleep(0.6)  # ... but slower than the limit
        return result

    monkeypatch.setattr(runtime.sessions["patients"], "answer", slow_answer)
    http = TestClient(app)
    headers = {**_auth(keys["alice"]), "Idempotency-Key": "slow-1"}
    late = http.post("/api/v1/datasets/patients/query", json={"query": MEAN}, headers=headers)
    assert late.status_code == 504 and late.json()["error"]["code"] == "timeout"
    time.sleep(0.8)  # the query finishes in the background and stores its answer
    again = http.post("/api/v1/datasets/patients/query", json={"query": MEAN}, headers=headers)
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert again.json()["remaining"]["epsilon"] == pytest.approx(0.9)  # charged once


def test_a_retry_while_the_charged_query_runs_is_pending_not_charged(demo: Any) -> None:
    config, keys = demo
    app = create_app(config)
    runtime = app.state.runtime
    http = TestClient(app)
    # A charge under this request key with no stored answer: the state a crash between
    # charge and answer leaves behind (or a query still running).
    token = REQUEST_KEY.set("crashed-1")
    try:
        runtime.accountant("alice", "patients").charge(Budget(0.1), "mean(age) in [0, 120]")
    finally:
        REQUEST_KEY.reset(token)
    headers = {**_auth(keys["alice"]), "Idempotency-Key": "crashed-1"}
    response = http.post("/api/v1/datasets/patients/query", json={"query": MEAN}, headers=headers)
    assert response.status_code == 409 and response.json()["error"]["code"] == "pending"
    assert response.headers["retry-after"] == "1"
    left = http.get("/api/v1/budget", headers=_auth(keys["alice"])).json()["grants"][0]
    assert left["remaining"]["epsilon"] == pytest.approx(0.9)  # charged once, never again
    assert http.get("/api/v1/history", headers=_auth(keys["alice"])).json()["queries"] == []


def test_a_retry_after_the_budget_ran_out_still_gets_its_answer(
    http: TestClient, demo: Any
) -> None:
    _, keys = demo
    spend_all = {**MEAN, "epsilon": 0.5}
    headers = {**_auth(keys["bob"]), "Idempotency-Key": "last-one"}
    first = http.post("/api/v1/datasets/patients/query", json={"query": spend_all}, headers=headers)
    assert first.status_code == 200 and first.json()["remaining"]["epsilon"] == 0.0
    retry = http.post("/api/v1/datasets/patients/query", json={"query": spend_all}, headers=headers)
    assert retry.status_code == 200 and retry.json()["replayed"] is True
    assert retry.json()["release"] == first.json()["release"]
    assert _ask(http, keys["bob"], MEAN).json()["error"]["code"] == "budget_exceeded"


def test_openapi_documents_every_route(http: TestClient) -> None:
    spec = http.get("/openapi.json").json()
    paths = set(spec["paths"])
    for route in (
        "/api/v1/datasets",
        "/api/v1/datasets/{name}/query",
        "/api/v1/datasets/{name}/dry-run",
        "/api/v1/datasets/{name}/twin",
        "/api/v1/budget",
        "/api/v1/history",
        "/api/v1/admin/analysts",
        "/api/v1/admin/grants",
        "/api/v1/admin/audit",
    ):
        assert route in paths
    page = http.get("/")
    assert (
        page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    )
    assert http.get("/docs").status_code == 200


def test_guessing_keys_is_limited_per_address(http: TestClient, demo: Any) -> None:
    _, keys = demo
    codes = [
        http.get("/api/v1/budget", headers=_auth(f"dpk_guess{i:03d}_x")).status_code
        for i in range(40)
    ]
    assert codes[:30] == [401] * 30 and set(codes[30:]) == {429}
    refused = http.get("/api/v1/budget", headers=_auth("dpk_guess999_x"))
    assert refused.status_code == 429 and refused.headers["retry-after"] == "60"
    # the address is held back for invalid keys only: valid ones behind it still work
    assert http.get("/api/v1/budget", headers=_auth(keys["alice"])).status_code == 200
    assert http.get("/api/v1/admin/audit", headers=_auth(keys["admin"])).status_code == 200
    assert http.get("/api/v1/admin/audit", headers=_auth(keys["bob"])).status_code == 403


def test_a_dataset_cap_bounds_the_sum_of_grants(demo: Any) -> None:
    config, keys = demo
    patients = dataclasses.replace(config.datasets["patients"], max_epsilon=2.0, max_delta=1e-5)
    capped = dataclasses.replace(config, datasets={"patients": patients})
    http = TestClient(create_app(capped))  # alice 1.0 + bob 0.5 from the file: 1.5 of 2.0
    admin = _auth(keys["admin"])
    view = http.get("/api/v1/admin/datasets", headers=admin).json()["datasets"][0]
    assert view["granted"]["epsilon"] == 1.5 and view["cap"] == {"epsilon": 2.0, "delta": 1e-5}
    grant = {"analyst": "bob", "dataset": "patients", "epsilon": 0.5, "delta": 0}
    assert http.post("/api/v1/admin/grants", json=grant, headers=admin).status_code == 200
    refused = http.post("/api/v1/admin/grants", json=grant, headers=admin)
    assert refused.status_code == 409 and "cap" in refused.json()["error"]["message"]
    assert http.get("/api/v1/admin/datasets", headers=admin).json()["datasets"][0]["granted"][
        "epsilon"
    ] == pytest.approx(2.0)
