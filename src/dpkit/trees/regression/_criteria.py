"""The regression criterion family: statistic channels, split utilities, leaf values.

Targets arrive clipped to the public ``target_bounds`` and mapped to [0, 1]
(``engine._grid.scale_target``); every sensitivity below is in those units.

Split utilities (over add/remove one row, for every candidate):

* ``sse_gain`` (dpkit's default): minus the children's total squared error,
  u = -(SSE_left + SSE_right), shifted by the node's SSE (a per-node constant,
  which leaves the exponential mechanism's distribution unchanged). Adding a
  row y to a child with n rows and mean m raises that child's SSE by
  n/(n+1) (y - m)^2, which lies in [0, 1): sensitivity 1 whatever the node
  size, and every candidate moves the same way (monotonic), so the
  exponential mechanism may use exp(eps u / Delta) instead of exp(eps u / 2 Delta).
* The regression-tree paper's utilities and leaves (Hoang & Thuc, 2020; not
  provably DP) are in ``_paper``; :mod:`dpkit.reproduce.regression_paper` reproduces it.

Leaf values:

* ``noisy_mean_leaves``: noisy sum (l1 sensitivity 1/2 after centring) and
  noisy count (sensitivity 1) per leaf; the value is their ratio, shrunk toward
  a prior with a public weight. Provably DP for any leaf size.
* ``grid_median_leaves``: exponential mechanism per leaf over a public grid of
  target values, utility -|#below - #above| (sensitivity 1). Provably DP.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from dpkit.errors import InvalidParameterError
from dpkit.trees.engine._budget import BudgetPlan, Randomness, as_float_at_most
from dpkit.trees.engine._choices import Choices
from dpkit.trees.engine._growth import Candidates, Tree, candidate_layout, grow
from dpkit.trees.engine._policies import (
    GreedyPolicy,
    RandomPolicy,
    _mechanisms,
    select,
)
from dpkit.trees.regression._spec import RegressionTreeSpec, _leaf_ids, _sse, regression_channels


def sse_gain(c: Candidates) -> NDArray[np.float64]:
    """SSE(node) - SSE(left) - SSE(right): sensitivity 1, monotonic (see module doc)."""
    node = _sse(c.total)[:, None, None]
    return node - _sse(c.left) - _sse(c.right)


def noisy_leaf_stats(
    leaf: NDArray[np.int64],
    y: NDArray[np.float64],
    leaves: NDArray[np.int64],
    n_nodes: int,
    eps_sum: float,
    eps_count: float,
    rng: np.random.Generator | None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Noisy centred sums and noisy counts of the given leaves.

    Privacy: a row lies in exactly one leaf, so adding or removing it changes
    the vector of centred sums sum(y - 1/2) by at most 1/2 in l1 (y in [0, 1])
    and the vector of counts by 1: Laplace(1/2 / eps_sum) and geometric
    (1 / eps_count) noise make them eps_sum- and eps_count-DP, eps_sum +
    eps_count together.
    """
    mech = _mechanisms()
    sums = np.bincount(leaf, weights=y - 0.5, minlength=n_nodes)[leaves]
    counts = np.bincount(leaf, minlength=n_nodes)[leaves]
    noisy_sum = np.asarray(
        mech.laplace(sums, sensitivity=0.5, epsilon=eps_sum, rng=rng), dtype=np.float64
    ).reshape(-1)
    noisy_count = np.asarray(
        mech.geometric(counts, sensitivity=1, epsilon=eps_count, rng=rng), dtype=np.float64
    ).reshape(-1)
    return noisy_sum, noisy_count


def shrunk_means(
    noisy_sum: NDArray[np.float64],
    noisy_count: NDArray[np.float64],
    prior: float | NDArray[np.float64],
    strength: float,
) -> NDArray[np.float64]:
    """(noisy centred sum + strength (prior - 1/2)) / (noisy count + strength), in [0, 1].

    Post-processing of noisy statistics. ``strength`` > 0 acts like that many
    pseudo-rows at ``prior`` (a public value or one derived from earlier
    releases) and keeps tiny or empty leaves near the prior; the denominator
    is floored at 1 so negative noisy counts cannot flip signs.
    """
    denom = np.maximum(np.maximum(noisy_count, 0.0) + strength, 1.0)
    est = 0.5 + (noisy_sum + strength * (np.asarray(prior) - 0.5)) / denom
    return np.asarray(np.clip(est, 0.0, 1.0), dtype=np.float64)


def grid_median_leaves(
    leaf: NDArray[np.int64],
    y: NDArray[np.float64],
    leaves: NDArray[np.int64],
    n_nodes: int,
    epsilon: float,
    levels: int,
    rng: np.random.Generator | None,
    offset: NDArray[np.float64] | None = None,
    selector: str = "exponential",
) -> NDArray[np.float64]:
    """epsilon-DP medians of the given leaves on a public grid of ``levels`` bins.

    Candidates are the centres of ``levels`` equal bins of [0, 1] (or of
    [-1, 1] when ``offset`` marks residual targets). Utility of bin g:
    -|#rows in bins < g - #rows in bins > g|; adding or removing one row
    changes it by at most 1. Leaves are disjoint, so one exponential-mechanism
    draw per leaf is epsilon-DP for the whole vector (parallel composition).
    """
    lo, width = (0.0, 1.0) if offset is None else (-1.0, 2.0)
    codes = np.minimum(((y - lo) / width * levels).astype(np.int64), levels - 1)
    codes = np.clip(codes, 0, levels - 1)
    position = np.full(n_nodes, -1, dtype=np.int64)
    position[leaves] = np.arange(leaves.size)
    row_pos = position[leaf]
    keep = row_pos >= 0
    hist = np.bincount(row_pos[keep] * levels + codes[keep], minlength=leaves.size * levels)
    hist = hist.reshape(leaves.size, levels).astype(np.float64)
    below = np.cumsum(hist, axis=1) - hist
    above = hist.sum(axis=1, keepdims=True) - below - hist
    utility = -np.abs(below - above)
    chosen = select(
        utility, epsilon=epsilon, sensitivity=1.0, monotonic=False, rng=rng, selector=selector
    )
    return np.asarray(lo + (chosen + 0.5) * (width / levels), dtype=np.float64)


# --------------------------------------------------------------------------
# Fitting one regression tree
# --------------------------------------------------------------------------

MEDIAN_LEVELS = 128  # public grid of candidate medians (width 1/128 of the target range)


def fit_regression_tree(
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
    """Grow one tree on (codes, y in [0, 1]) and fill its leaves; epsilon-DP except "paper".

    With ``roots`` (a disjoint partition label per row) it grows ``n_roots``
    trees at once as one multi-root structure (see ``engine._growth.grow``); each
    tree then has the full epsilon on its own rows (parallel composition).

    Returns the tree (leaf values in [0, 1]) and the budget plan; the plan's
    total equals ``epsilon`` exactly for "greedy" and "random". For "paper"
    the plan records what the paper charges (2 l_max + 1 queries of beta),
    not what the literal algorithm spends (see ``docs/trees-regression.md``).
    """
    rng = rnd.mechanism
    plan = BudgetPlan()
    depth = spec.max_depth
    if spec.algorithm in ("paper", "paper_total"):
        # The paper's algorithms (not provably DP; loaded on demand).
        from dpkit.trees.regression._paper import fit_paper_tree

        return fit_paper_tree(codes, y, n_bins, categorical, spec, epsilon, rnd, roots, n_roots)
    policy: GreedyPolicy | RandomPolicy
    if spec.algorithm == "greedy" and depth > 0:
        share = Fraction(spec.leaf_share)
        split_eps = epsilon * (1 - share) / depth
        leaf_eps = epsilon * share
        plan.add("split", split_eps, depth)
        s = as_float_at_most(split_eps)
        policy = GreedyPolicy(
            utility=sse_gain,
            sensitivity=1.0,
            monotonic=True,
            split_epsilon=[s] * depth,
            weights=regression_channels(y),
            selector=spec.selector,
            rng=rng,
        )
    elif spec.algorithm in ("greedy", "random"):
        leaf_eps = epsilon
        policy = RandomPolicy(candidate_layout(n_bins, categorical)[1], rnd.numpy)
    else:
        raise InvalidParameterError(
            f"algorithm must be 'greedy', 'random' or 'paper', got {spec.algorithm!r}."
        )
    tree, leaf = grow(codes, n_bins, categorical, depth, policy, roots=roots, n_roots=n_roots)
    leaves = _leaf_ids(tree)
    value = np.full(tree.n_nodes, np.nan)
    noisy = tree.noisy_count.copy()
    fill = LEAVES.lookup(spec.leaf)
    value[leaves], counts = fill(leaf, y, leaves, tree.n_nodes, leaf_eps, plan, spec, rng)
    if counts is not None:
        noisy[leaves] = counts
    return replace(tree.with_values(value), noisy_count=noisy), plan


def median_leaves(
    leaf: NDArray[np.int64],
    y: NDArray[np.float64],
    leaves: NDArray[np.int64],
    n_nodes: int,
    epsilon: Fraction,
    plan: BudgetPlan,
    spec: RegressionTreeSpec,
    rng: np.random.Generator | None,
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """Private medians on the public grid (see ``grid_median_leaves``); no counts released."""
    plan.add("leaf_median", epsilon)
    medians = grid_median_leaves(
        leaf,
        y,
        leaves,
        n_nodes,
        as_float_at_most(epsilon),
        MEDIAN_LEVELS,
        rng,
        selector=spec.selector,
    )
    return medians, None


def mean_leaves(
    leaf: NDArray[np.int64],
    y: NDArray[np.float64],
    leaves: NDArray[np.int64],
    n_nodes: int,
    epsilon: Fraction,
    plan: BudgetPlan,
    spec: RegressionTreeSpec,
    rng: np.random.Generator | None,
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """Noisy sums and counts, half of epsilon each (see ``noisy_leaf_stats``); shrunk means."""
    eps_sum = epsilon / 2
    eps_count = epsilon - eps_sum
    plan.add("leaf_sum", eps_sum)
    plan.add("leaf_count", eps_count)
    noisy_sum, noisy_count = noisy_leaf_stats(
        leaf,
        y,
        leaves,
        n_nodes,
        as_float_at_most(eps_sum),
        as_float_at_most(eps_count),
        rng,
    )
    means = shrunk_means(noisy_sum, noisy_count, spec.prior, max(spec.shrinkage, 1e-9))
    return means, noisy_count


#: ``leaf=``: name -> how a regression tree fills its leaves (values, released counts or None).
LEAVES: Choices[Callable[..., tuple[NDArray[np.float64], NDArray[np.float64] | None]]] = Choices(
    "leaf", {"median": median_leaves, "mean": mean_leaves}
)
