"""The command line: version, demo, and the wired subcommands."""

import numpy as np
import pandas as pd
from typer.testing import CliRunner

import dpkit
from dpkit.cli import app

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert dpkit.__version__ in result.output


def test_demo_prints_answers_bounds_and_budget():
    result = runner.invoke(app, ["demo"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "95% confidence interval" in result.output
    assert "left: ε=" in result.output


def test_histogram_command(tmp_path):
    path = tmp_path / "ages.csv"
    ages = np.random.default_rng(0).integers(0, 80, 500)
    pd.DataFrame({"age": ages}).to_csv(path, index=False)
    out = tmp_path / "h.png"
    result = runner.invoke(
        app,
        ["histogram", str(path), "age", "--type", "age=BIGINT", "--method", "laplace", "--epsilon", "1",
         "--bounds", "0", "80", "--width", "10", "--plot", str(out), "--seed", "3",
         "--budget", "5"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 1000


def test_histogram_without_public_bins_is_a_clear_error(tmp_path):
    path = tmp_path / "ages.csv"
    pd.DataFrame({"age": [31, 45, 52]}).to_csv(path, index=False)
    result = runner.invoke(
        app, ["histogram", str(path), "age", "--type", "age=DOUBLE", "--epsilon", "1"]
    )
    assert result.exit_code == 2
    assert "public" in result.output
    assert "Traceback" not in result.output
    for value in ("31", "45", "52"):
        assert value not in result.output


def test_budget_command_shows_the_ledger(tmp_path):
    ledger = tmp_path / "study.ledger"
    accountant = dpkit.Accountant(dpkit.Budget(1.0), ledger=ledger, dataset="study.csv")
    accountant.charge(dpkit.Budget(0.25), "mean age")
    accountant.close()
    result = runner.invoke(app, ["budget", str(ledger)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "mean age" in result.output and "guards the dataset: study.csv" in result.output
    assert "remaining: ε=0.75" in result.output


def test_budget_command_on_a_corrupt_ledger(tmp_path):
    ledger = tmp_path / "broken.ledger"
    ledger.write_bytes(b"this is not a ledger")
    result = runner.invoke(app, ["budget", str(ledger)])
    assert result.exit_code == 2
    assert "backup" in result.output
    assert ledger.read_bytes() == b"this is not a ledger"


def test_reproduce_regression_paper_quick_on_generated_data(tmp_path):
    result = runner.invoke(
        app, ["reproduce", "regression-paper", "--quick", "--no-progress", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "DPMean" in result.output
    assert any(p.suffix == ".png" for p in tmp_path.iterdir())


def test_walkthrough_titanic_on_a_generated_file(tmp_path):
    rng = np.random.default_rng(1)
    n = 150
    sex = rng.choice(["female", "male"], n)
    pd.DataFrame(
        {
            "Survived": (rng.random(n) < np.where(sex == "female", 0.7, 0.2)).astype(int),
            "Pclass": rng.integers(1, 4, n),
            "Sex": sex,
            "Age": rng.uniform(1, 70, n).round(),
            "SibSp": rng.integers(0, 3, n),
            "Parch": rng.integers(0, 3, n),
            "Fare": rng.uniform(5, 100, n).round(2),
            "Embarked": rng.choice(["C", "Q", "S"], n),
        }
    ).to_csv(tmp_path / "titanic.csv", index=False)
    result = runner.invoke(
        app,
        ["walkthrough", "titanic", "--data", str(tmp_path / "titanic.csv"), "--splits", "1"],
        env={"COLUMNS": "160"},
    )
    assert result.exit_code == 2 and "--public-data" in result.output
    result = runner.invoke(
        app,
        ["walkthrough", "titanic", "--data", str(tmp_path / "titanic.csv"), "--splits", "1",
         "--public-data"],
        env={"COLUMNS": "160"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "first 20 passengers" in result.output


def test_walkthrough_titanic_missing_file_is_a_clear_error(tmp_path):
    result = runner.invoke(
        app, ["walkthrough", "titanic", "--data", str(tmp_path / "nope.csv"), "--public-data"]
    )
    assert result.exit_code == 2
    assert "Traceback" not in result.output
