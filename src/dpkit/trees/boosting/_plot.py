"""``plot_shapes``: each feature's shape function of a boosted model, with its noise band.

Pure post-processing of the released model (``shapes_``, ``shape_noise_std_``
and the public grid ``grid_``): no row is read and no budget is spent.
Matplotlib, no pyplot state (a ``matplotlib.figure.Figure`` is returned).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from dpkit.errors import InvalidParameterError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from dpkit.trees.engine._grid import FeatureGrid

#: the band is +- this many noise standard deviations (about 95% for normal noise).
BAND_STDS = 1.96
_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#999999")


def _features(grid: FeatureGrid, features: object) -> list[int]:
    """Feature indices from None (all), names or integer positions (public input only)."""
    d = grid.n_features
    if features is None:
        return list(range(d))
    if isinstance(features, str | int | np.integer):
        features = [features]
    if not isinstance(features, Sequence | np.ndarray):
        raise InvalidParameterError(
            "features must be None (every feature), a list of column names or of positions."
        )
    names = [grid.feature_name(j) for j in range(d)]
    out = []
    for f in features:
        if isinstance(f, bool):
            raise InvalidParameterError("features must list column names or positions.")
        if isinstance(f, int | np.integer) and 0 <= int(f) < d:
            out.append(int(f))
        elif isinstance(f, str) and f in names:
            out.append(names.index(f))
        else:
            raise InvalidParameterError(
                f"features: {f!r} is not a feature of this model; its features are {names} "
                f"(or positions 0..{d - 1})."
            )
    if not out:
        raise InvalidParameterError("features is empty; pass None to draw every feature.")
    return out


def _style(ax: Axes) -> None:
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.tick_params(labelsize=8)
    ax.grid(axis="y", color="#e6e6e6", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.axhline(0.0, color="#888888", linewidth=0.6)


def _panel(
    ax: Axes,
    grid: FeatureGrid,
    j: int,
    shape: np.ndarray,
    std: np.ndarray,
    labels: list[str],
) -> None:
    domain = grid.categories[j]
    for c in range(shape.shape[1]):
        colour = _COLOURS[c % len(_COLOURS)]
        label = labels[c] if len(labels) > 1 else None
        if domain is None:
            n = grid.n_cuts + 1
            edges = np.concatenate([[grid.lows[j]], grid.thresholds(j), [grid.highs[j]]]).astype(
                np.float64
            )
            value, band = shape[:n, c], BAND_STDS * std[:n, c]
            ax.stairs(value, edges, baseline=None, color=colour, linewidth=1.6, label=label)
            ax.fill_between(
                edges,
                np.append(value - band, value[-1] - band[-1]),
                np.append(value + band, value[-1] + band[-1]),
                step="post",
                color=colour,
                alpha=0.2,
                linewidth=0,
            )
        else:
            n = len(domain)
            x = np.arange(n) + (c - (shape.shape[1] - 1) / 2) * 0.15
            ax.errorbar(
                x,
                shape[:n, c],
                yerr=BAND_STDS * std[:n, c],
                fmt="o",
                color=colour,
                markersize=4,
                capsize=3,
                label=label,
            )
            ax.set_xticks(np.arange(n), [str(v) for v in domain], rotation=30, ha="right")
    ax.set_title(grid.feature_name(j), fontsize=10)
    _style(ax)


def plot_shapes(
    model: Any, features: object = None, *, ncols: int = 3, scale: float = 1.0, ylabel: str
) -> Figure:
    """The figure for ``model.plot_shapes`` (see there); ``scale`` converts the shapes' units."""
    from matplotlib.figure import Figure

    check_is_fitted(model, "shapes_")
    if isinstance(ncols, bool) or not isinstance(ncols, int | np.integer) or ncols < 1:
        raise InvalidParameterError("ncols must be a whole number >= 1 (panels per row).")
    grid: FeatureGrid = model.grid_
    chosen = _features(grid, features)
    classes = getattr(model, "classes_", None)
    k = model.shapes_[0].shape[1] if model.shapes_ else 1
    if classes is not None and k > 1:
        labels = [f"class {c!r}" for c in np.asarray(classes).tolist()]
    else:
        labels = [""]
    cols = min(int(ncols), len(chosen))
    rows = math.ceil(len(chosen) / cols)
    fig = Figure(figsize=(3.4 * cols, 2.7 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for i, j in enumerate(chosen):
        shape = np.asarray(model.shapes_[j]) * scale
        std = np.asarray(model.shape_noise_std_[j]) * abs(scale)
        _panel(axes[i // cols][i % cols], grid, j, shape, std, labels)
    for i in range(len(chosen), rows * cols):
        axes[i // cols][i % cols].set_visible(False)
    if len(labels) > 1:
        axes[0][0].legend(fontsize=8, frameon=False)
    fig.supylabel(ylabel, fontsize=9)
    fig.suptitle(
        f"Shape functions with \u00b1{BAND_STDS:g} noise standard deviations "
        "(post-processing of the released model)",
        fontsize=10,
    )
    return fig
