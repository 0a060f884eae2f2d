"""The tree core: histograms, level-wise growth, routing, multi-root forests, traversal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import dpkit.trees.engine._growth as core
from dpkit.trees.engine._growth import (
    Candidates,
    SplitDecision,
    apply,
    apply_forest,
    candidate_layout,
    grow,
    histograms,
    split_roots,
)
from dpkit.trees.regression._criteria import regression_channels, sse_gain


def test_histograms_match_naive_counts() -> None:
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 4, size=(200, 3)).astype(np.int16)
    local = rng.integers(0, 5, size=200)
    w = rng.random((200, 2))
    hist = histograms(codes, local, 5, 4, w, None, 0)
    labels = rng.integers(0, 3, size=200)
    counts = histograms(codes, local, 5, 4, None, labels, 3)
    for node in range(5):
        for f in range(3):
            for b in range(4):
                rows = (local == node) & (codes[:, f] == b)
                np.testing.assert_allclose(hist[node, f, b], w[rows].sum(axis=0))
                np.testing.assert_array_equal(
                    counts[node, f, b], np.bincount(labels[rows], minlength=3)
                )


def test_candidate_layout_is_public_and_per_feature() -> None:
    width, valid = candidate_layout(np.array([5, 3, 4]), np.array([False, False, True]))
    assert width == 4
    assert valid.sum(axis=1).tolist() == [4, 2, 4]


@dataclass
class ArgmaxPolicy:
    """Non-private oracle: the best SSE gain (first in (feature, candidate) order)."""

    weights: np.ndarray
    labels: None = None
    n_labels: int = 0
    needs_statistics: bool = True

    def should_split(self, depth: int, counts: np.ndarray) -> SplitDecision:
        return SplitDecision(counts >= 2)

    def choose(
        self, depth: int, cands: Candidates | None, n_nodes: int
    ) -> tuple[np.ndarray, np.ndarray]:
        assert cands is not None
        valid = cands.valid if cands.valid.ndim == 3 else cands.valid[None]
        u = np.where(valid, sse_gain(cands), -np.inf).reshape(n_nodes, -1)
        idx = np.argmax(u, axis=1)
        width = valid.shape[-1]
        return idx // width, idx % width

    def accept(self, depth: int, left: np.ndarray, right: np.ndarray) -> None:
        return None


def brute_force_partition(
    codes: np.ndarray, y: np.ndarray, n_bins: np.ndarray, depth: int
) -> np.ndarray:
    """Greedy SSE tree by direct masks (no histograms); returns a leaf label per row."""
    label = np.zeros(len(y), dtype=np.int64)
    next_label = [1]

    def sse(v: np.ndarray) -> float:
        return float(((v - v.mean()) ** 2).sum()) if v.size else 0.0

    def build(rows: np.ndarray, level: int, name: int) -> None:
        label[rows] = name
        if level == depth or rows.size < 2:
            return
        best, best_gain = None, -np.inf
        for f in range(codes.shape[1]):
            for c in range(n_bins[f] - 1):
                left = codes[rows, f] <= c
                gain = sse(y[rows]) - sse(y[rows][left]) - sse(y[rows][~left])
                if gain > best_gain + 1e-9:
                    best, best_gain = (f, c), gain
        assert best is not None
        left = codes[rows, best[0]] <= best[1]
        a, b = next_label[0], next_label[0] + 1
        next_label[0] += 2
        build(rows[left], level + 1, a)
        build(rows[~left], level + 1, b)

    build(np.arange(len(y)), 0, 0)
    return label


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = np.unique(np.stack([a, b], axis=1), axis=0)
    return len(pairs) == len(np.unique(a)) == len(np.unique(b))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_growth_matches_brute_force_greedy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_bins = np.array([6, 9, 4])
    codes = np.stack([rng.integers(0, b, 300) for b in n_bins], axis=1).astype(np.int16)
    y = np.sin(codes[:, 0]) + 0.3 * codes[:, 1] ** 0.5 + rng.normal(0, 0.2, 300)
    policy = ArgmaxPolicy(weights=regression_channels(y))
    tree, leaf = grow(codes, n_bins, np.zeros(3, dtype=bool), 4, policy)
    assert same_partition(leaf, brute_force_partition(codes, y, n_bins, 4))
    # Routing at predict time sends every training row to the leaf growth put it in.
    np.testing.assert_array_equal(apply(tree, codes), leaf)
    assert np.all(tree.feature[leaf] == -1)


def test_chunked_histograms_give_the_same_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    n_bins = np.array([8, 8])
    codes = rng.integers(0, 8, size=(500, 2)).astype(np.int16)
    y = codes[:, 0] * 0.1 + rng.normal(0, 0.1, 500)
    tree_a, leaf_a = grow(
        codes, n_bins, np.zeros(2, dtype=bool), 5, ArgmaxPolicy(regression_channels(y))
    )
    monkeypatch.setattr(core, "_MAX_HIST_ENTRIES", 64)  # forces one node per chunk
    tree_b, leaf_b = grow(
        codes, n_bins, np.zeros(2, dtype=bool), 5, ArgmaxPolicy(regression_channels(y))
    )
    np.testing.assert_array_equal(leaf_a, leaf_b)
    np.testing.assert_array_equal(tree_a.feature, tree_b.feature)


def test_categorical_features_split_on_equality() -> None:
    rng = np.random.default_rng(3)
    codes = np.stack([rng.integers(0, 4, 400), rng.integers(0, 5, 400)], axis=1).astype(np.int16)
    y = np.where(codes[:, 0] == 2, 5.0, 0.0) + rng.normal(0, 0.1, 400)
    tree, leaf = grow(
        codes, np.array([4, 5]), np.array([True, False]), 1, ArgmaxPolicy(regression_channels(y))
    )
    assert tree.feature[0] == 0 and tree.cut[0] == 2
    assert np.all((codes[:, 0] == 2) == (leaf == tree.left[0]))
    np.testing.assert_array_equal(apply(tree, codes), leaf)


def test_multi_root_growth_splits_into_independent_trees() -> None:
    rng = np.random.default_rng(7)
    n_bins = np.array([10, 10, 10])
    codes = rng.integers(0, 10, size=(900, 3)).astype(np.int16)
    y = codes[:, 1] * 0.2 + rng.normal(0, 0.3, 900)
    roots = rng.integers(0, 3, 900)
    combined, leaf = grow(
        codes,
        n_bins,
        np.zeros(3, dtype=bool),
        3,
        ArgmaxPolicy(regression_channels(y)),
        roots=roots,
        n_roots=3,
    )
    trees, owner, local = split_roots(combined, 3)
    assert np.array_equal(owner[leaf], roots)  # a row's leaf belongs to its own partition's tree
    leaves = apply_forest(trees, codes)
    for t, tree in enumerate(trees):
        np.testing.assert_array_equal(leaves[:, t], apply(tree, codes))
        rows = roots == t
        np.testing.assert_array_equal(leaves[rows, t], local[leaf[rows]])
        # Each tree equals the tree grown on its partition alone.
        alone, _alone_leaf = grow(
            codes[rows],
            n_bins,
            np.zeros(3, dtype=bool),
            3,
            ArgmaxPolicy(regression_channels(y[rows])),
        )
        np.testing.assert_array_equal(alone.feature, tree.feature)
        np.testing.assert_array_equal(alone.cut, tree.cut)


def test_apply_forest_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(8)
    codes = rng.integers(0, 6, size=(300, 2)).astype(np.int16)
    y = rng.random(300)
    trees = [
        grow(
            codes,
            np.array([6, 6]),
            np.zeros(2, dtype=bool),
            3,
            ArgmaxPolicy(regression_channels(y)),
        )[0]
    ] * 3
    full = apply_forest(trees, codes)
    monkeypatch.setattr(core, "_MAX_HIST_ENTRIES", 30)
    np.testing.assert_array_equal(apply_forest(trees, codes), full)


def test_apply_handles_trees_whose_children_are_not_consecutive() -> None:
    """Hand-built tree: root splits x0 <= 1, its right child (id 1) splits x1 == 2 (categorical)."""
    tree = core.Tree(
        feature=np.array([0, 1, -1, -1, -1], dtype=np.int32),
        cut=np.array([1, 2, -1, -1, -1], dtype=np.int32),
        left=np.array([4, 2, -1, -1, -1], dtype=np.int32),
        right=np.array([1, 3, -1, -1, -1], dtype=np.int32),
        depth=np.array([0, 1, 2, 2, 1], dtype=np.int32),
        value=np.full((5, 1), np.nan),
        noisy_count=np.full(5, np.nan),
        categorical=np.array([False, True]),
    )
    codes = np.array([[0, 2], [1, 0], [2, 2], [3, 1], [5, 3]], dtype=np.int16)
    np.testing.assert_array_equal(apply(tree, codes), [4, 4, 2, 3, 3])
    np.testing.assert_array_equal(apply_forest([tree, tree], codes)[:, 1], [4, 4, 2, 3, 3])


def _settled_tests(tree: Any, n_bins: np.ndarray) -> int:
    """Internal nodes whose test every row of the node answers the same way (by the path)."""
    bad = 0

    def walk(node: int, lo: np.ndarray, hi: np.ndarray, excluded: set) -> None:
        nonlocal bad
        f = int(tree.feature[node])
        if f < 0:
            return
        c = int(tree.cut[node])
        if tree.categorical[f]:
            open_codes = {k for k in range(lo[f], hi[f] + 1) if (f, k) not in excluded}
            if len(open_codes) < 2 or c not in open_codes:
                bad += 1
            lo_l, hi_l = lo.copy(), hi.copy()
            lo_l[f] = hi_l[f] = c
            walk(int(tree.left[node]), lo_l, hi_l, excluded)
            walk(int(tree.right[node]), lo, hi, excluded | {(f, c)})
        else:
            if not lo[f] <= c < hi[f]:
                bad += 1
            hi_l, lo_r = hi.copy(), lo.copy()
            hi_l[f], lo_r[f] = c, c + 1
            walk(int(tree.left[node]), lo, hi_l, excluded)
            walk(int(tree.right[node]), lo_r, hi, excluded)

    walk(0, np.zeros(n_bins.size, dtype=int), n_bins - 1, set())
    return bad


@pytest.mark.parametrize("seed", range(4))
def test_greedy_trees_never_make_a_split_that_separates_nothing(seed: int) -> None:
    import pandas as pd

    from dpkit.trees import DPDecisionTreeClassifier, DPDecisionTreeRegressor

    rng = np.random.default_rng(seed)
    n = 400
    X = pd.DataFrame(
        {
            "a": rng.uniform(0, 1, n),
            "b": pd.Categorical.from_codes(rng.integers(0, 3, n), ["x", "y", "z"]),
        }
    )
    y = rng.integers(0, 2, n)
    # Few codes per feature and a deep tree at small epsilon: paths run out of tests.
    tree = DPDecisionTreeClassifier(
        epsilon=0.5,
        max_depth=8,
        n_cuts=3,
        bounds={"a": (0, 1)},
        domains={"b": ["x", "y", "z"]},
        classes=[0, 1],
        random_state=seed,
    ).fit(X, y)
    assert _settled_tests(tree.tree_, tree.n_bins_) == 0  # with the missing-value codes
    assert tree.tree_.max_depth < 8  # the paths ran out of useful tests
    reg = DPDecisionTreeRegressor(
        epsilon=0.5,
        max_depth=8,
        n_cuts=3,
        bounds={"a": (0, 1)},
        domains={"b": ["x", "y", "z"]},
        target_bounds=(0, 1),
        random_state=seed,
    ).fit(X, y.astype(float))
    assert _settled_tests(reg.tree_, np.array([4, 3])) == 0
