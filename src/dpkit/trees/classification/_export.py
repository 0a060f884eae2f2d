"""Readable rules and Graphviz DOT for fitted classification trees (post-processing only).

Questions read like the decision-tree course project's and the core's ``_export.condition``:
"Sex in [female]", "Age <= 30.3", thresholds being public candidate points in
the feature's own units. On top of the core's wording this adds what only
classifiers have: the missing-value branch of ``missing="separate"`` models
("Age is missing") and leaves that show the predicted class, its probability
and the noisy class counts (released statistics, never true counts).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit.trees.engine._export import condition
from dpkit.trees.engine._grid import FeatureGrid
from dpkit.trees.engine._growth import Tree


def _fmt(x: float, decimals: int) -> str:
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def question(
    tree: Tree, grid: FeatureGrid, node: int, missing_code: NDArray[np.int64] | None, decimals: int
) -> tuple[str, str]:
    """(question for the left branch, its negation for the right branch) of internal ``node``."""
    feature, cut = int(tree.feature[node]), int(tree.cut[node])
    name = grid.feature_name(feature)
    domain = grid.categories[feature]
    if domain is not None and cut >= len(domain):
        return f"{name} is missing", f"{name} is not missing"
    if domain is None and missing_code is not None and cut >= grid.n_cuts:
        return f"{name} is not missing", f"{name} is missing"
    yes = condition(tree, grid, node, True, decimals)
    no = condition(tree, grid, node, False, decimals)
    if domain is None and missing_code is not None:
        no += " or missing"
    return yes, no


def _leaf_text(
    tree: Tree, node: int, classes: NDArray[Any], counts: NDArray[np.float64], decimals: int
) -> str:
    proba = tree.value[node]
    k = int(np.argmax(proba))
    noisy = ", ".join(_fmt(float(c), 0) for c in counts[node])
    return f"class: {classes[k]} (p = {_fmt(float(proba[k]), decimals)}; noisy counts [{noisy}])"


def _node_counts(tree: Tree, leaf_counts: NDArray[np.float64]) -> NDArray[np.float64]:
    """(n_nodes, K) noisy counts at the leaves (from the estimator's per-leaf array)."""
    out = np.full((tree.n_nodes, leaf_counts.shape[1]), np.nan)
    out[tree.feature < 0] = leaf_counts
    return out


def export_text(estimator: Any, decimals: int = 2, tree_index: int | None = None) -> str:
    """Rules of a fitted classifier (or of tree ``tree_index`` of a forest)."""
    if tree_index is None:
        tree, counts = estimator.tree_, estimator.leaf_counts_
    else:
        tree, counts = estimator.trees_[tree_index], estimator.leaf_counts_list_[tree_index]
    return rules(
        tree, estimator.grid_, estimator.classes_, counts, estimator.missing_code_, decimals
    )


def rules(
    tree: Tree,
    grid: FeatureGrid,
    classes: NDArray[Any],
    leaf_counts: NDArray[np.float64],
    missing_code: NDArray[np.int64] | None,
    decimals: int = 2,
) -> str:
    """Indented rules: "if Sex == female:" / "else:  # Sex != female", leaves as "-> class ...".

    Written iteratively (trees can be deep), depth-first with the "yes" branch first.
    """
    counts = _node_counts(tree, leaf_counts)
    lines: list[str] = []
    # Stack entries: (kind, node, indent, text) with kind "node" or "line".
    stack: list[tuple[str, int, int, str]] = [("node", 0, 0, "")]
    while stack:
        kind, node, indent, text = stack.pop()
        pad = "|   " * indent
        if kind == "line":
            lines.append(pad + text)
            continue
        if tree.feature[node] < 0:
            lines.append(f"{pad}-> {_leaf_text(tree, node, classes, counts, decimals)}")
            continue
        yes, no = question(tree, grid, node, missing_code, decimals)
        stack.append(("node", int(tree.right[node]), indent + 1, ""))
        stack.append(("line", -1, indent, f"else:  # {no}"))
        stack.append(("node", int(tree.left[node]), indent + 1, ""))
        stack.append(("line", -1, indent, f"if {yes}:"))
    return "\n".join(lines)


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def export_graphviz(estimator: Any, decimals: int = 2, tree_index: int | None = None) -> str:
    """Graphviz DOT source of a fitted classifier's tree (or a forest's tree ``tree_index``)."""
    if tree_index is None:
        tree, leaf_counts = estimator.tree_, estimator.leaf_counts_
    else:
        tree, leaf_counts = estimator.trees_[tree_index], estimator.leaf_counts_list_[tree_index]
    grid, classes, missing_code = estimator.grid_, estimator.classes_, estimator.missing_code_
    counts = _node_counts(tree, leaf_counts)
    out = [
        "digraph DPTree {",
        '  node [shape=box, style="rounded", fontname="helvetica"];',
        '  edge [fontname="helvetica"];',
    ]
    for node in range(tree.n_nodes):
        if tree.feature[node] < 0:
            label = _leaf_text(tree, node, classes, counts, decimals).replace(" (", "\\n(")
            out.append(
                f'  n{node} [label="{_dot_escape(label)}", style="rounded,filled", fillcolor="#eeeeee"];'
            )
        else:
            yes, _ = question(tree, grid, node, missing_code, decimals)
            out.append(f'  n{node} [label="{_dot_escape(yes)}"];')
            out.append(f'  n{node} -> n{int(tree.left[node])} [label="yes"];')
            out.append(f'  n{node} -> n{int(tree.right[node])} [label="no"];')
    out.append("}")
    return "\n".join(out)
