"""DP classification trees: privacy bookkeeping, utilities' sensitivities, noise, accuracy, inputs.

Statistical tests are seeded and say which claim they check. Data are small
and generated (or scikit-learn's bundled breast-cancer table), never the
shared data files.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.datasets import load_breast_cancer
from sklearn.tree import DecisionTreeClassifier

from dpkit._checks import exact
from dpkit.errors import DataError, InvalidParameterError, PrivacyWarning
from dpkit.trees.classification._criteria import (
    ENTROPY_WEIGHT_CAP,
    criterion,
    entropy_sensitivity,
    hierarchical_probabilities,
    level_budgets,
    noisy_leaf_counts,
)
from dpkit.trees.classification._forest import DPRandomForestClassifier, auto_n_estimators
from dpkit.trees.classification._id3 import information_gains
from dpkit.trees.classification._inputs import auto_criterion, auto_depth_rule, encode_frame
from dpkit.trees.classification._predict import forest_leaf_values
from dpkit.trees.classification._tree import DPDecisionTreeClassifier
from dpkit.trees.engine._growth import Candidates, apply, apply_forest


def blobs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two numeric features on [0, 1]; the label is an axis-aligned rule plus 10 % flips."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 3))
    y = ((X[:, 0] > 0.5) ^ ((X[:, 1] > 0.7) & (X[:, 0] < 0.5))).astype(int)
    flip = rng.random(n) < 0.1
    return X, np.where(flip, 1 - y, y)


def frame(n: int, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """A mixed DataFrame: a 3-value categorical that matters, a numeric that matters, noise."""
    rng = np.random.default_rng(seed)
    colour = rng.integers(0, 3, n)
    age = rng.uniform(0, 80, n)
    noise = rng.normal(0, 1, n)
    y = np.where(colour == 0, 1, np.where(colour == 1, (age < 30).astype(int), 0))
    y = np.where(rng.random(n) < 0.05, 1 - y, y)
    X = pd.DataFrame(
        {
            "colour": pd.Categorical.from_codes(colour, ["red", "green", "blue"]),
            "age": age,
            "noise": noise,
        }
    )
    return X, y


FRAME_BOUNDS = {"age": (0, 100), "noise": (-5, 5)}
FRAME_DOMAINS = {"colour": ["red", "green", "blue"]}  # declared: the dtype is no declaration


# --------------------------------------------------------------------------
# Budget bookkeeping
# --------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["greedy", "id3", "random"])
@pytest.mark.parametrize("max_depth", [0, 1, 3, "auto"])
def test_budget_adds_up_exactly(algorithm: str, max_depth: Any) -> None:
    X, y = blobs(300)
    for eps in (0.1, 0.3, 1.0, 7.0):
        m = DPDecisionTreeClassifier(
            epsilon=eps,
            max_depth=max_depth,
            bounds=(0, 1),
            classes=[0, 1],
            algorithm=algorithm,
            count_share=0.2 if algorithm == "greedy" else 0.0,
            random_state=0,
        ).fit(X, y)
        assert m.privacy_.details["total"] == exact(eps)
        parts = m.privacy_.details["queries"]
        assert math.isclose(
            sum(p["epsilon"] * p["uses"] for p in parts.values()), eps, rel_tol=1e-12
        )


@given(
    eps=st.sampled_from([0.01, 0.1, 0.25, 1.0, 3.3]),
    share=st.sampled_from([0.1, 0.3, 0.5, 0.9]),
    growth=st.sampled_from([0.5, 1.0, 2.0]),
    depth=st.integers(1, 6),
)
def test_budget_split_is_exact_for_any_setting(
    eps: float, share: float, growth: float, depth: int
) -> None:
    X, y = blobs(80)
    m = DPDecisionTreeClassifier(
        epsilon=eps,
        max_depth=depth,
        leaf_share=share,
        level_growth=growth,
        criterion="gini",
        bounds=(0, 1),
        classes=[0, 1],
        random_state=1,
    ).fit(X, y)
    assert m.privacy_.details["total"] == exact(eps)


def test_level_budgets_are_exact_and_geometric() -> None:
    parts = level_budgets(Fraction(7, 10), 4, Fraction(2))
    assert sum(parts) == Fraction(7, 10)
    assert [parts[i + 1] / parts[i] for i in range(3)] == [2, 2, 2]


@pytest.mark.parametrize("partition", ["disjoint", "shared"])
def test_forest_budget_parallel_or_sequential(partition: str) -> None:
    X, y = blobs(400)
    m = DPRandomForestClassifier(
        epsilon=1.0,
        n_estimators=4,
        max_depth=2,
        criterion="gini",
        partition=partition,
        bounds=(0, 1),
        classes=[0, 1],
        random_state=0,
    ).fit(X, y)
    assert m.privacy_.details["total"] == 1
    parts = m.privacy_.details["queries"]
    if partition == "disjoint":
        # Each tree has the full epsilon on its own rows: the per-tree parts sum to epsilon.
        assert all(k.startswith("per_tree_") for k in parts)
        assert math.isclose(sum(p["epsilon"] * p["uses"] for p in parts.values()), 1.0)
    else:
        assert sum(1 for k in parts if k.endswith("_leaf")) == 4
    assert len(m.trees_) == 4


# --------------------------------------------------------------------------
# Utilities and their sensitivities (the proofs in _classification's docstring)
# --------------------------------------------------------------------------


def _single(left: np.ndarray, total: np.ndarray) -> Candidates:
    return Candidates(
        left=left.reshape(1, 1, 1, -1).astype(float),
        total=total.reshape(1, -1).astype(float),
        valid=np.ones((1, 1), dtype=bool),
    )


counts3 = st.lists(st.integers(0, 60), min_size=3, max_size=3)


@given(left=counts3, right=counts3, side=st.booleans(), k=st.integers(0, 2), big=st.booleans())
def test_utility_sensitivities(
    left: list[int], right: list[int], side: bool, k: int, big: bool
) -> None:
    """Adding one row changes each utility by at most its stated sensitivity (monotone where stated)."""
    scale = ENTROPY_WEIGHT_CAP - 40 if big else 0  # also probe children around the entropy cap
    lv = np.array(left) + (scale if big else 0)
    rv = np.array(right)
    total = lv + rv
    add = np.zeros(3, dtype=int)
    add[k] = 1
    lv2 = lv + add if side else lv
    for name in ("max", "gini", "entropy"):
        crit = criterion(name, 3)
        before = float(crit.utility(_single(lv, total))[0, 0, 0])
        after = float(crit.utility(_single(lv2, total + add))[0, 0, 0])
        change = after - before
        assert abs(change) <= crit.sensitivity + 1e-9, name
        if crit.monotonic:
            # max can only grow (more rows right), Gini impurity only grows (utility falls).
            assert (change >= -1e-9) if name == "max" else (change <= 1e-9), name


def test_entropy_sensitivity_value() -> None:
    assert entropy_sensitivity(2) == pytest.approx(
        math.log2(ENTROPY_WEIGHT_CAP + 1) + 1 / math.log(2)
    )


def test_information_gains_match_hand_computation() -> None:
    # One node, one numeric feature with 2 codes, 2 classes: left [8, 0], right [2, 10].
    noisy = np.array([[[[8, 0], [2, 10]]]], dtype=float)
    gains = information_gains(noisy, np.array([2]), np.array([False]))
    h = lambda p: -sum(x * math.log2(x) for x in p if x > 0)  # noqa: E731
    expected = h([0.5, 0.5]) - (8 / 20) * 0 - (12 / 20) * h([2 / 12, 10 / 12])
    assert gains[0, 0, 0] == pytest.approx(expected)
    assert np.isneginf(gains[0, 0, 1])  # no cut after the last code


# --------------------------------------------------------------------------
# Noise: the stated distribution
# --------------------------------------------------------------------------


def test_leaf_count_noise_has_the_geometric_variance() -> None:
    """Leaf counts get two-sided geometric noise of scale 1/eps: Var = 2 e^-eps / (1 - e^-eps)^2."""
    rng = np.random.default_rng(7)
    n_leaves, k, eps = 5000, 2, 0.5
    leaf = rng.integers(0, n_leaves, 40_000)
    labels = rng.integers(0, k, 40_000)
    true = np.bincount(leaf * k + labels, minlength=n_leaves * k).reshape(n_leaves, k)
    noisy = noisy_leaf_counts(
        leaf, labels, k, np.arange(n_leaves), n_leaves, eps, np.random.default_rng(8)
    )
    noise = (noisy - true).ravel()
    q = math.exp(-eps)
    variance = 2 * q / (1 - q) ** 2
    assert abs(noise.mean()) < 4 * math.sqrt(variance / noise.size)
    # 10,000 draws: the sample variance is within 6 % with overwhelming probability.
    assert noise.var() == pytest.approx(variance, rel=0.06)
    assert np.all(noise == np.round(noise))


# --------------------------------------------------------------------------
# Structure: huge epsilon = the non-private greedy tree on the same grid
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gini", "max"])
def test_huge_epsilon_picks_the_best_split_at_every_node(name: str) -> None:
    """With epsilon = 1e6 every split attains the maximal utility among the grid's candidates."""
    X, y = blobs(1500, seed=3)
    m = DPDecisionTreeClassifier(
        epsilon=1e6,
        max_depth=3,
        criterion=name,
        bounds=(0, 1),
        classes=[0, 1],
        n_cuts=16,
        random_state=0,
    ).fit(X, y)
    tree, grid = m.tree_, m.grid_
    codes = grid.encode([X[:, j] for j in range(3)])
    crit = criterion(name, 2)
    for node in range(tree.n_nodes):  # a handful of nodes
        if tree.feature[node] < 0:
            continue
        rows = np.flatnonzero(rows_through(tree, codes, node))
        hist = np.zeros((1, 3, 17, 2))
        np.add.at(
            hist, (0, np.repeat(np.arange(3)[None, :], rows.size, 0), codes[rows], y[rows, None]), 1
        )
        cum = np.cumsum(hist, axis=2)
        cands = Candidates(
            left=cum[:, :, :16, :], total=cum[:, 0, -1, :], valid=np.ones((3, 16), bool)
        )
        u = crit.utility(cands)[0]
        chosen = u[tree.feature[node], tree.cut[node]]
        assert chosen == pytest.approx(u.max())


def rows_through(tree: Any, codes: np.ndarray, target: int) -> np.ndarray:
    """Mask of the rows whose path passes through node ``target`` (numeric splits only)."""
    parent = np.full(tree.n_nodes, -1)
    internal = np.flatnonzero(tree.feature >= 0)
    parent[tree.left[internal]] = internal
    parent[tree.right[internal]] = internal
    mask = np.ones(codes.shape[0], dtype=bool)
    child = target
    while parent[child] >= 0:
        p = parent[child]
        go_left = codes[:, tree.feature[p]] <= tree.cut[p]
        mask &= go_left if tree.left[p] == child else ~go_left
        child = p
    return mask


def test_huge_epsilon_matches_sklearn_accuracy() -> None:
    X, y = blobs(3000, seed=4)
    Xte, yte = blobs(2000, seed=5)
    dp = DPDecisionTreeClassifier(
        epsilon=1e6, max_depth=3, criterion="gini", bounds=(0, 1), classes=[0, 1], random_state=0
    ).fit(X, y)
    sk = DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y)
    assert dp.score(Xte, yte) >= sk.score(Xte, yte) - 0.02


def test_random_structure_ignores_the_labels() -> None:
    """algorithm='random': the split structure is independent of the data (no budget spent on it)."""
    X, y = blobs(500)
    a = DPDecisionTreeClassifier(
        epsilon=1.0, max_depth=4, algorithm="random", bounds=(0, 1), classes=[0, 1], random_state=3
    ).fit(X, y)
    b = DPDecisionTreeClassifier(
        epsilon=1.0, max_depth=4, algorithm="random", bounds=(0, 1), classes=[0, 1], random_state=3
    ).fit(X, 1 - y)
    assert np.array_equal(a.tree_.feature, b.tree_.feature)
    assert np.array_equal(a.tree_.cut, b.tree_.cut)
    assert set(a.privacy_.details["queries"]) == {"leaf", "row_count"}


# --------------------------------------------------------------------------
# Accuracy (seeded, averaged)
# --------------------------------------------------------------------------


def test_accuracy_grows_with_epsilon() -> None:
    """Mean accuracy over 6 seeds: eps = 0.02 is near chance, eps = 5 near the non-private tree."""
    X, y = blobs(2000, seed=11)
    Xte, yte = blobs(2000, seed=12)

    def acc(eps: float) -> float:
        return float(
            np.mean(
                [
                    DPDecisionTreeClassifier(
                        epsilon=eps, bounds=(0, 1), classes=[0, 1], random_state=s
                    )
                    .fit(X, y)
                    .score(Xte, yte)
                    for s in range(6)
                ]
            )
        )

    low, high = acc(0.02), acc(5.0)
    assert high > low + 0.1
    assert high > 0.83  # the label is 90 % predictable


def test_breast_cancer_default_tree_and_forest() -> None:
    """scikit-learn's breast-cancer data at eps = 2: far above the 63 % majority class."""
    data = load_breast_cancer()
    X, y = data.data, data.target
    bounds = (np.zeros(X.shape[1]), X.max(axis=0) * 1.25)  # stand-in for a codebook in this test
    rng = np.random.default_rng(0)
    accs_tree, accs_forest = [], []
    for s in range(5):
        idx = rng.permutation(len(y))
        tr, te = idx[:400], idx[400:]
        accs_tree.append(
            DPDecisionTreeClassifier(epsilon=2.0, bounds=bounds, classes=[0, 1], random_state=s)
            .fit(X[tr], y[tr])
            .score(X[te], y[te])
        )
        accs_forest.append(
            DPRandomForestClassifier(
                epsilon=2.0, n_estimators=3, bounds=bounds, classes=[0, 1], random_state=s
            )
            .fit(X[tr], y[tr])
            .score(X[te], y[te])
        )
    assert np.mean(accs_tree) > 0.85
    assert np.mean(accs_forest) > 0.85


@pytest.mark.parametrize("algorithm", ["greedy", "id3"])
def test_dataframe_with_categories_learns_the_rule(algorithm: str) -> None:
    X, y = frame(4000, seed=1)
    Xte, yte = frame(2000, seed=2)
    m = DPDecisionTreeClassifier(
        epsilon=20.0,
        max_depth=3,
        bounds=FRAME_BOUNDS,
        domains=FRAME_DOMAINS,
        classes=[0, 1],
        algorithm=algorithm,
        random_state=0,
    ).fit(X, y)
    assert m.score(Xte, yte) > 0.88
    assert list(m.feature_names_in_) == ["colour", "age", "noise"]
    assert m.n_features_in_ == 3


def test_id3_makes_a_multiway_split_on_a_categorical_feature() -> None:
    X, y = frame(4000, seed=1)
    m = DPDecisionTreeClassifier(
        epsilon=50.0,
        max_depth=1,
        bounds=FRAME_BOUNDS,
        domains=FRAME_DOMAINS,
        classes=[0, 1],
        algorithm="id3",
        random_state=0,
    ).fit(X, y)
    tree = m.tree_
    # A 4-way split (3 colours and the missing-value code of missing="separate")
    # is a chain of 3 "==" tests on the same feature with 4 leaves.
    assert tree.n_leaves == 4
    assert set(tree.feature[tree.feature >= 0]) == {0}
    assert "colour in [red]" in m.export_text()


# --------------------------------------------------------------------------
# Inputs, metadata and errors
# --------------------------------------------------------------------------


def test_missing_metadata_errors_are_clear() -> None:
    X, y = blobs(100)
    with pytest.raises(InvalidParameterError, match="classes is required"):
        DPDecisionTreeClassifier(bounds=(0, 1)).fit(X, y)
    with pytest.raises(InvalidParameterError, match="bounds is required"):
        DPDecisionTreeClassifier(classes=[0, 1]).fit(X, y)
    with pytest.raises(InvalidParameterError, match="classes is required"):
        DPRandomForestClassifier(bounds=(0, 1)).fit(X, y)


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"epsilon": 0}, "epsilon"),
        ({"algorithm": "c4.5"}, "algorithm must be one of"),
        ({"criterion": "twoing"}, "criterion must be"),
        ({"selector": "argmax"}, "selector must be"),
        ({"max_depth": -1}, "max_depth"),
        ({"leaf_share": 1.0}, "leaf_share"),
        ({"level_growth": 10.0}, "level_growth"),
        ({"missing": "drop"}, "missing must be"),
        ({"n_cuts": 0}, "n_cuts"),
        ({"smoothing": -1.0}, "smoothing"),
    ],
)
def test_bad_parameters(params: dict[str, Any], fragment: str) -> None:
    X, y = blobs(60)
    with pytest.raises(InvalidParameterError, match=fragment):
        DPDecisionTreeClassifier(bounds=(0, 1), classes=[0, 1], **params).fit(X, y)


def test_forest_bad_parameters() -> None:
    X, y = blobs(60)
    with pytest.raises(InvalidParameterError, match="partition"):
        DPRandomForestClassifier(bounds=(0, 1), classes=[0, 1], partition="bagged").fit(X, y)
    with pytest.raises(InvalidParameterError, match="n_estimators"):
        DPRandomForestClassifier(bounds=(0, 1), classes=[0, 1], n_estimators=0).fit(X, y)


def test_error_messages_reveal_no_values() -> None:
    X, y = frame(200)
    X.loc[5, "age"] = 987654.321  # clipped silently: bounds are public, the value is private
    # An undeclared label is left out (a per-row rule), never an error that one row decides.
    secret = np.where(np.arange(200) == 7, 424242, y)
    DPDecisionTreeClassifier(
        bounds=FRAME_BOUNDS, domains=FRAME_DOMAINS, classes=[0, 1], random_state=0
    ).fit(X, secret)
    X2 = X.copy()
    X2.loc[3, "noise"] = np.nan
    with pytest.warns(PrivacyWarning, match="missing='error'"):
        with pytest.raises(DataError) as err2:
            DPDecisionTreeClassifier(
                bounds=FRAME_BOUNDS, domains=FRAME_DOMAINS, classes=[0, 1], missing="error"
            ).fit(X2, y)
    assert "'noise'" in str(err2.value) and "missing='separate'" in str(err2.value)
    assert "987654" not in str(err2.value)
    X3 = X.copy()
    X3["colour"] = X3["colour"].astype(object)
    X3.loc[4, "colour"] = "ultraviolet"
    domains = {"colour": ["red", "green", "blue"]}
    with pytest.raises(DataError) as err3:
        DPDecisionTreeClassifier(
            bounds=FRAME_BOUNDS, classes=[0, 1], domains=domains, missing="error"
        ).fit(X3, y)
    assert "ultraviolet" not in str(err3.value) and "colour" in str(err3.value)
    # By default the undeclared value is a missing value: no error.
    DPDecisionTreeClassifier(
        bounds=FRAME_BOUNDS, classes=[0, 1], domains=domains, random_state=0
    ).fit(X3, y)


def test_max_categories_refuses_large_public_domains() -> None:
    X, y = frame(100)
    with pytest.raises(InvalidParameterError, match="max_categories"):
        DPDecisionTreeClassifier(
            bounds=FRAME_BOUNDS, domains=FRAME_DOMAINS, classes=[0, 1], max_categories=2
        ).fit(X, y)


def test_missing_separate_policy() -> None:
    X, y = frame(2000, seed=3)
    rng = np.random.default_rng(0)
    X.loc[rng.random(2000) < 0.1, "age"] = np.nan
    X.loc[rng.random(2000) < 0.05, "colour"] = np.nan
    m = DPDecisionTreeClassifier(
        epsilon=10.0,
        max_depth=3,
        bounds=FRAME_BOUNDS,
        domains=FRAME_DOMAINS,
        classes=[0, 1],
        missing="separate",
        random_state=0,
    ).fit(X, y)
    proba = m.predict_proba(X)
    assert proba.shape == (2000, 2) and np.allclose(proba.sum(axis=1), 1)
    # An unseen category at predict time is treated as missing (no error).
    X_new = X.iloc[:5].copy()
    X_new["colour"] = pd.Categorical(["purple"] * 5, categories=["red", "green", "blue", "purple"])
    assert m.predict(X_new).shape == (5,)
    assert m.__sklearn_tags__().input_tags.allow_nan


def test_string_labels_and_three_classes() -> None:
    X, y = frame(1500)
    labels = np.array(["low", "mid", "high"])[np.clip(y + (X["age"].to_numpy() > 60), 0, 2)]
    m = DPDecisionTreeClassifier(
        epsilon=5.0,
        bounds=FRAME_BOUNDS,
        domains=FRAME_DOMAINS,
        classes=["high", "low", "mid"],
        random_state=0,
    ).fit(X, labels)
    assert list(m.classes_) == ["high", "low", "mid"]
    assert set(m.predict(X)) <= {"high", "low", "mid"}
    assert m.predict_proba(X).shape == (1500, 3)


# --------------------------------------------------------------------------
# Post-processing helpers, rules, speed paths
# --------------------------------------------------------------------------


def test_hierarchical_probabilities_fall_back_to_the_parent() -> None:
    X, y = blobs(300)
    m = DPDecisionTreeClassifier(
        epsilon=1.0, max_depth=2, criterion="gini", bounds=(0, 1), classes=[0, 1], random_state=0
    ).fit(X, y)
    tree = m.tree_
    counts = np.full((tree.n_nodes, 2), np.nan)
    leaves = np.flatnonzero(tree.feature < 0)
    counts[leaves] = [[30.0, 10.0]] + [[0.0, 0.0]] * (leaves.size - 1)
    proba = hierarchical_probabilities(tree, counts, smoothing=2.0)
    assert np.allclose(proba.sum(axis=1), 1)
    # The empty leaves get exactly their parent's distribution.
    internal = np.flatnonzero(tree.feature >= 0)
    parent = {int(c): int(p) for p in internal for c in (tree.left[p], tree.right[p])}
    for leaf in leaves[1:]:
        assert np.allclose(proba[leaf], proba[parent[int(leaf)]])


def test_rules_and_graphviz() -> None:
    X, y = frame(2000)
    m = DPDecisionTreeClassifier(
        epsilon=20.0,
        max_depth=2,
        bounds=FRAME_BOUNDS,
        domains=FRAME_DOMAINS,
        classes=[0, 1],
        random_state=0,
    ).fit(X, y)
    text = m.export_text()
    assert text.startswith("if ") and "-> class:" in text and "noisy counts" in text
    dot = m.export_graphviz()
    assert dot.startswith("digraph") and dot.count("->") >= 2
    f = DPRandomForestClassifier(
        epsilon=20.0,
        n_estimators=2,
        max_depth=2,
        bounds=FRAME_BOUNDS,
        domains=FRAME_DOMAINS,
        classes=[0, 1],
        random_state=0,
    ).fit(X, y)
    assert "-> class:" in f.export_text(tree_index=1)


def test_fast_frame_encoding_matches_the_grid() -> None:
    X, y = frame(500)
    m = DPDecisionTreeClassifier(
        epsilon=1.0, bounds=FRAME_BOUNDS, domains=FRAME_DOMAINS, classes=[0, 1], random_state=0
    ).fit(X, y)
    fast = encode_frame(X, m.grid_)
    assert fast is not None
    slow = m.grid_.encode(
        [X[c].astype(object).to_numpy() if c == "colour" else X[c].to_numpy() for c in X.columns]
    )
    assert np.array_equal(fast[0], slow)


def test_forest_leaf_values_match_core_traversal() -> None:
    X, y = frame(3000)
    f = DPRandomForestClassifier(
        epsilon=5.0,
        n_estimators=6,
        max_depth=4,
        bounds=FRAME_BOUNDS,
        domains=FRAME_DOMAINS,
        classes=[0, 1],
        random_state=0,
    ).fit(X, y)
    codes = f._prepare_predict(X)
    leaves = apply_forest(f.trees_, codes)
    expected = sum(t.value[leaves[:, i]] for i, t in enumerate(f.trees_))
    assert np.allclose(forest_leaf_values(f.trees_, codes, 2), expected)
    assert np.array_equal(apply(f.trees_[0], codes), leaves[:, 0])


def test_auto_rules_are_public_functions() -> None:
    assert auto_criterion(500, 1.0) == "max" and auto_criterion(50_000, 1.0) == "gini"
    assert auto_depth_rule(600, 1.0, 2, 7) < auto_depth_rule(60_000, 1.0, 2, 7) <= 10
    assert auto_n_estimators(600, 1.0) == 1 and auto_n_estimators(35_000, 5.0) == 3
    assert auto_n_estimators(1e9, 1.0) == 10


def test_seeded_fits_are_reproducible() -> None:
    X, y = blobs(300)
    a = DPDecisionTreeClassifier(epsilon=1.0, bounds=(0, 1), classes=[0, 1], random_state=5).fit(
        X, y
    )
    b = DPDecisionTreeClassifier(epsilon=1.0, bounds=(0, 1), classes=[0, 1], random_state=5).fit(
        X, y
    )
    assert np.array_equal(a.predict_proba(X), b.predict_proba(X))


def test_titanic_walkthrough_on_a_generated_file(tmp_path: Any) -> None:
    """The walk-through end to end on a small Titanic-shaped CSV (never the shared data)."""
    from dpkit.walkthroughs.titanic import run

    rng = np.random.default_rng(0)
    n = 300
    sex = rng.choice(["female", "male"], n)
    pclass = rng.integers(1, 4, n)
    survived = (rng.random(n) < np.where(sex == "female", 0.75, 0.2)).astype(int)
    age = np.where(rng.random(n) < 0.2, np.nan, rng.uniform(1, 70, n).round())
    embarked = np.where(rng.random(n) < 0.02, None, rng.choice(["C", "Q", "S"], n))
    frame_ = pd.DataFrame(
        {
            "PassengerId": np.arange(1, n + 1),
            "Survived": survived,
            "Pclass": pclass,
            "Name": "x",
            "Sex": sex,
            "Age": age,
            "SibSp": rng.integers(0, 4, n),
            "Parch": rng.integers(0, 3, n),
            "Ticket": "t",
            "Fare": rng.uniform(5, 100, n).round(2),
            "Cabin": None,
            "Embarked": embarked,
        }
    )
    path = tmp_path / "titanic.csv"
    frame_.to_csv(path, index=False)
    result = run(
        path, epsilon=2.0, epsilons=(1.0, 5.0), algorithms=("greedy", "id3"), splits=2, echo=False
    )
    assert "Sex in [" in result.rules or "-> class:" in result.rules
    assert result.first_predictions.shape == (20,) and result.first_truth.shape == (20,)
    assert set(result.accuracy) == {"greedy", "id3"}
    assert all(0 <= m <= 1 for per in result.accuracy.values() for m, _ in per.values())
