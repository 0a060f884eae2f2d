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


def shape_rules(model: Any, *, decimals: int = 3) -> list[str]:
    """One rule per (feature, bin): ``"age in (20.0, 30.0] => 0.31"`` (scores add up)."""
    check_is_fitted(model, "shapes_")
    grid = model.grid_
    rules = [
        "(always) => "
        + ", ".join(str(round(float(v), decimals)) for v in np.ravel(model.intercept_))
    ]
    for j, shape in enumerate(model.shapes_):
        name = grid.feature_name(j)
        categorical = grid.categories[j] is not None
        for k, (label, row) in enumerate(
            zip(_bin_labels(grid, j, shape.shape[0], decimals), shape)
        ):
            scores = ", ".join(str(round(float(v), decimals)) for v in row)
            if k >= shape.shape[0] - _extra_codes(grid, j, shape.shape[0]):
                test = f"{name} is missing"
            elif categorical:
                test = f"{name} == {label}"
            elif label.startswith("("):
                test = f"{name} in {label}"
            else:
                test = f"{name} {label}"
            rules.append(f"{test} => {scores}")
    return rules


def _extra_codes(grid: Any, feature: int, n_codes: int) -> int:
    """Codes past the grid's own: the missing-value code(s)."""
    return n_codes - int(grid.n_bins[feature])


def shapes_graphviz(model: Any, *, decimals: int = 3) -> str:
    """Graphviz DOT: one record per feature listing its bins' scores, all feeding the sum."""
    check_is_fitted(model, "shapes_")
    grid = model.grid_

    def esc(text: str) -> str:
        return "".join("\\" + c if c in '{}|<>"\\' else c for c in text)

    lines = ["digraph Additive {", 'node [shape=record, fontname="helvetica"];']
    lines.append('sum [shape=ellipse, label="score = sum of the rows\' bins"];')
    for j, shape in enumerate(model.shapes_):
        cells = [
            esc(f"{label}: {', '.join(str(round(float(v), decimals)) for v in row)}")
            for label, row in zip(_bin_labels(grid, j, shape.shape[0], decimals), shape)
        ]
        lines.append(f'f{j} [label="{{{esc(grid.feature_name(j))}|{"|".join(cells)}}}"];')
        lines.append(f"f{j} -> sum;")
    lines.append("}")
    return "\n".join(lines)
