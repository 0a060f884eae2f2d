"""The service's layout: routers per audience, dependencies that guard every route, state
on ``app.state`` (no closures), and the public list of query kinds.

Each test would fail on the layout it replaced or on a route added without its guard:
an admin route without the admin key, an analyst route without a key, limits shared
between two apps, or a public path without its per-address limit.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from dpkit.service.app import create_app
from dpkit.service.demo import build_demo
from dpkit.service.routers import admin, analyst
from dpkit.tables import kinds

#: The analyst router's paths that need no key.
PUBLIC = {"/api/v1/health", "/api/v1/query-kinds"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, str]]:
    return build_demo(tmp_path_factory.mktemp("layout"), rows=50)


def _routes(router: Any) -> list[tuple[str, str]]:
    out = []
    for route in router.routes:
        assert isinstance(route, APIRoute)
        for method in sorted(route.methods or ()):
            out.append((method, route.path.replace("{name}", "patients")))
    return out


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize(("method", "path"), _routes(admin.router))
def test_every_admin_route_needs_the_admin_key(
    demo: tuple[Any, dict[str, str]], method: str, path: str
) -> None:
    config, keys = demo
    http = TestClient(create_app(config))
    anonymous = http.request(method, path, json={})
    assert anonymous.status_code == 401, anonymous.text
    assert anonymous.json()["error"]["code"] == "unauthorized"
    analyst_key = http.request(method, path, json={}, headers=_auth(keys["alice"]))
    assert analyst_key.status_code == 403, analyst_key.text
    assert analyst_key.json()["error"]["message"] == "this endpoint needs the admin key."


@pytest.mark.parametrize(("method", "path"), _routes(analyst.router))
def test_every_analyst_route_but_the_public_ones_needs_a_key(
    demo: tuple[Any, dict[str, str]], method: str, path: str
) -> None:
    config, _ = demo
    http = TestClient(create_app(config))
    r = http.request(method, path, json={"query": {"kind": "count", "epsilon": 0.1}})
    if path in PUBLIC:
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == "Bearer"


def test_query_kinds_is_the_registry_without_a_key(demo: tuple[Any, dict[str, str]]) -> None:
    config, _ = demo
    r = TestClient(create_app(config)).get("/api/v1/query-kinds")
    assert r.status_code == 200
    assert r.json() == {"kinds": kinds.describe()}
    assert r.headers["cache-control"] == "no-store"  # an API path: the security headers apply


def test_public_paths_are_limited_per_address_and_apart_from_keys(
    demo: tuple[Any, dict[str, str]],
) -> None:
    config, keys = demo
    tight = dataclasses.replace(
        config, limits=dataclasses.replace(config.limits, requests_per_minute=3)
    )
    http = TestClient(create_app(tight))
    statuses = [http.get("/api/v1/query-kinds").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    refused = http.get("/api/v1/query-kinds")
    assert refused.json()["error"]["code"] == "rate_limited"
    assert "from this address" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) >= 1
    # the address's public bucket is not the analyst's: her key still works
    assert http.get("/api/v1/budget", headers=_auth(keys["alice"])).status_code == 200


def test_state_lives_on_the_app_not_in_closures(demo: tuple[Any, dict[str, str]]) -> None:
    config, keys = demo
    # create_app only assembles: no function is defined inside it
    nested = [c for c in create_app.__code__.co_consts if inspect.iscode(c)]
    assert nested == []
    tight = dataclasses.replace(
        config, limits=dataclasses.replace(config.limits, requests_per_minute=2)
    )
    first, second = create_app(tight), create_app(tight)
    for name in ("config", "runtime", "store", "rate_limit", "failed_keys", "public_limit"):
        assert getattr(first.state, name) is not getattr(second.state, name) or name == "config"
    assert first.state.store is first.state.runtime.store
    # one app's limits are its own: exhausting the first leaves the second untouched
    one, two = TestClient(first), TestClient(second)
    assert [
        one.get("/api/v1/budget", headers=_auth(keys["bob"])).status_code for _ in range(3)
    ] == [
        200,
        200,
        429,
    ]
    assert two.get("/api/v1/budget", headers=_auth(keys["bob"])).status_code == 200


def test_the_static_files_are_the_packages(demo: tuple[Any, dict[str, str]]) -> None:
    from dpkit.service.routers import page

    assert (page.STATIC / "index.html").is_file()
    assert Path(page.SWAGGER).is_dir()
    http = TestClient(create_app(demo[0]))
    assert http.get("/").status_code == 200
    assert "default-src 'self'" in http.get("/docs").headers["content-security-policy"]


def test_the_server_keeps_idle_connections_longer_than_clients_do(
    demo: tuple[Any, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that closes an idle connection first races a client reusing it at that
    moment ("Server disconnected without sending a response", seen in the two-process
    load test): dpkit's client (httpx) drops idle connections after 5 s, so the server
    must keep them longer, and `dpkit serve` must say so to Uvicorn."""
    import httpx
    import uvicorn

    from dpkit.service import _cli
    from dpkit.service.app import KEEP_ALIVE_SECONDS

    client_expiry = httpx.Limits().keepalive_expiry
    assert client_expiry is not None and KEEP_ALIVE_SECONDS > client_expiry
    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: seen.update(kwargs))
    _cli.serve(None, True, tmp_path, "127.0.0.1", 0)
    assert seen["timeout_keep_alive"] == KEEP_ALIVE_SECONDS
