"""Service admin feedback: grants above ε = 10 warn; the demo banner hides dead keys."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from dpkit.accounting import Budget
from dpkit.cli import app
from dpkit.errors import PrivacyWarning
from dpkit.service.app import create_app
from dpkit.service.demo import build_demo
from dpkit.service.store import Store


def test_a_grant_above_epsilon_10_warns_in_the_library(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    store.create()
    store.add_analyst("erin", actor="admin")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        store.add_grant("erin", "patients", 6, 0, actor="admin")  # ε = 6: quiet
        store.add_grant("erin", "patients", 4, 0, actor="admin")  # ε = 10 exactly: quiet
    with pytest.warns(PrivacyWarning, match=r"epsilon=10\.5 is above 10: the guarantee is weak"):
        store.add_grant("erin", "patients", 0.5, 0, actor="admin")  # the total passes 10
    store.close()


def test_the_admin_api_response_carries_the_warning(tmp_path: Path) -> None:
    config, keys = build_demo(tmp_path, rows=300)
    http = TestClient(create_app(config))
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    small = {"analyst": "bob", "dataset": "patients", "epsilon": 0.5, "delta": 0}
    body = http.post("/api/v1/admin/grants", json=small, headers=admin).json()
    assert body["epsilon"] == 1.0 and "warning" not in body
    large = {"analyst": "alice", "dataset": "patients", "epsilon": 11, "delta": 0}
    with pytest.warns(PrivacyWarning):
        body = http.post("/api/v1/admin/grants", json=large, headers=admin).json()
    assert body["epsilon"] == 12.0
    assert body["warning"].startswith("the grant's epsilon=12 is above 10: the guarantee is weak")


def test_dpkit_admin_grant_shows_the_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    import dpkit.service._cli as service_cli

    class _Admin:
        def __init__(self, total: float) -> None:
            self.total = total

        def grant(self, *_: Any, **__: Any) -> Budget:
            return Budget(self.total, 0)

    runner = CliRunner()
    for total, warned in ((2.0, False), (12.0, True)):
        monkeypatch.setattr(service_cli, "_admin", lambda url, key, t=total: _Admin(t))
        result = runner.invoke(
            app,
            ["admin", "grant", "erin", "patients", "--epsilon", "1"],
            env={"DPKIT_ADMIN_KEY": "k"},
        )
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith("erin on patients: ε=")
        assert ("warning: the grant's epsilon=12 is above 10" in result.stderr) is warned


def test_the_demo_banner_does_not_print_revoked_or_rotated_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    from dpkit.service._cli import serve

    config, keys = build_demo(tmp_path)
    store = Store(config.store)
    store.create()
    for name in config.analysts:
        store.ensure_analyst(name, config.analysts[name])
    store.revoke("bob", actor="admin")
    store.rotate_key("alice", actor="admin")
    store.close()
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    serve(None, True, tmp_path, None, None)
    err = capsys.readouterr().err
    assert keys["admin"] in err
    assert keys["bob"] not in err and keys["alice"] not in err
    assert "bob    (key revoked or rotated: not shown)" in err
    # A fresh demo directory shows every key.
    fresh = tmp_path / "fresh"
    _, fresh_keys = build_demo(fresh)
    serve(None, True, fresh, None, None)
    err = capsys.readouterr().err
    assert all(key in err for key in fresh_keys.values())
