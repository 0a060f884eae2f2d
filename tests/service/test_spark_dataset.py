"""A dataset served through Spark (``format = "spark"``): answers, twin, and no failure on bad cells."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from dpkit.demo import patients
from dpkit.service.config import parse_config
from dpkit.service.runtime import Runtime
from dpkit.service.store import hash_key, make_key

pytestmark = [pytest.mark.spark, pytest.mark.slow]
pytest.importorskip("pyspark")


def test_a_spark_dataset_answers_like_the_others(tmp_path: Path) -> None:
    table = patients(n=400).astype({"age": "object"})
    table.loc[0, "age"] = "not a number"  # a malformed cell: a missing value, not a failure
    table.to_csv(tmp_path / "p.csv", index=False)
    text = f"""
[service]
store = "s.db"
[datasets.p]
source = "p.csv"
format = "spark"
types = {{ age = "DOUBLE", weight = "DOUBLE", condition = "BOOLEAN", district = "VARCHAR" }}
[datasets.p.columns.age]
bounds = [0, 120]
[datasets.p.columns.district]
domain = ["Ba Dinh", "Hoan Kiem", "Dong Da", "Cau Giay", "Tay Ho"]
[analysts.a]
key_hash = "{hash_key(make_key())}"
[[grants]]
analyst = "a"
dataset = "p"
epsilon = 10
"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runtime = Runtime(parse_config(text, base=tmp_path))
    columns = runtime.describe("a", "p")["columns"]
    assert columns["age"]["type"] == "double" and columns["district"]["type"] == "string"
    mean = {"kind": "mean", "column": "age", "epsilon": 1.0, "bounds": [0, 120]}
    body = runtime.query("a", "p", mean).body
    assert 30 < body["release"]["value"] < 65 and body["charged"] is True
    grouped = {**mean, "group_by": ["district"]}
    assert len(runtime.query("a", "p", grouped).body["release"]["keys"]) == 5
    assert runtime.query("a", "p", mean, twin=True).body["twin"] is True
    assert runtime.budget("a", "p")["remaining"]["epsilon"] == pytest.approx(8.0)
