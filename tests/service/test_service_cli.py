"""``dpkit serve``, ``dpkit remote`` and ``dpkit admin`` against a live service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpkit.cli import app

runner = CliRunner()


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def test_remote_and_admin_verbs(live_service: tuple[str, dict[str, str]]) -> None:
    url, keys = live_service
    analyst = {"DPKIT_URL": url, "DPKIT_KEY": keys["alice"]}
    code, out = _run("remote", "datasets", env=analyst)
    assert code == 0 and json.loads(out)[0]["name"] == "patients"
    code, out = _run(
        "remote", "query", "patients", "mean", "age", "--epsilon", "0.05", "--bounds", "0", "120",
        "--where", "district==Ba Dinh", env=analyst,
    )  # fmt: skip
    body = json.loads(out)
    assert code == 0 and body["twin"] is False and 0 <= body["release"]["value"] <= 120
    code, out = _run(
        "remote", "query", "patients", "count", "--epsilon", "0.05", "--cost", env=analyst
    )
    assert code == 0 and json.loads(out)["affordable"] is True
    code, out = _run("remote", "budget", env=analyst)
    assert code == 0 and "patients" in out
    code, out = _run("remote", "history", env=analyst)
    assert code == 0 and len(json.loads(out)) == 1
    old = runner.invoke(
        app,
        ["remote", "query", "patients", "mean", "age", "--epsilon", "0.05", "--bounds", "0,120",
         "--where", "district=Ba Dinh", "--twin"],
        env=analyst,
    )  # fmt: skip  # the old remote syntax, one more release
    assert old.exit_code == 0 and json.loads(old.stdout)["twin"] is True
    assert "--bounds 0 120" in old.stderr and "district==VALUE" in old.stderr
    code, out = _run(
        "remote", "query", "patients", "mean", "nope", "--epsilon", "0.1", "--bounds", "0,1",
        env=analyst,
    )  # fmt: skip
    assert code == 2 and "unknown column" in out and "Traceback" not in out
    admin = {"DPKIT_URL": url, "DPKIT_ADMIN_KEY": keys["admin"]}
    code, out = _run("admin", "add", "erin", env=admin)
    assert code == 0 and out.strip().startswith("dpk_")
    code, out = _run("admin", "grant", "erin", "patients", "--epsilon", "0.2", env=admin)
    assert code == 0 and "0.2" in out
    code, out = _run("admin", "analysts", env=admin)
    assert code == 0 and any(a["name"] == "erin" for a in json.loads(out))
    code, out = _run("admin", "audit", "--limit", "3", env=admin)
    assert code == 0 and len(json.loads(out)) == 3
    code, out = _run("admin", "analysts", env=analyst | {"DPKIT_ADMIN_KEY": keys["alice"]})
    assert code == 2 and "admin key" in out


def test_hash_key_and_missing_keys(tmp_path: Path) -> None:
    code, out = _run("admin", "hash-key")
    assert code == 0 and "key:  dpk_" in out and "hash: " in out
    code, out = _run("admin", "hash-key", "not-a-key")
    assert code == 2
    code, out = _run("remote", "budget", env={"DPKIT_KEY": ""})
    assert code == 2 and "DPKIT_KEY" in out


def test_serve_refuses_a_bad_config_with_its_line(tmp_path: Path) -> None:
    config = tmp_path / "service.toml"
    config.write_text('[service]\nstore = "s.db"\n\n[datasets.p]\nsource = "missing.csv"\n')
    code, out = _run("serve", "--config", str(config))
    assert code == 2 and "line 5" in out and "does not exist" in out
    code, out = _run("serve")
    assert code == 2 and "--demo" in out


@pytest.mark.parametrize("fmt", ["parquet", "duckdb", "sqlite"])
def test_every_file_format_serves(tmp_path: Path, fmt: str) -> None:
    import sqlite3
    import warnings

    import duckdb

    from dpkit.demo import patients
    from dpkit.service.config import parse_config
    from dpkit.service.runtime import Runtime
    from dpkit.service.store import hash_key, make_key

    frame = patients(n=300)
    if fmt == "parquet":
        frame.to_parquet(tmp_path / "p.parquet")
        source = 'source = "p.parquet"'
    elif fmt == "duckdb":
        con = duckdb.connect(str(tmp_path / "p.duckdb"))
        con.execute("CREATE TABLE patients AS SELECT * FROM frame")
        con.close()
        source = 'source = "p.duckdb"\ntable = "patients"'
    else:
        with sqlite3.connect(tmp_path / "p.db") as con:
            frame.to_sql("patients", con, index=False)
        source = 'source = "p.db"\ntable = "patients"'
    text = f"""
[service]
store = "s.db"
[datasets.p]
{source}
types = {{ age = "DOUBLE", weight = "DOUBLE", condition = "BOOLEAN", district = "VARCHAR" }}
[datasets.p.columns.age]
bounds = [0, 120]
[analysts.a]
key_hash = "{hash_key(make_key())}"
[[grants]]
analyst = "a"
dataset = "p"
epsilon = 1
"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runtime = Runtime(parse_config(text, base=tmp_path))
    mean = {"kind": "mean", "column": "age", "epsilon": 0.5, "bounds": [0, 120]}
    assert 20 < runtime.query("a", "p", mean).body["release"]["value"] < 80
    assert runtime.query("a", "p", mean, twin=True).body["twin"] is True
