"""A dataset's published DP synthetic table: charged once to its publication ledger, served free.

* Charged once, ever: two runtimes on one store make one charge and serve the
  same table; other parameters under the same name stop start-up, nothing
  charged; a new name is a new table, charged again.
* Refusals before the charge: a table over the publication budget, or whose
  columns do not fit the schema, stops start-up and charges nothing.
* Served free: reading it charges no analyst's grant and needs a key.
* A failure after the charge is one generic error, stored, never re-made.
* Transcript: the demo table and a neighbour with one hostile row, with the
  noise fixed, give the same ledger rows and the same served body but for the
  synthetic values.
* The configuration's mistakes name their line.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import dpkit.synth.mst as mst
from dpkit.accounting import Accountant, Budget
from dpkit.client import Client
from dpkit.errors import PrivacyWarning
from dpkit.service import synthetic
from dpkit.service.app import create_app
from dpkit.service.config import ConfigError, ServiceConfig, load_config, parse_config
from dpkit.service.demo import build_demo
from dpkit.service.runtime import Runtime
from dpkit.service.store import DuplicateRequestError, Store
from dpkit.service.synthetic import FAILED

TABLE = """\
rows = 40
epsilon = 1.0
delta = 1e-9
columns = ["age", "district"]
bins = 4
"""


def _service(
    directory: Path,
    table: str = TABLE,
    cap: str = "publication_epsilon = 2.0\npublication_delta = 1e-6\n",
    **demo: Any,
) -> tuple[ServiceConfig, dict[str, str]]:
    """The demo service with a synthetic table declared on ``patients``."""
    _, keys = build_demo(directory, rows=300, **demo)
    path = directory / "service.toml"
    anchor = 'schema = "patients.schema.toml"\n'
    text = path.read_text().replace(
        anchor, f"{anchor}{cap}\n[datasets.patients.synthetic]\n{table}\n"
    )
    path.write_text(text)
    return load_config(path), keys


def _charges(config: ServiceConfig) -> list[Any]:
    """The rows of the patients' publication ledger."""
    return Store(config.store).publication_ledger("patients").read(0)


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _runtime(config: ServiceConfig) -> Runtime:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Runtime(config)


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[ServiceConfig, dict[str, str]]:
    """A demo service whose synthetic table was made once (one runtime started)."""
    config, keys = _service(tmp_path_factory.mktemp("synthetic"))
    _runtime(config).close()
    return config, keys


def test_two_runtimes_on_one_store_charge_once_and_serve_the_same_table(
    published: tuple[ServiceConfig, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, _ = published
    first = _charges(config)
    assert len(first) == 1 and first[0].cost.rho_declared is not None
    assert first[0].cost.epsilon <= 1.0 and first[0].cost.delta == pytest.approx(1e-9)
    served = _runtime(config).synthetic("alice", "patients", 0, 100)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a stored table must not be made again")

    monkeypatch.setattr("dpkit.tables.Session.synthesize", refuse)
    again = _runtime(config)  # a restart (or a second process) on the same store
    assert again.synthetic("bob", "patients", 0, 100) == served
    assert _charges(config) == first
    assert served["total_rows"] == 40 and len(served["rows"]) == 40
    assert set(served["rows"][0]) == {"age", "district"}


def test_charged_once_on_a_postgresql_store(tmp_path: Path, fresh_postgres_url: str) -> None:
    config, _ = _service(tmp_path)
    config = dataclasses.replace(config, store=fresh_postgres_url)
    first = _runtime(config).synthetic("alice", "patients", 0, 100)
    assert _runtime(config).synthetic("bob", "patients", 0, 100) == first
    assert len(_charges(config)) == 1


def test_the_table_is_served_free_with_its_guarantee_and_report(
    published: tuple[ServiceConfig, dict[str, str]],
) -> None:
    config, keys = published
    http = TestClient(create_app(config, runtime=_runtime(config)))
    before = http.get("/api/v1/budget", headers=_auth(keys["alice"])).json()
    for _ in range(3):
        response = http.get(
            "/api/v1/datasets/patients/synthetic?offset=10&limit=5", headers=_auth(keys["alice"])
        )
        assert response.status_code == 200
    body = response.json()
    assert body["synthetic"] is True and body["name"] == "synthetic"
    assert body["offset"] == 10 and len(body["rows"]) == 5 and body["total_rows"] == 40
    guarantee = body["guarantee"]
    assert guarantee["method"] == "mst" and guarantee["delta"] == pytest.approx(1e-9)
    assert 0.99 < guarantee["epsilon"] <= 1.0 and guarantee["rho"] > 0
    assert guarantee["neighbouring"] == "add/remove one row"
    report = body["report"]
    assert [m["columns"] for m in report["marginals"]] == [
        ["age"],
        ["district"],
        ["age", "district"],
    ]
    assert all(m["sigma"] > 0 and m["expected_l1_error"] > 0 for m in report["marginals"])
    assert sum(report["steps"].values()) == pytest.approx(guarantee["rho"])
    # free: no grant was charged, and the ledgers of every analyst are untouched
    assert http.get("/api/v1/budget", headers=_auth(keys["alice"])).json() == before
    assert Store(config.store).ledger("alice", "patients").read(0) == []
    assert len(_charges(config)) == 1
    admin = http.get("/api/v1/admin/datasets", headers=_auth(keys["admin"])).json()["datasets"]
    spent = admin[0]["publications"]["spent"]
    assert spent["delta"] == pytest.approx(1e-6) and 0 < spent["epsilon"] <= 2.0
    assert admin[0]["publications"]["cap"] == {"epsilon": 2.0, "delta": 1e-6}
    # a key is needed, and a dataset is found only with a grant on it
    assert http.get("/api/v1/datasets/patients/synthetic").status_code == 401
    described = http.get("/api/v1/datasets/patients", headers=_auth(keys["alice"])).json()
    assert described["synthetic"] == {"name": "synthetic", "method": "mst", "rows": 40}
    unknown = http.get("/api/v1/datasets/nowhere/synthetic", headers=_auth(keys["alice"]))
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_dataset"
    frame = Client("http://testserver", keys["bob"], http=http).dataset("patients").synthetic()
    assert len(frame) == 40 and list(frame.columns) == ["age", "district"]
    assert frame.attrs["guarantee"] == guarantee and frame.attrs["report"] == report
    too_many = http.get(
        "/api/v1/datasets/patients/synthetic?limit=100000", headers=_auth(keys["alice"])
    )
    assert too_many.status_code == 422
    beyond = http.get("/api/v1/datasets/patients/synthetic?offset=99", headers=_auth(keys["bob"]))
    assert beyond.status_code == 200 and beyond.json()["rows"] == []
    negative = http.get("/api/v1/datasets/patients/synthetic?offset=-1", headers=_auth(keys["bob"]))
    assert negative.status_code == 422


def test_a_page_holds_a_bounded_number_of_values_and_the_client_reads_them_all(
    published: tuple[ServiceConfig, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, keys = published
    monkeypatch.setattr(synthetic, "MAX_PAGE_VALUES", 20)  # 10 rows of 2 columns a page
    http = TestClient(create_app(config, runtime=_runtime(config)))
    page = http.get("/api/v1/datasets/patients/synthetic", headers=_auth(keys["alice"])).json()
    assert len(page["rows"]) == 10 and page["total_rows"] == 40
    whole = http.get("/api/v1/datasets/patients/synthetic?limit=10", headers=_auth(keys["alice"]))
    frame = Client("http://testserver", keys["alice"], http=http).dataset("patients").synthetic()
    first = frame.iloc[:10].astype(object)
    assert (
        len(frame) == 40
        and first.where(first.notna(), None).to_dict("records") == whole.json()["rows"]
    )


def test_twin_queries_answer_from_the_published_table(
    published: tuple[ServiceConfig, dict[str, str]],
) -> None:
    config, _ = published
    runtime = _runtime(config)
    count = {"kind": "count", "epsilon": 5.0}
    body = runtime.query("alice", "patients", count, twin=True).body
    assert body["twin"] is True and body["charged"] is False
    assert abs(body["release"]["value"] - 40) < 10  # the table's 40 rows, not twin_rows
    assert config.twin_rows == 1000
    assert Store(config.store).ledger("alice", "patients").read(0) == []


def test_a_dataset_without_a_table_says_so(tmp_path: Path) -> None:
    config, keys = build_demo(tmp_path, rows=300)
    http = TestClient(create_app(config))
    response = http.get("/api/v1/datasets/patients/synthetic", headers=_auth(keys["alice"]))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "no_synthetic_table"


def test_other_parameters_under_the_same_name_stop_start_up_and_a_new_name_charges_again(
    tmp_path: Path,
) -> None:
    config, _ = _service(tmp_path)
    _runtime(config).close()
    assert len(_charges(config)) == 1
    changed, _ = _service(tmp_path, TABLE.replace("epsilon = 1.0", "epsilon = 0.5"))
    with pytest.raises(ConfigError, match="new name") as err:
        _runtime(changed)
    assert "charged" in str(err.value) and "[datasets.patients.synthetic]" in str(err.value)
    assert len(_charges(config)) == 1  # nothing spent by the refusal
    renamed, _ = _service(tmp_path, 'name = "v2"\n' + TABLE.replace("1.0", "0.5"))
    runtime = _runtime(renamed)
    assert len(_charges(config)) == 2
    body = runtime.synthetic("alice", "patients", 0, 1)
    assert body["name"] == "v2" and body["guarantee"]["epsilon"] <= 0.5


@pytest.mark.parametrize(
    ("table", "cap", "fragment"),
    [
        (TABLE, "publication_epsilon = 0.5\npublication_delta = 1e-6\n", "publication budget"),
        (TABLE.replace('"district"', '"condition"'), None, "condition"),
        (TABLE.replace('"district"', '"salary"'), None, "unknown column"),
    ],
)
def test_refusals_before_the_charge_stop_start_up_and_charge_nothing(
    tmp_path: Path, table: str, cap: str | None, fragment: str
) -> None:
    config, _ = _service(tmp_path, table, **({} if cap is None else {"cap": cap}))
    with pytest.raises(ConfigError, match=fragment) as err:
        _runtime(config)
    assert "[datasets.patients.synthetic]" in str(err.value)
    assert _charges(config) == []
    assert Store(config.store).publication("patients", "synthetic") is None


def test_a_failure_after_the_charge_is_one_generic_error_and_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("age 37 in Ba Dinh")  # data-dependent text that must not leak

    monkeypatch.setattr(mst, "fit_and_sample", broken)
    config, keys = _service(tmp_path)
    http = TestClient(create_app(config, runtime=_runtime(config)))  # the service still starts
    response = http.get("/api/v1/datasets/patients/synthetic", headers=_auth(keys["alice"]))
    assert response.status_code == 500
    assert response.json()["error"] == {"code": "release_failed", "message": FAILED}
    assert len(_charges(config)) == 1  # the charge stands
    monkeypatch.undo()
    again = TestClient(create_app(config, runtime=_runtime(config)))  # not made again
    response = again.get("/api/v1/datasets/patients/synthetic", headers=_auth(keys["alice"]))
    assert response.json()["error"] == {"code": "release_failed", "message": FAILED}
    assert len(_charges(config)) == 1


def test_a_name_is_charged_once_whatever_processes_race(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    store.create()
    cap = Budget(1.0, 1e-6)
    first = Accountant(cap, ledger=store.publication_ledger("d", "t", {"a": 1}), composition="zcdp")
    other = Accountant(cap, ledger=store.publication_ledger("d", "t", {"a": 2}), composition="zcdp")
    first.charge(Budget(0.1, 0.0), "table")
    with pytest.raises(DuplicateRequestError):
        other.charge(Budget(0.1, 0.0), "table")  # refused before its budget is checked
    assert len(store.publication_ledger("d").read(0)) == 1
    stored = store.publication("d", "t")
    assert stored is not None and stored.status == "charged" and stored.params == {"a": 1}
    # the cap composes every table of the dataset
    third = Accountant(cap, ledger=store.publication_ledger("d", "u", {}), composition="zcdp")
    assert third.spent == first.spent and third.spent.epsilon > 0


def test_transcript_a_hostile_neighbour_changes_only_the_synthetic_values(
    tmp_path: Path,
) -> None:
    bodies, charges = [], []
    for name, hostile in (("table", None), ("neighbour", "1e12,1e12,true,Nowhere\n")):
        directory = tmp_path / name
        build_demo(directory, rows=300)
        if hostile is not None:
            with (directory / "patients.csv").open("a") as f:
                f.write(hostile)
        config, _ = _service(directory, noise_seed=5)
        bodies.append(_runtime(config).synthetic("alice", "patients", 0, 100))
        charges.append([dataclasses.replace(r, timestamp=0.0) for r in _charges(config)])
    table, neighbour = bodies
    assert charges[0] == charges[1]
    assert table.pop("rows") != [] and neighbour.pop("rows") != []
    assert table == neighbour  # guarantee, report (σ, ρ, cells, pairs), sizes: all public


@pytest.mark.parametrize(
    ("table", "cap", "fragment"),
    [
        (TABLE, "", "publication_epsilon and publication_delta"),
        (TABLE + "rho = 0.01\n", None, "exactly one of epsilon"),
        (TABLE.replace("delta = 1e-9\n", ""), None, "give delta"),
        (TABLE + 'workload = [["age"]]\n', None, 'workload goes with method = "aim"'),
        (TABLE.replace("rows = 40", "rows = 1000000"), None, "rows must be at most"),
        (TABLE + 'method = "gan"\n', None, "method must be"),
        (TABLE + "seed = 3\n", None, "unknown setting 'seed'"),
    ],
)
def test_configuration_mistakes_name_their_line(
    tmp_path: Path, table: str, cap: str | None, fragment: str
) -> None:
    build_demo(tmp_path, rows=20)
    path = tmp_path / "service.toml"
    anchor = 'schema = "patients.schema.toml"\n'
    cap = "publication_epsilon = 2.0\npublication_delta = 1e-6\n" if cap is None else cap
    text = path.read_text().replace(
        anchor, f"{anchor}{cap}\n[datasets.patients.synthetic]\n{table}\n"
    )
    with pytest.raises(ConfigError, match="line") as err:
        parse_config(text, base=tmp_path)
    assert fragment in str(err.value)


def test_a_publication_cap_without_a_table_is_refused(tmp_path: Path) -> None:
    build_demo(tmp_path, rows=20)
    text = (tmp_path / "service.toml").read_text()
    text = text.replace("[analysts.alice]", "publication_epsilon = 1.0\n\n[analysts.alice]", 1)
    with pytest.raises(ConfigError, match="publication_epsilon"):
        parse_config(text, base=tmp_path)
