"""``feature_importances_`` of every tree estimator, from the released model alone.

Post-processing: the numbers below read only what ``fit`` released (the trees'
structure, their noisy node counts, the boosted models' shape functions), never
the training rows, so they cost no budget and carry the fit's guarantee.

* Trees and forests: each split adds its node's weight to its feature; a node's
  weight is its released noisy row count (clipped at 0), or, where only the
  leaves' counts were released, the sum of its leaves' noisy counts; a tree
  with no released counts weighs every split 1. Forests add their trees up.
  Like scikit-learn's impurity importances it favours features that split
  many rows, but it weighs splits by rows, not by impurity decrease (the
  exact decrease is not released).
* Boosted additive models: the spread of each feature's shape function over its
  public bins (the unweighted mean absolute deviation from its mean, summed over
  outputs): how far that feature moves the score. Bins are not weighted by their
  rows, which are private.

Normalised to sum to 1; all zeros when nothing splits (a stump) or every shape
is flat.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

from dpkit.trees.engine._growth import Tree


def _node_weights(tree: Tree) -> NDArray[np.float64]:
    """Every node's weight: its released noisy count, else its leaves' (NaN when unknown)."""
    weight = np.where(np.isfinite(tree.noisy_count), np.maximum(tree.noisy_count, 0.0), np.nan)
    for i in range(tree.n_nodes - 1, -1, -1):  # children have larger ids than their parent
        if tree.feature[i] >= 0 and np.isnan(weight[i]):
            weight[i] = weight[tree.left[i]] + weight[tree.right[i]]
    return weight


def split_weights(tree: Tree, n_features: int) -> NDArray[np.float64]:
    """Per feature, the summed weight of the tree's splits on it (not normalised)."""
    out = np.zeros(n_features)
    internal = np.flatnonzero(tree.feature >= 0)
    if internal.size == 0:
        return out
    weight = _node_weights(tree)[internal]
    if not np.all(np.isfinite(weight)) or weight.sum() <= 0:
        weight = np.ones(internal.size)
    np.add.at(out, tree.feature[internal], weight)
    return out


def normalised(raw: NDArray[np.float64]) -> NDArray[np.float64]:
    total = float(raw.sum())
    return raw / total if total > 0 else np.zeros_like(raw)


def tree_importances(trees: Iterable[Tree], n_features: int) -> NDArray[np.float64]:
    """Importances of a tree or forest (each tree normalised first, as scikit-learn's forests)."""
    per_tree = [normalised(split_weights(t, n_features)) for t in trees]
    return normalised(np.sum(per_tree, axis=0)) if per_tree else np.zeros(n_features)


def shape_importances(shapes: Sequence[NDArray[np.float64]]) -> NDArray[np.float64]:
    """Importances of an additive model: the spread of each shape function (see module)."""
    raw = np.array(
        [float(np.abs(s - s.mean(axis=0)).mean(axis=0).sum()) if s.size else 0.0 for s in shapes]
    )
    return normalised(raw)
