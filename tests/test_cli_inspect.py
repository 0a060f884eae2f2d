"""``dpkit inspect``: for the data owner, what the declared schema makes of a file (issue 28).

The report is NOT private (it says so first and last); it counts what the query
path will do to each value, so its "does not parse" is checked against the
engine's own conversion (a property test) rather than against a copy of it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dpkit.accounting import Accountant, Budget
from dpkit.cli import app
from dpkit.tables.inspect import NOT_PRIVATE, inspect_file

runner = CliRunner(env={"COLUMNS": "500", "TERMINAL_WIDTH": "500"})


@pytest.fixture
def people(tmp_path: Path) -> Path:
    path = tmp_path / "people.csv"
    path.write_text(
        "age,district,when,note\n"
        "30,north,2020-01-01,a\n"
        "41,south,2020-02-30,b\n"
        "abc,north,,c\n"
        "200,east,2021-01-01,d\n"
        "inf,north,2021-05-05,e\n"
        ",south,,f\n"
    )
    return path


DECLARED = ["--type", "age=DOUBLE,district=VARCHAR,when=DATE", "--bounds", "age=0,120",
            "--domain", "district=north,south"]  # fmt: skip


def test_the_report_counts_what_queries_will_do_and_says_it_is_not_private(
    people: Path,
) -> None:
    result = runner.invoke(app, ["inspect", str(people), *DECLARED])
    assert result.exit_code == 1, result.output  # problems listed
    lines = result.stdout.strip().splitlines()
    assert lines[0] == NOT_PRIVATE and lines[-1] == NOT_PRIVATE
    assert "not share it with analysts" in NOT_PRIVATE
    row = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
           for line in lines if line.startswith("│")}  # fmt: skip
    # declared type, missing, does not parse, not finite, outside --bounds, not in --domain
    assert row["age"] == ["DOUBLE", "1", "1 (e.g. 'abc')", "1 (e.g. 'inf')", "1 (e.g. '200')", "-"]
    assert row["district"] == ["VARCHAR", "0", "0", "-", "-", "1 (e.g. 'east')"]
    assert row["when"] == ["DATE", "2", "1 (e.g. '2020-02-30')", "-", "-", "-"]
    assert row["note"][0] == "none (--infer-types: VARCHAR)"
    assert "--type note=VARCHAR" in result.stdout  # how to declare the rest
    assert "Traceback" not in result.output


def test_a_clean_file_exits_0_and_json_carries_the_notice(tmp_path: Path) -> None:
    path = tmp_path / "clean.csv"
    path.write_text("age,district\n30,north\n41,south\n")
    line = ["inspect", str(path), "--type", "age=BIGINT,district=VARCHAR", "--json"]
    result = runner.invoke(app, line)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert next(iter(report)) == "not_private" and report["not_private"] == NOT_PRIVATE
    assert report["clean"] is True and report["rows"] == 2
    notices = result.stderr.strip().splitlines()
    assert notices[0] == NOT_PRIVATE and notices[-1] == NOT_PRIVATE


def test_inspect_charges_nothing_and_creates_no_ledger(people: Path) -> None:
    before = sorted(os.listdir(os.environ["DPKIT_LEDGER_DIR"]))
    runner.invoke(app, ["inspect", str(people), *DECLARED])
    assert sorted(os.listdir(os.environ["DPKIT_LEDGER_DIR"])) == before


def test_ragged_rows_are_reported_by_line(tmp_path: Path) -> None:
    path = tmp_path / "ragged.csv"
    path.write_text('age,name\n30,a\n40,"b,c",x\n50,d\n60\n')
    result = runner.invoke(app, ["inspect", str(path), "--type", "age=DOUBLE,name=VARCHAR"])
    assert result.exit_code == 1, result.output
    assert "2 ragged row(s): the header has 2 fields; line 3 has 3, line 5 has 1" in result.stdout
    assert "Traceback" not in result.output and "column0" not in result.output


def test_an_encoding_problem_is_reported_with_the_flag_that_fixes_it(tmp_path: Path) -> None:
    path = tmp_path / "villes.csv"
    path.write_bytes("age,ville\n31,Paris\n45,Besançon\n".encode("latin-1"))
    line = ["inspect", str(path), "--type", "age=DOUBLE,ville=VARCHAR"]
    result = runner.invoke(app, line)
    assert result.exit_code == 1 and "line 3 is not valid utf-8 text" in result.stdout
    assert "--encoding" in result.stdout and "Traceback" not in result.output
    fixed = runner.invoke(app, [*line, "--encoding", "latin-1"])
    assert fixed.exit_code == 0, fixed.output


def test_parquet_is_read_as_queries_read_it(tmp_path: Path) -> None:
    path = tmp_path / "people.parquet"
    pd.DataFrame({"age": ["31", "x", None], "n": [1, 2, 3]}).to_parquet(path)
    report = inspect_file(path, {"age": "DOUBLE"})
    age, n = report.columns
    assert (age.missing, age.not_parsing, age.examples["not_parsing"]) == (1, 1, ["x"])
    assert n.declared is None and n.inferred == "BIGINT"  # the file's schema
    assert report.format == "Parquet" and not report.clean


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--type", "age=NUMBERISH"], "--type"),
        (["--type", "nope=DOUBLE"], "--type"),
        (["--type", "district=VARCHAR", "--bounds", "district=0,1"], "--bounds"),
        (["--bounds", "age=0,120"], "--type age=TYPE"),
        (["--type", "age=DOUBLE", "--bounds", "age=0"], "--bounds"),
        (["--type", "age=DOUBLE", "--bounds", "age=5,1"], "--bounds"),
        (["--domain", "district"], "--domain"),
        (["--encoding", "klingon"], "unknown encoding"),
    ],
)
def test_a_bad_command_line_is_one_line_naming_the_flag(
    people: Path, extra: list[str], flag: str
) -> None:
    result = runner.invoke(app, ["inspect", str(people), *extra])
    assert result.exit_code == 2, result.output
    assert flag in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("where", ["missing.csv", "."])
def test_a_bad_path_is_a_usage_error(tmp_path: Path, where: str) -> None:
    result = runner.invoke(app, ["inspect", str(tmp_path / where)])
    assert result.exit_code == 2 and "Traceback" not in result.output


# -- agreement with the engine: "does not parse" is what a query reads as missing -------------

_ENTRIES = st.one_of(
    st.sampled_from(["", "1", " 2 ", "1e3", "0x10", "1_000", "-0", "nan", "inf", "-Infinity",
                     "1e999", "9223372036854775808", "true", "FALSE", "t", "2024-02-29",
                     "2023-02-29", "2024-13-01", "1.5", "12abc", "NULL", "é"]),
    st.text(alphabet="0123456789.-+eE xT:", max_size=8),
)  # fmt: skip
_TYPES = ["DOUBLE", "BIGINT", "INTEGER", "DATE", "BOOLEAN", "DECIMAL(5,2)", "VARCHAR"]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(entries=st.lists(_ENTRIES, min_size=1, max_size=8), type_name=st.sampled_from(_TYPES))
def test_does_not_parse_agrees_with_the_query_engine(
    tmp_path: Path, entries: list[str], type_name: str
) -> None:
    import dpkit

    path = tmp_path / "x.csv"
    body = "".join('"' + e.replace('"', '""') + '"\n' for e in entries)
    path.write_text("x\n" + body, encoding="utf-8")
    session = dpkit.Session.from_csv(
        path, types={"x": type_name}, accountant=Accountant(Budget(1.0))
    )
    engine = session.engine
    seen = engine._connection.sql(f"SELECT x FROM {engine._table}").fetchall()  # type: ignore[attr-defined]
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)["x"].tolist()
    (column,) = inspect_file(path, {"x": type_name}).columns
    # DuckDB reads an empty field (quoted or not) as NULL: missing, not "does not parse".
    assert column.missing == sum(r == "" for r in raw)
    assert column.not_parsing == sum(v is None and r != "" for (v,), r in zip(seen, raw))
    if type_name == "DOUBLE":
        finite = [v for (v,) in seen if v is not None and not math.isfinite(v)]
        assert column.not_finite == len(finite)


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("dup.csv", b"a,a\n1,2\n", "header row naming every column once"),
        ("broken.parquet", b"PAR1 not really\xff", "could not open the Parquet file"),
    ],
)
def test_an_unreadable_file_is_a_reported_problem_not_a_traceback(
    tmp_path: Path, name: str, content: bytes, said: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    result = runner.invoke(app, ["inspect", str(path), "--type", "a=DOUBLE"])
    assert result.exit_code == 1, result.output
    assert said in result.stdout and "Traceback" not in result.output
    assert result.stdout.strip().splitlines()[-1] == NOT_PRIVATE
