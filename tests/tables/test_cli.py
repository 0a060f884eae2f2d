"""``dpkit query``'s plain function: Rich table or JSON, errors as exit code 1."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from dpkit._cli_query import QueryOptions
from dpkit.tables._cli import query_command

from .conftest import SECRET


@pytest.fixture
def csv(people: pd.DataFrame, tmp_path: Path) -> Path:
    path = tmp_path / "people.csv"
    people.assign(note=SECRET).to_csv(path, index=False)
    return path


TYPES = "age=DOUBLE,income=DOUBLE,district=VARCHAR,pid=BIGINT,smoker=BOOLEAN,note=VARCHAR"


_LEDGER = ("ledger", "budget", "budget_delta", "new_ledger")
_SOURCE = ("schema", "types", "infer_types", "privacy_unit", "max_contributions")


def run(table: Path, kind: str, column: str | None, **kwargs: object) -> tuple[int, str]:
    """``dpkit query TABLE KIND COLUMN`` with the options as keywords (grouped as the CLI does)."""
    buffer = io.StringIO()
    kwargs.setdefault("budget", 100.0)  # creates the file's default ledger on first use
    kwargs.setdefault("budget_delta", 1e-3)
    kwargs.setdefault("types", [TYPES])  # every column declared (issue 26 A3)
    ledger = {k: kwargs.pop(k) for k in _LEDGER if k in kwargs}
    source = {k: kwargs.pop(k) for k in _SOURCE if k in kwargs}
    as_json = bool(kwargs.pop("as_json", False))
    if kwargs.get("keys") == ["private"]:  # the current spelling of the deprecated --keys private
        kwargs["keys"], kwargs["private_keys"] = None, True
    query = QueryOptions(kind, column, **kwargs)  # type: ignore[arg-type]
    console = Console(file=buffer, width=1000)
    code = query_command(
        table, query, source=source, ledger=ledger, as_json=as_json, console=console
    )
    return code, buffer.getvalue()


def test_json_group_by_mean(csv: Path) -> None:
    code, out = run(
        csv,
        "mean",
        "age",
        epsilon=0.5,
        bounds=(0, 120),
        group_by=["district"],
        keys=["A", "B", "Z"],
        where=["smoker==false"],
        as_json=True,
    )
    assert code == 0
    payload = json.loads(out)
    assert [r["group"]["district"] for r in payload["results"]] == ["A", "B", "Z"]
    assert payload["epsilon"] == 0.5 and payload["remaining"]["epsilon"] == 99.5
    for r in payload["results"]:
        assert r["ci"][0] <= r["value"] <= r["ci"][1]


def test_table_output_and_schema_file(csv: Path, tmp_path: Path) -> None:
    schema = tmp_path / "schema.toml"
    schema.write_text("[columns.age]\nbounds = [0, 120]\n", encoding="utf-8")
    code, out = run(csv, "median", "age", epsilon=0.5, schema=schema)
    assert code == 0 and "median(age)" in out and "rank error" in out
    code, out = run(csv, "histogram", "age", epsilon=0.5, bounds=(0, 120), bins=4)
    assert code == 0 and "[0, 30)" in out and "[90, 120]" in out
    code, out = run(
        csv, "count", None, epsilon=0.5, group_by=["district"], keys=["private"], delta=1e-6
    )
    assert code == 0 and "noisy count ≥" in out


def test_ledger_persists_between_invocations(csv: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "l.ledger"
    assert run(csv, "count", None, epsilon=0.4, budget=1.0, ledger=ledger)[0] == 0
    later = {"budget": None, "budget_delta": None}  # the ledger already records the budget
    code, out = run(csv, "count", None, epsilon=0.4, ledger=ledger, as_json=True, **later)
    assert code == 0 and json.loads(out)["remaining"]["epsilon"] == pytest.approx(0.2)
    code, out = run(csv, "count", None, epsilon=0.4, ledger=ledger, **later)
    assert code == 1 and "BudgetExceededError" in out and "epsilon short" in out


def test_a_file_without_a_ledger_needs_an_explicit_budget(csv: Path, tmp_path: Path) -> None:
    """Issue 11 D: no CLI verb runs on an unlimited budget by accident."""
    code, out = run(csv, "count", None, epsilon=0.4, budget=None, budget_delta=None)
    assert code == 1 and "--budget" in out and "no ledger yet" in out
    assert run(csv, "count", None, epsilon=0.4, budget=1.0, budget_delta=None)[0] == 0
    # The file's default ledger now holds its budget: later commands spend from it.
    code, out = run(csv, "count", None, epsilon=0.4, budget=None, as_json=True)
    assert code == 0 and json.loads(out)["remaining"]["epsilon"] == pytest.approx(0.2)
    code, out = run(csv, "count", None, epsilon=0.1, budget=5.0, budget_delta=None)
    assert code == 1 and "already holds the budget" in " ".join(out.split())  # Rich wraps
    other = tmp_path / "copy.csv"
    other.write_bytes(csv.read_bytes())
    ledger = next(iter(Path(__import__("os").environ["DPKIT_LEDGER_DIR"]).glob("*.ledger")))
    code, out = run(other, "count", None, epsilon=0.1, ledger=ledger, budget=None)
    assert code == 1 and "guards the dataset" in out


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("mean", "age"), {"epsilon": 1.0}, "no public bounds"),
        (("mean", "nope"), {"epsilon": 1.0, "bounds": (0, 1)}, "unknown column"),
        (("average", "age"), {"epsilon": 1.0}, "unknown query"),
        (("quantile", "age"), {"epsilon": 1.0, "bounds": (0, 1)}, "needs --q"),
        (("mean", "note"), {"epsilon": 1.0, "bounds": (0, 1)}, "stored as text"),
        (("count", None), {"epsilon": 1.0, "keys": ["A"]}, "--keys needs --group-by"),
    ],
)
def test_errors_exit_1_without_data(
    csv: Path, args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    code, out = run(csv, *args, **kwargs)
    assert code == 1 and message in out.replace("\n", " ") and SECRET not in out
