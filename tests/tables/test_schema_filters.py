"""Schemas (public metadata, files) and structured filters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.tables._declared import types_of

from dpkit.errors import InvalidParameterError
from dpkit.tables import Column, Condition, Schema
from dpkit.tables.filters import parse_where, parse_where_text

KINDS = {"age": "numeric", "district": "text", "smoker": "boolean", "day": "temporal"}


def test_schema_from_toml_json_and_dict(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text(
        '[columns.age]\nbounds = [0, 120]\nnulls = "replace"\nreplacement = 40\n\n'
        '[columns.district]\ndomain = ["A", "B"]\n',
        encoding="utf-8",
    )
    s = Schema.load(toml)
    assert s.get("age").bounds == (0.0, 120.0)
    assert s.get("age").nulls == "replace" and s.get("age").replacement == 40
    assert s.get("district").domain == ("A", "B")
    assert s.get("undeclared") == Column("undeclared")
    data = {"columns": {"age": {"bounds": [0, 120], "coarse_range": [0, 1000]}}}
    js = tmp_path / "s.json"
    js.write_text(json.dumps(data), encoding="utf-8")
    assert Schema.load(js).get("age").coarse_range == (0.0, 1000.0)
    assert Schema.from_dict(data) == Schema.load(js)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"bounds": [5, 1]}, "lo < hi"),
        ({"bounds": [0, float("inf")]}, "finite"),
        ({"domain": []}, "empty"),
        ({"domain": ["A", "A"]}, "twice"),
        ({"domain": ["A", None]}, "missing"),
        ({"nulls": "replace"}, "no replacement"),
        ({"nulls": "impute"}, "'drop' or 'replace'"),
        ({"replacement": 3}, "null policy is 'drop'"),
        ({"edges": [0, 5, 5]}, "strictly increasing"),
        ({"colour": "red"}, "unknown key"),
    ],
)
def test_schema_errors_say_what_is_wrong(spec: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        Schema.from_dict({"columns": {"x": spec}})


def test_schema_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="does not exist"):
        Schema.load(tmp_path / "nope.toml")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(InvalidParameterError, match="not valid json"):
        Schema.load(bad)
    other = tmp_path / "s.ini"
    other.write_text("", encoding="utf-8")
    with pytest.raises(InvalidParameterError, match="unknown schema file type"):
        Schema.load(other)
    with pytest.raises(InvalidParameterError, match="unknown schema section"):
        Schema.from_dict({"tables": {}})


def test_where_mapping_forms() -> None:
    conds = parse_where(
        {
            "district": ["A", "B"],
            "age": ("between", 18, 65),
            "smoker": True,
        },
        KINDS,
    )
    assert conds == (
        Condition("district", "in", ("A", "B")),
        Condition("age", ">=", 18),
        Condition("age", "<=", 65),
        Condition("smoker", "==", True),
    )
    assert parse_where({"age": None}, KINDS) == (Condition("age", "is null"),)
    assert parse_where({"age": ("not null",)}, KINDS) == (Condition("age", "not null"),)
    assert parse_where({"age": ("!=", 3.5)}, KINDS) == (Condition("age", "!=", 3.5),)
    assert parse_where([Condition("age", "<", 3)], KINDS) == (Condition("age", "<", 3),)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("age > 3", "does not take SQL"),
        ({"height": 3}, "unknown column 'height'.*'age', 'day', 'district', 'smoker'"),
        ({"age": "old"}, "numeric column with a str"),
        ({"district": 3}, "text column with a int"),
        ({"age": ("~", 3)}, "does not start with an operator"),
        ({"age": ("between", 3)}, "two values"),
        ({"age": float("nan")}, "finite"),
        ({"age": ("<", 1, 2)}, "exactly one value"),
        ({"age": ("in", "abc")}, "list of values"),
        ([Condition("age", "LIKE", 3)], "unknown filter operator"),
        (42, "mapping or a list"),
    ],
)
def test_where_errors(where: object, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        parse_where(where, KINDS)  # type: ignore[arg-type]


def test_where_text_for_the_command_line() -> None:
    assert parse_where_text(["district=A", "age>=18"], KINDS) == {
        "district": "A",
        "age": (">=", 18),
    }
    assert parse_where_text(["district=A,B"], KINDS) == {"district": ["A", "B"]}
    assert parse_where_text(["smoker=true", "age!=2.5"], KINDS) == {
        "smoker": True,
        "age": ("!=", 2.5),
    }
    with pytest.raises(InvalidParameterError, match="needs a number"):
        parse_where_text(["age>=old"], KINDS)
    with pytest.raises(InvalidParameterError, match="cannot read the filter"):
        parse_where_text(["age"], KINDS)
    with pytest.raises(InvalidParameterError, match="filtered twice"):
        parse_where_text(["age>1", "age<3"], KINDS)


def test_the_smallest_64_bit_integer_is_a_valid_literal() -> None:
    import pandas as pd

    from dpkit.tables import Session

    frame = pd.DataFrame({"n": pd.array([-(2**63), 0, 5], dtype="Int64")})
    s = Session.from_pandas(frame, types=types_of(frame), epsilon=10.0, rng=1)
    assert s.count(where={"n": -(2**63)}, epsilon=1.0).value is not None
    with pytest.raises(InvalidParameterError, match=r"outside the type.s range"):
        s.count(where={"n": -(2**63) - 1}, epsilon=1.0)
    with pytest.raises(InvalidParameterError, match=r"outside the type.s range"):
        s.count(where={"n": 2**63}, epsilon=1.0)
