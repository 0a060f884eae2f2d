"""The classification criterion family: class-count statistics, split utilities, leaves.

Statistics: the core counts, per level and in one ``np.bincount`` pass, the rows
of every node x feature x code x class (``labels`` / ``n_labels`` channels of
``engine._growth.histograms``). ``Candidates.left[i, j, c, k]`` is then the number of
rows of class k of node i that candidate c of feature j sends left.

Split utilities for the exponential mechanism (Friedman & Schuster, KDD 2010),
each with its sensitivity over add/remove one row (the row lands in one child
of every candidate, so one child's class counts change by one in one class):

* ``max``: u = sum over children of max_k n_jk (rows the children's majority
  classes get right). Adding a row raises one child's max by 0 or 1 and never
  lowers it: sensitivity 1 and monotonic (exp(eps u / 1)).
* ``gini``: u = -sum_j n_j (1 - sum_k (n_jk / n_j)^2) (minus the children's
  weighted Gini impurity). Adding a row of class k to a child with n rows
  changes n G by (n^2 - 2 n n_k + S) / (n (n + 1)) with S = sum_k' n_k'^2;
  S >= n_k^2 makes it >= 0 and S <= n_k^2 + (n - n_k)^2 makes it < 2:
  sensitivity 2, monotonic.
* ``entropy``: minus the children's weighted entropy in bits, with every
  child's weight capped at ``ENTROPY_WEIGHT_CAP`` = M rows,
  u = -sum_j min(n_j, M) H(n_j. / n_j). Without a cap the sensitivity,
  log2(n + 1) + 1/ln 2, grows with the (private) node size n. With it: for
  n + 1 <= M the change is (n+1) H' - n H in [0, log2(M) + 1/ln 2); for n >= M
  it is M (H' - H) with |H' - H| <= max(log2(n+1) + 1/ln 2, log2 K) / (n + 1),
  at most max(log2(M+1) + 1/ln 2, log2 K). Not monotonic (capped children).

Leaves: one noisy class-count vector per leaf (two-sided geometric noise,
l1 sensitivity 1: a row is in one leaf and one class), probabilities by
post-processing (``hierarchical_probabilities``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from dpkit.trees.classification._id3 import grow_id3
from dpkit.trees.classification._spec import ClassificationTreeSpec
from dpkit.trees.engine._budget import BudgetPlan, Randomness, as_float_at_most
from dpkit.trees.engine._choices import Choices
from dpkit.trees.engine._growth import Candidates, Tree, candidate_layout, grow
from dpkit.trees.engine._policies import GreedyPolicy, RandomPolicy, _mechanisms

ENTROPY_WEIGHT_CAP = 1 << 16  # M above: entropy utility weighs a child as at most 65,536 rows

UtilityFn = Callable[[Candidates], NDArray[np.float64]]


@dataclass(frozen=True)
class Criterion:
    """A split utility with its sensitivity (add/remove one row) and monotonicity."""

    name: str
    utility: UtilityFn
    sensitivity: float
    monotonic: bool


def max_utility(c: Candidates) -> NDArray[np.float64]:
    """Sum over both children of the majority-class count; sensitivity 1, monotonic."""
    left = c.left
    right = c.total[:, None, None, :] - left
    return np.asarray(left.max(axis=-1) + right.max(axis=-1), dtype=np.float64)


def _weighted_gini(counts: NDArray[np.float64]) -> NDArray[np.float64]:
    n = counts.sum(axis=-1)
    sq = np.einsum("...k,...k->...", counts, counts)
    return np.asarray(n - sq / np.maximum(n, 1.0), dtype=np.float64)


def gini_utility(c: Candidates) -> NDArray[np.float64]:
    """Minus the children's weighted Gini impurity; sensitivity 2, monotonic."""
    right = c.total[:, None, None, :] - c.left
    return -(_weighted_gini(c.left) + _weighted_gini(right))


def _entropy_bits(counts: NDArray[np.float64]) -> NDArray[np.float64]:
    n = counts.sum(axis=-1, keepdims=True)
    p = counts / np.maximum(n, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
    return np.asarray(-terms.sum(axis=-1), dtype=np.float64)


def capped_weighted_entropy(counts: NDArray[np.float64], cap: float) -> NDArray[np.float64]:
    """min(n, cap) * H(counts / n) in bits (0 for an empty child)."""
    n = counts.sum(axis=-1)
    return np.asarray(np.minimum(n, cap) * _entropy_bits(counts), dtype=np.float64)


def entropy_utility(c: Candidates) -> NDArray[np.float64]:
    """Minus the children's capped weighted entropy (bits); see the module doc."""
    right = c.total[:, None, None, :] - c.left
    cap = float(ENTROPY_WEIGHT_CAP)
    return -(capped_weighted_entropy(c.left, cap) + capped_weighted_entropy(right, cap))


def entropy_sensitivity(n_classes: int, cap: int = ENTROPY_WEIGHT_CAP) -> float:
    """max(log2(cap + 1) + 1/ln 2, log2 K) per child; a row changes one child per candidate."""
    return max(math.log2(cap + 1) + 1.0 / math.log(2.0), math.log2(max(n_classes, 2)))


#: ``criterion=``: name -> the split utility for K classes (proofs in the module doc);
#: "auto" is chosen by a public rule (``_inputs.auto_criterion``).
CRITERIA: Choices[Callable[[int], Criterion]] = Choices(
    "criterion",
    {
        "gini": lambda n_classes: Criterion("gini", gini_utility, 2.0, True),
        "entropy": lambda n_classes: Criterion(
            "entropy", entropy_utility, entropy_sensitivity(n_classes), False
        ),
        "max": lambda n_classes: Criterion("max", max_utility, 1.0, True),
    },
    extra=("auto",),
)


def criterion(name: str, n_classes: int) -> Criterion:
    """The named split utility with its sensitivity (see the module doc for the proofs)."""
    return CRITERIA.lookup(name)(n_classes)


# --------------------------------------------------------------------------
# Leaves
# --------------------------------------------------------------------------


def noisy_leaf_counts(
    leaf: NDArray[np.int64],
    labels: NDArray[np.int64],
    n_classes: int,
    leaves: NDArray[np.int64],
    n_nodes: int,
    epsilon: float,
    rng: np.random.Generator | None,
) -> NDArray[np.float64]:
    """Class counts of the given leaves plus two-sided geometric noise, shape (len(leaves), K).

    Privacy: every row lies in exactly one leaf and has one class, so adding or
    removing it changes the whole (leaves x classes) count table by 1 in l1:
    geometric noise of scale 1/epsilon on every cell is epsilon-DP for all the
    leaves together (parallel composition over disjoint leaves).
    """
    counts = np.bincount(leaf * n_classes + labels, minlength=n_nodes * n_classes)
    table = counts.reshape(n_nodes, n_classes)[leaves]
    noisy = _mechanisms().geometric(table.astype(np.int64), sensitivity=1, epsilon=epsilon, rng=rng)
    return np.asarray(noisy, dtype=np.float64).reshape(leaves.size, n_classes)


def hierarchical_probabilities(
    tree: Tree,
    leaf_counts: NDArray[np.float64],
    smoothing: float,
    prior: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """Class probabilities of every node, each leaf shrunk toward its ancestors (post-processing).

    ``leaf_counts`` (n_nodes, K) holds the leaves' noisy class counts (other
    rows ignored). Counts are clipped at 0 and summed bottom-up, so an internal
    node's count is the sum of its leaves' noisy counts (more noise, but much
    more signal); then, top-down, p(root) = (c + a prior) / (n + a) and
    p(child) = (c_child + a p(parent)) / (n_child + a) with a = ``smoothing``
    pseudo-rows. A leaf with few rows (relative to the noise) thus inherits its
    parent's class distribution instead of a noise-driven guess. Uses only
    released counts: no budget.
    """
    k = leaf_counts.shape[1]
    is_leaf = tree.feature < 0
    counts = np.where(is_leaf[:, None], np.maximum(np.nan_to_num(leaf_counts, nan=0.0), 0.0), 0.0)
    internal = np.flatnonzero(~is_leaf)
    depth = tree.depth
    for level in range(int(depth.max(initial=0)), -1, -1):  # bottom-up, one step per level
        at = internal[depth[internal] == level]
        counts[at] = counts[tree.left[at]] + counts[tree.right[at]]
    if prior is None:
        total = counts[is_leaf].sum(axis=0)
        prior = total / total.sum() if total.sum() > 0 else np.full(k, 1.0 / k)
    parent = np.full(tree.n_nodes, -1, dtype=np.int64)
    parent[tree.left[internal]] = internal
    parent[tree.right[internal]] = internal
    proba = np.empty((tree.n_nodes, k))
    for level in range(int(depth.max(initial=0)) + 1):  # top-down
        at = np.flatnonzero(depth == level)
        base = np.where(parent[at, None] >= 0, proba[np.maximum(parent[at], 0)], prior[None, :])
        num = counts[at] + smoothing * base
        den = num.sum(axis=1, keepdims=True)
        proba[at] = np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0 / k)
    return proba


# --------------------------------------------------------------------------
# Fitting one classification tree
# --------------------------------------------------------------------------


def level_budgets(total: Fraction, depth: int, growth: Fraction) -> list[Fraction]:
    """Split ``total`` over ``depth`` levels in proportion to growth^t; sums to ``total`` exactly."""
    weights = [growth**t for t in range(depth)]
    norm = sum(weights, Fraction(0))
    return [total * w / norm for w in weights]


Grown = tuple[Tree, NDArray[np.int64], BudgetPlan, Fraction]


def grow_greedy(
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
) -> Grown:
    """Greedy structure (Friedman & Schuster): per level, one exponential-mechanism choice per node.

    Returns (tree, row -> leaf, plan of the split levels, leaf epsilon); the
    levels get ``(1 - leaf_share) epsilon`` in proportion to ``level_growth^t``.
    """
    depth = spec.max_depth
    if depth == 0:
        return grow_random(
            codes, labels, n_classes, n_bins, categorical, spec, epsilon, rnd, roots, n_roots
        )
    plan = BudgetPlan()
    crit = criterion(spec.criterion, n_classes)
    share = Fraction(spec.leaf_share)
    level_eps = level_budgets(epsilon * (1 - share), depth, Fraction(spec.level_growth))
    count_share = Fraction(spec.count_share)
    split_eps = [e * (1 - count_share) for e in level_eps]
    for t, e in enumerate(split_eps):
        plan.add(f"split_level_{t}", e)
    counts = None
    if count_share > 0:
        count_eps = [e * count_share for e in level_eps]
        for t, e in enumerate(count_eps):
            plan.add(f"count_level_{t}", e)
        counts = [as_float_at_most(e) for e in count_eps]
    policy = GreedyPolicy(
        utility=crit.utility,
        sensitivity=crit.sensitivity,
        monotonic=crit.monotonic,
        split_epsilon=[as_float_at_most(e) for e in split_eps],
        weights=None,
        labels=labels,
        n_labels=n_classes,
        count_epsilon=counts,
        min_split=float(spec.min_samples_split),
        selector=spec.selector,
        rng=rnd.mechanism,
    )
    tree, leaf = grow(codes, n_bins, categorical, depth, policy, roots=roots, n_roots=n_roots)
    return tree, leaf, plan, epsilon * share


def grow_random(
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
) -> Grown:
    """Random structure (Jagannathan et al.): reads no data, so all of epsilon goes to the leaves."""
    policy = RandomPolicy(candidate_layout(n_bins, categorical)[1], rnd.numpy)
    tree, leaf = grow(
        codes, n_bins, categorical, spec.max_depth, policy, roots=roots, n_roots=n_roots
    )
    return tree, leaf, BudgetPlan(), epsilon


#: ``algorithm=``: name -> the grower of the tree's structure (its plan and the leaves' epsilon).
ALGORITHMS: Choices[Callable[..., Grown]] = Choices(
    "algorithm", {"greedy": grow_greedy, "id3": grow_id3, "random": grow_random}
)


@dataclass(frozen=True)
class FittedTree:
    """A grown tree (leaf ``value`` = class probabilities), its plan and its rows' leaves."""

    tree: Tree
    plan: BudgetPlan
    leaf: NDArray[np.int64]
    leaf_counts: NDArray[np.float64]  # (n_nodes, K) noisy class counts (NaN off the leaves)


def fit_classification_tree(
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
    prior: NDArray[np.float64] | None = None,
) -> FittedTree:
    """Grow one tree (or ``n_roots`` trees on disjoint row groups) and fill its leaves.

    epsilon-DP under add/remove one row: the returned plan's total equals
    ``epsilon`` exactly. Levels hold disjoint nodes (parallel composition), a
    row's path meets each level once (sequential composition); with
    ``roots`` every row belongs to one tree, so each tree has the full epsilon.
    """
    rng = rnd.mechanism
    grower = ALGORITHMS.lookup(spec.algorithm)
    tree, leaf, plan, leaf_eps = grower(
        codes, labels, n_classes, n_bins, categorical, spec, epsilon, rnd, roots, n_roots
    )
    leaves = np.flatnonzero(tree.feature < 0)
    plan.add("leaf", leaf_eps)
    noisy = noisy_leaf_counts(
        leaf, labels, n_classes, leaves, tree.n_nodes, as_float_at_most(leaf_eps), rng
    )
    counts_all = np.full((tree.n_nodes, n_classes), np.nan)
    counts_all[leaves] = noisy
    value = np.full((tree.n_nodes, n_classes), np.nan)
    value[leaves] = hierarchical_probabilities(tree, counts_all, spec.smoothing, prior)[leaves]
    noisy_total = tree.noisy_count.copy()
    noisy_total[leaves] = noisy.sum(axis=1)
    fitted = replace(tree.with_values(value), noisy_count=noisy_total)
    return FittedTree(fitted, plan, leaf, counts_all)
