"""Issue 26 A3 in the service: a dataset's schema and twin come from the config's types only.

A SQLite table read without DuckDB's sqlite extension went through pandas,
which types a column from its rows: one NULL or one text value in a column
declared BIGINT changed the published type, the twin and the answers' shape.
"""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest

from dpkit.service.config import ConfigError, parse_config
from dpkit.service.runtime import Runtime
from dpkit.service.store import hash_key, make_key

ROWS: list[tuple[Any, ...]] = [(i, 20.0 + i, "ab"[i % 2]) for i in range(1, 31)]
HOSTILE: dict[str, tuple[Any, ...]] = {
    "none": (),
    "null": ((None, None, None),),
    "text": (("seven", "oops", "c"),),
    "blob": ((b"\xff\x00", b"\x01", b"\xfe"),),
    "huge": ((2**63 - 1, 1e308, "z" * 300),),
}


def _runtime(tmp: Path, extra: tuple[tuple[Any, ...], ...], types: str) -> Runtime:
    with sqlite3.connect(tmp / "p.db") as db:
        db.execute("CREATE TABLE people (n BIGINT, age REAL, g TEXT)")
        db.executemany("INSERT INTO people VALUES (?, ?, ?)", [*ROWS, *extra])
    db.close()
    text = f"""
[service]
store = "s.db"
[datasets.p]
source = "p.db"
table = "people"
{types}
[datasets.p.columns.age]
bounds = [0, 120]
[analysts.a]
key_hash = "{hash_key(make_key())}"
[[grants]]
analyst = "a"
dataset = "p"
epsilon = 10
"""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Runtime(parse_config(text, base=tmp))


TYPES = 'types = { n = "BIGINT", age = "DOUBLE", g = "VARCHAR" }'


@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_a_hostile_sqlite_row_publishes_the_same_schema_and_twin(
    tmp_path: Path, hostile: str
) -> None:
    seen = []
    for name, extra in (("clean", ()), (hostile, HOSTILE[hostile])):
        directory = tmp_path / name
        directory.mkdir()
        runtime = _runtime(directory, extra, TYPES)
        described = runtime.describe("a", "p")
        twin = runtime.twins["p"]
        mean = {"kind": "mean", "column": "age", "epsilon": 0.5, "bounds": [0, 120]}
        body = runtime.query("a", "p", mean).body
        seen.append(
            (
                described["columns"],
                twin.columns,
                twin.column_kinds,
                sorted(body),
                sorted(body["release"]),
            )
        )
    assert seen[0] == seen[1]
    assert seen[0][0]["n"]["type"] == "BIGINT" and seen[0][1] == {
        "n": "BIGINT",
        "age": "DOUBLE",
        "g": "VARCHAR",
    }


def test_a_dataset_with_an_undeclared_column_does_not_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no declared type|types"):
        _runtime(tmp_path, (), 'types = { n = "BIGINT", age = "DOUBLE" }')
