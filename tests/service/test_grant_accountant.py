"""A grant's accountant (issue 29, item 6): its composition rule in the config, the store
and the dry run's ``answers_left``.

* the config takes ``accountant = "basic" | "zcdp" | "rdp"`` per grant (default
  basic) and refuses anything else at start-up, naming the grant, its line and
  the key (``pld``/``tightest``: valid only for queries fixed in advance);
* the grant's :class:`~dpkit.accounting.Accountant` composes with that rule, the
  store records the rule with the grant (a restart naming another rule is a
  config error) and every charge's privacy event (the rule composes events);
* ``answers_left`` (``POST .../dry-run``) is how many more copies of the query the
  grant admits: exactly that many charges succeed and the next is refused; it
  reads no data (equal on a dataset and its hostile neighbour); an ``rdp`` or
  ``zcdp`` grant gets more answers than a ``basic`` one for many small queries.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from dpkit.accounting import Accountant
from dpkit.accounting.events import GeometricEvent, LaplaceEvent
from dpkit.errors import BudgetExceededError
from dpkit.service.app import create_app
from dpkit.service.config import ConfigError, ServiceConfig, parse_config
from dpkit.service.runtime import Runtime
from dpkit.service.store import hash_key, make_key
from dpkit.tables import costing
from dpkit.tables.specs import QuerySpec

ANALYST, DATASET = "ana", "people"
KEY = make_key()
ADMIN = make_key()
ROWS = "x,g\n" + "".join(f"{i % 90},{'abc'[i % 3]}\n" for i in range(60))
#: the neighbour: one more person, as hostile as a declared DOUBLE/VARCHAR CSV row gets
HOSTILE = "1e308,zz-new\n"
COUNT = {"kind": "count", "column": None, "epsilon": 0.02}
MEAN = {"kind": "mean", "column": "x", "epsilon": 0.05, "bounds": [0, 100]}


def _config(
    directory: Path,
    *,
    accountant: str | None = None,
    delta: float = 1e-6,
    rows: str = ROWS,
    store: str = "service.db",
) -> ServiceConfig:
    (directory / "people.csv").write_text(rows)
    lines = [
        "[service]",
        f'store = "{store}"',
        "seed = 7",
        f"admin_key_hash = {json.dumps(hash_key(ADMIN))}",
        "",
        f"[datasets.{DATASET}]",
        'source = "people.csv"',
        'types = { x = "DOUBLE", g = "VARCHAR" }',
        "",
        f"[analysts.{ANALYST}]",
        f"key_hash = {json.dumps(hash_key(KEY))}",
        "",
        "[[grants]]",
        f'analyst = "{ANALYST}"',
        f'dataset = "{DATASET}"',
        "epsilon = 1.0",
        f"delta = {delta!r}",
    ]
    if accountant is not None:
        lines.append(f'accountant = "{accountant}"')
    return parse_config("\n".join(lines) + "\n", base=directory, name="service.toml")


@contextmanager
def _runtime(config: ServiceConfig) -> Iterator[Runtime]:
    with pytest.warns(Warning, match="fixed noise seed"):
        rt = Runtime(config)
    try:
        yield rt
    finally:
        rt.close()
        rt.store.close()


@contextmanager
def _client(config: ServiceConfig) -> Iterator[TestClient]:
    with pytest.warns(Warning, match="fixed noise seed"):
        app = create_app(config)
    try:
        with TestClient(app, headers={"Authorization": f"Bearer {KEY}"}) as client:
            yield client
    finally:
        app.state.runtime.store.close()


def _dry_run(client: TestClient, query: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/api/v1/datasets/{DATASET}/dry-run", json={"query": query})
    assert response.status_code == 200, response.text
    return dict(response.json())


# ------------------------------------------------------------------------------ config


def test_a_grant_takes_its_accountant_from_the_config(tmp_path: Path) -> None:
    assert _config(tmp_path).grants[0].accountant == "basic"
    assert _config(tmp_path, accountant="rdp").grants[0].accountant == "rdp"
    assert _config(tmp_path, accountant="zcdp").grants[0].accountant == "zcdp"


@pytest.mark.parametrize("rule", ["pld", "tightest"])
def test_rules_for_queries_fixed_in_advance_are_refused_at_start_up(
    tmp_path: Path, rule: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, accountant=rule)
    message = str(err.value)
    assert "service.toml, line 18" in message  # the accountant line of the grant
    assert f"the grant of '{ANALYST}' on '{DATASET}'" in message
    assert f'accountant = "{rule}" is valid only for queries whose noise is fixed' in message
    assert 'Use accountant = "rdp"' in message


def test_an_unknown_accountant_and_a_pure_grant_under_rdp_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r'line 18: .*accountant must be "basic"'):
        _config(tmp_path, accountant="renyi")
    with pytest.raises(
        ConfigError, match=r'line 17: .*accountant = "rdp" needs a grant with delta > 0'
    ):
        _config(tmp_path, accountant="rdp", delta=0.0)


# ------------------------------------------------------------------------------ runtime


def test_the_grants_accountant_composes_with_its_rule(tmp_path: Path) -> None:
    with _runtime(_config(tmp_path, accountant="rdp")) as rt:
        acct = rt.accountant(ANALYST, DATASET)
        assert acct.composition == "rdp"
        assert rt.budget(ANALYST, DATASET)["accountant"] == "rdp"
        rt.query(ANALYST, DATASET, COUNT, request_key="q1")
        # the charge's event is stored with it, and read back as the release's own
        (row,) = rt.store.ledger(ANALYST, DATASET).read(0)
        assert isinstance(row.event, GeometricEvent | LaplaceEvent)
        assert row.event.budget() == row.cost
        fresh = Accountant(acct.budget, ledger=rt.store.ledger(ANALYST, DATASET), composition="rdp")
        assert fresh.spent == acct.spent


def test_a_grant_keeps_its_rule_across_restarts(tmp_path: Path) -> None:
    with _runtime(_config(tmp_path, accountant="rdp")) as rt:
        rt.query(ANALYST, DATASET, COUNT, request_key="q1")
    with pytest.raises(ConfigError) as err:
        _runtime(_config(tmp_path, accountant="zcdp")).__enter__()
    message = str(err.value)
    assert f"[[grants]] of '{ANALYST}' on '{DATASET}' says accountant = 'zcdp'" in message
    assert "Set accountant = 'rdp'" in message
    with _runtime(_config(tmp_path, accountant="rdp")) as rt:  # the same rule: fine
        assert rt.accountant(ANALYST, DATASET).composition == "rdp"


@pytest.mark.parametrize("rule", ["basic", "rdp"])
def test_answers_left_is_exactly_what_the_grant_admits(tmp_path: Path, rule: str) -> None:
    with _runtime(_config(tmp_path, accountant=rule)) as rt:
        rt.query(ANALYST, DATASET, MEAN, request_key="first")  # a history to add to
        left = rt.dry_run(ANALYST, DATASET, COUNT)["answers_left"]
        assert left > 0
        acct = rt.accountant(ANALYST, DATASET)
        planned = rt.sessions[DATASET].prepare(QuerySpec.from_dict(COUNT))
        cost, event = costing.cost(planned.query), costing.event(planned.query)
        for i in range(left):
            acct.charge(cost, f"copy {i}", event=event)
        with pytest.raises(BudgetExceededError):
            acct.charge(cost, "one more", event=event)
        assert rt.dry_run(ANALYST, DATASET, COUNT)["answers_left"] == 0


def test_an_rdp_or_zcdp_grant_gets_more_answers_than_basic(tmp_path: Path) -> None:
    left = {}
    for rule in ("basic", "zcdp", "rdp"):
        directory = tmp_path / rule
        directory.mkdir()
        with _runtime(_config(directory, accountant=rule)) as rt:
            body = rt.dry_run(ANALYST, DATASET, COUNT)
            assert body["accountant"] == rule
            left[rule] = body["answers_left"]
    # ε = 0.02 a query out of (1, 1e-6): basic composition's 50, Rényi and zCDP over 100
    assert left["basic"] == 50
    assert left["rdp"] > 2 * left["basic"]
    assert left["zcdp"] > 2 * left["basic"]


# ------------------------------------------------------------------------------ HTTP


@pytest.mark.parametrize("rule", ["basic", "rdp"])
def test_answers_left_is_the_same_on_a_dataset_and_its_neighbour(tmp_path: Path, rule: str) -> None:
    bodies = []
    for name, rows in (("smaller", ROWS), ("bigger", ROWS + HOSTILE)):
        directory = tmp_path / name
        directory.mkdir()
        with _client(_config(directory, accountant=rule, rows=rows)) as client:
            seen = [_dry_run(client, COUNT), _dry_run(client, MEAN)]
            answer = client.post(
                f"/api/v1/datasets/{DATASET}/query",
                json={"query": MEAN},
                headers={"Idempotency-Key": "k1"},
            )
            assert answer.status_code == 200, answer.text
            seen += [_dry_run(client, COUNT), _dry_run(client, MEAN)]
            budget = client.get("/api/v1/budget")
            assert budget.status_code == 200, budget.text
            seen.append(budget.json()["grants"][0])
        bodies.append(seen)
    assert bodies[0] == bodies[1]
    assert bodies[0][0]["answers_left"] > bodies[0][2]["answers_left"] > 0
    assert bodies[0][-1]["accountant"] == rule


def test_the_admin_api_creates_a_grant_with_its_accountant(tmp_path: Path) -> None:
    with _client(_config(tmp_path)) as client:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        assert client.post("/api/v1/admin/analysts", json={"name": "bo"}, headers=admin).is_success
        grant = {"analyst": "bo", "dataset": DATASET, "epsilon": 1.0, "delta": 1e-6}
        refused = client.post(
            "/api/v1/admin/grants", json={**grant, "accountant": "pld"}, headers=admin
        )
        assert refused.status_code == 400, refused.text
        assert "Use 'rdp'" in refused.json()["error"]["message"]
        made = client.post(
            "/api/v1/admin/grants", json={**grant, "accountant": "rdp"}, headers=admin
        )
        assert made.status_code == 200, made.text
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        assert runtime.accountant("bo", DATASET).composition == "rdp"
        other = client.post(
            "/api/v1/admin/grants", json={**grant, "accountant": "zcdp"}, headers=admin
        )
        assert other.status_code == 409, other.text
        assert "composes its charges with accountant 'rdp', not 'zcdp'" in other.text
        more = client.post("/api/v1/admin/grants", json=grant, headers=admin)  # keeps its rule
        assert more.status_code == 200 and more.json()["epsilon"] == 2.0
