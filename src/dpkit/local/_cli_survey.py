"""``dpkit survey simulate`` and ``dpkit survey estimate``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dpkit.errors import InvalidParameterError
from dpkit.local.survey import Survey, true_summary


def read_survey(path: Path) -> Survey:
    """The declared survey (JSON)."""
    try:
        text = path.read_text()
    except OSError:
        raise InvalidParameterError(f"cannot read the survey file {path}.") from None
    return Survey.from_json(text)


def simulate_command(
    spec: Path, n: int, out: Path, answers_out: Path | None, seed: int | None
) -> None:
    """Simulate n respondents, perturb their answers on 'their devices', write the reports."""
    survey = read_survey(spec)
    answers = survey.simulate(n, rng=seed)
    reports = survey.perturb(
        answers, rng=None if seed is None else seed + 1
    )  # an independent stream
    reports.to_csv(out, index=False)
    if answers_out is not None:
        answers.to_csv(answers_out, index=False)
    print(f"wrote {n} respondents' reports to {out} (ε per respondent {survey.epsilon:g}).")


def estimate_command(
    reports: Path, spec: Path, level: float, plot: Path | None, answers: Path | None
) -> None:
    """Estimate every question from a reports file; optionally plot beside the true answers."""
    survey = read_survey(spec)
    result = survey.estimate(pd.read_csv(reports), level=level)
    print(f"n = {result.n}, ε per respondent = {result.epsilon:g}, {level:.0%} intervals")
    print(result.table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if plot is not None:
        truth = true_summary(survey, pd.read_csv(answers)) if answers is not None else None
        print(f"wrote {result.plot(plot, truth)}")
