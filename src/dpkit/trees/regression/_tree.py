"""``DPDecisionTreeRegressor``: one differentially private regression tree."""

from __future__ import annotations

import warnings
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import RegressorMixin
from sklearn.utils.validation import check_is_fitted

from dpkit._checks import exact
from dpkit.accounting.budget import Budget
from dpkit.errors import InvalidParameterError, PrivacyWarning
from dpkit.trees.engine._budget import BudgetPlan, randomness
from dpkit.trees.engine._choices import Choices
from dpkit.trees.engine._grid import check_target_bounds, regression_rows
from dpkit.trees.engine._growth import Tree, apply
from dpkit.trees.engine._privacy import fit_paid, plan_report
from dpkit.trees.engine._rules import COUNT_SHARE, noisy_row_count, tree_depth_rule
from dpkit.trees.engine._sklearn import (
    DPTreeEstimatorBase,
    check_fraction,
    check_max_depth,
    check_positive_int,
    store_parameters,
)
from dpkit.trees.regression._criteria import LEAVES, RegressionTreeSpec, fit_regression_tree

#: ``algorithm=`` of a regression tree: name -> whether it is provably epsilon-DP
#: (the paper's are grown by ``_paper``, see ``fit_regression_tree``).
TREE_ALGORITHMS: Choices[bool] = Choices(
    "algorithm", {"greedy": True, "random": True, "paper": False, "paper_total": False}
)
PAPER_ALGORITHMS = tuple(name for name, private in TREE_ALGORITHMS.items() if not private)

PAPER_WARNING = (
    "algorithm={name!r} reproduces the regression-tree paper (Vu Quoc Hoang & Nguyen Dinh Thuc, 2020) and is NOT provably "
    "epsilon-DP: its sensitivities assume node sizes that are only checked on noisy counts, "
    "and a row's path makes more queries than its budget split counts. Use it to reproduce "
    "the paper, never to release a model; see docs/trees-regression.md."
)


def check_payable(algorithm: str, accountant: Any) -> None:
    """Refuse an accountant for the paper's algorithms: nothing can pay for a fit that is not DP."""
    if algorithm in PAPER_ALGORITHMS and accountant is not None:
        raise InvalidParameterError(
            f"algorithm={algorithm!r} is not differentially private, so no accountant can "
            "pay for it; use a DP algorithm, or fit without accountant= to reproduce the paper."
        )


def check_depth(value: object, name: str = "max_depth") -> int | None:
    if value == "auto":
        return None
    return check_max_depth(value, name)


class RegressionTreesBase(RegressorMixin, DPTreeEstimatorBase):
    """What the regression tree and forest share: their settings, tags and constraints."""

    target_bounds: Any
    algorithm: str
    leaf: str
    max_depth: int | str
    min_samples_split: int
    min_samples_leaf: int
    leaf_share: float

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "algorithm": [TREE_ALGORITHMS.constraint()],
        "leaf": [LEAVES.constraint()],
    }

    def __sklearn_tags__(self):  # type: ignore[no-untyped-def]
        tags = super().__sklearn_tags__()
        tags.regressor_tags.poor_score = True  # DP noise: no accuracy promise on tiny check data
        tags.input_tags.allow_nan = False  # fit leaves NaN rows out; predict refuses NaN
        tags.input_tags.categorical = True
        return tags


class DPDecisionTreeRegressor(RegressionTreesBase):
    """A differentially private regression tree (scikit-learn compatible).

    Privacy guarantee (``algorithm`` "greedy" or "random", the default is
    "greedy"): the fitted model, hence every prediction made from it, is
    ``epsilon``-DP with respect to adding or removing one training row. The
    bounds, domains, target bounds and all other parameters are public and
    must not be derived from the data. Budget (exact fractions, recorded in
    ``budget_plan_``):

    * ``max_depth="auto"``: 1% of epsilon for a noisy row count (geometric,
      sensitivity 1) that sets the depth by a public rule; the rest is the
      tree's epsilon_t below. With an explicit depth no count is made.
    * "greedy": ``(1 - leaf_share) epsilon_t`` split evenly over the levels.
      At each level every node picks one (feature, threshold) among the
      public candidates by the exponential mechanism with utility
      SSE(node) - SSE(left) - SSE(right) on targets scaled to [0, 1]: adding
      a row changes its child's SSE by n/(n+1) (y - mean)^2 in [0, 1), so the
      sensitivity is 1 for every node size and all candidates move the same
      way (monotonic: exp(eps u / 1)). Nodes of a level are disjoint (parallel
      composition), levels add up (sequential).
    * "random": splits drawn without looking at the data (no budget).
    * leaves (``leaf_share epsilon_t``, all of epsilon_t for "random"):
      "median" (default) picks, per leaf, one of 128 public target values by
      the exponential mechanism with utility -|#rows below - #rows above|
      (sensitivity 1); "mean" releases noisy centred sums (Laplace,
      sensitivity (hi - lo)/2) and noisy counts (geometric, sensitivity 1),
      half the leaf budget each, and predicts their ratio. Leaves are
      disjoint, so each kind of leaf query costs its epsilon once.

    ``algorithm="paper"`` is Table 1 of the regression-tree paper (Hoang & Thuc, 2020) as written (utility
    -MSE or -MAE with sensitivity 1/N_split, leaf mean + Lap(1/(N_leaf beta))
    or the exponential-mechanism median of eqs. 7-8, beta = epsilon /
    (2 max_depth + 1), noisy-count stopping rules); "paper_total" the same
    with minus the *total* error as utility, which reproduces the paper's
    Table 3. Neither is provably DP (the size conditions are checked on noisy
    counts; see docs/trees-regression.md); fitting one warns.

    Parameters:
        epsilon: the privacy budget of the whole fit.
        bounds: public feature bounds: ``(lo, hi)`` for all features,
            ``(lows, highs)`` per feature, or ``{column: (lo, hi)}`` for a
            DataFrame. Values are clipped to them. Required for numeric
            features.
        target_bounds: public ``(lo, hi)`` of the target; y is clipped to it.
        domains: ``{column: [values]}`` for categorical DataFrame columns not
            of pandas ``category`` dtype.
        algorithm: "greedy" (default), "random", "paper", "paper_total".
        leaf: "median" (default; robust, best for absolute error) or "mean".
        max_depth: depth of the tree, or "auto" (greedy/random: about
            log2(n epsilon / 300) from the noisy count; paper: 15, the
            paper's l_max).
        n_cuts: equally spaced candidate thresholds per numeric feature (the
            paper's N_range).
        min_samples_split, min_samples_leaf: the paper's N_split and N_leaf
            (paper algorithms only; dpkit's algorithms need no size floors).
        leaf_share: fraction of the tree's epsilon spent on leaves ("greedy").
        random_state: None (cryptographically secure noise; the only choice for
            real releases), or an int / Generator for reproducible experiments.

    Attributes:
        tree_: the fitted :class:`dpkit.trees.Tree` (leaf values in target units).
        grid_: the public candidate grid.
        budget_plan_: the budget split (exact fractions per query kind and how
            many a row's path meets; ``budget_plan_.total`` is the epsilon spent).
        epsilon_: the epsilon the fit is charged (equal to ``epsilon``).
        provably_private_: False for the paper's algorithms.
        max_depth_: the depth used. n_features_in_, feature_names_in_: as in scikit-learn.
    """

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        bounds: Any = None,
        target_bounds: Any = None,
        domains: Any = None,
        algorithm: str = "greedy",
        leaf: str = "median",
        max_depth: int | str = "auto",
        n_cuts: int = 40,
        min_samples_split: int = 20,
        min_samples_leaf: int = 10,
        leaf_share: float = 0.5,
        random_state: Any = None,
        accountant: Any = None,
    ) -> None:
        store_parameters(self, locals())

    def fit(self, X: Any, y: ArrayLike) -> DPDecisionTreeRegressor:
        """Fit the tree; see the class docstring for the privacy guarantee."""
        epsilon = self._validated_epsilon()
        algorithm = TREE_ALGORITHMS.check(self.algorithm)
        leaf = LEAVES.check(self.leaf)
        depth = check_depth(self.max_depth)
        share = check_fraction(self.leaf_share, "leaf_share")
        n_split = check_positive_int(self.min_samples_split, "min_samples_split")
        n_leaf = check_positive_int(self.min_samples_leaf, "min_samples_leaf")
        lo, hi = check_target_bounds(self.target_bounds)
        check_payable(algorithm, self.accountant)
        columns, y_raw = self._fit_columns(X, y)
        grid = self._make_grid(columns)
        codes, y_unit = regression_rows(grid, columns, y_raw, lo, hi)

        def grow() -> DPDecisionTreeRegressor:
            nonlocal depth
            rnd = randomness(self.random_state)
            eps = exact(epsilon)
            plan = BudgetPlan()
            if algorithm in PAPER_ALGORITHMS:
                warnings.warn(PAPER_WARNING.format(name=algorithm), PrivacyWarning, stacklevel=2)
                depth = 15 if depth is None else depth
            elif depth is None:
                eps_count = eps * COUNT_SHARE
                n_hat = noisy_row_count(codes.shape[0], eps_count, rnd.mechanism)
                plan.add("row_count", eps_count)
                eps = eps - eps_count
                depth = tree_depth_rule(n_hat, float(eps))
            spec = RegressionTreeSpec(
                algorithm=algorithm,
                leaf=leaf,
                max_depth=depth,
                min_samples_split=n_split,
                min_samples_leaf=n_leaf,
                leaf_share=Fraction(share).limit_denominator(10**6),
            )
            tree, tree_plan = fit_regression_tree(
                codes, y_unit, grid.n_bins, grid.is_categorical, spec, eps, rnd
            )
            for name, part in tree_plan.parts.items():
                plan.add(name, part, tree_plan.uses[name])
            self.tree_: Tree = tree.with_values(lo + tree.value * (hi - lo))
            self.grid_ = grid
            self.target_bounds_ = (lo, hi)
            self.max_depth_ = depth
            self.budget_plan_ = plan
            self.epsilon_ = epsilon
            self.provably_private_ = algorithm not in PAPER_ALGORITHMS
            self.privacy_ = plan_report(
                float(epsilon), plan, provably_private=self.provably_private_
            )
            return self

        return fit_paid(
            self.accountant, Budget(exact(epsilon)), "DPDecisionTreeRegressor.fit", grow
        )

    def predict(self, X: Any) -> NDArray[np.float64]:
        """Predicted targets (post-processing of the private tree: no extra budget)."""
        check_is_fitted(self, "tree_")
        codes = self._predict_codes(X)
        return np.asarray(self.tree_.value[apply(self.tree_, codes), 0], dtype=np.float64)

    def apply(self, X: Any) -> NDArray[np.int64]:
        """Index of the leaf each row falls into."""
        check_is_fitted(self, "tree_")
        return apply(self.tree_, self._predict_codes(X))

    def get_n_leaves(self) -> int:
        check_is_fitted(self, "tree_")
        return self.tree_.n_leaves

    def get_depth(self) -> int:
        check_is_fitted(self, "tree_")
        return self.tree_.max_depth
