"""``feature_importances_`` for every public tree estimator: from the released model only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import dpkit.trees as trees
from dpkit.trees.engine._growth import Tree
from dpkit.trees.engine._importance import shape_importances, tree_importances

ESTIMATORS = sorted(
    name
    for name in trees.__all__
    if name.startswith("DP") and name.endswith(("Classifier", "Regressor"))
)

MAKE: dict[str, Callable[..., Any]] = {
    "DPDecisionTreeClassifier": lambda **kw: trees.DPDecisionTreeClassifier(
        classes=[0, 1], max_depth=3, **kw
    ),
    "DPRandomForestClassifier": lambda **kw: trees.DPRandomForestClassifier(
        classes=[0, 1], n_estimators=3, max_depth=3, **kw
    ),
    "DPDecisionTreeRegressor": lambda **kw: trees.DPDecisionTreeRegressor(
        target_bounds=(0, 1), max_depth=3, **kw
    ),
    "DPRandomForestRegressor": lambda **kw: trees.DPRandomForestRegressor(
        target_bounds=(0, 1), algorithm="greedy", n_estimators=2, max_depth=3, **kw
    ),
    "DPGradientBoostingClassifier": lambda **kw: trees.DPGradientBoostingClassifier(
        classes=[0, 1], max_iter=10, **kw
    ),
    "DPGradientBoostingRegressor": lambda **kw: trees.DPGradientBoostingRegressor(
        target_bounds=(0, 1), max_iter=10, **kw
    ),
}


def _data(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 4))
    y = (X[:, 0] > 0.5).astype(int)  # only feature 0 matters
    return X, y


def test_every_public_estimator_is_covered() -> None:
    assert set(ESTIMATORS) == set(MAKE)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_importances_sum_to_one_and_find_the_informative_feature(name: str) -> None:
    X, y = _data()
    model = MAKE[name](epsilon=5.0, bounds=(0, 1), random_state=0)
    with pytest.raises(NotFittedError):
        _ = model.feature_importances_
    model.fit(X, y.astype(float) if "Regressor" in name else y)
    imp = model.feature_importances_
    assert imp.shape == (4,) and imp.dtype == np.float64
    assert np.all(imp >= 0) and imp.sum() == pytest.approx(1.0)
    assert int(np.argmax(imp)) == 0


def _stump() -> Tree:
    one = np.array([-1], dtype=np.int32)
    return Tree(
        feature=one,
        cut=one,
        left=one,
        right=one,
        depth=np.zeros(1, dtype=np.int32),
        value=np.zeros((1, 1)),
        noisy_count=np.array([10.0]),
        categorical=np.zeros(1, dtype=bool),
    )


def test_a_stump_and_flat_shapes_give_zeros() -> None:
    np.testing.assert_array_equal(tree_importances([_stump()], 3), np.zeros(3))
    np.testing.assert_array_equal(shape_importances([np.zeros((4, 1))] * 2), np.zeros(2))


def test_splits_are_weighted_by_their_leaves_noisy_counts() -> None:
    # root splits on feature 1; its left child on feature 0; leaves 3, 4, 2 hold 10, 30, 60.
    tree = Tree(
        feature=np.array([1, 0, -1, -1, -1], dtype=np.int32),
        cut=np.array([0, 0, -1, -1, -1], dtype=np.int32),
        left=np.array([1, 3, -1, -1, -1], dtype=np.int32),
        right=np.array([2, 4, -1, -1, -1], dtype=np.int32),
        depth=np.array([0, 1, 1, 2, 2], dtype=np.int32),
        value=np.zeros((5, 1)),
        noisy_count=np.array([np.nan, np.nan, 60.0, 10.0, 30.0]),
        categorical=np.zeros(5, dtype=bool),
    )
    np.testing.assert_allclose(tree_importances([tree], 3), [40 / 140, 100 / 140, 0.0])
