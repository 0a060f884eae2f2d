"""The local-DP survey workflow: mechanisms by public rule, coverage, round trips, bad input, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from dpkit.cli import app
from dpkit.errors import DataError, InvalidParameterError
from dpkit.local import (
    DuchiMean,
    GeneralizedRandomizedResponse,
    OptimizedUnaryEncoding,
    PiecewiseMean,
    Survey,
    number,
    one_of,
    yes_no,
)
from dpkit.local.survey import true_summary

SURVEY = Survey(
    [
        yes_no("smoker", epsilon=math.log(3)),
        one_of("party", list("ABCDEFGHIJKLMNOPQRST"), epsilon=1.0),
        number("income", bounds=(0, 200), epsilon=0.5),
        number("age", bounds=(18, 90), epsilon=3.0),
    ]
)


def test_each_question_gets_its_public_mechanism_and_epsilon_adds_up() -> None:
    m = SURVEY.mechanisms
    assert isinstance(m["smoker"], GeneralizedRandomizedResponse)
    assert m["smoker"].p_star == pytest.approx(
        0.75, abs=1e-6
    )  # the decision-tree course project's coin flips
    assert isinstance(m["party"], OptimizedUnaryEncoding)  # d = 20 > 3e + 2
    assert isinstance(m["income"], DuchiMean) and isinstance(m["age"], PiecewiseMean)
    assert SURVEY.epsilon == pytest.approx(math.log(3) + 1.0 + 0.5 + 3.0)


def test_intervals_cover_the_truth_at_their_level() -> None:
    answers = SURVEY.simulate(4_000, rng=1)
    truth = true_summary(SURVEY, answers)
    inside = total = 0
    for seed in range(40):
        table = SURVEY.estimate(SURVEY.perturb(answers, rng=100 + seed)).table
        for q, value in truth.items():
            rows = table[table["question"] == q]
            true = np.atleast_1d(value)
            inside += int(np.sum((rows["ci_low"] <= true) & (true <= rows["ci_high"])))
            total += len(rows)
    coverage = inside / total
    assert 0.93 <= coverage <= 0.97, coverage  # 95% intervals over 40 x 23 estimates


def test_reports_round_trip_through_csv_and_json(tmp_path: Path) -> None:
    answers = SURVEY.simulate(500, rng=2)
    reports = SURVEY.perturb(answers, rng=3)
    assert [c for c in reports.columns if not c.startswith("party#")] == ["smoker", "income", "age"]
    reports.to_csv(tmp_path / "r.csv", index=False)
    again = Survey.from_json(SURVEY.to_json())
    assert again.questions == SURVEY.questions
    a = SURVEY.estimate(reports).table
    b = again.estimate(pd.read_csv(tmp_path / "r.csv")).table
    assert np.allclose(a["estimate"], b["estimate"])


def test_bad_declarations_and_answers_get_clear_errors() -> None:
    with pytest.raises(InvalidParameterError, match="distinct"):
        Survey([yes_no("a", epsilon=1), yes_no("a", epsilon=1)])
    for bad in (
        lambda: yes_no("a", epsilon=0),
        lambda: one_of("a", ["x"], epsilon=1),
        lambda: number("a", bounds=(1, 1), epsilon=1),
        lambda: Survey([]),
        lambda: Survey.from_json("{not json"),
        lambda: Survey.from_json(
            json.dumps({"questions": [{"name": "a", "kind": "essay", "epsilon": 1}]})
        ),
    ):
        with pytest.raises(InvalidParameterError):
            bad()
    answers = SURVEY.simulate(10, rng=4)
    for column, value in (
        ("smoker", "maybe"),
        ("smoker", None),
        ("party", "Z"),
        ("income", "lots"),
        ("age", math.inf),
    ):
        broken = answers.copy()
        broken[column] = broken[column].astype(object)
        broken.loc[3, column] = value
        with pytest.raises(DataError) as err:
            SURVEY.perturb(broken)
        assert str(value) not in str(err.value) or value is None
    with pytest.raises(DataError, match="no column"):
        SURVEY.perturb(answers.drop(columns="age"))
    with pytest.raises(DataError, match="no reports"):
        SURVEY.estimate(pd.DataFrame())
    with pytest.raises(DataError, match="no column"):
        SURVEY.estimate(SURVEY.perturb(answers, rng=5).drop(columns="smoker"))


def test_yes_no_answers_accept_the_usual_spellings() -> None:
    s = Survey([yes_no("q", epsilon=1.0)])
    reports = s.perturb(pd.DataFrame({"q": ["yes", "No", 1, 0, True, 1.0]}), rng=6)
    assert len(reports) == 6


def test_cli_simulate_then_estimate(tmp_path: Path) -> None:
    spec = tmp_path / "survey.json"
    spec.write_text(SURVEY.to_json())
    runner = CliRunner()
    reports, answers, plot = tmp_path / "r.csv", tmp_path / "a.csv", tmp_path / "s.png"
    made = runner.invoke(app, ["survey", "simulate", str(spec), "--n", "3000", "--out", str(reports),
                               "--answers-out", str(answers), "--seed", "1"])  # fmt: skip
    assert made.exit_code == 0, made.output
    est = runner.invoke(app, ["survey", "estimate", str(reports), str(spec), "--plot", str(plot),
                              "--answers", str(answers)])  # fmt: skip
    assert est.exit_code == 0, est.output
    assert "income" in est.output and "duchi" in est.output and plot.stat().st_size > 0
    spec.write_text("[]")
    bad = runner.invoke(app, ["survey", "estimate", str(reports), str(spec)])
    assert bad.exit_code == 2 and "must be JSON" in bad.output
