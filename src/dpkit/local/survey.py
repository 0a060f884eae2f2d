"""A local-DP survey: declared questions, each respondent's reports, estimates with intervals.

Each question is declared with its own ε and public answer space — a yes/no
question, one of k declared categories, or a number in declared bounds — and
gets the mechanism with the lowest variance for it by a public rule
(:func:`dpkit.local.best_oracle` for categories, which for yes/no is binary
randomized response: the decision-tree course project's coin-flip survey is the case ε = ln 3;
:func:`dpkit.local.best_mean_mechanism` for numbers).

Privacy: every report of a question is ε_q-LDP for any change of that
respondent's answer; a respondent answers every question once, so their
reports together are (Σ_q ε_q)-LDP (sequential composition):
``Survey.epsilon``. Estimation reads only reports: post-processing.
Every respondent must answer every question (a blank would reveal itself):
map "no answer" to a declared category if it is a possible answer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpkit._checks import check_bounds, check_epsilon, check_level
from dpkit.errors import DataError, InvalidParameterError
from dpkit.local.frequency_oracles import FrequencyOracle, best_oracle
from dpkit.local.mean import best_mean_mechanism
from dpkit.local.methods import mean_mechanism
from dpkit.mechanisms.sampling import as_source
from dpkit.privacy import LOCAL_NEIGHBOURING, PrivacyReport

__all__ = ["Question", "Survey", "SurveyEstimate", "number", "one_of", "true_summary", "yes_no"]

KINDS = ("yes_no", "one_of", "number")

#: The survey file's format (``dpkit survey --help``, docs/local.md).
SURVEY_FORMAT = (
    '{"questions": [{"name": "smokes", "kind": "yes_no", "epsilon": 1.0}, '
    '{"name": "region", "kind": "one_of", "epsilon": 1.0, "categories": ["north", "south"]}, '
    '{"name": "age", "kind": "number", "epsilon": 1.0, "bounds": [0, 100]}]}'
)
_KEYS = {"yes_no": (), "one_of": ("categories",), "number": ("bounds",)}


@dataclass(frozen=True)
class Question:
    """One declared question: name, kind, ε and its public answer space."""

    name: str
    kind: str
    epsilon: float
    categories: tuple[Any, ...] = ()
    bounds: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "#" in self.name:
            raise InvalidParameterError("a question's name must be a non-empty string without '#'.")
        if self.kind not in KINDS:
            raise InvalidParameterError(f"a question's kind is one of {', '.join(KINDS)}.")
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        if self.kind == "number":
            object.__setattr__(self, "bounds", check_bounds(self.bounds))
        elif self.kind == "one_of" and len(self.categories) < 2:
            raise InvalidParameterError(f"question {self.name!r} needs at least two categories.")


def yes_no(name: str, *, epsilon: float) -> Question:
    """A yes/no question (answers True/False, 1/0, "yes"/"no")."""
    return Question(name, "yes_no", epsilon, categories=(False, True))


def one_of(name: str, categories: Sequence[Any], *, epsilon: float) -> Question:
    """A question whose answer is one of the declared categories."""
    return Question(name, "one_of", epsilon, categories=tuple(categories))


def number(name: str, *, bounds: tuple[float, float], epsilon: float) -> Question:
    """A number in the declared bounds [lo, hi] (answers outside are clipped on the device)."""
    return Question(name, "number", epsilon, bounds=bounds)


# Keys 1 and 0 also match True/False (equal hashes) and 1.0/0.0.
_YES = {
    1: True,
    0: False,
    "yes": True,
    "no": False,
    "true": True,
    "false": False,
    "1": True,
    "0": False,
}


def _yes_no_values(values: pd.Series) -> np.ndarray:
    out = []
    for v in values:
        key = v.strip().lower() if isinstance(v, str) else v
        if isinstance(key, float) and key in (0.0, 1.0):
            key = int(key)
        try:
            out.append(_YES[key])
        except (KeyError, TypeError):
            raise DataError(
                "a yes/no answer is not one of True/False, 1/0, yes/no: fix the answers."
            ) from None
    return np.array(out, dtype=object)


def _question_from_json(k: int, item: Any) -> Question:
    """Question ``k`` of a survey file; errors name the key that is wrong or missing."""
    if not isinstance(item, dict):
        raise InvalidParameterError(f"question {k} of the survey file must be a JSON object.")
    for key in ("name", "kind", "epsilon"):
        if key not in item:
            raise InvalidParameterError(
                f'question {k} of the survey file has no "{key}" key: every question declares '
                f'"name", "kind" and "epsilon", e.g. {SURVEY_FORMAT}'
            )
    kind = item["kind"]
    if kind not in _KEYS:
        raise InvalidParameterError(f'question {k}: "kind" is one of {", ".join(KINDS)}.')
    allowed = {"name", "kind", "epsilon", *_KEYS[kind]}
    unknown = sorted(str(key) for key in item if key not in allowed)
    if unknown:
        expected = f'"{_KEYS[kind][0]}"' if _KEYS[kind] else "no other key"
        raise InvalidParameterError(
            f"question {k} ({kind}) has unknown key(s) {', '.join(map(repr, unknown))}: "
            f"a {kind} question takes {expected} besides name, kind and epsilon."
        )
    for key in _KEYS[kind]:
        if not isinstance(item.get(key), list):
            raise InvalidParameterError(
                f'question {k} ({kind}) needs "{key}": a JSON list, e.g. {SURVEY_FORMAT}'
            )
    try:
        return Question(
            item["name"],
            kind,
            item["epsilon"],
            categories=(False, True) if kind == "yes_no" else tuple(item.get("categories", ())),
            bounds=tuple(item["bounds"]) if "bounds" in item else None,
        )
    except (ValueError, TypeError) as err:
        if isinstance(err, InvalidParameterError):  # say which question, in the file's words
            raise InvalidParameterError(f"question {k} of the survey file: {err}") from None
        raise InvalidParameterError(
            f"question {k} of the survey file has a value of the wrong type: {SURVEY_FORMAT}"
        ) from None


@dataclass(frozen=True)
class SurveyEstimate:
    """Per-question estimates: one row per category (share) or per number question (mean)."""

    table: pd.DataFrame
    epsilon: float
    n: int
    level: float

    @property
    def privacy(self) -> PrivacyReport:
        """The :class:`dpkit.PrivacyReport`: ε of one respondent's reports together (local DP)."""
        return PrivacyReport(
            epsilon=self.epsilon,
            neighbouring=LOCAL_NEIGHBOURING,
            mechanisms=tuple(str(m) for m in dict.fromkeys(self.table["mechanism"])),
        )

    def plot(self, path: str | Path, truth: Mapping[str, Any] | None = None) -> Path:
        """Estimates with their intervals, beside the truth when given (name -> share/mean)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        questions = list(dict.fromkeys(self.table["question"]))
        fig, axes = plt.subplots(
            1, len(questions), figsize=(4 * len(questions), 3.6), squeeze=False
        )
        for ax, q in zip(axes[0], questions):
            rows = self.table[self.table["question"] == q]
            x = np.arange(len(rows))
            err = [rows["estimate"] - rows["ci_low"], rows["ci_high"] - rows["estimate"]]
            ax.errorbar(x, rows["estimate"], yerr=err, fmt="o", capsize=4, label="estimate")
            if truth is not None and q in truth:
                true = np.atleast_1d(np.asarray(truth[q], dtype=np.float64))
                ax.plot(x, true, "x", color="black", markersize=9, label="truth")
            ax.set_xticks(x, [str(a) for a in rows["answer"]], rotation=30)
            ax.set_title(q)
            ax.legend(fontsize=8)
        fig.suptitle(
            f"local-DP survey: n = {self.n}, ε per respondent = {self.epsilon:g}, {self.level:.0%} intervals"
        )
        fig.tight_layout()
        out = Path(path)
        fig.savefig(out, dpi=110)
        plt.close(fig)
        return out


@dataclass(frozen=True)
class Survey:
    """Declared questions and the mechanism of each (chosen by public rules)."""

    questions: tuple[Question, ...]
    mechanisms: Mapping[str, Any] = field(init=False, repr=False)

    def __init__(self, questions: Sequence[Question]) -> None:
        qs = tuple(questions)
        if not qs or not all(isinstance(q, Question) for q in qs):
            raise InvalidParameterError(
                "a survey needs at least one Question (yes_no, one_of, number)."
            )
        names = [q.name for q in qs]
        if len(set(names)) != len(names):
            raise InvalidParameterError("question names must be distinct.")
        mechanisms: dict[str, Any] = {}
        for q in qs:
            if q.kind == "number":
                assert q.bounds is not None
                cls = mean_mechanism(best_mean_mechanism(q.epsilon))
                mechanisms[q.name] = cls(epsilon=q.epsilon, bounds=q.bounds)
            else:
                mechanisms[q.name] = best_oracle(epsilon=q.epsilon, domain=list(q.categories))
        object.__setattr__(self, "questions", qs)
        object.__setattr__(self, "mechanisms", mechanisms)

    @property
    def epsilon(self) -> float:
        """ε of one respondent's reports together: the sum over questions."""
        return float(math.fsum(q.epsilon for q in self.questions))

    # -- declaration as JSON (for the CLI) ---------------------------------------------------
    @classmethod
    def from_json(cls, text: str) -> Survey:
        """{"questions": [{"name", "kind", "epsilon", "categories" | "bounds"}, ...]}

        Each error names the key that is wrong or missing (``SURVEY_FORMAT`` shows the format).
        """
        try:
            spec = json.loads(text)
        except ValueError as err:
            raise InvalidParameterError(
                f"the survey file is not valid JSON (line {getattr(err, 'lineno', '?')}): "
                f"it should look like {SURVEY_FORMAT}"
            ) from None
        items = spec.get("questions") if isinstance(spec, dict) else None
        if not isinstance(items, list) or not items:
            raise InvalidParameterError(
                f'the survey file must be JSON with a non-empty "questions" list: {SURVEY_FORMAT}'
            )
        return cls([_question_from_json(k, item) for k, item in enumerate(items, start=1)])

    def to_json(self) -> str:
        """The declaration as JSON (public)."""
        items = []
        for q in self.questions:
            item: dict[str, Any] = {"name": q.name, "kind": q.kind, "epsilon": q.epsilon}
            if q.kind == "one_of":
                item["categories"] = list(q.categories)
            if q.kind == "number":
                item["bounds"] = list(q.bounds or ())
            items.append(item)
        return json.dumps({"questions": items}, indent=2)

    # -- client side -------------------------------------------------------------------------
    def perturb(
        self, answers: pd.DataFrame | Mapping[str, Any], rng: object = None
    ) -> pd.DataFrame:
        """Each respondent's reports, one row per respondent (what leaves their device).

        A question whose reports are vectors (unary encoding, local hashing)
        gets columns ``name#0``, ``name#1``, ...
        """
        frame = pd.DataFrame(answers)
        missing = [q.name for q in self.questions if q.name not in frame.columns]
        if missing:
            raise DataError(
                f"the answers have no column for question(s) {', '.join(map(repr, missing))}."
            )
        if len(frame) == 0:
            raise DataError("no respondents: give at least one row of answers.")
        source = as_source(rng)
        columns: dict[str, Any] = {}
        for q in self.questions:
            values = frame[q.name]
            if values.isna().any():
                raise DataError(
                    f"question {q.name!r} has blank answers: every respondent answers every "
                    "question (declare a category for 'no answer' if it is one)."
                )
            mechanism = self.mechanisms[q.name]
            if q.kind == "number":
                nums = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
                if not np.isfinite(nums).all():
                    raise DataError(f"question {q.name!r} has answers that are not finite numbers.")
                reports = mechanism.perturb(nums, rng=source)
            else:
                raw = (
                    _yes_no_values(values) if q.kind == "yes_no" else values.to_numpy(dtype=object)
                )
                reports = mechanism.perturb(raw, rng=source)
            if reports.ndim == 1:
                columns[q.name] = reports
            else:
                for k in range(reports.shape[1]):
                    columns[f"{q.name}#{k}"] = reports[:, k]
        return pd.DataFrame(columns)

    # -- server side -------------------------------------------------------------------------
    def estimate(self, reports: pd.DataFrame, *, level: float = 0.95) -> SurveyEstimate:
        """Estimates per question with intervals at ``level`` (post-processing: no cost)."""
        lv = check_level(level)
        frame = pd.DataFrame(reports)
        if len(frame) == 0:
            raise DataError(
                "no reports to estimate from: collect at least one respondent's reports."
            )
        rows: list[dict[str, Any]] = []
        for q in self.questions:
            mechanism = self.mechanisms[q.name]
            data: np.ndarray[Any, Any]
            if q.name in frame.columns:
                data = frame[q.name].to_numpy()
            else:
                prefix = f"{q.name}#"
                cols = sorted(
                    (
                        c
                        for c in frame.columns
                        if str(c).startswith(prefix) and str(c)[len(prefix) :].isdigit()
                    ),
                    key=lambda c: int(str(c)[len(prefix) :]),
                )
                if not cols:
                    raise DataError(f"the reports have no column for question {q.name!r}.")
                data = frame[cols].to_numpy()
            if q.kind == "number":
                est = mechanism.estimate(data.astype(np.float64), level=lv)
                rows.append({"question": q.name, "answer": "mean", "estimate": est.mean,
                             "ci_low": est.ci[0], "ci_high": est.ci[1],
                             "std_error": math.sqrt(est.variance), "mechanism": est.mechanism})  # fmt: skip
                continue
            assert isinstance(mechanism, FrequencyOracle)
            freq = mechanism.estimate(data, level=lv)
            low, high = freq.frequency_ci
            se = np.sqrt(freq.frequency_variance)
            answers = ("yes",) if q.kind == "yes_no" else q.categories
            offset = 1 if q.kind == "yes_no" else 0
            for k, answer in enumerate(answers):
                i = k + offset
                rows.append({"question": q.name, "answer": answer, "estimate": float(freq.frequencies[i]),
                             "ci_low": float(low[i]), "ci_high": float(high[i]),
                             "std_error": float(se[i]), "mechanism": freq.oracle})  # fmt: skip
        return SurveyEstimate(pd.DataFrame(rows), self.epsilon, len(frame), lv)

    # -- simulation ----------------------------------------------------------------------------
    def simulate(self, n: int, *, rng: object = None) -> pd.DataFrame:
        """n synthetic respondents' true answers (for trying a survey out, never for release).

        Yes/no: yes with probability 0.3; categories: shares ∝ 1/(rank + 1);
        numbers: lo + (hi - lo)·Beta(2, 5).
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidParameterError("n must be a positive integer.")
        gen = as_source(rng).generator()
        data: dict[str, Any] = {}
        for q in self.questions:
            if q.kind == "yes_no":
                data[q.name] = gen.random(n) < 0.3
            elif q.kind == "one_of":
                weights = 1.0 / (np.arange(len(q.categories)) + 1.0)
                picks = gen.choice(len(q.categories), size=n, p=weights / weights.sum())
                data[q.name] = np.array(q.categories, dtype=object)[picks]
            else:
                lo, hi = q.bounds or (0.0, 1.0)
                data[q.name] = lo + (hi - lo) * gen.beta(2.0, 5.0, size=n)
        return pd.DataFrame(data)


def true_summary(survey: Survey, answers: pd.DataFrame) -> dict[str, Any]:
    """The true shares/means of answers, in the estimate's order (to plot beside it)."""
    out: dict[str, Any] = {}
    for q in survey.questions:
        values = answers[q.name]
        if q.kind == "number":
            lo, hi = q.bounds or (0.0, 1.0)
            out[q.name] = float(np.clip(pd.to_numeric(values), lo, hi).mean())
        elif q.kind == "yes_no":
            out[q.name] = float(np.mean(_yes_no_values(values).astype(bool)))
        else:
            out[q.name] = [float(np.mean(values.to_numpy(dtype=object) == c)) for c in q.categories]
    return out
