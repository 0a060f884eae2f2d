"""One CLI pattern: the query options are defined once (from the query-kind registry) and read
the same way by ``dpkit query`` and ``dpkit remote query``; histogram methods have one spelling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from dpkit._cli_query import QUERY, SPEC_OPTIONS, QueryOptions, _old_bounds, kinds_of_types
from dpkit.cli import app
from dpkit.errors import InvalidParameterError
from dpkit.histograms.methods import PUBLISHERS_1D, PUBLISHERS_2D
from dpkit.tables.engines.base import Condition
from dpkit.tables.specs import PARAMETERS, QUERY_KINDS, QuerySpec

runner = CliRunner()
KINDS = {"age": "numeric", "district": "text", "smoker": "boolean", "day": "temporal"}


def _command(*path: str) -> Any:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def test_every_parameter_of_every_kind_has_one_option() -> None:
    """Adding a parameter to the registry without a command-line option fails here."""
    taken = {p for kind in QUERY_KINDS for p in PARAMETERS[kind]}
    assert taken == set(SPEC_OPTIONS)


def test_local_and_remote_query_share_their_options_word_for_word() -> None:
    local, remote = _command("query"), _command("remote", "query")
    shared = {p.name for p in QUERY.parameters}

    def described(command: Any) -> dict[str, tuple[object, ...]]:
        return {
            str(p.name): (tuple(p.opts), getattr(p, "help", None), p.nargs, p.multiple)
            for p in command.params
            if p.name in shared
        }

    assert described(local) == described(remote)
    assert set(described(local)) == shared
    for kind in QUERY_KINDS:  # the kinds in --help are the registry's
        assert kind in runner.invoke(app, ["remote", "query", "--help"]).output


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ({"where": ["district==A"]}, {"where": {"district": "A"}}),
        ({"where": ["district==A,B"]}, {"where": {"district": ["A", "B"]}}),
        ({"where": ["age>=18", "age<65"]}, {"where": [Condition("age", ">=", 18), Condition("age", "<", 65)]}),
        ({"where": ["smoker!=true"]}, {"where": {"smoker": ("!=", True)}}),
        ({"group_by": ["district"], "keys": ["A", "B"]}, {"group_by": "district", "keys": ["A", "B"]}),
        ({"group_by": ["district"], "private_keys": True, "delta": 1e-6}, {"group_by": "district", "keys": "private", "delta": 1e-6}),
        ({"group_by": ["district", "age"], "keys": ["A|30"]}, {"group_by": ["district", "age"], "keys": [("A", 30)]}),
    ],
)  # fmt: skip
def test_the_typed_query_is_the_library_spec(
    typed: dict[str, object], expected: dict[str, object]
) -> None:
    options = QueryOptions("mean", "age", epsilon=0.5, bounds=(0.0, 120.0), **typed)  # type: ignore[arg-type]
    want = QuerySpec("mean", "age", epsilon=0.5, bounds=(0.0, 120.0), **expected)
    assert options.spec(KINDS) == want
    assert options.spec(KINDS).to_dict() == want.to_dict()


def test_old_spellings_still_work_with_a_note_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    old = QueryOptions("count", None, epsilon=1.0, where=["district=A"], group_by=["district"],
                       keys=["private"], delta=1e-6)  # fmt: skip
    new = QueryOptions("count", None, epsilon=1.0, where=["district==A"], group_by=["district"],
                       private_keys=True, delta=1e-6)  # fmt: skip
    assert capsys.readouterr().err == ""
    assert old.spec(KINDS) == new.spec(KINDS)
    err = capsys.readouterr().err
    assert "--where district=VALUE is deprecated" in err and "--private-keys" in err
    histogram = {"epsilon": 1.0, "bounds": (0.0, 1.0), "bins": 4}
    assert QueryOptions("histogram", "age", method="noise-first", **histogram).spec(KINDS) == (  # type: ignore[arg-type]
        QuerySpec("histogram", "age", method="noise_first", **histogram)
    )
    assert "--method noise_first" in capsys.readouterr().err
    assert _old_bounds(["--bounds", "0,120", "--epsilon", "1"]) == [
        "--bounds", "0", "120", "--epsilon", "1",
    ]  # fmt: skip
    assert _old_bounds(["--bounds=0,120"]) == ["--bounds", "0", "120"]
    assert "--bounds 0 120" in capsys.readouterr().err
    assert _old_bounds(["--bounds", "0", "120"]) == ["--bounds", "0", "120"]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ({"kind": "median", "q": 0.5}, "--q applies to quantile, min and max only."),
        ({"kind": "mean", "domain": ["A"]}, "--domain applies to mode and histogram only."),
        ({"kind": "count", "bounds": (0.0, 1.0)}, "--bounds applies to sum, mean"),
        ({"kind": "quantile"}, "quantile needs --q"),
        ({"kind": "mean", "column": None}, "mean needs a column."),
        ({"kind": "count", "keys": ["A"]}, "--keys needs --group-by."),
        ({"kind": "count", "private_keys": True}, "--keys needs --group-by."),
        ({"kind": "average"}, "unknown query 'average'"),
        (
            {"kind": "count", "group_by": ["district"], "keys": ["A"], "private_keys": True},
            "give public --keys or --private-keys, not both.",
        ),
    ],
)
def test_what_the_registry_decides_is_refused_before_any_request(
    typed: dict[str, object], message: str
) -> None:
    values: dict[str, object] = {"column": "age", "epsilon": 1.0, **typed}
    with pytest.raises(InvalidParameterError, match="^" + message.replace("(", r"\(")):
        QueryOptions(**values).check()  # type: ignore[arg-type]


def test_the_filter_grammar_refuses_what_it_cannot_read() -> None:
    for bad in (["age>=old"], ["nope==1"], ["district"], ["age>=1,2"], ["smoker==maybe"]):
        with pytest.raises(InvalidParameterError):
            QueryOptions("count", epsilon=1.0, where=bad).spec(KINDS)


_TYPES = ["DOUBLE", "BIGINT", "INTEGER", "SMALLINT", "TINYINT", "HUGEINT", "UBIGINT", "FLOAT",
          "DECIMAL(10,2)", "VARCHAR", "BOOLEAN", "DATE", "TIMESTAMP", "TIME"]  # fmt: skip


def test_the_remote_reading_of_types_agrees_with_the_engine(tmp_path: Path) -> None:
    """The remote verb types filter values from the service's type names as DuckDB would."""
    import warnings

    from dpkit.accounting import Accountant, Budget
    from dpkit.tables import Session

    path = tmp_path / "t.csv"
    row = "1.5,1,1,1,1,1,1,1.5,1.5,x,true,2020-01-01,2020-01-01 00:00:00,00:00:00"
    path.write_text(",".join(f"c{i}" for i in range(len(_TYPES))) + "\n" + row + "\n")
    types = {f"c{i}": t for i, t in enumerate(_TYPES)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = Session.from_csv(path, accountant=Accountant(Budget(1.0)), types=types)
    engine_types = session.engine.column_types()
    assert kinds_of_types(engine_types) == session.column_kinds


@given(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), st.integers(-(10**6), 10**6))
def test_a_numeric_filter_reads_the_same_locally_and_remotely(op: str, value: int) -> None:
    typed = QueryOptions("count", epsilon=1.0, where=[f"age{op}{value}"])
    remote = kinds_of_types({"age": "DOUBLE", "district": "VARCHAR"})
    assert typed.spec({"age": "numeric", "district": "text"}) == typed.spec(remote)
    assert typed.spec(remote).where == (Condition("age", op, value),)


def test_histogram_help_lists_the_registry_names() -> None:
    one = runner.invoke(app, ["histogram", "--help"], env={"COLUMNS": "300"}).output
    two = runner.invoke(app, ["histogram2d", "--help"], env={"COLUMNS": "300"}).output
    assert " | ".join(PUBLISHERS_1D) in one and "noise-first" not in one
    assert " | ".join(PUBLISHERS_2D) in two


def _ages(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    pd.DataFrame({"age": np.random.default_rng(0).integers(0, 80, 300)}).to_csv(path, index=False)
    return path


def test_an_old_method_spelling_is_the_same_release_with_a_note(tmp_path: Path) -> None:
    """``--method noise-first`` publishes what ``noise_first`` does (same seed), and says so."""
    outputs = []
    path = _ages(tmp_path, "ages.csv")
    for method, budget in (("noise_first", ["--budget", "5"]), ("noise-first", [])):
        args = ["histogram", str(path), "age", "--type", "age=BIGINT", "--method", method,
                "--bounds", "0", "80",
                "--width", "5", "--epsilon", "1", "--seed", "3", "--json", *budget]  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        outputs.append((json.loads(result.stdout), result.stderr))
    (new, new_err), (old, old_err) = outputs
    assert new["estimates"] == old["estimates"] and new["label"] == old["label"]
    assert "noise_first" in new["label"] and new_err == ""
    assert "--method noise-first is deprecated" in old_err and "--method noise_first" in old_err
    path = _ages(tmp_path, "grid.csv")
    pd.DataFrame({"x": [1.0, 2.0], "y": [3.0, 4.0]}).to_csv(path, index=False)
    result = runner.invoke(app, ["histogram2d", str(path), "x", "y", "--type", "x=DOUBLE,y=DOUBLE",
                                 "--method", "laplace-2d",
                                 "--x-bounds", "0", "5", "--y-bounds", "0", "5", "--units", "2",
                                 "2", "--budget", "5", "--seed", "1", "--json"])  # fmt: skip
    assert result.exit_code == 0 and json.loads(result.stdout)["method"] == "laplace2d"
    assert "write --method laplace2d" in result.stderr


def test_local_query_new_and_old_syntax_give_the_same_spec(tmp_path: Path) -> None:
    """``dpkit query`` with the documented syntax and with the deprecated one: same charge."""
    path = tmp_path / "p.csv"
    pd.DataFrame({"age": [30.0, 40.0, 50.0], "district": ["A", "B", "A"]}).to_csv(path, index=False)
    base = ["query", str(path), "mean", "age", "--type", "age=DOUBLE,district=VARCHAR",
            "--epsilon", "0.25", "--budget", "1", "--json", "--group-by", "district"]  # fmt: skip
    new = runner.invoke(app, [*base, "--bounds", "0", "100", "--where", "district==A,B",
                              "--keys", "A", "--keys", "B"])  # fmt: skip
    old = runner.invoke(app, [*base, "--bounds", "0,100", "--where", "district=A,B",
                              "--keys", "A", "--keys", "B"])  # fmt: skip
    assert new.exit_code == 0 and old.exit_code == 0, old.output
    one, two = json.loads(new.stdout), json.loads(old.stdout)
    assert [r["group"] for r in one["results"]] == [r["group"] for r in two["results"]]
    assert one["remaining"]["epsilon"] == pytest.approx(0.75)
    assert two["remaining"]["epsilon"] == pytest.approx(0.5)  # the same file's one ledger
    assert new.stderr == "" and "deprecated" in old.stderr


def _documented_commands() -> list[list[str]]:
    """The ``dpkit query|remote query|histogram|histogram2d`` lines of the README and docs."""
    import re
    import shlex

    root = Path(__file__).resolve().parent.parent
    commands = []
    for doc in ("README.md", "docs/queries.md", "docs/histograms.md", "docs/service.md"):
        text = (root / doc).read_text(encoding="utf-8").replace("\\\n", " ")
        for line in text.splitlines():
            found = re.search(r"dpkit ((?:remote )?query|histogram2d|histogram) (.*)", line)
            if found and "`" not in found.group(0):
                words = shlex.split(found.group(0).replace("$T", "x=DOUBLE"), comments=True)
                commands.append(words[1:])
    return commands


def test_the_documented_commands_parse_in_the_current_syntax(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command line the docs show is read by the CLI as written, with no deprecation note."""
    commands = _documented_commands()
    assert {c[0] for c in commands} >= {"query", "remote", "histogram", "histogram2d"}
    monkeypatch.chdir(tmp_path)
    for name in ("patients.csv", "titanic.csv", "california_housing.csv"):
        (tmp_path / name).write_text("a\n1\n")
    for words in commands:
        path = words[:2] if words[0] == "remote" else words[:1]
        command = _command(*path)
        command.make_context(" ".join(path), list(words[len(path) :]))
        assert capsys.readouterr().err == "", words
        if words[0].startswith("histogram") and "--method" in words:
            method = words[words.index("--method") + 1]
            assert method in (PUBLISHERS_2D if words[0] == "histogram2d" else PUBLISHERS_1D)


def test_a_local_dry_run_shows_what_the_query_will_charge_and_charges_nothing(
    tmp_path: Path,
) -> None:
    """``dpkit query --cost``, like ``dpkit remote query --cost``: the label and the cost."""
    from dpkit._cli_budget import default_ledger
    from dpkit.accounting import Accountant

    path = tmp_path / "p.csv"
    pd.DataFrame({"age": [30.0, 40.0, 50.0], "district": ["A", "B", "A"]}).to_csv(path, index=False)
    args = ["query", str(path), "count", "--type", "age=DOUBLE,district=VARCHAR", "--epsilon",
            "0.25", "--group-by", "district", "--private-keys", "--delta", "1e-6"]  # fmt: skip
    dry = runner.invoke(app, [*args, "--cost"])
    assert dry.exit_code == 0, dry.output
    planned = json.loads(dry.stdout)
    assert not default_ledger(path).exists()  # no ledger opened, nothing charged
    real = runner.invoke(app, [*args, "--budget", "1", "--budget-delta", "1e-5"])
    assert real.exit_code == 0, real.output
    accountant = Accountant.from_ledger(default_ledger(path))
    try:
        (record,) = accountant.history
        assert record.label == planned["label"]
        assert (record.cost.epsilon, record.cost.delta) == (planned["epsilon"], planned["delta"])
    finally:
        accountant.close()
