"""DPGradientBoostingClassifier: accuracy, accounting, the privacy report, parameters."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from dpkit import Accountant, Budget
from dpkit.errors import BudgetExceededError, InvalidParameterError
from dpkit.trees import DPGradientBoostingClassifier, DPGradientBoostingRegressor
from dpkit.trees.boosting._cyclic import (
    FULL_GRADIENT,
    MODEL_BITS,
    LogLoss,
    PooledHessian,
    segment_sums,
    segments,
)
from dpkit.trees.boosting._estimator import GRADIENT_LIMIT, HESSIAN_WEIGHT
from dpkit.trees.boosting._noise import gaussian_plan, laplace_plan

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.errors.PrivacyWarning")


def _binary(n: int = 6000, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "a": rng.uniform(0, 10, n),
            "b": rng.uniform(0, 10, n),
            "c": pd.Categorical.from_codes(rng.integers(0, 4, n), ["w", "x", "y", "z"]),
        }
    )
    f = (
        0.8 * (X["a"] - 5)
        - 0.05 * (X["b"] - 5) ** 2
        + np.array([0.0, 1.0, -1.0, 0.5])[X["c"].cat.codes]
    )
    y = (rng.random(n) < 1 / (1 + np.exp(-f))).astype(int)
    return X, y.to_numpy() if hasattr(y, "to_numpy") else y


BOUNDS = {"a": (0.0, 10.0), "b": (0.0, 10.0)}
DOMAINS = {"c": ["w", "x", "y", "z"]}  # declared: a category dtype is no declaration


def _auc(model: DPGradientBoostingClassifier, X: pd.DataFrame, y: np.ndarray) -> float:
    return float(roc_auc_score(y, model.predict_proba(X)[:, 1]))


def test_ranks_close_to_the_non_private_limit_at_a_moderate_epsilon() -> None:
    X, y = _binary()
    Xt, yt = _binary(4000, seed=1)
    model = DPGradientBoostingClassifier(
        epsilon=1.0, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1], random_state=0
    ).fit(X, y)
    # The limit: the true score is additive; a one-hot logistic model on the same
    # features is a generous reference (it sees exact data).
    onehot = pd.get_dummies(X.assign(b2=(X["b"] - 5) ** 2), columns=["c"])
    limit = roc_auc_score(
        yt,
        LogisticRegression(max_iter=1000)
        .fit(onehot, y)
        .predict_proba(pd.get_dummies(Xt.assign(b2=(Xt["b"] - 5) ** 2), columns=["c"]))[:, 1],
    )
    assert _auc(model, Xt, yt) > limit - 0.03
    accuracy = np.mean(model.predict(Xt) == yt)
    assert accuracy > 0.75


def test_more_budget_ranks_better() -> None:
    X, y = _binary()
    Xt, yt = _binary(4000, seed=1)
    aucs = [
        np.mean(
            [
                _auc(
                    DPGradientBoostingClassifier(
                        epsilon=e, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1], random_state=s
                    ).fit(X, y),
                    Xt,
                    yt,
                )
                for s in range(3)
            ]
        )
        for e in (0.05, 2.0)
    ]
    assert aucs[1] > aucs[0] + 0.01


def test_multiclass_probabilities_and_scores() -> None:
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 1, (5000, 2))
    y = np.digitize(X[:, 0] + 0.1 * rng.normal(size=5000), [0.33, 0.66])  # 0, 1, 2
    model = DPGradientBoostingClassifier(
        epsilon=2.0, bounds=(0, 1), classes=[0, 1, 2], random_state=0
    ).fit(X, y)
    proba = model.predict_proba(X[:500])
    assert proba.shape == (500, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert model.decision_function(X[:10]).shape == (10, 3)
    assert np.mean(model.predict(X) == y) > 0.8
    # softmax gradients are not clipped, so they keep the smaller steps' rule
    assert model.learning_rate_ == pytest.approx(0.05 * np.sqrt(2.0))
    binary = DPGradientBoostingClassifier(
        epsilon=2.0, bounds=(0, 1), classes=[0, 1], random_state=0
    ).fit(X, (y > 0).astype(int))
    assert binary.learning_rate_ == pytest.approx(0.075 * np.sqrt(2.0))


def test_binary_decision_function_is_the_log_odds() -> None:
    X, y = _binary(2000)
    model = DPGradientBoostingClassifier(
        epsilon=1.0, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1], random_state=0
    ).fit(X, y)
    score = model.decision_function(X[:50])
    np.testing.assert_allclose(model.predict_proba(X[:50])[:, 1], 1 / (1 + np.exp(-score)))


def test_many_categories_and_missing_values_need_no_extra_parameter() -> None:
    rng = np.random.default_rng(0)
    n = 3000
    countries = [f"country-{i}" for i in range(60)]
    X = pd.DataFrame(
        {
            "country": pd.Categorical.from_codes(rng.integers(0, 60, n), countries),
            "age": np.where(rng.random(n) < 0.1, np.nan, rng.uniform(18, 90, n)),
        }
    )
    y = rng.integers(0, 2, n)
    model = DPGradientBoostingClassifier(
        epsilon=1.0,
        bounds={"age": (18, 90)},
        domains={"country": countries},
        classes=[0, 1],
        random_state=0,
    ).fit(X, y)
    assert model.shapes_[0].shape == (61, 1)  # 60 categories and the missing code
    assert model.predict_proba(X).shape == (n, 2)


def test_the_fit_charges_the_accountant_and_a_refused_fit_costs_nothing() -> None:
    X, y = _binary(1000)
    acc = Accountant(Budget(1.5, 1e-5))
    model = DPGradientBoostingClassifier(
        epsilon=1.0, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1], random_state=0, accountant=acc
    ).fit(X, y)
    spent = (acc.spent.epsilon, acc.spent.delta)
    assert spent == (model.privacy_.epsilon, model.privacy_.delta) == (1.0, 1e-6)
    again = DPGradientBoostingClassifier(
        epsilon=1.0, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1], random_state=0, accountant=acc
    )
    with pytest.raises(BudgetExceededError):
        again.fit(X, y)
    assert (acc.spent.epsilon, acc.spent.delta) == spent


def test_a_pure_epsilon_session_is_told_that_delta_0_gives_pure_epsilon() -> None:
    """A delta = 0 session refuses the default (zCDP, delta 1e-6) fit and says how to fit."""
    import dpkit

    X, y = _binary(300)
    session = dpkit.Session.from_pandas(
        pd.DataFrame({"x": [1.0]}), types={"x": "float"}, epsilon=2.0
    )
    for estimator in (DPGradientBoostingClassifier, DPGradientBoostingRegressor):
        extra = {"classes": [0, 1]} if estimator is DPGradientBoostingClassifier else {}
        if estimator is DPGradientBoostingRegressor:
            extra = {"target_bounds": (0.0, 1.0)}
        model = estimator(
            epsilon=0.5,
            bounds=BOUNDS,
            domains=DOMAINS,
            random_state=0,
            accountant=session,
            max_iter=2,
            max_leaf_nodes=2,
            **extra,
        )
        before = session.spent.epsilon
        with pytest.raises(BudgetExceededError) as refused:
            model.fit(X, y)
        message = str(refused.value)
        assert "delta short" in message
        assert f"pass delta=0 to the estimator ({estimator.__name__}(delta=0, ...))" in message
        assert "pure epsilon-DP" in message
        assert session.spent.epsilon == before  # refused: nothing charged
        model.set_params(delta=0).fit(X, y)  # the advice works
        assert model.privacy_.delta == 0.0


def test_the_privacy_report_adds_up() -> None:
    X, y = _binary(1000)
    zcdp = DPGradientBoostingClassifier(
        epsilon=1.0,
        max_iter=20,
        max_leaf_nodes=8,
        bounds=BOUNDS,
        domains=DOMAINS,
        classes=[0, 1],
        random_state=0,
    ).fit(X, y)
    report = zcdp.privacy_
    assert report.epsilon == 1.0 and report.delta == 1e-6
    assert report.neighbouring == "add/remove one row"
    assert report.uses == {"segment_sums": 20 * 3}  # shapes given: no row count
    assert report.split["segment_sums"] * 60 <= report.rho * (1 + 1e-12)
    pure = DPGradientBoostingClassifier(
        epsilon=1.0,
        delta=0.0,
        max_iter=20,
        max_leaf_nodes=8,
        bounds=BOUNDS,
        domains=DOMAINS,
        classes=[0, 1],
        random_state=0,
    ).fit(X, y)
    assert pure.privacy_.delta == 0.0 and pure.privacy_.rho is None
    assert pure.privacy_.split["segment_sums"] * 60 == pytest.approx(1.0)


@pytest.mark.parametrize("delta", [1e-6, 0.0])
def test_auto_shapes_buy_a_row_count_and_the_parts_add_up(delta: float) -> None:
    small_X, small_y = _binary(500)
    small = DPGradientBoostingClassifier(
        epsilon=1.0, delta=delta, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1], random_state=0
    ).fit(small_X, small_y)
    big_X, big_y = _binary(6000)
    big = DPGradientBoostingClassifier(
        epsilon=1.0, delta=delta, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1], random_state=0
    ).fit(big_X, big_y)
    assert (small.n_iter_, small.max_leaf_nodes_) == (20, 4)  # a few hundred rows
    assert (big.n_iter_, big.max_leaf_nodes_) == (150, 8)
    for model in (small, big):
        report = model.privacy_
        assert report.uses["row_count"] == 1
        total = sum(report.split[k] * report.uses[k] for k in report.split)
        budget = report.rho if delta > 0 else report.epsilon
        assert total <= budget * (1 + 1e-9) and total >= budget * 0.999


def test_noise_plans_never_spend_more_than_planned() -> None:
    from fractions import Fraction

    plan = gaussian_plan(1400, 32, LogLoss(1).l2_sensitivity, Fraction(1, 100))
    assert plan.rho_each is not None and plan.rho_each * 1400 <= Fraction(1, 100)
    lap = laplace_plan(700, 16, LogLoss(3).l1_sensitivity, Fraction(1))
    assert lap.epsilon_each is not None and lap.epsilon_each * 700 == 1
    t, s = lap.laplace_scale
    # scale in grid units >= l1 grid sensitivity / epsilon_each
    assert Fraction(t, s) * lap.epsilon_each >= Fraction(int(3 / lap.granularity))


def test_segments_are_contiguous_and_keep_extra_codes_apart() -> None:
    rng = np.random.default_rng(0)
    seg, n_seg = segments(33, 32, 8, rng)  # 32 ordered bins + a missing code
    assert n_seg == 9 and seg[-1] == 8
    assert np.all(np.diff(seg[:32]) >= 0) and set(seg[:32]) == set(range(8))
    seg, n_seg = segments(5, 0, 8, rng)  # a categorical feature
    assert n_seg == 5 and list(seg) == [0, 1, 2, 3, 4]


def test_every_row_of_the_clipped_log_loss_is_within_its_stated_sensitivity() -> None:
    loss = LogLoss(1, GRADIENT_LIMIT, HESSIAN_WEIGHT)
    # every score the logistic table distinguishes, and far past its ends, both labels
    units = (np.arange(-20 * 256, 20 * 256 + 1, dtype=np.int64) << (MODEL_BITS - 8))[:, None]
    for label in (0.0, 1.0):
        g, h = loss.gradients(np.full(units.shape, label), units)
        row = np.hstack([g, loss.hessian_weight * h])
        assert np.abs(g).max() == pytest.approx(loss.clip)  # the clip binds somewhere
        assert np.sqrt((row**2).sum(axis=1)).max() <= loss.l2_sensitivity
        assert np.abs(row).sum(axis=1).max() <= loss.l1_sensitivity
        assert np.all(g * FULL_GRADIENT == np.round(g * FULL_GRADIENT))  # on the grid
    unclipped = LogLoss(1)
    assert unclipped.l2_sensitivity == pytest.approx(np.sqrt(1 + 1 / 16))
    assert loss.l2_sensitivity < 0.55 * unclipped.l2_sensitivity
    with pytest.raises(ValueError):
        LogLoss(3, GRADIENT_LIMIT)  # softmax gradients are not clipped


@pytest.mark.parametrize("uneven", [False, True])
def test_the_pooled_hessian_is_exact_without_noise_and_averages_the_noise_away(
    uneven: bool,
) -> None:
    rng = np.random.default_rng(3)
    # a Hessian sum per code that does not move: 32 ordered bins and a missing code
    true = np.linspace(5.0, 80.0, 33)[:, None] if uneven else np.full((33, 1), 40.0)
    ordered = np.array([32])
    noiseless, noisy = (
        PooledHessian(np.array([33]), ordered, 1),
        PooledHessian(np.array([33]), ordered, 1),
    )
    sigma, errors, misses = 60.0, [], []
    for _ in range(200):
        seg, n_seg = segments(33, 32, 8, rng)
        exact = segment_sums(true, seg, n_seg)
        misses.append(float(np.abs(noiseless.pooled(0, seg, n_seg, exact) - exact).max()))
        pooled = noisy.pooled(0, seg, n_seg, exact + rng.normal(0.0, sigma, exact.shape))
        errors.append(float(np.std(pooled - exact)))
    # without noise: exact once the random cuts have told the codes apart
    assert max(misses[-50:]) < 0.05
    # one release alone is off by sigma; 200 of them pooled, by a small fraction of it
    assert errors[0] > 0.5 * sigma and np.mean(errors[-20:]) < 0.3 * sigma
    # a feature with more ordered codes than are solved for keeps the equal shares
    wide = PooledHessian(np.array([1001]), np.array([1000]), 1)
    assert wide.gram[0].size == 0
    # a negative estimate is never used as a Hessian
    clipped = PooledHessian(np.array([4]), np.array([0]), 1)
    assert np.all(clipped.pooled(0, np.arange(4), 4, np.full((4, 1), -5.0)) == 0.0)


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("max_iter", 0),
        ("max_leaf_nodes", 1),
        ("learning_rate", -0.1),
        ("learning_rate", "fast"),
        ("l2_regularization", 0.0),
        ("delta", 1.5),
        ("missing", "drop"),
        ("update", "jacobi"),
    ],
)
def test_bad_parameters_are_refused_with_a_clear_message(param: str, value: object) -> None:
    X, y = _binary(200)
    model = DPGradientBoostingClassifier(
        bounds=BOUNDS, domains=DOMAINS, classes=[0, 1], **{param: value}
    )
    with pytest.raises(InvalidParameterError, match=param):
        model.fit(X, y)


def test_a_filter_is_for_sessions_only() -> None:
    X, y = _binary(200)
    model = DPGradientBoostingClassifier(bounds=BOUNDS, domains=DOMAINS, classes=[0, 1])
    with pytest.raises(InvalidParameterError, match="where="):
        model.fit(X, y, where={"a": (">", 0)})


def test_seeded_fits_are_reproducible() -> None:
    X, y = _binary(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = DPGradientBoostingClassifier(
            bounds=BOUNDS, domains=DOMAINS, classes=[0, 1], random_state=7
        ).fit(X, y)
        b = DPGradientBoostingClassifier(
            bounds=BOUNDS, domains=DOMAINS, classes=[0, 1], random_state=7
        ).fit(X, y)
    np.testing.assert_array_equal(a.decision_function(X), b.decision_function(X))


def test_the_regressor_fits_an_additive_target_within_its_bounds() -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (8000, 3))
    y = 10 + 20 * X[:, 0] + 5 * np.sin(6 * X[:, 1]) + rng.normal(0, 1, 8000)
    model = DPGradientBoostingRegressor(
        epsilon=1.0, bounds=(0, 1), target_bounds=(0, 40), random_state=0
    ).fit(X, y)
    Xt = rng.uniform(0, 1, (2000, 3))
    truth = 10 + 20 * Xt[:, 0] + 5 * np.sin(6 * Xt[:, 1])
    pred = model.predict(Xt)
    assert np.all((pred >= 0) & (pred <= 40))
    constant = np.mean(np.abs(truth - np.median(truth)))
    assert np.mean(np.abs(pred - truth)) < 0.35 * constant
    assert model.privacy_.uses["segment_sums"] == 100 * 3


@pytest.mark.parametrize("loss", ["absolute_error", "squared_error"])
def test_both_regression_losses_fit(loss: str) -> None:
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (4000, 2))
    y = X[:, 0]
    model = DPGradientBoostingRegressor(
        epsilon=2.0, bounds=(0, 1), target_bounds=(0, 1), loss=loss, random_state=0
    ).fit(X, y)
    assert np.mean(np.abs(model.predict(X) - y)) < 0.1


def test_an_unknown_regression_loss_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match="loss"):
        DPGradientBoostingRegressor(bounds=(0, 1), target_bounds=(0, 1), loss="huber").fit(
            np.zeros((10, 1)), np.zeros(10)
        )


def test_exports_show_the_shape_functions() -> None:
    from dpkit.trees import export_graphviz, export_rules, export_text

    X, y = _binary(1000)
    model = DPGradientBoostingClassifier(
        epsilon=1.0, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1], n_cuts=3, random_state=0
    ).fit(X, y)
    text = export_text(model)
    assert text.startswith("intercept:")
    assert "c:" in text and "|   w:" in text and "|   <= 2.5:" in text
    rules = export_rules(model)
    assert rules[0].startswith("(always) => ")
    assert "c == w" in "\n".join(rules) and "a in (2.5, 5.0]" in "\n".join(rules)
    assert any(r.startswith("a is missing") for r in rules)
    assert len(rules) == 1 + sum(shape.shape[0] for shape in model.shapes_)
    dot = export_graphviz(model)
    assert dot.startswith("digraph") and dot.count("-> sum") == 3


@pytest.mark.parametrize("make", ["tree", "forest"])
def test_exports_work_for_missing_value_branches(make: str) -> None:
    from dpkit.trees import (
        DPDecisionTreeClassifier,
        DPRandomForestClassifier,
        export_graphviz,
        export_rules,
        export_text,
    )

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (5000, 2))
    missing = rng.random(5000) < 0.3
    X[missing, 0] = np.nan
    y = missing.astype(int)  # missingness is the signal: the root tests it
    cls = DPDecisionTreeClassifier if make == "tree" else DPRandomForestClassifier
    model = cls(
        epsilon=50.0,
        bounds=(0, 1),
        classes=[0, 1],
        missing="separate",
        max_depth=2,
        random_state=0,
    ).fit(X, y)
    text = export_text(model)
    assert "x[0] is missing" in text and "x[0] is not missing" in text
    assert export_rules(model) and export_graphviz(model).startswith("digraph")
