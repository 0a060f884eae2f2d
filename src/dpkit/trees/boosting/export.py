"""Readable text of a boosted additive model: its intercept and one shape function per feature.

Post-processing of the fitted (private) model: it shows the released scores
on the public bins, nothing else.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted


def _bin_labels(grid: Any, feature: int, n_codes: int, decimals: int) -> list[str]:
    domain = grid.categories[feature]
    if domain is not None:
        labels = [str(v) for v in domain]
    else:
        edges = [round(float(t), decimals) for t in grid.thresholds(feature)]
        labels = [f"<= {edges[0]}"]
        labels += [f"({a}, {b}]" for a, b in itertools.pairwise(edges)]
        labels.append(f"> {edges[-1]}")
    labels += ["missing"] * (n_codes - len(labels))
    return labels


def export_shapes(model: Any, *, decimals: int = 3) -> str:
    """The intercept and, per feature, each bin's score (one column per output)."""
    check_is_fitted(model, "shapes_")
    grid = model.grid_
    fmt = ", ".join
    lines = [
        f"intercept: {fmt(str(round(float(v), decimals)) for v in np.ravel(model.intercept_))}"
    ]
    for j, shape in enumerate(model.shapes_):
        lines.append(f"{grid.feature_name(j)}:")
        for label, row in zip(_bin_labels(grid, j, shape.shape[0], decimals), shape):
            lines.append(f"|   {label}: {fmt(str(round(float(v), decimals)) for v in row)}")
    return "\n".join(lines)
