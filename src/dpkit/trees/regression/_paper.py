"""The regression-tree paper's algorithms (Vu Quoc Hoang & Nguyen Dinh Thuc, 2020), literally.

NOT provably differentially private (see docs/trees-regression.md, "The paper
and its correctness gap"): the utilities assume sensitivity 1/N_split and the
leaves 1/N_leaf, which hold only for nodes with at least that many rows, and
the paper checks sizes on noisy counts. dpkit's estimators reach this code only
through ``algorithm="paper"`` / ``"paper_total"``, which warn and set
``provably_private_ = False``; :mod:`dpkit.reproduce.regression_paper` runs its
experiments.

* ``paper_mse`` / ``paper_mae``: minus the mean squared / absolute error of a
  split (``paper_total_sse`` and the total variant of the MAE reproduce Table 3).
* ``paper_mean_leaves`` / ``paper_median_leaves``: equations 6 and 7-8.
* ``fit_paper_tree``: Table 1, literally, on dpkit's tree engine.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from dpkit.trees.engine._budget import BudgetPlan, Randomness, as_float_at_most
from dpkit.trees.engine._growth import Candidates, Tree, grow
from dpkit.trees.engine._policies import GreedyPolicy, _mechanisms, noisy_counts, select
from dpkit.trees.regression._spec import (
    RegressionTreeSpec,
    _leaf_ids,
    _sse,
    regression_channels,
)

PAPER_TARGET_LEVELS = 32  # bins of the target for the paper's -MAE utility (error <= 1/64 per row)


def paper_mse(c: Candidates) -> NDArray[np.float64]:
    """-(SSE_left + SSE_right) / n_node, the paper's -MSE utility (0 for an empty node)."""
    n = c.total[:, 0][:, None, None]
    return -(_sse(c.left) + _sse(c.right)) / np.maximum(n, 1.0)


def paper_total_sse(c: Candidates) -> NDArray[np.float64]:
    """-(SSE_left + SSE_right): the utility that reproduces the paper's Table 3 (with its 1/N_split)."""
    return -(_sse(c.left) + _sse(c.right))


def target_codes(y: NDArray[np.float64], levels: int) -> NDArray[np.int64]:
    """y in [0, 1] -> one of ``levels`` equal-width bins (public grid)."""
    return np.minimum((y * levels).astype(np.int64), levels - 1)


def _sae(hist: NDArray[np.float64], centers: NDArray[np.float64]) -> NDArray[np.float64]:
    """Sum of absolute deviations from the (lower) median, from binned targets."""
    n = hist.sum(axis=-1)
    cdf = np.cumsum(hist, axis=-1)
    csum = np.cumsum(hist * centers, axis=-1)
    med = np.argmax(2 * cdf >= n[..., None], axis=-1)
    cnt_le = np.take_along_axis(cdf, med[..., None], axis=-1)[..., 0]
    sum_le = np.take_along_axis(csum, med[..., None], axis=-1)[..., 0]
    v = centers[med]
    total = csum[..., -1]
    return v * cnt_le - sum_le + (total - sum_le) - v * (n - cnt_le)


def make_paper_mae(levels: int, total: bool = False):  # type: ignore[no-untyped-def]
    """The paper's -MAE utility (or minus the total absolute error), on binned targets.

    Exact MAE needs each candidate child's median; binning the target (width
    1/levels) makes that one cumulative sum per histogram, at an error of at
    most 1/(2 levels) per row.
    """
    centers = (np.arange(levels) + 0.5) / levels

    def paper_mae(c: Candidates) -> NDArray[np.float64]:
        sae = _sae(c.left, centers) + _sae(c.right, centers)
        if total:
            return -sae
        n = c.total.sum(axis=-1)[:, None, None]
        return -sae / np.maximum(n, 1.0)

    return paper_mae


def paper_mean_leaves(
    leaf: NDArray[np.int64],
    y: NDArray[np.float64],
    leaves: NDArray[np.int64],
    n_nodes: int,
    epsilon: float,
    min_leaf: int,
    rng: np.random.Generator | None,
) -> NDArray[np.float64]:
    """Equation 6 of the paper: leaf mean + Lap(1 / (N_leaf epsilon)), clipped to [0, 1].

    NOT provably DP: a leaf's true size can be below N_leaf (the paper tests
    sizes on noisy counts), and then its mean's sensitivity exceeds 1/N_leaf.
    An empty leaf's mean is taken as 1/2.
    """
    mech = _mechanisms()
    sums = np.bincount(leaf, weights=y, minlength=n_nodes)[leaves]
    counts = np.bincount(leaf, minlength=n_nodes)[leaves]
    means = np.where(counts > 0, sums / np.maximum(counts, 1), 0.5)
    noisy = mech.laplace(means, sensitivity=1.0 / min_leaf, epsilon=epsilon, rng=rng)
    return np.clip(np.asarray(noisy, dtype=np.float64).reshape(-1), 0.0, 1.0)


def paper_median_leaves(
    leaf: NDArray[np.int64],
    y: NDArray[np.float64],
    leaves: NDArray[np.int64],
    n_nodes: int,
    epsilon: float,
    min_leaf: int,
    rng: np.random.Generator | None,
    numpy_rng: np.random.Generator,
) -> NDArray[np.float64]:
    """Equations 7-8 of the paper: the exponential-mechanism median of each leaf.

    With the leaf's targets sorted, y_0 = 0 <= y_1 <= ... <= y_n <= y_{n+1} = 1,
    K = k with probability proportional to (y_k - y_{k-1}) exp(-eps |1/2 -
    F_n(y_k)| N_leaf / 2), then a uniform draw in [y_{K-1}, y_K]. The interval
    widths enter as log-width offsets of the utilities, which is exactly the
    same distribution. NOT provably DP (sensitivity 1/N_leaf assumed, see
    ``paper_mean_leaves``). Leaves are processed in batches of similar size so
    the padded utility matrix stays small.
    """
    position = np.full(n_nodes, -1, dtype=np.int64)
    position[leaves] = np.arange(leaves.size)
    row_pos = position[leaf]
    keep = np.flatnonzero(row_pos >= 0)
    order = np.lexsort((y[keep], row_pos[keep]))
    sorted_pos = row_pos[keep][order]
    sorted_y = y[keep][order]
    sizes = np.bincount(sorted_pos, minlength=leaves.size)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = np.empty(leaves.size)
    by_size = np.argsort(sizes, kind="stable")
    budget = 1 << 21
    i = 0
    delta = 1.0 / min_leaf
    while i < by_size.size:
        width = int(sizes[by_size[i]]) + 1
        j = i
        while j < by_size.size and (j - i + 1) * (int(sizes[by_size[j]]) + 1) <= max(budget, width):
            j += 1
        batch = by_size[i:j]
        w = int(sizes[batch].max()) + 1  # number of intervals of the largest leaf
        k = np.arange(w)
        n_b = sizes[batch][:, None]
        # Padded points: y_0 = 0, y_1..y_n, y_{n+1} = 1 (then beyond: invalid).
        pts = np.ones((batch.size, w + 1))
        pts[:, 0] = 0.0
        idx = starts[batch][:, None] + np.minimum(k, np.maximum(n_b - 1, 0))
        inner = k[None, :] < n_b
        pts[:, 1:] = np.where(
            inner,
            sorted_y[np.minimum(idx, max(sorted_y.size - 1, 0))] if sorted_y.size else 1.0,
            1.0,
        )
        lower, upper = pts[:, :-1], pts[:, 1:]  # interval k+1 is [y_k, y_{k+1}]
        kk = k[None, :] + 1  # interval index 1..n+1
        cdf = np.where(kk <= n_b, kk / np.maximum(n_b, 1), 1.0)
        utility = -np.abs(0.5 - cdf)
        valid = kk <= n_b + 1
        with np.errstate(divide="ignore"):
            log_width = np.log(upper - lower)
        # exp(eps u / (2 delta)) * width == exp(eps (u + (2 delta / eps) log width) / (2 delta))
        shifted = np.where(valid, utility + (2 * delta / epsilon) * log_width, -np.inf)
        if not np.isfinite(shifted).any(axis=1).all():
            # All intervals of a leaf have zero width (ties at 0 or 1 only): any choice is that value.
            shifted = np.where(
                valid & ~np.isfinite(shifted).any(axis=1, keepdims=True), 0.0, shifted
            )
        chosen = select(
            shifted,
            epsilon=epsilon,
            sensitivity=delta,
            monotonic=False,
            rng=rng,
            selector="exponential",
        )
        a = np.take_along_axis(lower, chosen[:, None], axis=1)[:, 0]
        b = np.take_along_axis(upper, chosen[:, None], axis=1)[:, 0]
        out[batch] = a + (b - a) * numpy_rng.random(batch.size)
        i = j
    return out


def fit_paper_tree(
    codes: NDArray[np.int16],
    y: NDArray[np.float64],
    n_bins: NDArray[np.int64],
    categorical: NDArray[np.bool_],
    spec: RegressionTreeSpec,
    epsilon: Fraction,
    rnd: Randomness,
    roots: NDArray[np.int64] | None = None,
    n_roots: int = 1,
) -> tuple[Tree, BudgetPlan]:
    """Table 1 of the paper on (codes, y in [0, 1]); the plan records what the paper charges
    (2 l_max + 1 queries of beta), not what the literal algorithm spends."""
    rng = rnd.mechanism
    plan = BudgetPlan()
    depth = spec.max_depth
    total = spec.algorithm == "paper_total"
    beta = epsilon / (2 * depth + 1)
    b = as_float_at_most(beta)
    plan.add("paper_query", beta, 2 * depth + 1)
    if spec.leaf == "median":
        labels = target_codes(y, PAPER_TARGET_LEVELS)
        policy = GreedyPolicy(
            utility=make_paper_mae(PAPER_TARGET_LEVELS, total),
            sensitivity=1.0 / spec.min_samples_split,
            monotonic=False,
            split_epsilon=[b] * depth,
            weights=None,
            labels=labels,
            n_labels=PAPER_TARGET_LEVELS,
            count_epsilon=[b] * depth,
            min_split=spec.min_samples_split,
            child_epsilon=[b] * depth,
            min_leaf=spec.min_samples_leaf,
            continuous_counts=True,
            rng=rng,
        )
    else:
        policy = GreedyPolicy(
            utility=paper_total_sse if total else paper_mse,
            sensitivity=1.0 / spec.min_samples_split,
            monotonic=False,
            split_epsilon=[b] * depth,
            weights=regression_channels(y),
            count_epsilon=[b] * depth,
            min_split=spec.min_samples_split,
            child_epsilon=[b] * depth,
            min_leaf=spec.min_samples_leaf,
            continuous_counts=True,
            rng=rng,
        )
    tree, leaf = grow(codes, n_bins, categorical, depth, policy, roots=roots, n_roots=n_roots)
    leaves = _leaf_ids(tree)
    # Line 7 of Table 1: every node, leaves included, first draws a fresh noisy count.
    n_at_leaves = np.bincount(leaf, minlength=tree.n_nodes)[leaves]
    noisy = tree.noisy_count.copy()
    fresh = np.isnan(noisy[leaves])
    if fresh.any():
        noisy[leaves[fresh]] = noisy_counts(n_at_leaves[fresh], b, rng, continuous=True)
    if spec.leaf == "median":
        vals = paper_median_leaves(
            leaf, y, leaves, tree.n_nodes, b, spec.min_samples_leaf, rng, rnd.numpy
        )
    else:
        vals = paper_mean_leaves(leaf, y, leaves, tree.n_nodes, b, spec.min_samples_leaf, rng)
    value = np.full(tree.n_nodes, np.nan)
    value[leaves] = vals
    return replace(tree.with_values(value), noisy_count=noisy), plan
