"""End-to-end privacy of the tree estimators: transcripts and statistical audits.

*Transcripts*: the same fit on a dataset and a neighbour (one row added or
removed), with the noise fixed by ``random_state``, must give the same
everything except what the mechanisms choose: no error on one side only, the
same warnings, the same public attributes and the same privacy report.
Hostile rows (NaN, ±inf, text in a numeric column, an undeclared label) must
not make ``fit`` fail on one side only: they are handled by per-row rules
(missing code, or the row left out), never by an error.

*Audits*: many fits on two neighbours; the empirical privacy loss of the
prediction at a fixed point, with 99% confidence bounds, must not exceed the
claimed ε — and the same audit must refute a broken variant that spends 30×
what it claims.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tests.tables._declared import types_of

from dpkit.audit import audit_samples
from dpkit.trees import (
    DPDecisionTreeClassifier,
    DPDecisionTreeRegressor,
    DPGradientBoostingClassifier,
    DPGradientBoostingRegressor,
    DPRandomForestClassifier,
    DPRandomForestRegressor,
)

ESTIMATORS: dict[str, Callable[..., Any]] = {
    "tree-classifier": lambda **kw: DPDecisionTreeClassifier(bounds=(0, 1), classes=[0, 1], **kw),
    "forest-classifier": lambda **kw: DPRandomForestClassifier(bounds=(0, 1), classes=[0, 1], **kw),
    "tree-regressor": lambda **kw: DPDecisionTreeRegressor(
        bounds=(0, 1), target_bounds=(0, 1), **kw
    ),
    "forest-regressor": lambda **kw: DPRandomForestRegressor(
        bounds=(0, 1), target_bounds=(0, 1), **kw
    ),
    "boosting-classifier": lambda **kw: DPGradientBoostingClassifier(
        bounds=(0, 1), classes=[0, 1], max_iter=10, **kw
    ),
    "boosting-regressor": lambda **kw: DPGradientBoostingRegressor(
        bounds=(0, 1), target_bounds=(0, 1), max_iter=10, **kw
    ),
}
PUBLIC = (
    "classes_",
    "n_classes_",
    "n_features_in_",
    "privacy_",
    "budget_plan_",
    "epsilon_",
    "provably_private_",
    "target_bounds_",
    "learning_rate_",
    "l2_regularization_",
    "n_iter_",
)


def _data(n: int = 240, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 3))
    y = (X[:, 0] + 0.2 * rng.normal(size=n) > 0.5).astype(int)
    return X, y


def _transcript(make: Callable[..., Any], X: np.ndarray, y: np.ndarray, regression: bool) -> dict:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model = make(epsilon=1.0, random_state=3).fit(X, y.astype(float) if regression else y)
            error = None
        except Exception as err:  # the type and message are part of the transcript
            model, error = None, (type(err).__name__, str(err))
    public = (
        {} if model is None else {k: repr(getattr(model, k)) for k in PUBLIC if hasattr(model, k)}
    )
    return {
        "error": error,
        "warnings": sorted({(w.category.__name__, str(w.message)) for w in caught}),
        "public": public,
    }


ORDINARY = {
    "remove a row": lambda X, y: (X[1:], y[1:]),
    "add a row": lambda X, y: (np.vstack([X, [0.5, 0.5, 0.5]]), np.append(y, 1)),
    "add a huge value": lambda X, y: (np.vstack([X, [1e308, 0.5, 0.5]]), np.append(y, 0)),
    "add a value below the bounds": lambda X, y: (
        np.vstack([X, [-5.0, 0.5, 2.0]]),
        np.append(y, 1),
    ),
}
HOSTILE = {
    "add NaN": lambda X, y: (np.vstack([X, [np.nan, 0.5, 0.5]]), np.append(y, 0)),
    "add +inf": lambda X, y: (np.vstack([X, [np.inf, 0.5, 0.5]]), np.append(y, 0)),
    "add -inf": lambda X, y: (np.vstack([X, [0.5, -np.inf, 0.5]]), np.append(y, 1)),
    "add text": lambda X, y: (
        np.vstack([X.astype(object), np.array([["secret", 0.5, 0.5]], dtype=object)]),
        np.append(y, 1),
    ),
    "add a NaN label": lambda X, y: (np.vstack([X, [0.5, 0.5, 0.5]]), np.append(y, np.nan)),
}


@pytest.mark.parametrize("neighbour", sorted(ORDINARY))
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_transcripts_match_on_neighbours(name: str, neighbour: str) -> None:
    X, y = _data()
    regression = "regressor" in name
    X2, y2 = ORDINARY[neighbour](X, y)
    assert _transcript(ESTIMATORS[name], X, y, regression) == _transcript(
        ESTIMATORS[name], X2, y2, regression
    )


@pytest.mark.parametrize("neighbour", sorted(HOSTILE))
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_transcripts_match_on_hostile_neighbours(name: str, neighbour: str) -> None:
    X, y = _data()
    regression = "regressor" in name
    X2, y2 = HOSTILE[neighbour](X, y)
    assert _transcript(ESTIMATORS[name], X, y, regression) == _transcript(
        ESTIMATORS[name], X2, y2, regression
    )


@pytest.mark.parametrize("name", ["boosting-classifier", "forest-classifier", "tree-classifier"])
def test_an_undeclared_label_does_not_make_fit_fail(name: str) -> None:
    X, y = _data()
    X2, y2 = np.vstack([X, [0.5, 0.5, 0.5]]), np.append(y, 7)
    assert _transcript(ESTIMATORS[name], X, y, False) == _transcript(
        ESTIMATORS[name], X2, y2, False
    )


# -- audits ------------------------------------------------------------------------------

# Classifiers: one row at x = 0.2 flips the majority there (and overall): 3:3 → 3:4.
# Regressors: one row is the whole median (0.1 ×20, 0.5, 0.9 ×20); without it any
# value in (0.1, 0.9) is a median. Both pairs are neighbours (one row added).
_PAIRS = {
    "classifier": (
        np.array([[0.2]] * 6 + [[0.8]] * 6),
        np.array([0, 0, 0, 1, 1, 1] * 2),
        np.array([[0.2]] * 7 + [[0.8]] * 6),
        np.array([0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1]),
    ),
    "regressor": (
        np.array([[0.2]] * 41),
        np.array([0.1] * 20 + [0.9] * 20 + [0.5]),
        np.array([[0.2]] * 40),
        np.array([0.1] * 20 + [0.9] * 20),
    ),
}
_POINT = np.array([[0.2]])


def _predictions(name: str, X: np.ndarray, y: np.ndarray, epsilon: float, n: int, seed: int):
    make = ESTIMATORS[name]
    regression = "regressor" in name
    target = y.astype(float) if regression else y
    rng = np.random.default_rng(seed)
    out = np.empty(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(n):
            model = make(epsilon=epsilon, random_state=int(rng.integers(2**31)))
            model.fit(X, target)
            # the boosted model's score is continuous: audit it, not the class
            score = model.predict_proba(_POINT)[0, 1] if name == "boosting-classifier" else None
            out[i] = float(model.predict(_POINT)[0]) if score is None else float(score)
    return out


def _audit(name: str, spent: float, n: int) -> Any:
    claimed = 1.0
    X, y, X_prime, y_prime = _PAIRS["regressor" if "regressor" in name else "classifier"]
    a = _predictions(name, X, y, spent, n, seed=1)
    b = _predictions(name, X_prime, y_prime, spent, n, seed=2)
    return audit_samples(a, b, epsilon=claimed, min_count=max(40, n // 20))


def test_tree_classifier_audit_passes_and_refutes_a_broken_variant() -> None:
    """Fast subset (make test): the default classifier, 800 fits per neighbour."""
    assert _audit("tree-classifier", 1.0, 800).passed
    broken = _audit("tree-classifier", 30.0, 800)  # spends 30x what it claims
    assert not broken.passed and broken.epsilon_lower_bound > 1.0


@pytest.mark.parametrize("name", ["boosting-classifier", "boosting-regressor"])
def test_boosted_model_audit_passes_and_refutes_a_broken_variant(name: str) -> None:
    """Fast subset: the boosted models' prediction at a point, 600 fits per neighbour."""
    assert _audit(name, 1.0, 600).passed
    broken = _audit(name, 30.0, 600)
    assert not broken.passed and broken.epsilon_lower_bound > 1.0


@pytest.mark.audit
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_estimator_audit_passes_and_refutes_a_broken_variant(name: str) -> None:
    """Full set (make audit): every estimator, 4,000 fits per neighbour."""
    assert _audit(name, 1.0, 4000).passed
    broken = _audit(name, 30.0, 4000)
    assert not broken.passed and broken.epsilon_lower_bound > 1.0


# -- one accountant for queries and models ---------------------------------------------


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_estimator_charges_the_accountant_before_it_fits(name: str) -> None:
    from dpkit import Accountant, Budget
    from dpkit.errors import BudgetExceededError

    X, y = _data()
    target = y.astype(float) if "regressor" in name else y
    acc = Accountant(Budget(1.5, 1e-5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ESTIMATORS[name](epsilon=1.0, random_state=0, accountant=acc).fit(X, target)
    report = model.privacy_
    assert (acc.spent.epsilon, acc.spent.delta) == (report.epsilon, report.delta)
    assert report.epsilon == 1.0 and report.neighbouring == "add/remove one row"
    assert report.split and report.uses.keys() == report.split.keys()
    # A second fit cannot be paid: refused before the model is grown, nothing charged.
    again = ESTIMATORS[name](epsilon=1.0, random_state=0, accountant=acc)
    with pytest.raises(BudgetExceededError):
        again.fit(X, target)
    assert not hasattr(again, "privacy_")
    assert (acc.spent.epsilon, acc.spent.delta) == (report.epsilon, report.delta)


def test_a_model_trained_beside_session_queries_pays_from_the_same_budget() -> None:
    import pandas as pd

    from dpkit import Session

    X, y = _data()
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(y=y)
    session = Session.from_pandas(frame, types=types_of(frame), epsilon=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session.count(epsilon=0.5)
        DPDecisionTreeClassifier(
            epsilon=0.4, bounds=(0, 1), classes=[0, 1], accountant=session
        ).fit(X, y)
        with pytest.raises(Exception, match="budget"):
            DPDecisionTreeClassifier(
                epsilon=0.2, bounds=(0, 1), classes=[0, 1], accountant=session
            ).fit(X, y)
    assert session.spent.epsilon == pytest.approx(0.9)


def test_the_papers_algorithms_cannot_be_charged_to_an_accountant() -> None:
    from dpkit import Accountant, Budget
    from dpkit.errors import InvalidParameterError

    X, y = _data()
    acc = Accountant(Budget(5.0))
    with pytest.raises(InvalidParameterError, match="not differentially private"):
        DPDecisionTreeRegressor(
            algorithm="paper", bounds=(0, 1), target_bounds=(0, 1), accountant=acc
        ).fit(X, y.astype(float))
    assert acc.spent.epsilon == 0
