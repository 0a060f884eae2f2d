"""``plot_shapes`` of the boosted models: one panel per feature, shape and noise band."""

from __future__ import annotations

import functools
import io

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest

from dpkit.errors import InvalidParameterError
from dpkit.trees import DPGradientBoostingClassifier, DPGradientBoostingRegressor


def _frame(n: int = 2000, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "age": rng.uniform(0, 100, n),
            "income": rng.uniform(0, 1, n),
            "city": pd.Categorical(rng.choice(["a", "b", "c"], n), categories=["a", "b", "c"]),
        }
    )
    y = (X["age"] > 50).to_numpy().astype(int)
    return X, y


def _classifier(**kw: object) -> DPGradientBoostingClassifier:
    X, y = _frame()
    return DPGradientBoostingClassifier(
        epsilon=2.0,
        bounds={"age": (0, 100), "income": (0, 1)},
        domains={"city": ["a", "b", "c"]},
        classes=[0, 1],
        max_iter=8,
        random_state=0,
        **kw,  # type: ignore[arg-type]
    ).fit(X, y)


@functools.cache
def _default_classifier() -> DPGradientBoostingClassifier:
    return _classifier()  # fitted once: plot_shapes only reads it


def test_one_panel_per_feature_with_a_band_and_it_saves() -> None:
    model = _default_classifier()
    fig = model.plot_shapes()
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == ["age", "income", "city"]
    age = visible[0]
    assert age.collections, "the numeric panel has a noise band"
    assert [t.get_text() for t in visible[2].get_xticklabels()] == ["a", "b", "c"]
    assert "log-odds of 1" in fig.get_supylabel()
    assert "post-processing" in fig.get_suptitle()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    assert buffer.getvalue()[:4] == b"\x89PNG"


def test_the_drawn_line_is_the_released_shape_and_the_band_its_noise() -> None:
    model = _default_classifier()
    assert len(model.shape_noise_std_) == 3
    for shape, std in zip(model.shapes_, model.shape_noise_std_, strict=True):
        assert std.shape == shape.shape and np.all(std > 0) and np.all(np.isfinite(std))
    fig = model.plot_shapes(["age"], ncols=1)
    (ax,) = [a for a in fig.axes if a.get_visible()]
    step = ax.patches[0]  # the StepPatch of ax.stairs
    np.testing.assert_allclose(
        step.get_data().values, model.shapes_[0][: model.grid_.n_cuts + 1, 0]
    )
    # Age matters (y = age > 50): its shape rises across the range by more than its band.
    shape, std = model.shapes_[0][:, 0], model.shape_noise_std_[0][:, 0]
    assert shape[-2] - shape[0] > 1.96 * (std[-2] + std[0])


def test_the_band_grows_with_less_budget() -> None:
    wide = _classifier(max_leaf_nodes=4, learning_rate=0.1)
    X, y = _frame()
    narrow = DPGradientBoostingClassifier(
        epsilon=20.0,
        bounds={"age": (0, 100), "income": (0, 1)},
        domains={"city": ["a", "b", "c"]},
        classes=[0, 1],
        max_iter=8,
        max_leaf_nodes=4,
        learning_rate=0.1,
        l2_regularization=wide.l2_regularization_,
        random_state=0,
    ).fit(X, y)
    assert np.mean(narrow.shape_noise_std_[1]) < np.mean(wide.shape_noise_std_[1])


def test_regressor_shapes_are_in_target_units() -> None:
    X, _ = _frame()
    y = X["income"].to_numpy() * 1000.0
    model = DPGradientBoostingRegressor(
        epsilon=2.0,
        bounds={"age": (0, 100), "income": (0, 1)},
        domains={"city": ["a", "b", "c"]},
        target_bounds=(0, 1000),
        max_iter=5,
        random_state=0,
    ).fit(X, y)
    fig = model.plot_shapes(features=[1], ncols=2)
    (ax,) = [a for a in fig.axes if a.get_visible()]
    np.testing.assert_allclose(
        ax.patches[0].get_data().values, model.shapes_[1][: model.grid_.n_cuts + 1, 0] * 1000.0
    )
    assert "target units" in fig.get_supylabel()


def test_bad_features_and_ncols_are_refused_with_the_feature_names() -> None:
    model = _default_classifier()
    with pytest.raises(InvalidParameterError, match=r"\['age', 'income', 'city'\]"):
        model.plot_shapes(["salary"])
    with pytest.raises(InvalidParameterError, match="ncols"):
        model.plot_shapes(ncols=0)
