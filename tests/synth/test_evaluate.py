"""``evaluate(..., target=...)``: downstream utility (TSTR vs TRTR), its errors, and ``plot``."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest

from dpkit.errors import InvalidParameterError
from dpkit.synth import Evaluation, evaluate

matplotlib.use("Agg")

EDGES = {"score": np.linspace(0, 100, 11)}
COLUMNS = ["group", "score", "label"]


def _table(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """``label`` depends strongly on ``score``; ``group`` is noise."""
    rng = np.random.default_rng(seed)
    group = rng.choice(["a", "b", "c"], n)
    score = rng.uniform(0, 100, n)
    flip = rng.random(n) < 0.05
    label = np.where((score > 50) ^ flip, "yes", "no")
    return pd.DataFrame({"group": group, "score": score, "label": label})


def test_a_copy_has_no_distance_and_the_same_utility() -> None:
    real = _table()
    result = evaluate(real, real.copy(), COLUMNS, edges=EDGES, target="label")
    assert result.mean == 0.0 and result.max == 0.0
    u = result.utility
    assert u is not None
    assert set(u) == {"accuracy_synthetic", "accuracy_real", "auc_synthetic", "auc_real"}
    assert u["accuracy_real"] > 0.9 and u["auc_real"] > 0.9
    assert abs(u["accuracy_synthetic"] - u["accuracy_real"]) < 0.05
    assert abs(u["auc_synthetic"] - u["auc_real"]) < 0.05


def test_a_shuffled_target_has_no_utility() -> None:
    real = _table()
    synthetic = real.copy()
    synthetic["label"] = np.random.default_rng(1).permutation(synthetic["label"].to_numpy())
    u = evaluate(real, synthetic, COLUMNS, edges=EDGES, target="label").utility
    assert u is not None
    assert u["auc_real"] > 0.8
    assert u["auc_synthetic"] < 0.65


def test_without_target_there_is_no_utility_and_old_fields_work() -> None:
    real = _table(500)
    result = evaluate(real, real, COLUMNS, edges=EDGES)
    assert result.utility is None
    assert set(result.pairs) == {("group", "score"), ("group", "label"), ("score", "label")}
    assert Evaluation(0.1, 0.2, {("a", "b"): 0.1}).utility is None


def test_a_numeric_target_with_edges_is_predicted_by_bin_without_auc() -> None:
    real = _table(1000)
    u = evaluate(real, real, COLUMNS, edges=EDGES, target="score").utility
    assert u is not None and set(u) == {"accuracy_synthetic", "accuracy_real"}


def test_an_unknown_target_is_refused() -> None:
    real = _table(200)
    with pytest.raises(InvalidParameterError, match="target 'other'"):
        evaluate(real, real, COLUMNS, edges=EDGES, target="other")


def test_a_single_class_synthetic_target_is_refused_without_quoting_data() -> None:
    real = _table(200)
    synthetic = real.assign(label="yes")
    with pytest.raises(InvalidParameterError, match="single class") as error:
        evaluate(real, synthetic, COLUMNS, edges=EDGES, target="label")
    assert "yes" not in str(error.value)


def test_plot_draws_one_bar_per_pair() -> None:
    from matplotlib.axes import Axes

    real = _table(500)
    synthetic = real.assign(group=np.random.default_rng(2).permutation(real["group"].to_numpy()))
    result = evaluate(real, synthetic, COLUMNS, edges=EDGES, target="label")
    ax = result.plot()
    assert isinstance(ax, Axes)
    assert len(ax.patches) == len(result.pairs) == 3
    labels = {t.get_text() for t in ax.get_yticklabels()}
    assert "group \u00d7 score" in labels
    assert "accuracy" in ax.get_title()
    widths = [p.get_width() for p in ax.patches]
    assert widths == sorted(widths)
    # on a given Axes, and without utility
    from matplotlib.figure import Figure

    given = Figure().add_subplot()
    drawn = Evaluation(0.1, 0.2, {("a", "b"): 0.2, ("a", "c"): 0.0}).plot(ax=given)
    assert drawn is given and len(given.patches) == 2 and given.get_title() == ""
