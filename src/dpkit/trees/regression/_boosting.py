"""Differentially private gradient boosting of regression trees (absolute loss).

Each round grows one tree on *all* rows and adds ``learning_rate`` times its
leaf values to the model (LAD TreeBoost, Friedman 2001, made private):

* structure: greedy exponential-mechanism splits on the sign of the current
  residual, u = SSE gain of the 0/1 indicator [y > F(x)] (sensitivity 1,
  monotonic; see ``regression._criteria.sse_gain``), ``split_epsilon`` per level;
* leaves: the private median of the residuals y - F(x) in [-1, 1] on a public
  grid (``regression._criteria.grid_median_leaves``), ``leaf_epsilon``; or a noisy mean.

The model F before a round is a function of earlier *releases* only, so the
residuals are a public transformation of each row: a row's influence on a
round is that of one row, and rounds compose sequentially. A row meets one
node per level and one leaf per round, so the whole model costs
rounds x (depth x split_epsilon + leaf_epsilon).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from dpkit.trees.engine._budget import BudgetPlan, Randomness, as_float_at_most
from dpkit.trees.engine._feedback import fit_progress
from dpkit.trees.engine._growth import Tree, grow
from dpkit.trees.engine._policies import GreedyPolicy, _mechanisms
from dpkit.trees.regression._criteria import (
    MEDIAN_LEVELS,
    grid_median_leaves,
    regression_channels,
    sse_gain,
)


@dataclass(frozen=True)
class BoostingSpec:
    rounds: int
    max_depth: int
    learning_rate: float
    leaf: str = "median"
    leaf_share: Fraction = Fraction(1, 2)
    selector: str = "permute_and_flip"
    init: float = 0.5


def _mean_residual_leaves(
    leaf: NDArray[np.int64],
    r: NDArray[np.float64],
    leaves: NDArray[np.int64],
    n_nodes: int,
    epsilon: Fraction,
    rng: np.random.Generator | None,
) -> NDArray[np.float64]:
    """Noisy mean residual per leaf: sum (l1 sensitivity 1, r in [-1, 1]) / count (sensitivity 1).

    epsilon/2 each; leaves are disjoint, so the vectors cost that much in total.
    """
    mech = _mechanisms()
    e_sum = epsilon / 2
    sums = np.bincount(leaf, weights=r, minlength=n_nodes)[leaves]
    counts = np.bincount(leaf, minlength=n_nodes)[leaves]
    noisy_sum = np.asarray(
        mech.laplace(sums, sensitivity=1.0, epsilon=as_float_at_most(e_sum), rng=rng)
    ).reshape(-1)
    noisy_count = np.asarray(
        mech.geometric(counts, sensitivity=1, epsilon=as_float_at_most(epsilon - e_sum), rng=rng)
    ).reshape(-1)
    return np.clip(noisy_sum / np.maximum(noisy_count + 1.0, 1.0), -1.0, 1.0)


def fit_boosted(
    codes: NDArray[np.int16],
    y: NDArray[np.float64],
    n_bins: NDArray[np.int64],
    categorical: NDArray[np.bool_],
    spec: BoostingSpec,
    epsilon: Fraction,
    rnd: Randomness,
) -> tuple[list[Tree], BudgetPlan]:
    """Fit the boosted trees on y in [0, 1]; epsilon-DP (add/remove one row) in total.

    Returns the trees (leaf values already multiplied by the learning rate,
    so the model is ``init + sum of tree values``) and the budget plan, whose
    total is ``epsilon`` exactly.
    """
    rng = rnd.mechanism
    per_round = epsilon / spec.rounds
    share = Fraction(spec.leaf_share)
    depth = spec.max_depth
    plan = BudgetPlan()
    leaf_eps = per_round * share if depth > 0 else per_round
    split_eps = (per_round - leaf_eps) / depth if depth > 0 else Fraction(0)
    if depth > 0:
        plan.add("split", split_eps, spec.rounds * depth)
    plan.add("leaf", leaf_eps, spec.rounds)
    s = as_float_at_most(split_eps) if depth > 0 else 0.0
    current = np.full(y.size, spec.init)
    trees: list[Tree] = []
    progress = fit_progress(
        "DPRandomForestRegressor.fit: boosting rounds", spec.rounds, n_bins.size
    )
    with progress as advance:
        for _ in range(spec.rounds):  # rounds are sequential by nature
            residual = np.clip(y - current, -1.0, 1.0)
            indicator = (residual > 0).astype(np.float64)
            policy = GreedyPolicy(
                utility=sse_gain,
                sensitivity=1.0,
                monotonic=True,
                split_epsilon=[s] * depth,
                weights=regression_channels(indicator),
                selector=spec.selector,
                rng=rng,
            )
            tree, leaf = grow(codes, n_bins, categorical, depth, policy)
            leaves = np.flatnonzero(tree.feature < 0)
            if spec.leaf == "median":
                vals = grid_median_leaves(
                    leaf,
                    residual,
                    leaves,
                    tree.n_nodes,
                    as_float_at_most(leaf_eps),
                    MEDIAN_LEVELS,
                    rng,
                    offset=np.zeros(1),
                    selector=spec.selector,
                )
            else:
                vals = _mean_residual_leaves(leaf, residual, leaves, tree.n_nodes, leaf_eps, rng)
            value = np.full(tree.n_nodes, np.nan)
            value[leaves] = spec.learning_rate * vals
            tree = tree.with_values(value)
            trees.append(tree)
            current = current + tree.value[leaf, 0]
            advance(1)
    return trees, plan
