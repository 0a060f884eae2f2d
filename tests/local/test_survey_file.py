"""The survey file: documented keys, errors naming the key, an empty reports file, one warning."""

import json
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpkit.cli import app
from dpkit.errors import InvalidParameterError, PrivacyWarning
from dpkit.local._cli_survey import each_warning_once
from dpkit.local.survey import Survey

runner = CliRunner()
REGION = {"name": "region", "kind": "one_of", "epsilon": 1.0, "categories": ["n", "s", "e"]}


def _spec(tmp_path: Path, *questions: dict, name: str = "survey.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"questions": list(questions)}))
    return path


def _reports(tmp_path: Path, spec: Path) -> Path:
    out = tmp_path / "r.csv"
    made = runner.invoke(app, ["survey", "simulate", str(spec), "--n", "200", "--out", str(out)])
    assert made.exit_code == 0, made.output
    return out


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ({**{k: v for k, v in REGION.items() if k != "categories"}, "values": ["n", "s"]},
         'unknown key(s) \'values\': a one_of question takes "categories"'),
        ({k: v for k, v in REGION.items() if k != "epsilon"}, 'has no "epsilon" key'),
        ({k: v for k, v in REGION.items() if k != "categories"}, 'needs "categories"'),
        ({"name": "age", "kind": "number", "epsilon": 1.0}, 'needs "bounds"'),
    ],
)  # fmt: skip
def test_a_wrong_key_is_named(tmp_path: Path, question: dict, expected: str) -> None:
    with pytest.raises(InvalidParameterError) as err:
        Survey.from_json(json.dumps({"questions": [question]}))
    assert expected in str(err.value)  # 2bf6f1e: "needs at least two categories" / "must be JSON"
    reports = _reports(tmp_path, _spec(tmp_path, REGION, name="plain.json"))
    bad = runner.invoke(app, ["survey", "estimate", str(reports), str(_spec(tmp_path, question))])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert expected in " ".join(bad.output.split())


def test_help_documents_the_keys() -> None:
    out = " ".join(runner.invoke(app, ["survey", "--help"]).output.split())
    assert '"categories"' in out and '"bounds"' in out and '"epsilon"' in out


@pytest.mark.parametrize("content", ["", "\n"])
def test_an_empty_reports_file_is_a_clear_error(tmp_path: Path, content: str) -> None:
    spec = _spec(tmp_path, REGION)
    empty = tmp_path / "empty.csv"
    empty.write_text(content)
    result = runner.invoke(app, ["survey", "estimate", str(empty), str(spec)])
    assert result.exit_code == 2, result.output  # 2bf6f1e: EmptyDataError traceback
    assert "Traceback" not in result.output and "empty.csv is empty" in result.output


def test_one_large_epsilon_warns_once(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {**REGION, "epsilon": 20.0})
    reports = _reports(tmp_path, _spec(tmp_path, REGION, name="plain.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("always", PrivacyWarning)  # pyproject ignores it in tests
        result = runner.invoke(app, ["survey", "estimate", str(reports), str(spec)])
    assert result.exit_code == 0, result.output
    assert result.output.count("above 10") == 1  # 2bf6f1e: six times
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with each_warning_once():
            Survey.from_json(spec.read_text())
    assert sum(issubclass(w.category, PrivacyWarning) for w in caught) == 1
