"""ID3 on noisy class counts (the decision-tree course project; Blum et al.'s SuLQ tree as summarised in the course report on DP applications).

Level by level, for the disjoint nodes of the level at once, one query per
feature j: the counts n^{v,c} of every node x code v of j x class c, plus
noise. A row falls in one cell per feature, so the d feature tables together
have l1 sensitivity d; two-sided geometric noise of scale d / eps_level (i.e.
eps_level / d per feature table, sensitivity 1 each) makes the level
eps_level-DP. Everything else is post-processing of those noisy tables:

* n^v = sum_c n^{v,c} (SuLQ spends a second query on n^v; deriving it halves
  the cost, so each table gets beta / (m d) instead of the applications report's beta / (2 m d));
* the node's class counts, averaged over the d tables (d independent noisy
  copies, so the average has 1/d of one table's variance);
* information gain of every candidate: a multiway split over the public domain
  of a categorical feature (ID3), or a binary "x <= t" split at each public
  threshold of a numeric feature (C4.5 style), from clipped noisy counts;
* stopping: noisy node size below ``min_samples_split`` or below one
  standard deviation of its own noise (a public function of epsilon and the
  layout: below it the gains are noise), best noisy gain below
  ``min_information_gain``, or the depth limit.

A categorical multiway split on a domain of k values is stored in the core's
binary :class:`~dpkit.trees.engine._growth.Tree` as a chain of k - 1 "== value" tests
(value 1 goes left of the first test, value 2 left of the second, ..., the
last value right of the last test), so prediction and export need no second
tree format. Categorical features are not reused below their own split.

Cost of a tree of depth D: D levels x eps_level plus the leaf query, which the
caller (``_criteria.fit_classification_tree``) adds.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from dpkit.trees.classification._spec import ClassificationTreeSpec
from dpkit.trees.engine._budget import BudgetPlan, Randomness, as_float_at_most
from dpkit.trees.engine._growth import Tree, histograms
from dpkit.trees.engine._policies import _mechanisms

_MAX_CELLS = 1 << 21  # noisy histogram cells per chunk of nodes


def _entropy(counts: NDArray[np.float64]) -> NDArray[np.float64]:
    """Entropy in bits of count vectors along the last axis (0 for empty)."""
    n = counts.sum(axis=-1, keepdims=True)
    p = counts / np.maximum(n, 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    return np.asarray(-terms.sum(axis=-1), dtype=np.float64)


def information_gains(
    noisy: NDArray[np.float64],
    n_bins: NDArray[np.int64],
    categorical: NDArray[np.bool_],
) -> NDArray[np.float64]:
    """Gains (m, d, B) from clipped noisy node x feature x code x class tables.

    Slot [i, j, c] of a numeric feature j is the binary split "code <= c"
    (c < n_bins[j] - 1); slot [i, j, 0] of a categorical feature is its
    multiway split. Other slots are -inf. Post-processing only.
    """
    b = noisy.shape[2]
    total = noisy.sum(axis=2)  # (m, d, K): each table's own view of the node
    n = total.sum(axis=-1)  # (m, d)
    parent = _entropy(total)
    safe_n = np.maximum(n, 1e-12)
    left = np.cumsum(noisy, axis=2)
    right = total[:, :, None, :] - left
    n_left = left.sum(axis=-1)
    n_right = right.sum(axis=-1)
    children = (n_left * _entropy(left) + n_right * _entropy(right)) / safe_n[:, :, None]
    gains = parent[:, :, None] - children
    slots = np.arange(b)[None, :]
    numeric_ok = (~categorical[:, None]) & (slots < (n_bins[:, None] - 1))
    gains = np.where(numeric_ok[None, :, :], gains, -np.inf)
    # Multiway gain of categorical features: every code is a child.
    n_code = noisy.sum(axis=-1)
    multi = parent - (n_code * _entropy(noisy)).sum(axis=2) / safe_n
    gains[:, categorical, 0] = multi[:, categorical]
    return np.asarray(
        np.where(n[:, :, None] > 0, gains, np.where(np.isfinite(gains), 0.0, -np.inf))
    )


def _noisy_tables(
    codes: NDArray[np.int16],
    labels: NDArray[np.int64],
    rows: NDArray[np.int64],
    local: NDArray[np.int64],
    m: int,
    n_bins: NDArray[np.int64],
    n_classes: int,
    epsilon: float,
    rng: np.random.Generator | None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Noisy (m, d, B, K) tables of one level: (clipped at 0, node sizes), chunked for memory.

    One geometric draw of scale d / epsilon per cell: the d feature tables
    together have l1 sensitivity d (see the module doc). The node sizes are
    the unclipped table sums averaged over the d tables (unbiased; clipping
    first would make an empty node look like B K E[max(noise, 0)] rows).
    """
    d = codes.shape[1]
    b = int(n_bins.max())
    chunk = max(1, _MAX_CELLS // (d * b * n_classes))
    mech = _mechanisms()
    out = np.empty((m, d, b, n_classes))
    order = np.argsort(local, kind="stable") if m > chunk else None
    for start in range(0, m, chunk):
        stop = min(m, start + chunk)
        if order is None:
            r, loc = rows, local
        else:
            lo, hi = np.searchsorted(local[order], [start, stop])
            sel = order[lo:hi]
            r, loc = rows[sel], local[sel] - start
        hist = histograms(codes[r], loc, stop - start, b, None, labels[r], n_classes)
        noisy = mech.geometric(hist.astype(np.int64), sensitivity=d, epsilon=epsilon, rng=rng)
        out[start:stop] = np.asarray(noisy, dtype=np.float64).reshape(hist.shape)
    valid = np.arange(b)[None, :] < n_bins[:, None]  # public: codes a feature cannot take
    raw = np.where(valid[None, :, :, None], out, 0.0)
    size = raw.sum(axis=(2, 3)).mean(axis=1)
    return np.maximum(raw, 0.0), size


def size_noise_std(n_bins: NDArray[np.int64], n_classes: int, epsilon: float) -> float:
    """Standard deviation of a node-size estimate (public: from epsilon and the layout only).

    Cells carry two-sided geometric noise of scale s = d / epsilon, variance
    2 q / (1 - q)^2 with q = exp(-1/s); feature j's sum has n_bins[j] K cells
    and the estimate averages the d sums.
    """
    d = n_bins.size
    q = math.exp(-epsilon / d)
    cell_var = 2 * q / (1 - q) ** 2
    return math.sqrt(float(n_bins.sum()) * n_classes * cell_var) / d


SIZE_FLOOR_SDS = 1.0  # nodes whose noisy size is below one noise SD stop (their gains are noise)


class _Builder:
    """Binary node arrays grown by appending (ids increase from parent to child)."""

    def __init__(self, n_roots: int) -> None:
        self.feature: list[int] = [-1] * n_roots
        self.cut: list[int] = [-1] * n_roots
        self.left: list[int] = [-1] * n_roots
        self.right: list[int] = [-1] * n_roots
        self.depth: list[int] = [0] * n_roots
        self.noisy: list[float] = [float("nan")] * n_roots

    def new(self, depth: int) -> int:
        self.feature.append(-1)
        self.cut.append(-1)
        self.left.append(-1)
        self.right.append(-1)
        self.depth.append(depth)
        self.noisy.append(float("nan"))
        return len(self.feature) - 1

    def set_split(self, node: int, feature: int, cut: int, left: int, right: int) -> None:
        self.feature[node], self.cut[node] = feature, cut
        self.left[node], self.right[node] = left, right

    def tree(self, categorical: NDArray[np.bool_], n_outputs: int) -> Tree:
        n = len(self.feature)
        return Tree(
            feature=np.asarray(self.feature, dtype=np.int32),
            cut=np.asarray(self.cut, dtype=np.int32),
            left=np.asarray(self.left, dtype=np.int32),
            right=np.asarray(self.right, dtype=np.int32),
            depth=np.asarray(self.depth, dtype=np.int32),
            value=np.full((n, n_outputs), np.nan),
            noisy_count=np.asarray(self.noisy, dtype=np.float64),
            categorical=np.asarray(categorical, dtype=bool).copy(),
        )


def grow_id3(
    codes: NDArray[np.int16],
    labels: NDArray[np.int64],
    n_classes: int,
    n_bins: NDArray[np.int64],
    categorical: NDArray[np.bool_],
    spec: ClassificationTreeSpec,
    epsilon: Fraction,
    rnd: Randomness,
    roots: NDArray[np.int64] | None = None,
    n_roots: int = 1,
) -> tuple[Tree, NDArray[np.int64], BudgetPlan, Fraction]:
    """Grow the ID3 structure; returns (tree, row -> binary leaf id, plan so far, leaf epsilon).

    The plan holds the ``max_depth`` level queries; the caller spends the
    returned leaf epsilon on the leaves' noisy class counts, so the total is
    ``epsilon`` exactly.
    """
    n, d = codes.shape
    depth_limit = spec.max_depth
    plan = BudgetPlan()
    eps_level = 0.0
    if depth_limit == 0:
        leaf_eps = epsilon
    else:
        leaf_eps = epsilon * Fraction(spec.leaf_share)
        level_eps = (epsilon - leaf_eps) / depth_limit
        plan.add("id3_level", level_eps, depth_limit)
        eps_level = as_float_at_most(level_eps)
    floor = SIZE_FLOOR_SDS * size_noise_std(n_bins, n_classes, eps_level) if depth_limit else 0.0
    builder = _Builder(n_roots)
    row_node = (
        np.zeros(n, dtype=np.int64) if roots is None else np.asarray(roots, dtype=np.int64).copy()
    )
    # The current level: binary ids of its (logical) nodes and their used categorical features.
    level_nodes = np.arange(n_roots)
    used = np.zeros((n_roots, d), dtype=bool)
    rows = np.arange(n)
    for _depth in range(depth_limit):
        m = level_nodes.size
        if m == 0:
            break
        node_pos = np.full(len(builder.feature), -1, dtype=np.int64)
        node_pos[level_nodes] = np.arange(m)
        local = node_pos[row_node[rows]]
        noisy, size = _noisy_tables(
            codes, labels, rows, local, m, n_bins, n_classes, eps_level, rnd.mechanism
        )
        gains = information_gains(noisy, n_bins, categorical)
        gains = np.where(used[:, :, None], -np.inf, gains)
        flat = gains.reshape(m, -1)
        best = np.argmax(flat, axis=1)
        best_gain = flat[np.arange(m), best]
        f_best, c_best = best // gains.shape[2], best % gains.shape[2]
        split = (
            np.isfinite(best_gain)
            & (size >= max(spec.min_samples_split, floor))
            & (best_gain > spec.min_information_gain)
            & ~(categorical[f_best] & (n_bins[f_best] < 2))
        )
        for i, level_node in enumerate(level_nodes.tolist()):
            builder.noisy[level_node] = float(size[i])
        if not split.any():
            break
        # Allocate children (and chain nodes of multiway splits): a loop over the
        # level's splitting nodes, never over rows. children[i, branch] = child id.
        width = int(max(2, n_bins[categorical].max(initial=2)))
        children = np.full((m, width), -1, dtype=np.int64)
        next_nodes: list[int] = []
        next_used: list[NDArray[np.bool_]] = []
        for i in np.flatnonzero(split).tolist():
            node = int(level_nodes[i])
            f = int(f_best[i])
            base_depth = builder.depth[node]
            u = used[i].copy()
            if categorical[f]:
                u[f] = True
                k = int(n_bins[f])
                at = int(node)
                for v in range(k - 1):
                    left_child = builder.new(base_depth + v + 1)
                    rest = builder.new(base_depth + v + 1)
                    builder.set_split(at, f, v, left_child, rest)
                    children[i, v] = left_child
                    at = rest
                children[i, k - 1] = at
                ids = children[i, :k].tolist()
            else:
                left_child = builder.new(base_depth + 1)
                right_child = builder.new(base_depth + 1)
                builder.set_split(node, f, int(c_best[i]), left_child, right_child)
                children[i, :2] = (left_child, right_child)
                ids = [left_child, right_child]
            next_nodes.extend(ids)
            next_used.extend([u] * len(ids))
        moving = split[local]
        rows_m, loc_m = rows[moving], local[moving]
        f_row = f_best[loc_m]
        code = codes[rows_m, f_row].astype(np.int64)
        branch = np.where(
            categorical[f_row],
            np.minimum(code, n_bins[f_row] - 1),
            (code > c_best[loc_m]).astype(np.int64),
        )
        row_node[rows_m] = children[loc_m, branch]
        rows = rows_m
        level_nodes = np.asarray(next_nodes, dtype=np.int64)
        used = np.asarray(next_used, dtype=bool).reshape(len(next_nodes), d)
    tree = builder.tree(categorical, n_classes)
    return tree, row_node, plan, leaf_eps
