"""``dpkit survey simulate`` and ``dpkit survey estimate``."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from dpkit.errors import DataError, InvalidParameterError
from dpkit.local.survey import Survey, true_summary


@contextmanager
def each_warning_once() -> Iterator[None]:
    """Show each distinct warning (category and text) once, where it was first raised.

    One ε > 10 question is checked by the question and by each mechanism it builds;
    a user should read that once.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            seen: set[tuple[type[Warning], str]] = set()
            unique = []
            for w in caught:
                key = (w.category, str(w.message))
                if key not in seen:
                    seen.add(key)
                    unique.append(w)
    for w in unique:  # through the caller's filters again
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def read_survey(path: Path) -> Survey:
    """The declared survey (JSON)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise InvalidParameterError(
            f"cannot read the survey file {path}: give a readable UTF-8 JSON file."
        ) from None
    return Survey.from_json(text)


def read_reports(
    path: Path,
    what: str = "reports",
    header: str = "one column per question or per question#k",
) -> pd.DataFrame:
    """A CSV file of a local verb; an empty, ragged or unreadable file is a clear error.

    A row with more fields than the header is refused (pandas would otherwise take
    the first column as an index, or drop the extra fields).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(path, index_col=False)
    except pd.errors.EmptyDataError:
        raise DataError(
            f"the {what} file {path} is empty: it needs a header row ({header}) and one row "
            "per person."
        ) from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.ParserWarning):
        raise DataError(
            f"cannot read the {what} file {path}: it must be a UTF-8 CSV file whose rows have "
            "as many fields as its header row."
        ) from None


def simulate_command(
    spec: Path, n: int, out: Path, answers_out: Path | None, seed: int | None
) -> None:
    """Simulate n respondents, perturb their answers on 'their devices', write the reports."""
    with each_warning_once():
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
    with each_warning_once():
        survey = read_survey(spec)
        result = survey.estimate(read_reports(reports), level=level)
    print(f"n = {result.n}, ε per respondent = {result.epsilon:g}, {level:.0%} intervals")
    print(result.table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if plot is not None:
        truth = (
            true_summary(survey, read_reports(answers, "answers")) if answers is not None else None
        )
        print(f"wrote {result.plot(plot, truth)}")
