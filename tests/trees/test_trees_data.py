"""Public metadata: bounds parsing, the candidate grid, encoding, input refusal."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.errors import InvalidParameterError
from dpkit.trees.engine._grid import FeatureGrid, make_grid, resolve_bounds, split_columns


def test_single_pair_applies_to_all_numeric_features() -> None:
    lows, highs = resolve_bounds((0, 5), 3, None, [False, False, False])
    assert lows.tolist() == [0, 0, 0] and highs.tolist() == [5, 5, 5]


def test_lows_highs_pair_per_feature() -> None:
    lows, highs = resolve_bounds(([0, -1, 2], [1, 1, 3]), 3, None, [False] * 3)
    assert lows.tolist() == [0, -1, 2] and highs.tolist() == [1, 1, 3]


def test_dict_bounds_follow_column_order_and_skip_categoricals() -> None:
    lows, highs = resolve_bounds(
        {"b": (0, 2), "a": (1, 3)}, 3, ["a", "b", "c"], [False, False, True]
    )
    assert lows[:2].tolist() == [1, 0] and highs[:2].tolist() == [3, 2]
    assert np.isnan(lows[2]) and np.isnan(highs[2])


@pytest.mark.parametrize(
    ("bounds", "names", "fragment"),
    [
        (None, None, "bounds is required"),
        ({"a": (0, 1)}, None, "need a pandas DataFrame"),
        ({"a": (0, 1), "zz": (0, 1)}, ["a", "b"], "not in X"),
        ({"a": (0, 1)}, ["a", "b"], "no entry for numeric column"),
        (([0, 0], [1, 1]), None, "one low and one high per feature"),
        ((1, 0), None, "lo < hi"),
        ("wide", None, "malformed"),
    ],
)
def test_bad_bounds_explain_the_fix(bounds: object, names: list[str] | None, fragment: str) -> None:
    with pytest.raises(InvalidParameterError, match=fragment):
        resolve_bounds(
            bounds,
            3 if names is None else len(names),
            names,
            [False] * (3 if names is None else len(names)),
        )


def test_missing_bounds_message_says_how_to_supply_them() -> None:
    with pytest.raises(InvalidParameterError) as info:
        resolve_bounds(None, 2, None, [False, False])
    message = str(info.value)
    assert "bounds=(lo, hi)" in message and "never from the data" in message


@settings(max_examples=60, deadline=None)
@given(
    lo=st.floats(-1e6, 1e6),
    width=st.floats(1e-3, 1e6),
    n_cuts=st.integers(1, 60),
    xs=st.lists(st.floats(-2e6, 2e6), min_size=1, max_size=30),
)
def test_code_order_matches_thresholds(
    lo: float, width: float, n_cuts: int, xs: list[float]
) -> None:
    """x <= threshold_k exactly when code <= k (the semantics predict and export rely on)."""
    grid = FeatureGrid(np.array([lo]), np.array([lo + width]), (None,), n_cuts)
    x = np.array(xs)
    codes = grid.encode([x])[:, 0]
    thresholds = grid.thresholds(0)
    assert codes.min() >= 0 and codes.max() <= n_cuts
    for k in range(n_cuts):
        np.testing.assert_array_equal(x <= thresholds[k], codes <= k)


def test_values_outside_bounds_are_clipped_to_end_codes() -> None:
    grid = FeatureGrid(np.array([0.0]), np.array([1.0]), (None,), 9)
    codes = grid.encode([np.array([-50.0, 0.0, 0.5, 1.0, 70.0])])[:, 0]
    assert codes.tolist() == [0, 0, 4, 9, 9]
    np.testing.assert_allclose(grid.thresholds(0), np.arange(1, 10) / 10)


def test_categorical_codes_and_unknowns() -> None:
    grid = FeatureGrid(np.array([np.nan]), np.array([np.nan]), (("a", "b", "c"),), 40)
    codes = grid.encode([np.array(["c", "a", "zz"], dtype=object)])[:, 0]
    assert codes.tolist() == [2, 0, 3]
    assert grid.unusable([np.array(["zz", "a", None], dtype=object)])[:, 0].tolist() == [
        True,
        False,
        True,
    ]
    assert grid.n_bins.tolist() == [3]


def test_dataframe_columns_categorical_by_declared_domain_whatever_the_dtype() -> None:
    frame = pd.DataFrame(
        {
            "age": [30.0, 40.0],
            "sex": pd.Categorical(["f", "m"], categories=["f", "m"]),
            "port": ["S", "C"],
        }
    )
    cols = split_columns(frame, {"port": ["C", "Q", "S"], "sex": ["f", "m"]})
    assert cols.categorical == [False, True, True]
    assert cols.domains[1] == ("f", "m") and cols.domains[2] == ("C", "Q", "S")
    grid = make_grid(cols, {"age": (0, 100)}, 10)
    assert grid.encode(cols.arrays)[:, 2].tolist() == [2, 0]


def test_values_are_never_refused_only_marked_unusable() -> None:
    """Whether fit fails must not depend on one row: nothing here raises on a value."""
    secret = "SECRET-314159"
    frame = pd.DataFrame({"a": [1.0, np.nan], "t": [secret, "2.5"]})
    cols = split_columns(frame, None)  # "t" is not declared categorical: read as numbers
    assert cols.categorical == [False, False]
    assert np.isnan(cols.arrays[1][0]) and cols.arrays[1][1] == 2.5
    grid = make_grid(cols, (0.0, 10.0), 4)
    assert grid.unusable(cols.arrays).tolist() == [[False, True], [True, False]]
    arr = split_columns(np.array([[1.0, np.inf], [np.nan, 2.0]]), None)
    assert np.isinf(arr.arrays[1][0]) and np.isnan(arr.arrays[0][1])
    # ±inf is missing, like NaN (docs/queries.md, "Missing and non-finite values").
    assert make_grid(arr, (0.0, 10.0), 4).unusable(arr.arrays).tolist() == [
        [False, True],
        [True, False],
    ]


def test_a_category_dtype_that_is_not_declared_is_refused() -> None:
    """The refusal depends on the dtype only: the same with or without a rare category."""
    messages = set()
    for values in (["x", "y"], ["x", "y", "rare-value"]):
        frame = pd.DataFrame({"c": pd.Categorical(values)})
        with pytest.raises(InvalidParameterError, match=r"\['c'\].*domains=") as caught:
            split_columns(frame, None)
        messages.add(str(caught.value))
    assert len(messages) == 1 and "rare-value" not in messages.pop()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        split_columns(frame, {"c": ["x", "y", "rare-value"]})  # declared: public, no warning
    # Through an estimator: refused at fit before anything is charged.
    from dpkit.accounting import Accountant, Budget
    from dpkit.trees import DPDecisionTreeClassifier

    shared = Accountant(Budget(1.0))
    model = DPDecisionTreeClassifier(epsilon=0.5, classes=[0, 1], accountant=shared)
    with pytest.raises(InvalidParameterError, match="no declared domain"):
        model.fit(frame, [0, 1, 0])
    assert shared.spent.epsilon == 0
    declared = DPDecisionTreeClassifier(
        epsilon=0.5,
        classes=[0, 1],
        accountant=shared,
        domains={"c": list(frame["c"].cat.categories)},  # the explicit opt-in
        random_state=0,
    )
    declared.fit(frame, [0, 1, 0])
    assert shared.spent.epsilon == pytest.approx(0.5)
