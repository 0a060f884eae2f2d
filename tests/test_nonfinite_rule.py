"""One rule for non-finite values across dpkit (issue 28).

The rule (``docs/queries.md``, "Missing and non-finite values"): NaN, None and
±inf are *missing*, everywhere: a table query applies the column's null policy
to them (``"drop"`` by default), a tree estimator's ``fit`` treats them as
missing entries (classifiers: the missing branch; regressors: the row is left
out). A huge finite value (1e308) is a value: clipped to the public bounds (a
bounded query treats one beyond ``queries.valid_range(bounds)`` as missing).
Nothing refuses a hostile value: no error depends on the data.

Each test runs the same release twice with the same seed, once with a hostile
value in one row and once with that entry missing (``None``/NaN), and asserts
the two are identical: so the hostile value was treated exactly as missing.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpkit import Session
from dpkit.errors import DataError
from dpkit.trees import (
    DPDecisionTreeClassifier,
    DPDecisionTreeRegressor,
    DPGradientBoostingClassifier,
    DPGradientBoostingRegressor,
    DPRandomForestClassifier,
    DPRandomForestRegressor,
)

NON_FINITE = {"nan": math.nan, "none": None, "+inf": math.inf, "-inf": -math.inf}
HUGE = 1e308
B = (0.0, 10.0)

# ----------------------------------------------------------------------- queries


def _frame(hostile: Any) -> pd.DataFrame:
    x = [0.5, 1.5, 2.5, 9.5, 1.0, 3.0, 4.0, hostile]
    return pd.DataFrame(
        {
            "x": pd.Series(x, dtype=object),
            "y": [1.0, 2.0, 3.0, 4.0, 5.0, 9.0, 2.0, 2.0],
            "g": ["a", "a", "b", "b", "a", "b", "a", "b"],
        }
    )


TYPES = {"x": "DOUBLE", "y": "DOUBLE", "g": "VARCHAR"}

Query = Callable[[Session], Any]
#: One query per kind that reads the numeric column x (bounded ones first).
BOUNDED: dict[str, Query] = {
    "sum": lambda s: s.sum("x", epsilon=1.0, bounds=B),
    "mean": lambda s: s.mean("x", epsilon=1.0, bounds=B),
    "variance": lambda s: s.variance("x", epsilon=1.0, bounds=B),
    "std-grouped": lambda s: s.std("x", epsilon=1.0, bounds=B, group_by="g", keys=["a", "b"]),
    "median": lambda s: s.median("x", epsilon=1.0, bounds=B),
    "quantile": lambda s: s.quantile("x", 0.9, epsilon=1.0, bounds=B),
    "histogram": lambda s: s.histogram("x", epsilon=1.0, bins=4, bounds=B),
    "histogram-method": lambda s: s.histogram("x", epsilon=1.0, bins=4, bounds=B, method="hb"),
    "histogram2d": lambda s: s.histogram2d(
        "x", "y", epsilon=1.0, bins=(2, 2), bounds=(B, B), method="laplace2d"
    ),
}
UNBOUNDED: dict[str, Query] = {"count-x": lambda s: s.count("x", epsilon=1.0)}


def _view(r: Any) -> Any:
    """Everything a release shows, made comparable (arrays as lists, NaN as a tag)."""

    def plain(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return plain(v.tolist())
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [plain(x) for x in v]
        if isinstance(v, float) and math.isnan(v):
            return "nan"
        if isinstance(v, np.generic):
            return plain(v.item())
        return v

    details = {k: plain(v) for k, v in r.details.items() if k != "published"}
    return plain(r.value), plain(r.ci), details, r.epsilon, r.delta, r.mechanism


def _run(hostile: Any, query: Query) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = Session.from_pandas(_frame(hostile), types=TYPES, epsilon=100.0, rng=7)
        out = _view(query(s))
    # The session's own warnings (seed, large ε) are the same on both sides.
    return out, sorted(str(w.message) for w in caught)


@pytest.mark.parametrize("value", sorted(NON_FINITE))
@pytest.mark.parametrize("kind", sorted({**BOUNDED, **UNBOUNDED}))
def test_a_query_treats_non_finite_values_as_missing(kind: str, value: str) -> None:
    query = {**BOUNDED, **UNBOUNDED}[kind]
    # No error (nothing depends on the value), and exactly the release with None.
    assert _run(NON_FINITE[value], query) == _run(None, query)


@pytest.mark.parametrize("kind", sorted(BOUNDED))
def test_a_bounded_query_treats_a_value_beyond_its_valid_range_as_missing(kind: str) -> None:
    assert _run(HUGE, BOUNDED[kind]) == _run(None, BOUNDED[kind])


def test_a_count_of_a_column_counts_a_huge_finite_value() -> None:
    query = UNBOUNDED["count-x"]
    assert _run(HUGE, query) == _run(5.0, query) != _run(None, query)


# ------------------------------------------------------------------------- trees

_RNG = np.random.default_rng(0)
X_TREES = _RNG.random((120, 2))
Y_CLASS = (X_TREES[:, 0] > 0.5).astype(int)
Y_REG = 3 * X_TREES[:, 0] + _RNG.normal(0, 0.1, 120)
PROBE = np.column_stack([np.linspace(0, 1, 25), np.linspace(1, 0, 25)])

Estimator = Callable[[], Any]
CLASSIFIERS: dict[str, Estimator] = {
    "tree": lambda: DPDecisionTreeClassifier(
        epsilon=2.0, max_depth=3, bounds=(0, 1), classes=[0, 1], random_state=0
    ),
    "forest": lambda: DPRandomForestClassifier(
        epsilon=2.0, n_estimators=3, max_depth=3, bounds=(0, 1), classes=[0, 1], random_state=0
    ),
    "boosting": lambda: DPGradientBoostingClassifier(
        epsilon=2.0, bounds=(0, 1), classes=[0, 1], random_state=0
    ),
}
REGRESSORS: dict[str, Estimator] = {
    "tree": lambda: DPDecisionTreeRegressor(
        epsilon=2.0, max_depth=3, bounds=(0, 1), target_bounds=(0, 3), random_state=0
    ),
    "forest": lambda: DPRandomForestRegressor(
        epsilon=2.0, bounds=(0, 1), target_bounds=(0, 3), random_state=0
    ),
    "boosting": lambda: DPGradientBoostingRegressor(
        epsilon=2.0, bounds=(0, 1), target_bounds=(0, 3), random_state=0
    ),
}
ESTIMATORS = {
    **{f"classifier-{k}": (v, Y_CLASS) for k, v in CLASSIFIERS.items()},
    **{f"regressor-{k}": (v, Y_REG) for k, v in REGRESSORS.items()},
}


def _fit_predict(make: Estimator, X: Any, y: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().fit(X, y)
    # Probabilities (classifiers) show every leaf's noisy counts, so one row moving
    # between the missing branch and a clipped bin shows.
    out = model.predict_proba(PROBE) if hasattr(model, "predict_proba") else model.predict(PROBE)
    return np.round(out, 12).tolist()


def _with(value: Any, row: int = 5, column: int = 0) -> Any:
    X = X_TREES.astype(object)
    X[row, column] = value
    return X


@pytest.mark.parametrize("value", sorted(NON_FINITE))
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_fit_treats_non_finite_features_as_missing(name: str, value: str) -> None:
    make, y = ESTIMATORS[name]
    assert _fit_predict(make, _with(NON_FINITE[value]), y) == _fit_predict(make, _with(math.nan), y)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_fit_clips_a_huge_finite_feature_to_the_bounds(name: str) -> None:
    make, y = ESTIMATORS[name]
    assert _fit_predict(make, _with(HUGE), y) == _fit_predict(make, _with(1.0), y)


@pytest.mark.parametrize("value", sorted(NON_FINITE))
@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_a_regressor_treats_a_non_finite_target_as_missing(name: str, value: str) -> None:
    make = REGRESSORS[name]
    y = Y_REG.astype(object)
    y[5] = NON_FINITE[value]
    y_nan = Y_REG.copy()
    y_nan[5] = math.nan
    assert _fit_predict(make, X_TREES, y) == _fit_predict(make, X_TREES, y_nan)


@pytest.mark.parametrize("frame", [False, True])
@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_a_classifier_predicts_non_finite_features_as_missing(name: str, frame: bool) -> None:
    """``predict`` (the caller's own data): ±inf takes the missing branch, like NaN."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        X = pd.DataFrame(X_TREES, columns=["a", "b"]) if frame else X_TREES
        model = CLASSIFIERS[name]().fit(X, Y_CLASS)
    probe = np.array([[math.inf, 0.5], [-math.inf, 0.5], [math.nan, 0.5], [0.5, math.inf]])
    probe_nan = np.array([[math.nan, 0.5]] * 3 + [[0.5, math.nan]])
    if frame:
        probe, probe_nan = (pd.DataFrame(p, columns=["a", "b"]) for p in (probe, probe_nan))
    np.testing.assert_array_equal(model.predict_proba(probe), model.predict_proba(probe_nan))


@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_a_regressor_refuses_to_predict_a_missing_feature_by_name(name: str) -> None:
    """A regressor has no missing branch: ``predict`` says so, naming the column only."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = REGRESSORS[name]().fit(X_TREES, Y_REG)
    for value in (math.inf, -math.inf, math.nan):
        with pytest.raises(DataError, match=r"missing values \(NaN, ±inf") as info:
            model.predict(np.array([[0.5, value]]))
        assert "inf" not in str(info.value).replace("±inf", "")
