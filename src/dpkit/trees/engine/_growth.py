"""The tree core shared by every dpkit tree: representation, growth, traversal.

One builder serves regression and classification. It grows a tree level by
level; each level makes one vectorised pass over the rows still in growing
nodes and builds, with ``np.bincount``, a histogram indexed by
node x feature x code (x statistic channel or label). A *split policy*
(greedy exponential mechanism, random, the paper's exact algorithm, ...) turns
those histograms into split decisions; a *criterion family* (regression:
count / sum / sum of squares of the target; classification: class counts)
supplies the channels and the utilities. Leaf values are computed by the
estimator afterwards from the rows' leaf indices.

Privacy bookkeeping lives in the policies: the core itself releases nothing.
All nodes of one level hold disjoint rows, so per-node queries of one level
compose in parallel; the policies document the per-level cost.

The representation is dpkit's own (plain arrays), so fitted trees do not depend
on scikit-learn internals and can be exported, compared and serialised.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

# Histograms larger than this (in float64 entries) are built in node chunks.
_MAX_HIST_ENTRIES = 1 << 22


@dataclass(frozen=True)
class Tree:
    """A fitted binary tree over coded features (see ``engine._grid.FeatureGrid``).

    Node 0 is the root. For an internal node i, rows whose code of feature
    ``feature[i]`` is ``<= cut[i]`` (numeric feature) or ``== cut[i]``
    (categorical feature) go to ``left[i]``, the others to ``right[i]``. Leaves
    have ``feature == -1``. ``value[i]`` is the (private) prediction of leaf i
    (NaN for internal nodes); ``noisy_count[i]`` the released noisy number of
    training rows in node i when the algorithm measured it (NaN otherwise).
    """

    feature: NDArray[np.int32]
    cut: NDArray[np.int32]
    left: NDArray[np.int32]
    right: NDArray[np.int32]
    depth: NDArray[np.int32]
    value: NDArray[np.float64]
    noisy_count: NDArray[np.float64]
    categorical: NDArray[np.bool_]

    @property
    def n_nodes(self) -> int:
        return int(self.feature.size)

    @property
    def is_leaf(self) -> NDArray[np.bool_]:
        return self.feature < 0

    @property
    def n_leaves(self) -> int:
        return int(np.count_nonzero(self.feature < 0))

    @property
    def max_depth(self) -> int:
        return int(self.depth.max()) if self.depth.size else 0

    def with_values(self, value: NDArray[np.float64]) -> Tree:
        """The same structure with new node values (shape (n_nodes, n_outputs))."""
        return replace(self, value=np.asarray(value, dtype=np.float64).reshape(self.n_nodes, -1))


@dataclass(frozen=True)
class SplitDecision:
    """Which nodes of a level split, and the noisy counts measured (if any)."""

    split: NDArray[np.bool_]
    noisy_count: NDArray[np.float64] | None = None


@dataclass(frozen=True)
class Candidates:
    """Per-node split statistics of one chunk of nodes.

    ``left[i, j, c]`` holds the statistic channels (or label counts) of the
    rows of node i that candidate c of feature j sends left; ``total[i]`` those
    of node i. ``valid[i, j, c]`` marks candidates that exist and can separate
    something at node i: features have different numbers of codes, and a test
    whose outcome is fixed by the node's path (a threshold outside the codes
    the path leaves open, a category already tested) would send every row one
    way. Both depend on public metadata and the released structure only.
    """

    left: NDArray[np.float64]
    total: NDArray[np.float64]
    valid: NDArray[np.bool_]

    @property
    def right(self) -> NDArray[np.float64]:
        return self.total[:, None, None, :] - self.left


class SplitPolicy(Protocol):
    """How a tree decides to split. The policy owns the privacy accounting.

    ``weights`` (n, k) are per-row statistic channels summed in histograms;
    alternatively ``labels`` (n,) integer labels in ``[0, n_labels)`` counted
    per label. A policy that never reads histograms sets ``needs_statistics``
    to False and is given ``None``.
    """

    needs_statistics: bool
    weights: NDArray[np.float64] | None
    labels: NDArray[np.int64] | None
    n_labels: int

    def should_split(self, depth: int, counts: NDArray[np.int64]) -> SplitDecision:
        """Decide per node of this level (true counts given; add noise if used)."""
        ...

    def choose(
        self, depth: int, candidates: Candidates | None, n_nodes: int
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(feature, candidate index) per node of a chunk."""
        ...

    def accept(
        self, depth: int, left_counts: NDArray[np.int64], right_counts: NDArray[np.int64]
    ) -> NDArray[np.bool_] | None:
        """Optionally veto splits after the fact (None: keep all)."""
        ...


def candidate_layout(
    n_bins: NDArray[np.int64], categorical: NDArray[np.bool_]
) -> tuple[int, NDArray[np.bool_]]:
    """(number of candidate slots C, valid (d, C)) for the coded features.

    A numeric feature with b codes has b - 1 cuts ("code <= c", c < b - 1); a
    categorical one has b "code == c" tests. Depends on public metadata only.
    """
    n_cand = np.where(categorical, n_bins, n_bins - 1)
    width = max(1, int(n_cand.max()))
    valid = np.arange(width)[None, :] < n_cand[:, None]
    return width, valid


@dataclass
class PathCodes:
    """For every node of a level, the codes its path leaves open (public: structure only).

    ``lo``/``hi`` (m, d): the smallest and largest code a row of the node can
    have in each feature; ``ex_f``/``ex_c`` (m, k): categorical tests "== c"
    answered "no" on the path (feature, code), -1 padded.
    """

    lo: NDArray[np.int64]
    hi: NDArray[np.int64]
    ex_f: NDArray[np.int64]
    ex_c: NDArray[np.int64]

    @classmethod
    def root(cls, n_roots: int, n_bins: NDArray[np.int64]) -> PathCodes:
        d = n_bins.size
        return cls(
            np.zeros((n_roots, d), dtype=np.int64),
            np.tile(np.asarray(n_bins, dtype=np.int64) - 1, (n_roots, 1)),
            np.full((n_roots, 0), -1, dtype=np.int64),
            np.full((n_roots, 0), -1, dtype=np.int64),
        )

    def _open_categories(self, nodes: NDArray[np.int64]) -> NDArray[np.int64]:
        """(len(nodes), d): codes of each feature not yet ruled out (categorical meaning)."""
        d = self.lo.shape[1]
        ex_f = self.ex_f[nodes]
        rows, slots = np.nonzero(ex_f >= 0)
        excluded = np.bincount(rows * d + ex_f[rows, slots], minlength=nodes.size * d).reshape(
            nodes.size, d
        )
        return np.asarray(self.hi[nodes] - self.lo[nodes] + 1 - excluded)

    def splittable(self, categorical: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """Per node: does some test still send rows both ways? (cheap: no (d, C) mask)."""
        nodes = np.arange(self.lo.shape[0])
        numeric = self.hi > self.lo
        cat = self._open_categories(nodes) >= 2
        return np.asarray(np.where(categorical[None, :], cat, numeric).any(axis=1))

    def valid(
        self, nodes: NDArray[np.int64], categorical: NDArray[np.bool_], base: NDArray[np.bool_]
    ) -> NDArray[np.bool_]:
        """(len(nodes), d, C): candidates that can send rows both ways at these nodes."""
        c = np.arange(base.shape[1])[None, None, :]
        lo, hi = self.lo[nodes][:, :, None], self.hi[nodes][:, :, None]
        numeric = (lo <= c) & (c < hi)
        several = (self._open_categories(nodes) >= 2)[:, :, None]
        open_cat = (lo <= c) & (c <= hi) & several
        mask = np.where(categorical[None, :, None], open_cat, numeric) & base[None]
        ex_f, ex_c = self.ex_f[nodes], self.ex_c[nodes]
        rows, slots = np.nonzero(ex_f >= 0)
        mask[rows, ex_f[rows, slots], ex_c[rows, slots]] = False
        return np.asarray(mask)

    def children(
        self,
        kept: NDArray[np.int64],
        feature: NDArray[np.int64],
        cut: NDArray[np.int64],
        categorical: NDArray[np.bool_],
    ) -> PathCodes:
        """The open codes of the children (left, right, consecutive) of the kept nodes."""
        lo = np.repeat(self.lo[kept], 2, axis=0)
        hi = np.repeat(self.hi[kept], 2, axis=0)
        ex_f = np.repeat(self.ex_f[kept], 2, axis=0)
        ex_c = np.repeat(self.ex_c[kept], 2, axis=0)
        k = np.arange(kept.size)
        left, right = 2 * k, 2 * k + 1
        cat = categorical[feature]
        # left: "code <= cut" (numeric) or "code == cut" (categorical)
        hi[left, feature] = cut
        lo[left[cat], feature[cat]] = cut[cat]
        # right: "code > cut" (numeric) or "code != cut" (categorical, recorded)
        num = ~cat
        lo[right[num], feature[num]] = cut[num] + 1
        new_f = np.full((2 * kept.size, 1), -1, dtype=np.int64)
        new_c = np.full((2 * kept.size, 1), -1, dtype=np.int64)
        new_f[right[cat], 0] = feature[cat]
        new_c[right[cat], 0] = cut[cat]
        return PathCodes(
            lo, hi, np.concatenate([ex_f, new_f], axis=1), np.concatenate([ex_c, new_c], axis=1)
        )


def histograms(
    codes: NDArray[np.int16],
    local: NDArray[np.int64],
    n_nodes: int,
    n_bins: int,
    weights: NDArray[np.float64] | None,
    labels: NDArray[np.int64] | None,
    n_labels: int,
) -> NDArray[np.float64]:
    """Node x feature x code x channel histogram, one bincount pass per channel.

    ``codes`` (r, d) and ``local`` (r,) hold the rows of the nodes ``0..n_nodes-1``.
    Returns shape (n_nodes, d, n_bins, k) with k = weights' width, or n_labels.
    """
    _r, d = codes.shape
    base = (local[:, None] * d + np.arange(d)) * n_bins + codes
    cells = n_nodes * d * n_bins
    if labels is not None:
        idx = (base * n_labels + labels[:, None]).ravel()
        hist = np.bincount(idx, minlength=cells * n_labels).astype(np.float64)
        return hist.reshape(n_nodes, d, n_bins, n_labels)
    assert weights is not None
    flat = base.ravel()
    out = np.empty((cells, weights.shape[1]), dtype=np.float64)
    for ch in range(weights.shape[1]):  # a handful of channels, not rows
        w = weights[:, ch]
        if np.all(w == 1.0):
            out[:, ch] = np.bincount(flat, minlength=cells)
        else:
            out[:, ch] = np.bincount(flat, weights=np.repeat(w, d), minlength=cells)
    return out.reshape(n_nodes, d, n_bins, weights.shape[1])


def candidates_from_histogram(
    hist: NDArray[np.float64], categorical: NDArray[np.bool_], width: int, valid: NDArray[np.bool_]
) -> Candidates:
    """Left statistics of every (feature, candidate) from a node histogram."""
    cum = np.cumsum(hist, axis=2)
    left = cum[:, :, :width, :]
    if categorical.any():
        left = left.copy()
        left[:, categorical] = hist[:, categorical, :width, :]
    total = cum[:, 0, -1, :]
    return Candidates(left=left, total=total, valid=valid)


def grow(
    codes: NDArray[np.int16],
    n_bins: NDArray[np.int64],
    categorical: NDArray[np.bool_],
    max_depth: int,
    policy: SplitPolicy,
    n_outputs: int = 1,
    roots: NDArray[np.int64] | None = None,
    n_roots: int = 1,
) -> tuple[Tree, NDArray[np.int64]]:
    """Grow a tree level by level; returns the tree (values NaN) and each row's leaf.

    Work per level: one bincount over the live rows (node sizes for the
    policy), one histogram pass if the policy reads statistics, one gather to
    route rows. Node ids of a level are contiguous, children of node k of a
    level are consecutive.

    ``roots`` (per row, in ``[0, n_roots)``) grows ``n_roots`` trees at once,
    one per group of rows, as a single multi-root structure whose roots are
    nodes ``0..n_roots-1`` (split it with :func:`split_roots`). When the groups
    are disjoint partitions of the data, each level's nodes are still
    disjoint, so every per-level query covers all trees at the cost of one.
    """
    n, d = codes.shape
    width, valid = candidate_layout(n_bins, categorical)
    n_bins_max = int(n_bins.max()) if n_bins.size else 1
    feature: list[NDArray[np.int64]] = [np.full(n_roots, -1, dtype=np.int64)]
    cut: list[NDArray[np.int64]] = [np.full(n_roots, -1, dtype=np.int64)]
    left: list[NDArray[np.int64]] = [np.full(n_roots, -1, dtype=np.int64)]
    right: list[NDArray[np.int64]] = [np.full(n_roots, -1, dtype=np.int64)]
    depth_of: list[NDArray[np.int64]] = [np.zeros(n_roots, dtype=np.int64)]
    noisy: list[NDArray[np.float64]] = [np.full(n_roots, np.nan)]
    row_node = (
        np.zeros(n, dtype=np.int64) if roots is None else np.asarray(roots, dtype=np.int64).copy()
    )
    live = np.arange(n)
    first = 0  # id of the first node of the current level
    level = 0  # index into the per-level lists
    paths = PathCodes.root(n_roots, np.asarray(n_bins, dtype=np.int64))
    for depth in range(max_depth + 1):
        m = feature[level].size
        local = row_node[live] - first
        counts = np.bincount(local, minlength=m)
        if depth == max_depth:
            break
        decision = policy.should_split(depth, counts)
        if decision.noisy_count is not None:
            noisy[level] = np.asarray(decision.noisy_count, dtype=np.float64)
        split = np.asarray(decision.split, dtype=bool)
        if policy.needs_statistics:
            # A node whose path has settled every test stays a leaf (public: structure only).
            split &= paths.splittable(categorical)
        if not split.any():
            break
        split_nodes = np.flatnonzero(split)
        slot = np.cumsum(split) - 1  # node -> index among splitting nodes
        in_split = split[local]
        srows, slocal = live[in_split], slot[local[in_split]]
        f_sel, c_sel = _choose_all(
            policy,
            depth,
            codes,
            srows,
            slocal,
            split_nodes,
            d,
            n_bins_max,
            categorical,
            width,
            valid,
            paths,
        )
        row_f = f_sel[slocal]
        row_code = codes[srows, row_f]
        go_left = np.where(categorical[row_f], row_code == c_sel[slocal], row_code <= c_sel[slocal])
        n_left = np.bincount(slocal, weights=go_left, minlength=split_nodes.size).astype(np.int64)
        n_right = np.bincount(slocal, minlength=split_nodes.size) - n_left
        keep = policy.accept(depth, n_left, n_right)
        if keep is None:
            keep = np.ones(split_nodes.size, dtype=bool)
        kept = split_nodes[keep]
        if kept.size == 0:
            break
        # Children of the kept nodes, allocated as one contiguous block.
        next_first = first + m
        child_rank = np.cumsum(keep) - 1
        feature[level][kept] = f_sel[keep]
        cut[level][kept] = c_sel[keep]
        left[level][kept] = next_first + 2 * np.arange(kept.size)
        right[level][kept] = next_first + 2 * np.arange(kept.size) + 1
        row_keep = keep[slocal]
        moving, mslot = srows[row_keep], child_rank[slocal[row_keep]]
        row_node[moving] = next_first + 2 * mslot + (~go_left[row_keep]).astype(np.int64)
        live = moving
        first = next_first
        size = 2 * kept.size
        feature.append(np.full(size, -1, dtype=np.int64))
        cut.append(np.full(size, -1, dtype=np.int64))
        left.append(np.full(size, -1, dtype=np.int64))
        right.append(np.full(size, -1, dtype=np.int64))
        depth_of.append(np.full(size, depth + 1, dtype=np.int64))
        noisy.append(np.full(size, np.nan))
        paths = paths.children(kept, f_sel[keep], c_sel[keep], categorical)
        level += 1
    n_nodes = sum(a.size for a in feature)
    tree = Tree(
        feature=np.concatenate(feature).astype(np.int32),
        cut=np.concatenate(cut).astype(np.int32),
        left=np.concatenate(left).astype(np.int32),
        right=np.concatenate(right).astype(np.int32),
        depth=np.concatenate(depth_of).astype(np.int32),
        value=np.full((n_nodes, n_outputs), np.nan),
        noisy_count=np.concatenate(noisy),
        categorical=np.asarray(categorical, dtype=bool).copy(),
    )
    return tree, row_node


def _choose_all(
    policy: SplitPolicy,
    depth: int,
    codes: NDArray[np.int16],
    srows: NDArray[np.int64],
    slocal: NDArray[np.int64],
    split_nodes: NDArray[np.int64],
    d: int,
    n_bins_max: int,
    categorical: NDArray[np.bool_],
    width: int,
    valid: NDArray[np.bool_],
    paths: PathCodes,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Ask the policy for one split per splitting node, in memory-bounded chunks."""
    n_split = split_nodes.size
    if not policy.needs_statistics:
        f, c = policy.choose(depth, None, n_split)
        return np.asarray(f, dtype=np.int64), np.asarray(c, dtype=np.int64)
    k = policy.n_labels if policy.labels is not None else policy.weights.shape[1]  # type: ignore[union-attr]
    per_node = d * n_bins_max * (k * 2 + 1)  # histogram, cumulative sums, validity
    chunk = max(1, _MAX_HIST_ENTRIES // per_node)
    f_out = np.empty(n_split, dtype=np.int64)
    c_out = np.empty(n_split, dtype=np.int64)
    order = np.argsort(slocal, kind="stable") if n_split > chunk else None
    bounds = (
        np.searchsorted(slocal[order], np.arange(0, n_split + chunk, chunk))
        if order is not None
        else None
    )
    for i, start in enumerate(range(0, n_split, chunk)):
        stop = min(n_split, start + chunk)
        if order is None:
            rows, loc = srows, slocal
        else:
            assert bounds is not None
            sel = order[bounds[i] : bounds[i + 1]]
            rows, loc = srows[sel], slocal[sel] - start
        hist = histograms(
            codes[rows],
            loc,
            stop - start,
            n_bins_max,
            None if policy.weights is None else policy.weights[rows],
            None if policy.labels is None else policy.labels[rows],
            policy.n_labels,
        )
        node_valid = paths.valid(split_nodes[start:stop], categorical, valid)
        cands = candidates_from_histogram(hist, categorical, width, node_valid)
        f, c = policy.choose(depth, cands, stop - start)
        f_out[start:stop], c_out[start:stop] = f, c
    return f_out, c_out


def split_roots(
    tree: Tree, n_roots: int
) -> tuple[list[Tree], NDArray[np.int64], NDArray[np.int64]]:
    """Split a multi-root structure into single-root trees.

    Returns the trees, the tree of every node and every node's id inside its
    tree (to map rows' leaves). Children always have larger ids than their
    parent, so one pass in id order labels every node with its root.
    """
    n_nodes = tree.n_nodes
    owner = np.full(n_nodes, -1, dtype=np.int64)
    owner[:n_roots] = np.arange(n_roots)
    internal = np.flatnonzero(tree.feature >= 0)
    # Levels are contiguous id blocks: propagate owners level by level.
    for level in range(tree.max_depth):
        at = internal[tree.depth[internal] == level]
        owner[tree.left[at]] = owner[at]
        owner[tree.right[at]] = owner[at]
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=n_roots)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    local = np.empty(n_nodes, dtype=np.int64)
    local[order] = np.arange(n_nodes) - np.repeat(starts, counts)
    trees = []
    for t in range(n_roots):
        ids = order[starts[t] : starts[t] + counts[t]]
        internal_t = tree.feature[ids] >= 0
        trees.append(
            Tree(
                feature=tree.feature[ids],
                cut=tree.cut[ids],
                left=np.where(internal_t, local[np.maximum(tree.left[ids], 0)], -1).astype(
                    np.int32
                ),
                right=np.where(internal_t, local[np.maximum(tree.right[ids], 0)], -1).astype(
                    np.int32
                ),
                depth=tree.depth[ids],
                value=tree.value[ids],
                noisy_count=tree.noisy_count[ids],
                categorical=tree.categorical,
            )
        )
    return trees, owner, local


def apply(tree: Tree, codes: NDArray[np.int16]) -> NDArray[np.int64]:
    """The leaf index of every row (one vectorised step per level)."""
    return apply_forest([tree], codes)[:, 0]


# Rows per block in traversal: small blocks keep the (rows x trees) node matrix in cache.
_APPLY_CHUNK_ROWS = 8192


def _traverse(
    trees: list[Tree], codes: NDArray[np.int16]
) -> Iterator[tuple[int, int, NDArray[np.int32]]]:
    """Yield (start, stop, packed leaf ids (rows x trees)) block by block.

    The trees are packed into flat arrays in which a leaf tests feature 0
    against the largest code (so it always "goes left") and its left child is
    itself. Every row then takes exactly ``max depth`` steps with no masks;
    when every node's children are consecutive (as ``grow`` makes them) a
    step is ``node = left[node] + goes_right``. Packed id = node id + the
    tree's offset (``np.cumsum`` of the trees' sizes).
    """
    n, d = codes.shape
    t = len(trees)
    offsets = np.cumsum([0] + [tr.n_nodes for tr in trees[:-1]]).astype(np.int64)
    feature = np.concatenate([tr.feature for tr in trees]).astype(np.int64)
    cut = np.concatenate([tr.cut for tr in trees]).astype(np.int64)
    left = np.concatenate([tr.left.astype(np.int64) + o for tr, o in zip(trees, offsets)])
    right_child = np.concatenate([tr.right.astype(np.int64) + o for tr, o in zip(trees, offsets)])
    leaf = feature < 0
    own = np.arange(feature.size, dtype=np.int64)
    consecutive = bool(np.all(leaf | (right_child == left + 1)))
    left = np.where(leaf, own, left).astype(np.int32)
    right_child = np.where(leaf, own, right_child).astype(np.int32)
    feature = np.where(leaf, 0, feature).astype(np.int32)
    cut = np.where(leaf, np.iinfo(np.int16).max, cut).astype(np.int16)
    node_categorical = np.where(leaf, False, trees[0].categorical[feature])
    any_categorical = bool(node_categorical.any())
    depth = max(tr.max_depth for tr in trees)
    flat_codes = np.ascontiguousarray(codes, dtype=np.int16).reshape(-1)
    start_nodes = offsets.astype(np.int32)
    for start in range(0, n, _APPLY_CHUNK_ROWS):
        stop = min(n, start + _APPLY_CHUNK_ROWS)
        node = np.broadcast_to(start_nodes, (stop - start, t)).copy()
        base = (np.arange(start, stop, dtype=np.int64) * d)[:, None]
        for _ in range(depth):
            code = flat_codes[base + feature[node]]
            threshold = cut[node]
            right = code > threshold
            if any_categorical:
                right = np.where(node_categorical[node], code != threshold, right)
            node = (
                left[node] + right
                if consecutive
                else np.where(right, right_child[node], left[node])
            )
        yield start, stop, node


def apply_forest(trees: list[Tree], codes: NDArray[np.int16]) -> NDArray[np.int64]:
    """Leaf indices (n, n_trees) for a list of trees, all trees stepped together."""
    offsets = np.cumsum([0] + [tr.n_nodes for tr in trees[:-1]]).astype(np.int64)
    out = np.empty((codes.shape[0], len(trees)), dtype=np.int64)
    for start, stop, node in _traverse(trees, codes):
        out[start:stop] = node - offsets
    return out


def forest_sum(trees: list[Tree], codes: NDArray[np.int16], output: int = 0) -> NDArray[np.float64]:
    """Sum over the trees of each row's leaf value (column ``output``), without an (n, trees) matrix."""
    values = np.concatenate([tr.value[:, output] for tr in trees])
    out = np.empty(codes.shape[0], dtype=np.float64)
    for start, stop, node in _traverse(trees, codes):
        out[start:stop] = values[node].sum(axis=1)
    return out
