"""The scikit-learn estimators: contract, errors, budget bookkeeping, accuracy against epsilon."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.datasets import load_diabetes
from sklearn.utils.estimator_checks import parametrize_with_checks

from dpkit._checks import exact
from dpkit.errors import DataError, InvalidParameterError, PrivacyWarning
from dpkit.trees import DPDecisionTreeClassifier, DPDecisionTreeRegressor, DPRandomForestRegressor

# scikit-learn's checks fit on generated data without declaring bounds; a DP
# estimator cannot (bounds are public metadata), so the checks run on
# instances that declare wide bounds. Every check passes on them; see
# docs/trees-regression.md ("scikit-learn compatibility").
CHECK_INSTANCES = [
    DPDecisionTreeRegressor(
        epsilon=10.0, bounds=(-10, 10), target_bounds=(-1000, 1000), random_state=0
    ),
    DPRandomForestRegressor(
        epsilon=10.0, bounds=(-10, 10), target_bounds=(-1000, 1000), random_state=0
    ),
    DPRandomForestRegressor(
        epsilon=10.0,
        bounds=(-10, 10),
        target_bounds=(-1000, 1000),
        algorithm="greedy",
        random_state=0,
    ),
]


# fit never refuses a value (whether it fails must not depend on one row): entries
# that are not numbers count as missing and their rows are left out.
EXPECTED_FAILURES = {
    "check_dtype_object": "entries that are not numbers leave their row out, not refused",
    "check_supervised_y_no_nan": "NaN and infinite targets are missing: their row is left out",
    "check_estimators_nan_inf": "fit treats NaN and infinities as missing (never refuses)",
}


@parametrize_with_checks(CHECK_INSTANCES, expected_failed_checks=lambda _: EXPECTED_FAILURES)
def test_sklearn_contract(estimator: Any, check: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        check(estimator)


ESTIMATORS = [DPDecisionTreeRegressor, DPRandomForestRegressor]


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_missing_metadata_gives_clear_errors(cls: Any, make_friedman: Any) -> None:
    X, y = make_friedman(100)
    with pytest.raises(InvalidParameterError, match="bounds is required"):
        cls(target_bounds=(0, 30)).fit(X, y)
    with pytest.raises(InvalidParameterError, match="target_bounds=\\(lo, hi\\) is required"):
        cls(bounds=(0, 1)).fit(X, y)


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"epsilon": 0}, "epsilon"),
        ({"epsilon": float("inf")}, "epsilon"),
        ({"algorithm": "xgboost"}, "algorithm must be one of"),
        ({"leaf": "mode"}, "leaf must be"),
        ({"max_depth": -1}, "max_depth"),
        ({"leaf_share": 1.5}, "leaf_share"),
        ({"n_cuts": 0}, "n_cuts"),
    ],
)
def test_bad_parameters(
    cls: Any, params: dict[str, Any], fragment: str, make_friedman: Any
) -> None:
    X, y = make_friedman(50)
    with pytest.raises(InvalidParameterError, match=fragment):
        cls(bounds=(0, 1), target_bounds=(0, 30), **params).fit(X, y)


def test_error_messages_reveal_no_values() -> None:
    secret = "CONFIDENTIAL-271828"
    frame = pd.DataFrame({"x": [0.1, 0.2, 0.3], "c": ["a", "b", secret]})
    model = DPDecisionTreeRegressor(
        bounds={"x": (0, 1)}, target_bounds=(0, 1), domains={"c": ["a", "b"]}, random_state=0
    )
    model.fit(frame, [0.1, 0.2, 0.3])  # the undeclared value's row is left out: no error
    DPDecisionTreeRegressor(bounds=(0, 1), target_bounds=(0, 1), random_state=0).fit(
        [[0.5], [0.25]], [0.1, 123.456e300 * 1e10]
    )  # an infinite target is missing (docs/queries.md): its row is left out, no error
    with pytest.raises(DataError) as info:  # a shape error: scikit-learn's message prints X
        DPDecisionTreeRegressor(bounds=(0, 1), target_bounds=(0, 1)).fit(
            np.array([0.314159, 0.2]), [0.1, 0.2]
        )
    assert "314159" not in str(info.value) and "2-dimensional" in str(info.value)


def test_rows_that_cannot_be_used_are_left_out_by_a_per_row_rule() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (300, 2))
    y = X[:, 0]
    base = DPDecisionTreeRegressor(
        epsilon=5.0, max_depth=2, bounds=(0, 1), target_bounds=(0, 1), random_state=1
    ).fit(X, y)
    X_bad = np.vstack([X, [[np.nan, 0.5]]])
    y_bad = np.append(y, 0.5)
    with_nan = DPDecisionTreeRegressor(
        epsilon=5.0, max_depth=2, bounds=(0, 1), target_bounds=(0, 1), random_state=1
    ).fit(X_bad, y_bad)
    # The NaN row was left out: same rows, same seed, same model.
    np.testing.assert_array_equal(base.tree_.value, with_nan.tree_.value)
    with pytest.raises(DataError, match="impute"):
        with_nan.predict([[np.nan, 0.5]])  # predict is not private: it can say so


ALGOS = [
    (DPDecisionTreeRegressor, "greedy"),
    (DPDecisionTreeRegressor, "random"),
    (DPRandomForestRegressor, "boosting"),
    (DPRandomForestRegressor, "greedy"),
    (DPRandomForestRegressor, "random"),
]


@pytest.mark.parametrize(("cls", "algorithm"), ALGOS)
@pytest.mark.parametrize("epsilon", [0.3, 1.7, 10.0])
@pytest.mark.parametrize("auto", [True, False])
def test_budget_plan_adds_up_to_epsilon_exactly(
    cls: Any, algorithm: str, epsilon: float, auto: bool, make_friedman: Any
) -> None:
    X, y = make_friedman(300)
    params: dict[str, Any] = {} if auto else {"max_depth": 3}
    if not auto and cls is DPRandomForestRegressor:
        params.update(n_estimators=3, learning_rate=0.5)
    model = cls(
        epsilon=epsilon,
        bounds=(0, 1),
        target_bounds=(-5, 35),
        algorithm=algorithm,
        random_state=0,
        **params,
    )
    model.fit(X, y)
    assert model.budget_plan_.total == exact(epsilon)
    assert ("row_count" in model.budget_plan_.parts) == auto
    assert model.provably_private_


def test_paper_algorithms_warn_and_are_labelled(make_friedman: Any) -> None:
    X, y = make_friedman(400)
    for cls in ESTIMATORS:
        for algorithm in ("paper", "paper_total"):
            with pytest.warns(PrivacyWarning, match="NOT provably"):
                model = cls(
                    epsilon=2.0,
                    bounds=(0, 1),
                    target_bounds=(-5, 35),
                    algorithm=algorithm,
                    random_state=1,
                )
                model.fit(X, y)
            assert not model.provably_private_
    tree = DPDecisionTreeRegressor(
        epsilon=3.0, bounds=(0, 1), target_bounds=(-5, 35), algorithm="paper", random_state=0
    )
    with pytest.warns(PrivacyWarning):
        tree.fit(X, y)
    # beta = eps / (2 l_max + 1) with l_max = 15 by default, 31 uses.
    assert tree.max_depth_ == 15
    assert tree.budget_plan_.parts["paper_query"] * 31 == exact(3.0)


def test_same_seed_same_model_different_seed_different_noise(make_friedman: Any) -> None:
    X, y = make_friedman(500)
    base = DPRandomForestRegressor(
        epsilon=1.0, bounds=(0, 1), target_bounds=(-5, 35), random_state=4
    )
    a = clone(base).fit(X, y).predict(X)
    b = clone(base).fit(X, y).predict(X)
    c = clone(base).set_params(random_state=5).fit(X, y).predict(X)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_secure_default_noise_differs_between_fits(make_friedman: Any) -> None:
    X, y = make_friedman(300)
    model = DPDecisionTreeRegressor(epsilon=1.0, bounds=(0, 1), target_bounds=(-5, 35), max_depth=3)
    assert not np.array_equal(model.fit(X, y).tree_.value, clone(model).fit(X, y).tree_.value)


@pytest.mark.parametrize(
    ("cls", "params"),
    [
        (DPDecisionTreeRegressor, {}),
        (DPRandomForestRegressor, {}),
        (DPRandomForestRegressor, {"algorithm": "greedy"}),
    ],
)
def test_error_falls_as_epsilon_grows(cls: Any, params: dict[str, Any], make_friedman: Any) -> None:
    """Seeded: mean test MAE over 3 seeds drops from eps = 0.05 to eps = 2 to eps = 50."""
    X, y = make_friedman(4000, seed=3)
    Xt, yt = make_friedman(2000, seed=4)
    maes = []
    for eps in (0.05, 2.0, 50.0):
        errs = [
            np.mean(
                np.abs(
                    cls(
                        epsilon=eps, bounds=(0, 1), target_bounds=(-5, 35), random_state=s, **params
                    )
                    .fit(X, y)
                    .predict(Xt)
                    - yt
                )
            )
            for s in range(3)
        ]
        maes.append(np.mean(errs))
    baseline = np.mean(np.abs(yt - np.median(y)))
    assert maes[0] > maes[1] > maes[2]
    assert maes[2] < 0.6 * baseline  # a useful model, not a constant


def test_dataframe_input_names_dict_bounds_and_categoricals() -> None:
    rng = np.random.default_rng(0)
    n = 3000
    frame = pd.DataFrame(
        {
            "age": rng.uniform(18, 90, n),
            "city": pd.Categorical(
                rng.choice(["north", "south", "east"], n), categories=["north", "south", "east"]
            ),
            "plan": rng.choice(["basic", "pro"], n),
        }
    )
    y = (
        10
        + 0.2 * frame["age"]
        + np.where(frame["city"] == "south", 15.0, 0.0)
        + rng.normal(0, 1, n)
    )
    model = DPDecisionTreeRegressor(
        epsilon=20.0,
        bounds={"age": (0, 100)},
        target_bounds=(0, 60),
        domains={"plan": ["basic", "pro"], "city": list(frame["city"].cat.categories)},
        max_depth=3,
        random_state=0,
    ).fit(frame, y)
    assert list(model.feature_names_in_) == ["age", "city", "plan"]
    assert model.n_features_in_ == 3
    pred = model.predict(frame)
    assert np.mean(np.abs(pred - y)) < 0.5 * np.mean(np.abs(y - np.median(y)))
    # An unseen category at predict time is routed, not refused (it equals no split value).
    unseen = frame.head(3).astype({"plan": object})
    unseen.loc[:, "plan"] = "enterprise"
    assert np.all(np.isfinite(model.predict(unseen)))
    with pytest.raises(InvalidParameterError, match="dict"):
        DPDecisionTreeRegressor(bounds={"age": (0, 100)}, target_bounds=(0, 60)).fit(
            frame[["age"]].to_numpy(), y
        )


def test_forest_beats_constant_on_bundled_data() -> None:
    X, y = load_diabetes(return_X_y=True)
    Xtr, Xte, ytr, yte = X[:350], X[350:], y[:350], y[350:]
    baseline = np.mean(np.abs(yte - np.median(ytr)))
    errs = [
        np.mean(
            np.abs(
                DPRandomForestRegressor(
                    epsilon=20.0, bounds=(-0.2, 0.2), target_bounds=(0, 350), random_state=s
                )
                .fit(Xtr, ytr)
                .predict(Xte)
                - yte
            )
        )
        for s in range(5)
    ]
    assert np.mean(errs) < 0.9 * baseline


def test_predictions_stay_within_target_bounds(make_friedman: Any) -> None:
    X, y = make_friedman(500)
    for cls in ESTIMATORS:
        pred = (
            cls(epsilon=0.2, bounds=(0, 1), target_bounds=(0, 20), random_state=0)
            .fit(X, y)
            .predict(X)
        )
        assert pred.min() >= 0 and pred.max() <= 20


def test_exports_show_public_thresholds_and_leaf_values() -> None:
    from dpkit.trees import export_graphviz, export_rules, export_text

    rng = np.random.default_rng(1)
    frame = pd.DataFrame(
        {"size": rng.uniform(0, 10, 2000), "kind": pd.Categorical(rng.choice(["a", "b"], 2000))}
    )
    y = frame["size"] * 2 + np.where(frame["kind"] == "b", 5.0, 0.0)
    tree = DPDecisionTreeRegressor(
        epsilon=50.0,
        bounds={"size": (0, 10)},
        target_bounds=(0, 30),
        domains={"kind": ["a", "b"]},
        max_depth=2,
        random_state=0,
    ).fit(frame, y)
    text = export_text(tree)
    rules = export_rules(tree)
    dot = export_graphviz(tree)
    assert len(rules) == tree.get_n_leaves() == 4
    thresholds = {f"{t:.3f}".rstrip("0").rstrip(".") for t in tree.grid_.thresholds(0)}
    for line in text.splitlines():
        if "size <=" in line:
            assert line.split("<= ")[1] in thresholds  # only public grid points appear
    assert "kind in [" in text or "size <=" in text
    assert dot.startswith("digraph Tree {") and dot.count("->") == 2 * (
        tree.tree_.n_nodes - tree.get_n_leaves()
    )
    leaf_values = sorted(float(r.split("=> ")[1]) for r in rules)
    np.testing.assert_allclose(
        leaf_values, np.sort(tree.tree_.value[tree.tree_.feature < 0, 0]), atol=1e-3
    )
    forest = DPRandomForestRegressor(
        epsilon=5.0, bounds=(0, 10), target_bounds=(0, 30), random_state=0
    )
    forest.fit(frame[["size"]].to_numpy(), y)
    assert export_text(forest, tree=len(forest.trees_) - 1).count("value:") >= 1
    with pytest.raises(InvalidParameterError, match="tree must be in"):
        export_text(forest, tree=len(forest.trees_))
    with pytest.raises(InvalidParameterError, match="fitted"):
        export_text(DPDecisionTreeRegressor())


@pytest.mark.parametrize(
    "make",
    [
        lambda: DPDecisionTreeClassifier(max_depth=21, bounds=(0, 1), classes=[0, 1]),
        lambda: DPDecisionTreeRegressor(max_depth=40, bounds=(0, 1), target_bounds=(0, 1)),
    ],
)
def test_depths_whose_leaves_cannot_fit_in_memory_are_refused_clearly(make: Any) -> None:
    with pytest.raises(InvalidParameterError, match=r"too deep.*GiB.*max_depth <= 20"):
        make().fit(np.zeros((4, 1)), np.array([0, 1, 0, 1]))
