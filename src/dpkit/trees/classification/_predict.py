"""Fast leaf lookup for many trees at once (prediction only; reads no training data).

``engine._growth.apply_forest`` steps all (row, tree) pairs together and compacts the
active set each level. For forests of shallow trees it is faster to walk one
tree at a time over cache-sized blocks of rows with a fixed number of steps:
leaves point to themselves, so rows that reached a leaf simply stay there and
no bookkeeping is needed. Codes are read through a flat view (one 1-D gather
per step instead of 2-D fancy indexing).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from dpkit.trees.engine._growth import Tree

_BLOCK = 1 << 16  # rows per block: keeps the per-step arrays in cache


def _prepared(
    tree: Tree,
) -> tuple[
    NDArray[np.int32], NDArray[np.int16], NDArray[np.int16], NDArray[np.int32], NDArray[np.int32]
]:
    """Per node: feature, [lo, hi] code interval sent left, left child, right child.

    "code <= c" is the interval [min, c], "code == v" is [v, v]; a leaf
    points to itself and sends every row "left" to itself.
    """
    leaf = tree.feature < 0
    ids = np.arange(tree.n_nodes, dtype=np.int32)
    feature = np.where(leaf, 0, tree.feature).astype(np.int32)
    cat = tree.categorical[feature] & ~leaf
    lo = np.where(cat, tree.cut, np.iinfo(np.int16).min).astype(np.int16)
    hi = np.where(leaf, np.iinfo(np.int16).max, tree.cut).astype(np.int16)
    left = np.where(leaf, ids, tree.left).astype(np.int32)
    right = np.where(leaf, ids, tree.right).astype(np.int32)
    return feature, lo, hi, left, right


def forest_leaf_values(
    trees: list[Tree], codes: NDArray[np.int16], n_outputs: int
) -> NDArray[np.float64]:
    """Sum over trees of the value of each row's leaf, shape (n, n_outputs)."""
    n, d = codes.shape
    out = np.zeros((n, n_outputs))
    prepared = [(_prepared(t), t.max_depth, t.value) for t in trees]
    for start in range(0, n, _BLOCK):
        block = np.ascontiguousarray(codes[start : start + _BLOCK], dtype=np.int16)
        flat = block.ravel()
        rows = block.shape[0]
        base = np.arange(rows, dtype=np.int32) * np.int32(d)
        acc = out[start : start + rows]
        for (feature, lo, hi, left, right), depth, value in prepared:
            node = np.zeros(rows, dtype=np.int32)
            for _ in range(depth):
                code = flat[base + feature[node]]
                go_left = (code >= lo[node]) & (code <= hi[node])
                node = np.where(go_left, left[node], right[node])
            acc += value[node]
    return out
