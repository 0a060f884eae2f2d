"""Rows whose label is not in ``classes``: a noisy count of them, and a warning when many are.

The count is one more cell of the leaves' noisy count table (no extra cost);
the warning is decided from released noisy numbers only.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from dpkit.trees import DPDecisionTreeClassifier, DPRandomForestClassifier
from dpkit.trees.classification._inputs import left_out_warning

MAKERS = {
    "tree": lambda **kw: DPDecisionTreeClassifier(bounds=(0, 1), **kw),
    "forest-disjoint": lambda **kw: DPRandomForestClassifier(
        bounds=(0, 1), n_estimators=3, max_depth=2, **kw
    ),
    "forest-shared": lambda **kw: DPRandomForestClassifier(
        bounds=(0, 1), n_estimators=2, max_depth=2, partition="shared", **kw
    ),
}


def _data(n: int = 400, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 2))
    y = np.where(X[:, 0] + 0.1 * rng.normal(size=n) > 0.5, "Yes", "No")
    return X, y


def _fit(name: str, X: Any, y: Any, classes: list[Any], seed: int = 3) -> tuple[Any, list[Any]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = MAKERS[name](classes=classes, epsilon=1.0, random_state=seed).fit(X, y)
    return model, [w for w in caught if "left out" in str(w.message)]


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_labels_in_the_wrong_case_are_counted_and_warned_about(name: str) -> None:
    X, y = _data()
    model, caught = _fit(name, X, y, ["no", "yes"])
    assert abs(model.n_left_out_ - 400) < 40  # noisy, at the leaves' epsilon
    lo, hi = model.n_left_out_ci_
    assert lo <= model.n_left_out_ <= hi
    assert len(caught) == 1 and caught[0].category is UserWarning
    message = str(caught[0].message)
    assert "have a label that is not in classes=['no', 'yes']" in message
    assert "spelling, case" in message
    assert "Yes" not in message and "No " not in message  # never the data's labels


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_declared_labels_give_a_small_count_and_no_warning(name: str) -> None:
    X, y = _data()
    model, caught = _fit(name, X, y, ["No", "Yes"])
    assert model.n_left_out_ < 40
    assert caught == []


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_transcript_with_a_stray_label_differs_only_in_the_noisy_count(name: str) -> None:
    """Dataset vs neighbour with one more row labelled "maybe", noise fixed: the kept rows
    are the same, so the model is identical; only the noisy left-out count moves, by one."""
    X, y = _data()
    X2, y2 = np.vstack([X, [[0.3, 0.7]]]), np.append(y, "maybe")
    a, wa = _fit(name, X, y, ["No", "Yes"])
    b, wb = _fit(name, X2, y2, ["No", "Yes"])
    trees_a = a.trees_ if hasattr(a, "trees_") else [a.tree_]
    trees_b = b.trees_ if hasattr(b, "trees_") else [b.tree_]
    for ta, tb in zip(trees_a, trees_b, strict=True):
        for field in ("feature", "cut", "left", "right", "value", "noisy_count"):
            np.testing.assert_array_equal(getattr(ta, field), getattr(tb, field))
    assert a.privacy_ == b.privacy_
    assert [str(w.message) for w in wa] == [str(w.message) for w in wb] == []
    # Same noise draw on both sides: the noisy counts (seen through the interval's upper
    # end, which is not clipped at 0 for this seed) differ by exactly the one stray row.
    assert a.n_left_out_ci_[1] > 0
    assert b.n_left_out_ci_[1] - a.n_left_out_ci_[1] == pytest.approx(1.0)


def test_the_warning_is_a_function_of_the_noisy_numbers_only() -> None:
    classes = ["no", "yes"]
    assert left_out_warning(0.0, (0.0, 6.0), 500.0, classes) is None
    assert left_out_warning(4.0, (0.0, 10.0), 500.0, classes) is None  # interval reaches 0
    assert left_out_warning(8.0, (2.0, 14.0), 5000.0, classes) is None  # under 1%
    message = left_out_warning(300.0, (294.0, 306.0), 20.0, classes)
    assert message is not None and message.startswith("about 300 training rows")
