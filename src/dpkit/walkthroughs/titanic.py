"""The Titanic walk-through of the decision-tree course project, with dpkit's DP trees.

The decision-tree course project trains an ID3 tree whose information gains come from
Laplace-noised counts on Kaggle's Titanic data (Pclass, Sex, Age, SibSp, Parch,
Fare, Embarked -> Survived), prints its questions ("Sex in [female]",
"Age <= 30") and compares its predictions on the first 20 passengers with the
truth. :func:`run` does the same with every dpkit algorithm, then measures test
accuracy over random train/test splits at several epsilons.

Public metadata used (never derived from the data): the classes {0, 1}; the
categorical domains (Pclass 1/2/3, Sex, Embarked C/Q/S); bounds from general
knowledge: ages 0-100, at most 10 siblings/spouses or parents/children aboard,
fares up to 600 pounds. Missing Age/Embarked values get a branch of their own
(``missing="separate"``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dpkit.errors import DataError

FEATURES = ["Pclass", "Sex", "Age", "SibSp", "Parch", "Fare", "Embarked"]
TARGET = "Survived"
CLASSES = [0, 1]
BOUNDS = {"Age": (0.0, 100.0), "SibSp": (0.0, 10.0), "Parch": (0.0, 10.0), "Fare": (0.0, 600.0)}
DOMAINS: dict[str, list[Any]] = {
    "Pclass": [1, 2, 3],
    "Sex": ["female", "male"],
    "Embarked": ["C", "Q", "S"],
}
EPSILONS = (0.1, 0.5, 1.0, 2.0, 5.0)
ALGORITHMS = ("greedy", "id3", "random", "forest")


def default_data_path() -> Path:
    """``../shared/data/titanic.csv`` relative to the repository (where the data lives)."""
    return Path(__file__).resolve().parents[3].parent / "shared" / "data" / "titanic.csv"


def load_titanic(path: str | Path | None = None) -> tuple[pd.DataFrame, NDArray[np.int64]]:
    """The seven features as a DataFrame (categoricals with their public domains) and Survived."""
    path = Path(path) if path is not None else default_data_path()
    if not path.is_file():
        raise DataError(
            f"cannot find the Titanic data file at {path}; pass its path (Kaggle's train.csv with "
            "columns Pclass, Sex, Age, SibSp, Parch, Fare, Embarked, Survived)."
        )
    try:
        frame = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError):
        raise DataError(
            f"cannot read {path} as a UTF-8 CSV file with a header row and as many fields in "
            "every row as in the header (Kaggle's train.csv)."
        ) from None
    missing = [c for c in [*FEATURES, TARGET] if c not in frame.columns]
    if missing:
        raise DataError(f"the Titanic file lacks column(s) {missing}.")
    X = frame[FEATURES].copy()
    for col, domain in DOMAINS.items():
        X[col] = X[col].astype(pd.CategoricalDtype(categories=list(domain)))
    for col in BOUNDS:
        X[col] = X[col].astype(np.float64)
    y = frame[TARGET].to_numpy().astype(np.int64)
    return X, y


@dataclass
class WalkthroughResult:
    """What :func:`run` prints, as data (for the docs and tests)."""

    rules: str
    first_predictions: NDArray[Any]
    first_truth: NDArray[Any]
    accuracy: dict[str, dict[float, tuple[float, float]]] = field(default_factory=dict)
    majority: float = 0.0


_NOT_GIVEN: Any = object()  # run()'s deprecated ``seed=`` was not passed

#: What each row of the accuracy table is (printed under it).
ROW_MEANINGS = {
    "greedy": "dpkit's default tree (DPDecisionTreeClassifier)",
    "id3": "the course project's ID3 on noisy counts, depth 3",
    "random": "a tree with random splits; only its leaves' counts are noisy",
    "forest": "dpkit's default forest (DPRandomForestClassifier, n_estimators='auto')",
}
#: DPRandomForestClassifier(n_estimators="auto") grows one tree below rows × ε = 100,000.
_ONE_TREE_BELOW = 100_000


@contextmanager
def _warnings_once() -> Iterator[None]:
    """Re-raise each distinct warning once: a seeded run fits hundreds of models that each warn."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    firsts = {(w.category, str(w.message)): w for w in reversed(caught)}
    for w in sorted(firsts.values(), key=caught.index):
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _row_notes(algorithms: Sequence[str], n_train: int, epsilons: Sequence[float]) -> list[str]:
    """One line per row of the accuracy table saying what it is."""
    notes = [f"{a}: {ROW_MEANINGS[a]}" for a in algorithms if a in ROW_MEANINGS]
    if "forest" in algorithms and n_train * max(epsilons) < _ONE_TREE_BELOW:
        notes.append(
            f"  at {n_train} training rows × ε ≤ {max(epsilons):g} (< {_ONE_TREE_BELOW:,}) the "
            "default forest is ONE tree, the same model as greedy: its row equals greedy's."
        )
    return notes


def _model(algorithm: str, epsilon: float, rng: int | None) -> Any:
    from dpkit.trees import DPDecisionTreeClassifier, DPRandomForestClassifier

    common: dict[str, Any] = {
        "epsilon": epsilon,
        "bounds": BOUNDS,
        "domains": DOMAINS,  # declared: a category dtype is no declaration
        "classes": CLASSES,
        "missing": "separate",
        "random_state": rng,
    }
    if algorithm == "forest":
        return DPRandomForestClassifier(**common)
    if algorithm == "id3":
        # The decision-tree course project's settings: a shallow ID3 tree on noisy counts.
        return DPDecisionTreeClassifier(algorithm="id3", max_depth=3, **common)
    return DPDecisionTreeClassifier(algorithm=algorithm, **common)


def accuracy_over_splits(
    X: pd.DataFrame,
    y: NDArray[np.int64],
    *,
    epsilons: Sequence[float] = EPSILONS,
    algorithms: Sequence[str] = ALGORITHMS,
    splits: int = 20,
    test_size: float = 0.3,
    rng: int | None = 0,
) -> dict[str, dict[float, tuple[float, float]]]:
    """Mean and standard deviation of test accuracy over random train/test splits.

    Split ``r`` uses a permutation seeded by ``rng + r`` (public randomness);
    the models' noise is seeded too when ``rng`` is not None (reproducible
    experiment), secure otherwise.
    """
    n = len(y)
    out: dict[str, dict[float, tuple[float, float]]] = {}
    for algorithm in algorithms:
        for eps in epsilons:
            accs = []
            for r in range(splits):
                perm = np.random.default_rng(None if rng is None else rng + r).permutation(n)
                cut = round(n * (1 - test_size))
                tr, te = perm[:cut], perm[cut:]
                noise_seed = None if rng is None else 10_000 + r
                model = _model(algorithm, eps, noise_seed).fit(X.iloc[tr], y[tr])
                accs.append(float(np.mean(model.predict(X.iloc[te]) == y[te])))
            out.setdefault(algorithm, {})[eps] = (float(np.mean(accs)), float(np.std(accs)))
    return out


def run(
    data: str | Path | None = None,
    *,
    epsilon: float = 1.0,
    epsilons: Sequence[float] = EPSILONS,
    algorithms: Sequence[str] = ALGORITHMS,
    splits: int = 20,
    rng: int | None = 0,
    echo: bool = True,
    seed: Any = _NOT_GIVEN,
) -> WalkthroughResult:
    """The decision-tree course project's walk-through with DP trees; prints it (``echo``) and returns it.

    1. Fit the decision-tree course project's algorithm (ID3 on noisy counts, depth 3) on all 891
       passengers with ``epsilon`` and print its questions.
    2. Predict the first 20 passengers next to the truth, as the course project does (these
       rows were in the training data, as in the course project).
    3. For each algorithm ("greedy" = dpkit's default tree, "id3", "random",
       "forest" = dpkit's default forest), test accuracy over ``splits``
       random 70/30 splits at each epsilon, beside the majority-class rate.

    Every fit is ``epsilon``-DP (add/remove one passenger); the accuracy table
    fits ``len(algorithms) * len(epsilons) * splits`` models on the same data,
    so it is an experiment about the method, not a release: report its numbers,
    not the models.

    ``rng``: the seed of the splits and of the models' noise (None: secure
    noise). ``seed=`` is its old name: still accepted with a DeprecationWarning
    until the next release.
    """
    if seed is not _NOT_GIVEN:
        warnings.warn(
            "run(seed=...) is deprecated and goes in the next release; pass rng=... instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        rng = seed
    from rich.console import Console

    console = Console(highlight=False) if echo else Console(quiet=True)
    X, y = load_titanic(data)
    with _warnings_once():  # one warning per run, not one per fitted model
        return _run(X, y, console, epsilon, epsilons, algorithms, splits, rng)


def _run(
    X: pd.DataFrame,
    y: NDArray[np.int64],
    console: Any,
    epsilon: float,
    epsilons: Sequence[float],
    algorithms: Sequence[str],
    splits: int,
    rng: int | None,
) -> WalkthroughResult:
    from rich.table import Table

    model = _model("id3", epsilon, rng).fit(X, y)
    rules = model.export_text()
    console.rule(
        f"ID3 on noisy counts (the decision-tree course project), epsilon = {epsilon:g}, all 891 passengers"
    )
    console.print(rules, markup=False)  # "Sex in [female]" is not Rich markup
    console.print(f"privacy: {model.privacy_.details['queries']}", markup=False)
    first = model.predict(X.iloc[:20])
    console.rule("The first 20 passengers (as in the decision-tree course project)")
    console.print("Predictions: ", list(map(int, first)), markup=False)
    console.print("Real values: ", list(map(int, y[:20])), markup=False)
    console.print(f"agreement: {int(np.sum(first == y[:20]))} / 20")
    table_data = accuracy_over_splits(
        X, y, epsilons=epsilons, algorithms=algorithms, splits=splits, rng=rng
    )
    majority = float(max(np.mean(y), 1 - np.mean(y)))
    table = Table(title=f"Test accuracy, mean ± std over {splits} random 70/30 splits")
    table.add_column("algorithm")
    for eps in epsilons:
        table.add_column(f"ε = {eps:g}", justify="right")
    for algorithm, per_eps in table_data.items():
        table.add_row(algorithm, *[f"{per_eps[e][0]:.3f} ± {per_eps[e][1]:.3f}" for e in epsilons])
    console.print(table)
    console.print(f"majority class (everyone dies): {majority:.3f}")
    for note in _row_notes(algorithms, round(len(y) * 0.7), epsilons):
        console.print(note, markup=False)
    return WalkthroughResult(rules, first, y[:20].copy(), table_data, majority)
