"""Readable exports of fitted trees: indented rules, one rule per leaf, Graphviz DOT.

Exports are post-processing of a fitted (private) model: they cost nothing
and show only released quantities (thresholds from the public grid, private
leaf values, noisy counts where the algorithm measured them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkit.errors import InvalidParameterError
from dpkit.trees.engine._grid import FeatureGrid
from dpkit.trees.engine._growth import Tree


def _resolve(model: Any, tree: int) -> tuple[Tree, FeatureGrid]:
    if isinstance(model, tuple) and len(model) == 2 and isinstance(model[0], Tree):
        return model[0], model[1]
    if hasattr(model, "tree_") and hasattr(model, "grid_"):
        return model.tree_, model.grid_
    if hasattr(model, "trees_") and hasattr(model, "grid_"):
        trees = model.trees_
        if not 0 <= tree < len(trees):
            raise InvalidParameterError(f"tree must be in [0, {len(trees)}), got {tree}.")
        return trees[tree], model.grid_
    raise InvalidParameterError(
        "export needs a fitted dpkit tree estimator (call fit first) or a (Tree, FeatureGrid) pair."
    )


def condition(tree: Tree, grid: FeatureGrid, node: int, left: bool, decimals: int = 3) -> str:
    """The test of internal ``node`` as text, for its left (True) or right branch."""
    f = int(tree.feature[node])
    c = int(tree.cut[node])
    name = grid.feature_name(f)
    domain = grid.categories[f]
    # Codes past the grid are the missing-value code of missing="separate" models.
    if domain is not None:
        if c >= len(domain):
            return f"{name} {'is missing' if left else 'is not missing'}"
        return f"{name} {'in' if left else 'not in'} [{domain[c]}]"
    if c >= grid.n_cuts:  # "code <= last code": every present value goes left
        return f"{name} {'is not missing' if left else 'is missing'}"
    threshold = round(float(grid.thresholds(f)[c]), decimals)
    return f"{name} {'<=' if left else '>'} {threshold}"


def _value_text(tree: Tree, node: int, decimals: int) -> str:
    value = tree.value[node]
    shown = ", ".join(str(round(float(v), decimals)) for v in value)
    return shown if value.size == 1 else f"[{shown}]"


def _count_text(tree: Tree, node: int) -> str:
    count = tree.noisy_count[node]
    return f" (noisy count {round(float(count))})" if np.isfinite(count) else ""


def export_text(model: Any, *, tree: int = 0, decimals: int = 3) -> str:
    """The tree as indented if/else rules, like scikit-learn's ``export_text``.

    ``model``: a fitted dpkit tree estimator (``tree`` picks a forest member)
    or a ``(Tree, FeatureGrid)`` pair. Thresholds are in the feature's units;
    categorical tests read ``Sex in [female]``.
    """
    if hasattr(model, "shapes_"):
        from dpkit.trees.boosting.export import export_shapes

        return export_shapes(model, decimals=decimals)
    t, grid = _resolve(model, tree)
    out: list[str] = []

    def visit(node: int, level: int) -> None:  # recursion depth = tree depth
        pad = "|   " * level
        if t.feature[node] < 0:
            out.append(f"{pad}|--- value: {_value_text(t, node, decimals)}{_count_text(t, node)}")
            return
        for branch, child in ((True, t.left[node]), (False, t.right[node])):
            out.append(f"{pad}|--- {condition(t, grid, node, branch, decimals)}")
            visit(int(child), level + 1)

    visit(0, 0)
    return "\n".join(out)


def export_rules(model: Any, *, tree: int = 0, decimals: int = 3) -> list[str]:
    """One rule per leaf: ``"MedInc > 5.03 / Latitude <= 37.9 => 2.41"`` (as in the decision-tree course project).

    A boosted additive model gives one rule per (feature, bin); a row's score is
    the sum of the rules it meets.
    """
    if hasattr(model, "shapes_"):
        from dpkit.trees.boosting.export import shape_rules

        return shape_rules(model, decimals=decimals)
    t, grid = _resolve(model, tree)
    rules: list[str] = []

    def visit(node: int, path: list[str]) -> None:
        if t.feature[node] < 0:
            premise = " / ".join(path) if path else "(always)"
            rules.append(f"{premise} => {_value_text(t, node, decimals)}")
            return
        visit(int(t.left[node]), [*path, condition(t, grid, node, True, decimals)])
        visit(int(t.right[node]), [*path, condition(t, grid, node, False, decimals)])

    visit(0, [])
    return rules


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def export_graphviz(model: Any, *, tree: int = 0, decimals: int = 3) -> str:
    """The tree in Graphviz DOT text (render with ``dot -Tpng``); no Graphviz needed to call it.

    A boosted additive model is drawn as one record per feature (its bins and
    scores) feeding the sum.
    """
    if hasattr(model, "shapes_"):
        from dpkit.trees.boosting.export import shapes_graphviz

        return shapes_graphviz(model, decimals=decimals)
    t, grid = _resolve(model, tree)
    lines = ["digraph Tree {", 'node [shape=box, style="rounded", fontname="helvetica"];']
    for node in range(t.n_nodes):
        if t.feature[node] < 0:
            label = f"value = {_value_text(t, node, decimals)}{_count_text(t, node)}"
        else:
            label = condition(t, grid, node, True, decimals)
        lines.append(f'{node} [label="{_dot_escape(label)}"];')
    for parent in np.flatnonzero(t.feature >= 0):
        lines.append(f'{parent} -> {int(t.left[parent])} [label="yes"];')
        lines.append(f'{parent} -> {int(t.right[parent])} [label="no"];')
    lines.append("}")
    return "\n".join(lines)
