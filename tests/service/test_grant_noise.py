"""A grant's noise (issue 29, item 6): ``noise = "laplace" | "gaussian" | "auto"`` per grant.

* the config takes it per grant (default laplace) and refuses an unknown noise,
  and Gaussian noise under a ``basic`` grant, at start-up (naming the grant, its
  line and both keys);
* the store keeps it with the grant; unlike the accountant it may change (a
  restart with another noise, or the admin API, sets it — audited): the noise
  is public and chosen by the data owner, and each charge in the ledger states
  the cost of the noise it paid for;
* every query, twin answer and dry run of the grant is costed and released with
  it: a Gaussian ``rdp`` grant's count is ``discrete_gaussian`` and its ledger
  row holds a discrete Gaussian event; the dry run's ``answers_left`` is exactly
  how many answers then succeed;
* over HTTP, a dataset and a hostile neighbour served with the same Gaussian
  grant give the same transcripts but for the noisy values.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from tests.service.test_http_transcripts import (
    _SETTINGS,
    _TMP,
    STEPS,
    Keys,
    _fixed_pair,
    serve,
    service_config,
    transcript_differences,
)
from tests.tables._neighbours import CSV_TYPES, SCHEMA, Pair, neighbours, write_csv

from dpkit.accounting.events import DiscreteGaussianEvent, GeometricEvent
from dpkit.service.config import ConfigError, ServiceConfig, parse_config
from dpkit.service.store import hash_key, make_key

ANALYST, DATASET = "ana", "people"
KEY = make_key()
ADMIN = make_key()
ROWS = "x,g\n" + "".join(f"{i % 90},{'abc'[i % 3]}\n" for i in range(60))
COUNT = {"kind": "count", "column": None, "epsilon": 0.2}


def _config(
    directory: Path,
    *,
    noise: str | None = None,
    accountant: str | None = "rdp",
    epsilon: float = 1.0,
    delta: float = 1e-6,
) -> ServiceConfig:
    (directory / "people.csv").write_text(ROWS)
    head = f"""[service]
store = "service.db"
seed = 7
admin_key_hash = {json.dumps(hash_key(ADMIN))}

[datasets.{DATASET}]
source = "people.csv"
types = {{ x = "DOUBLE", g = "VARCHAR" }}

[analysts.{ANALYST}]
key_hash = {json.dumps(hash_key(KEY))}

[[grants]]
"""
    grant = {"analyst": ANALYST, "dataset": DATASET, "epsilon": epsilon, "delta": delta}
    grant.update(accountant=accountant, noise=noise)  # lines 18 and 19 when given
    lines = [
        head.rstrip("\n"),
        *(f"{k} = {json.dumps(v)}" for k, v in grant.items() if v is not None),
    ]
    return parse_config("\n".join(lines) + "\n", base=directory, name="service.toml")


@contextmanager
def _client(config: ServiceConfig) -> Iterator[TestClient]:
    from dpkit.service.app import create_app

    with pytest.warns(Warning, match="fixed noise seed"):
        app = create_app(config)
    try:
        with TestClient(app, headers={"Authorization": f"Bearer {KEY}"}) as client:
            yield client
    finally:
        app.state.runtime.store.close()


def _query(client: TestClient, query: dict[str, Any], key: str) -> Any:
    return client.post(
        f"/api/v1/datasets/{DATASET}/query",
        json={"query": query},
        headers={"Idempotency-Key": key},
    )


def _dry_run(client: TestClient, query: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/api/v1/datasets/{DATASET}/dry-run", json={"query": query})
    assert response.status_code == 200, response.text
    return dict(response.json())


# ------------------------------------------------------------------------------ config


def test_a_grant_takes_its_noise_from_the_config(tmp_path: Path) -> None:
    assert _config(tmp_path).grants[0].noise == "laplace"
    assert _config(tmp_path, noise="gaussian").grants[0].noise == "gaussian"
    assert _config(tmp_path, noise="auto", accountant=None).grants[0].noise == "auto"


def test_gaussian_noise_under_a_basic_grant_is_a_start_up_error(tmp_path: Path) -> None:
    for accountant in (None, "basic"):
        with pytest.raises(ConfigError) as err:
            _config(tmp_path, noise="gaussian", accountant=accountant)
        message = str(err.value)
        line = 18 if accountant is None else 19  # the noise line of the grant
        assert f"service.toml, line {line}: the grant of '{ANALYST}' on '{DATASET}'" in message
        assert 'noise = "gaussian" needs accountant = "zcdp" or "rdp"' in message
        assert 'not accountant = "basic"' in message
        assert 'Add accountant = "rdp"' in message


def test_an_unknown_noise_is_a_start_up_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r'line 19: .*noise must be "laplace" \(the default\)'):
        _config(tmp_path, noise="normal")
    with pytest.raises(ConfigError, match=r"line 19: .*noise must be"):
        _config(tmp_path, noise="Gaussian")  # names are exact


# ------------------------------------------------------------------------------ answers


def test_a_gaussian_grant_answers_and_charges_discrete_gaussian(tmp_path: Path) -> None:
    with _client(_config(tmp_path, noise="gaussian")) as client:
        assert client.get(f"/api/v1/datasets/{DATASET}").json()["budget"]["noise"] == "gaussian"
        planned = _dry_run(client, COUNT)
        response = _query(client, COUNT, "q1")
        assert response.status_code == 200, response.text
        release = response.json()["release"]
        assert release["mechanism"] == "discrete_gaussian"
        # the dry run said the Gaussian charge and error bar: σ = Δ₂/ε = 5
        assert release["epsilon"] == planned["epsilon"] and release["delta"] == planned["delta"]
        assert release["details"]["sigma"] == pytest.approx(1 / COUNT["epsilon"])
        assert planned["expected_error"]["half_width"] == release["details"]["half_width"]
        rt = client.app.state.runtime  # type: ignore[attr-defined]
        (row,) = rt.store.ledger(ANALYST, DATASET).read(0)
        assert isinstance(row.event, DiscreteGaussianEvent)
        assert row.event.budget() == row.cost
        assert row.cost.rho_declared == pytest.approx(0.2**2 / 2)
        # the twin answers with the grant's noise too (and is free)
        twin = client.post(
            f"/api/v1/datasets/{DATASET}/query", json={"query": COUNT, "twin": True}
        ).json()
        assert twin["release"]["mechanism"] == "discrete_gaussian" and not twin["charged"]


def test_answers_left_is_how_many_gaussian_answers_succeed(tmp_path: Path) -> None:
    with _client(_config(tmp_path, noise="gaussian")) as client:
        small = {**COUNT, "epsilon": 0.05}
        first = _dry_run(client, small)
        assert first["noise"] == "gaussian" and first["accountant"] == "rdp"
        left = first["answers_left"]
        assert first["epsilon"] > 0.05  # the (ε', δ) statement of ρ = ε²/2 alone
        assert 5 < left < 200
        for i in range(left):
            response = _query(client, small, f"q{i}")
            assert response.status_code == 200, (i, response.text)
            assert response.json()["release"]["mechanism"] == "discrete_gaussian"
        assert _dry_run(client, small)["answers_left"] == 0
        refused = _query(client, small, "one-more")
        assert refused.status_code == 403, refused.text
        assert "budget" in refused.text


def test_the_noise_may_change_on_restart(tmp_path: Path) -> None:
    small = {**COUNT, "epsilon": 0.05}
    with _client(_config(tmp_path, noise="gaussian")) as client:
        assert _query(client, small, "q1").status_code == 200
    with _client(_config(tmp_path)) as client:  # noise not given: laplace
        body = _query(client, small, "q2").json()
        assert body["release"]["mechanism"] == "geometric"
        rt = client.app.state.runtime  # type: ignore[attr-defined]
        first, second = rt.store.ledger(ANALYST, DATASET).read(0)
        assert isinstance(first.event, DiscreteGaussianEvent)
        assert isinstance(second.event, GeometricEvent)
        # both charges count: what is left is what the rule admits after both
        assert client.get("/api/v1/budget").status_code == 200
        changes = [e for e in rt.store.audit_log() if e["action"] == "grant_noise"]
        assert [(e["actor"], e["detail"]["noise"], e["detail"]["was"]) for e in changes] == [
            ("config", "laplace", "gaussian")
        ]


def test_the_admin_sets_a_grants_noise(tmp_path: Path) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with _client(_config(tmp_path, accountant=None)) as client:
        grant = {"analyst": ANALYST, "dataset": DATASET, "epsilon": 0.0}
        refused = client.post(
            "/api/v1/admin/grants", json={**grant, "noise": "gaussian"}, headers=admin
        )
        assert refused.status_code in (400, 422), refused.text
        assert "needs accountant 'zcdp' or 'rdp'" in refused.text
        assert "this grant's accountant is 'basic'" in refused.text
        bad = client.post("/api/v1/admin/grants", json={**grant, "noise": "normal"}, headers=admin)
        assert bad.status_code in (400, 422) and "a grant's noise is one of" in bad.text
        ok = client.post("/api/v1/admin/grants", json={**grant, "noise": "auto"}, headers=admin)
        assert ok.status_code == 200, ok.text
        assert _dry_run(client, COUNT)["noise"] == "auto"
        # a new grant made by the admin: rdp with Gaussian noise
        client.post("/api/v1/admin/analysts", json={"name": "bo"}, headers=admin)
        new = client.post(
            "/api/v1/admin/grants",
            json={
                "analyst": "bo",
                "dataset": DATASET,
                "epsilon": 1.0,
                "delta": 1e-6,
                "accountant": "rdp",
                "noise": "gaussian",
            },
            headers=admin,
        )
        assert new.status_code == 200, new.text
        rt = client.app.state.runtime  # type: ignore[attr-defined]
        assert rt.payer("bo", DATASET)[1] == "gaussian"
        assert rt.store.grant_terms("bo", DATASET).noise == "gaussian"


# ------------------------------------------------------------------------------ transcripts


@contextmanager
def _serve_pair(pair: Pair, keys: Keys) -> Iterator[tuple[TestClient, TestClient]]:
    """Two services over ``pair``, both with an rdp grant with Gaussian noise."""
    with ExitStack() as stack:
        clients = []
        for rows in (pair.smaller, pair.bigger):
            directory = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="dpkit-noise-", dir=_TMP))
            )
            write_csv(rows, directory / "table.csv")
            config = service_config(
                directory / "table.csv",
                directory,
                keys,
                types=CSV_TYPES,
                columns=SCHEMA["columns"],
            )
            (grant,) = config.grants
            gaussian = dataclasses.replace(grant, accountant="rdp", noise="gaussian")
            config = dataclasses.replace(config, grants=(gaussian,))
            clients.append(stack.enter_context(serve(config)))
        yield clients[0], clients[1]


def _check(pair: Pair, steps: list[Any]) -> None:
    keys = Keys()
    with _serve_pair(pair, keys) as (a, b):
        assert a.app.state.runtime.payer("ana", "people")[1] == "gaussian"  # type: ignore[attr-defined]
        found = transcript_differences(a, b, steps, keys)
        rows = a.app.state.runtime.store.ledger("ana", "people").read(0)  # type: ignore[attr-defined]
    # the transcripts went through Gaussian releases (else they would test nothing new)
    assert sum("discrete_gaussian" in json.dumps(r.event.to_json()) for r in rows) >= 5
    assert not found, "a Gaussian grant's answers differ between neighbours:\n" + "\n".join(found)


def test_a_gaussian_grant_looks_alike_on_a_fixed_neighbour() -> None:
    _check(_fixed_pair(), STEPS)


@pytest.mark.slow
@settings(_SETTINGS, max_examples=4)
@given(pair=neighbours())
def test_a_gaussian_grant_looks_alike_on_hostile_neighbours(pair: Pair) -> None:
    _check(pair, STEPS)


def test_dpkit_admin_grant_passes_the_accountant_and_the_noise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    import dpkit.service._cli as service_cli
    from dpkit.accounting import Budget
    from dpkit.cli import app

    calls: list[tuple[Any, ...]] = []

    class _Admin:
        def grant(self, *args: Any, **options: Any) -> Budget:
            calls.append((*args, options))
            return Budget(1.0, 1e-6)

    monkeypatch.setattr(service_cli, "_admin", lambda url, key: _Admin())
    argv = ["admin", "grant", "bo", DATASET, "--epsilon", "1", "--delta", "1e-6"]
    result = CliRunner().invoke(
        app, [*argv, "--accountant", "rdp", "--noise", "gaussian"], env={"DPKIT_ADMIN_KEY": "k"}
    )
    assert result.exit_code == 0, result.output
    assert calls == [("bo", DATASET, 1.0, 1e-6, {"accountant": "rdp", "noise": "gaussian"})]


def test_the_admin_client_creates_a_gaussian_grant(tmp_path: Path) -> None:
    from dpkit.client import AdminClient

    with _client(_config(tmp_path)) as client:
        admin = AdminClient("http://testserver", ADMIN, http=client)
        admin.add_analyst("bo")
        total = admin.grant("bo", DATASET, 1.0, 1e-6, accountant="rdp", noise="gaussian")
        assert total.epsilon == 1.0
        rt = client.app.state.runtime  # type: ignore[attr-defined]
        assert rt.store.grant_terms("bo", DATASET) == (total, "rdp", "gaussian")
        admin.grant("bo", DATASET, 0.0, noise="auto")  # the noise alone may change
        assert rt.payer("bo", DATASET)[1] == "auto"
