"""Public rules for the "auto" hyperparameters, and the private row count they use.

The rules depend on epsilon (public) and the number of training rows n, which
is *not* public under add/remove-one-row privacy: it is estimated with a
geometric-noise count costing ``COUNT_SHARE`` of epsilon, and only that noisy
count enters the rules. Users who know n publicly (or want fixed settings)
pass explicit values instead and the count is not made.

The constants were chosen on the California Housing protocol of the regression-tree paper (Hoang & Thuc, 2020)
(see docs/trees-regression.md, "How the defaults were chosen") and checked on
generated data; they are heuristics, not privacy-relevant.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpkit.trees.engine._budget import as_float_at_most
from dpkit.trees.engine._policies import _mechanisms

COUNT_SHARE = Fraction(1, 100)


def noisy_row_count(n: int, epsilon: Fraction, rng: np.random.Generator | None) -> float:
    """n + geometric noise of scale 1/epsilon, floored at 1: epsilon-DP (a count has sensitivity 1)."""
    noisy = _mechanisms().geometric(
        int(n), sensitivity=1, epsilon=as_float_at_most(epsilon), rng=rng
    )
    return float(max(int(noisy), 1))


def boosting_rule(n_hat: float, epsilon: float) -> tuple[int, int, float]:
    """(rounds, depth, learning rate) for DP boosting.

    rounds = round(sqrt(n epsilon / 700)) in [1, 50]: each round needs about
    n epsilon / rounds >= ~700 x rounds to pick useful splits; the learning
    rate min(1, 1.5 / sqrt(rounds)) and deeper trees when there are few rounds.
    """
    rounds = int(min(50, max(1, round(math.sqrt(n_hat * epsilon / 700.0)))))
    depth = 6 if rounds <= 2 else (5 if rounds <= 5 else 4)
    return rounds, depth, min(1.0, 1.5 / math.sqrt(rounds))


def partition_rule(n_hat: float, epsilon: float) -> tuple[int, int]:
    """(trees, depth) for a forest of greedy trees on disjoint partitions."""
    trees = int(min(50, max(1, round(math.sqrt(n_hat * epsilon / 20000.0)))))
    return trees, tree_depth_rule(n_hat / trees, epsilon)


def tree_depth_rule(n_hat: float, epsilon: float) -> int:
    """Depth of a single greedy tree: about log2(n epsilon / 300), in [2, 10].

    Leaves then hold on the order of 300 / epsilon rows, enough for a private
    median whose rank error (~ 2 log(grid) / epsilon) is small against them.
    """
    return int(min(10, max(2, round(math.log2(max(n_hat * epsilon / 300.0, 1.0))))))
