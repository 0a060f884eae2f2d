"""``DPRandomForestRegressor``: ensembles of differentially private regression trees."""

from __future__ import annotations

import warnings
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.utils.validation import check_is_fitted

from dpkit._checks import exact
from dpkit.accounting.budget import Budget
from dpkit.errors import InvalidParameterError, PrivacyWarning
from dpkit.trees.engine._budget import BudgetPlan, randomness
from dpkit.trees.engine._choices import Choices
from dpkit.trees.engine._grid import check_target_bounds, regression_rows
from dpkit.trees.engine._growth import forest_sum, split_roots
from dpkit.trees.engine._privacy import fit_paid, plan_report
from dpkit.trees.engine._rules import COUNT_SHARE, boosting_rule, noisy_row_count, partition_rule
from dpkit.trees.engine._sklearn import check_fraction, check_positive_int, store_parameters
from dpkit.trees.regression._boosting import BoostingSpec, fit_boosted
from dpkit.trees.regression._criteria import LEAVES, RegressionTreeSpec, fit_regression_tree
from dpkit.trees.regression._tree import (
    PAPER_ALGORITHMS,
    PAPER_WARNING,
    TREE_ALGORITHMS,
    RegressionTreesBase,
    check_depth,
    check_payable,
)

#: ``algorithm=`` of a regression forest: boosting of trees, or partition forests of
#: any tree algorithm; name -> whether it is provably epsilon-DP.
FOREST_ALGORITHMS: Choices[bool] = Choices("algorithm", {"boosting": True, **TREE_ALGORITHMS})


def _check_auto_int(value: object, name: str) -> int | None:
    if value == "auto":
        return None
    return check_positive_int(value, name, hint=" or 'auto'")


class DPRandomForestRegressor(RegressionTreesBase):
    """A differentially private ensemble of regression trees (scikit-learn compatible).

    Privacy guarantee (every ``algorithm`` except the paper's): the fitted
    model is ``epsilon``-DP with respect to adding or removing one training
    row; predictions are post-processing. Parameters are public. The budget
    split is recorded, as exact fractions, in ``budget_plan_``. When any of
    ``n_estimators`` / ``max_depth`` / ``learning_rate`` is "auto", 1% of
    epsilon buys a noisy row count (geometric, sensitivity 1) that sets them
    by public rules (``dpkit.trees.engine._rules``); the rest is epsilon_m below.

    ``algorithm``:

    * "boosting" (default, the most accurate dpkit found): gradient boosting
      for absolute error on all rows. Round r grows a tree whose splits are
      chosen, level by level, by the exponential mechanism with the SSE-gain
      utility of the residual sign (sensitivity 1, monotonic), and whose
      leaves are private medians of the residuals on a public grid (utility
      -|#below - #above|, sensitivity 1); the model adds ``learning_rate``
      times the leaves. Residuals depend on the data only through earlier
      releases, so the rounds compose sequentially: each round gets
      epsilon_m / n_estimators, split ``leaf_share`` to leaves and the rest
      evenly over the levels (disjoint nodes of a level compose in parallel).
    * "greedy" / "random": the paper's DPPartRegForest structure with dpkit's
      provably private trees: rows get independent uniform partition labels
      (so adding a row changes one partition only), one tree per partition,
      each tree fitted as ``DPDecisionTreeRegressor`` with the full epsilon_m
      (parallel composition); the prediction is the mean of the trees.
    * "paper" / "paper_total": Table 2 of the regression-tree paper (Hoang & Thuc, 2020) with Table 1 trees
      (equal-size partitions, mean of trees; see ``DPDecisionTreeRegressor``).
      NOT provably DP; fitting one warns.

    Parameters:
        epsilon, bounds, target_bounds, domains, n_cuts, min_samples_split,
        min_samples_leaf, leaf_share, random_state: as for
            :class:`DPDecisionTreeRegressor`.
        n_estimators: boosting rounds or number of partition trees, or "auto"
            (paper algorithms: 25, the paper's tau).
        max_depth: depth of each tree, or "auto" (paper algorithms: 5).
        learning_rate: boosting shrinkage in (0, 1], or "auto".
        algorithm: "boosting" (default), "greedy", "random", "paper", "paper_total".
        leaf: "median" (default) or "mean".

    Attributes:
        trees_: the fitted :class:`dpkit.trees.Tree` list (leaf values in
            target units; for boosting, already multiplied by the learning rate).
        init_: boosting's starting prediction (target units).
        n_estimators_, max_depth_, learning_rate_: the settings used.
        budget_plan_, epsilon_, provably_private_, grid_: as for the tree.
    """

    n_estimators: int | str
    learning_rate: float | str

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **RegressionTreesBase._parameter_constraints,
        "algorithm": [FOREST_ALGORITHMS.constraint()],
    }

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        bounds: Any = None,
        target_bounds: Any = None,
        domains: Any = None,
        n_estimators: int | str = "auto",
        max_depth: int | str = "auto",
        learning_rate: float | str = "auto",
        algorithm: str = "boosting",
        leaf: str = "median",
        n_cuts: int = 40,
        min_samples_split: int = 20,
        min_samples_leaf: int = 10,
        leaf_share: float = 0.5,
        random_state: Any = None,
        accountant: Any = None,
    ) -> None:
        store_parameters(self, locals())

    def _check_learning_rate(self) -> float | None:
        lr = self.learning_rate
        if lr == "auto":
            return None
        if (
            isinstance(lr, bool)
            or not isinstance(lr, int | float | np.integer | np.floating)
            or not 0 < float(lr) <= 1
        ):
            raise InvalidParameterError("learning_rate must be a number in (0, 1] or 'auto'.")
        return float(lr)

    def fit(self, X: Any, y: ArrayLike) -> DPRandomForestRegressor:
        """Fit the ensemble; see the class docstring for the privacy guarantee."""
        epsilon = self._validated_epsilon()
        algorithm = FOREST_ALGORITHMS.check(self.algorithm)
        leaf = LEAVES.check(self.leaf)
        n_trees = _check_auto_int(self.n_estimators, "n_estimators")
        depth = check_depth(self.max_depth)
        lr = self._check_learning_rate()
        share = Fraction(check_fraction(self.leaf_share, "leaf_share")).limit_denominator(10**6)
        n_split = check_positive_int(self.min_samples_split, "min_samples_split")
        n_leaf = check_positive_int(self.min_samples_leaf, "min_samples_leaf")
        lo, hi = check_target_bounds(self.target_bounds)
        check_payable(algorithm, self.accountant)
        columns, y_raw = self._fit_columns(X, y)
        grid = self._make_grid(columns)
        codes, y_unit = regression_rows(grid, columns, y_raw, lo, hi)

        def grow() -> DPRandomForestRegressor:
            nonlocal n_trees, depth, lr
            n = codes.shape[0]
            rnd = randomness(self.random_state)
            eps = exact(epsilon)
            plan = BudgetPlan()
            if algorithm in PAPER_ALGORITHMS:
                warnings.warn(PAPER_WARNING.format(name=algorithm), PrivacyWarning, stacklevel=2)
                n_trees = 25 if n_trees is None else n_trees
                depth = 5 if depth is None else depth
            elif n_trees is None or depth is None or (algorithm == "boosting" and lr is None):
                eps_count = eps * COUNT_SHARE
                n_hat = noisy_row_count(n, eps_count, rnd.mechanism)
                plan.add("row_count", eps_count)
                eps = eps - eps_count
                if algorithm == "boosting":
                    auto_trees, auto_depth, auto_lr = boosting_rule(n_hat, float(eps))
                    lr = auto_lr if lr is None else lr
                else:
                    auto_trees, auto_depth = partition_rule(n_hat, float(eps))
                n_trees = auto_trees if n_trees is None else n_trees
                depth = auto_depth if depth is None else depth
            assert n_trees is not None and depth is not None
            self.init_ = lo + 0.5 * (hi - lo)
            if algorithm == "boosting":
                lr = 1.0 if lr is None else lr
                spec = BoostingSpec(
                    rounds=n_trees, max_depth=depth, learning_rate=lr, leaf=leaf, leaf_share=share
                )
                trees, sub_plan = fit_boosted(
                    codes, y_unit, grid.n_bins, grid.is_categorical, spec, eps, rnd
                )
                # Leaf values are increments: scale by the target range only.
                self.trees_ = [t.with_values(t.value * (hi - lo)) for t in trees]
            else:
                if algorithm in PAPER_ALGORITHMS:
                    # Table 2: tau partitions of (nearly) equal size.
                    roots: NDArray[np.int64] = np.empty(n, dtype=np.int64)
                    for tree_index, members in enumerate(
                        np.array_split(rnd.numpy.permutation(n), n_trees)
                    ):
                        roots[members] = tree_index
                else:
                    # Independent labels: adding a row leaves every other row's partition unchanged.
                    roots = np.asarray(rnd.numpy.integers(0, n_trees, size=n), dtype=np.int64)
                tree_spec = RegressionTreeSpec(
                    algorithm=algorithm,
                    leaf=leaf,
                    max_depth=depth,
                    min_samples_split=n_split,
                    min_samples_leaf=n_leaf,
                    leaf_share=share,
                )
                combined, sub_plan = fit_regression_tree(
                    codes,
                    y_unit,
                    grid.n_bins,
                    grid.is_categorical,
                    tree_spec,
                    eps,
                    rnd,
                    roots=roots,
                    n_roots=n_trees,
                )
                trees, _, _ = split_roots(combined, n_trees)
                self.trees_ = [t.with_values(lo + t.value * (hi - lo)) for t in trees]
                lr = None
            for name, amount in sub_plan.parts.items():
                plan.add(name, amount, sub_plan.uses[name])
            self.grid_ = grid
            self.target_bounds_ = (lo, hi)
            self.n_estimators_ = n_trees
            self.max_depth_ = depth
            self.learning_rate_ = lr
            self.budget_plan_ = plan
            self.epsilon_ = epsilon
            self.provably_private_ = algorithm not in PAPER_ALGORITHMS
            self.privacy_ = plan_report(
                float(epsilon), plan, provably_private=self.provably_private_
            )
            self.algorithm_ = algorithm
            return self

        return fit_paid(
            self.accountant, Budget(exact(epsilon)), "DPRandomForestRegressor.fit", grow
        )

    def predict(self, X: Any) -> NDArray[np.float64]:
        """Predicted targets (post-processing of the private trees: no extra budget)."""
        check_is_fitted(self, "trees_")
        codes = self._predict_codes(X)
        lo, hi = self.target_bounds_
        total = forest_sum(self.trees_, codes)
        if self.algorithm_ == "boosting":
            # Leaf values are increments in target units; clip the sum to the target range.
            return np.asarray(np.clip(self.init_ + total, lo, hi), dtype=np.float64)
        return np.asarray(total / len(self.trees_), dtype=np.float64)
