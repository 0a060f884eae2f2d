"""``DPDecisionTreeClassifier``: a differentially private decision tree classifier."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from sklearn.utils.validation import check_is_fitted

from dpkit._checks import exact
from dpkit.accounting.budget import Budget
from dpkit.errors import InvalidParameterError
from dpkit.trees.classification._criteria import ALGORITHMS, CRITERIA, fit_classification_tree
from dpkit.trees.classification._inputs import (
    MISSING_POLICIES,
    DPClassifierBase,
    auto_criterion,
    auto_depth_rule,
)
from dpkit.trees.classification._spec import ClassificationTreeSpec
from dpkit.trees.engine._budget import BudgetPlan, randomness
from dpkit.trees.engine._growth import Tree, apply
from dpkit.trees.engine._policies import SELECTORS
from dpkit.trees.engine._privacy import fit_paid, plan_report
from dpkit.trees.engine._sklearn import check_fraction, check_max_depth, store_parameters

#: leaf_share=None picks these (measured, docs/trees-classification.md).
DEFAULT_LEAF_SHARE = {"greedy": Fraction(3, 10), "id3": Fraction(1, 4), "random": Fraction(1)}


def resolve_depth(max_depth: object) -> int | None:
    """None for "auto", else the validated integer depth."""
    if isinstance(max_depth, str) and max_depth == "auto":
        return None
    return check_max_depth(max_depth)


def resolve_smoothing(smoothing: object, leaf_epsilon: Fraction) -> float:
    """Pseudo-rows of the leaf prior: "auto" = 1 / leaf epsilon (about one noise scale)."""
    if smoothing is None or (isinstance(smoothing, str) and smoothing == "auto"):
        return float(1 / leaf_epsilon) if leaf_epsilon > 0 else 1.0
    if isinstance(smoothing, bool) or not isinstance(
        smoothing, int | float | np.integer | np.floating
    ):
        raise InvalidParameterError("smoothing must be a number >= 0 (pseudo-rows) or 'auto'.")
    if not float(smoothing) >= 0 or not np.isfinite(float(smoothing)):
        raise InvalidParameterError(
            "smoothing must be a finite number >= 0 (pseudo-rows) or 'auto'."
        )
    return float(smoothing)


def check_growth(growth: object) -> Fraction:
    """The per-level budget ratio r (level t gets a share proportional to r^t), 0.25 <= r <= 4."""
    if isinstance(growth, bool) or not isinstance(growth, int | float | np.integer | np.floating):
        raise InvalidParameterError(
            "level_growth must be a number between 0.25 and 4 (1: equal levels)."
        )
    if not 0.25 <= float(growth) <= 4:
        raise InvalidParameterError(
            f"level_growth must be between 0.25 and 4, got {float(growth)!r}; level t of the tree "
            "gets a share of the split budget proportional to level_growth**t."
        )
    return exact(float(growth))


def check_nonnegative(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"{name} must be a number >= 0.")
    v = float(value)
    if not (np.isfinite(v) and v >= 0):
        raise InvalidParameterError(f"{name} must be a finite number >= 0, got {v!r}.")
    return v


class TreeClassifierBase(DPClassifierBase):
    """What the tree and the forest classifier share: their tree settings and their checks."""

    max_depth: int | str
    algorithm: str
    criterion: str
    leaf_share: float | None
    count_share: float
    min_samples_split: float
    min_information_gain: float
    smoothing: float | str
    selector: str
    level_growth: float

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "algorithm": [ALGORITHMS.constraint()],
        "criterion": [CRITERIA.constraint()],
        "selector": [SELECTORS.constraint()],
        "missing": [MISSING_POLICIES.constraint()],
    }

    def _spec(self, depth: int, tree_epsilon: Fraction, criterion: str) -> ClassificationTreeSpec:
        """One tree's public settings (checked: this runs before the charge too)."""
        algorithm = ALGORITHMS.check(self.algorithm)
        leaf_share = (
            DEFAULT_LEAF_SHARE[algorithm]
            if self.leaf_share is None
            else exact(check_fraction(self.leaf_share, "leaf_share"))
        )
        if algorithm == "random" or depth == 0:
            leaf_share = Fraction(1)
        count_share = Fraction(0)
        if self.count_share:
            count_share = exact(check_fraction(self.count_share, "count_share"))
        return ClassificationTreeSpec(
            algorithm=algorithm,
            criterion=criterion,
            max_depth=depth,
            leaf_share=leaf_share,
            count_share=count_share,
            min_samples_split=check_nonnegative(self.min_samples_split, "min_samples_split"),
            min_information_gain=float(self.min_information_gain),
            smoothing=resolve_smoothing(self.smoothing, tree_epsilon * leaf_share),
            selector=SELECTORS.check(self.selector),
            level_growth=check_growth(self.level_growth),
        )


class DPDecisionTreeClassifier(TreeClassifierBase):
    """A decision tree classifier that is epsilon-differentially private.

    Guarantee: ``fit`` is ``epsilon``-DP (pure) with respect to adding or
    removing one training row (features and label together). ``predict`` and
    export only post-process the fitted model. The budget is split exactly (as
    fractions) between the queries below and recorded in ``privacy_``;
    ``privacy_["total"] == epsilon``.

    Public metadata (required, never derived from the data): ``classes``
    (every label y may take), ``bounds`` for numeric features (values are
    clipped to them; candidate thresholds are ``n_cuts`` equally spaced points
    inside them), categorical ``domains`` (or a pandas ``category`` dtype).

    Algorithms (``algorithm=``), per level of the tree, on all the level's
    nodes at once (they hold disjoint rows: parallel composition), so a row
    pays once per level along its path (sequential composition):

    * ``"greedy"`` (default; Friedman & Schuster 2010): one exponential-mechanism
      selection per node over every (feature, threshold or category) pair with
      the ``criterion`` utility — "gini" (sensitivity 2), "max" (sensitivity
      1) or "entropy" (capped, see ``_criteria``); all three are monotonic
      or bounded as proved in ``dpkit.trees.classification._criteria``. Per level
      eps_split = eps (1 - leaf_share) / max_depth; optionally ``count_share``
      of it buys a noisy node count (sensitivity 1) and nodes below
      ``min_samples_split`` stop.
    * ``"id3"`` (the decision-tree course project; SuLQ as summarised in the applications report): per level, noisy node x value x
      class counts for every feature (sensitivity d for the d tables,
      eps_level = eps (1 - leaf_share) / max_depth), information gain from the
      noisy counts (post-processing), multiway categorical splits,
      ``min_samples_split`` on noisy counts and ``min_information_gain``.
    * ``"random"`` (Jagannathan et al. 2012): a data-independent random
      structure; the whole budget goes to the leaves.

    Leaves: class counts plus two-sided geometric noise with
    eps_leaf = eps * leaf_share (sensitivity 1 for the whole leaf x class
    table); probabilities are the clipped counts smoothed toward the overall
    noisy class shares with ``smoothing`` pseudo-rows (post-processing).

    ``max_depth="auto"`` (default) spends eps/20 on a noisy row count
    (sensitivity 1) and picks the depth from it by a public rule
    (``_inputs.auto_depth_rule``): fewer levels when epsilon * n is small.

    ``accountant``: None, a :class:`dpkit.Accountant`, a ledger path or a
    :class:`dpkit.Session`; ``epsilon`` is charged to it after the public checks
    and before the tree reads the rows.

    ``random_state``: None (secure noise, the default) or a seed / Generator
    for reproducible experiments and tests (not for production releases).

    Fitted attributes: ``classes_``, ``n_classes_``, ``n_features_in_``,
    ``feature_names_in_`` (DataFrames), ``tree_`` (a ``dpkit.trees.engine._growth.Tree``
    whose leaf values are class probabilities), ``leaf_counts_`` (noisy class
    counts of the leaves), ``max_depth_``, ``privacy_`` (the budget split),
    ``n_left_out_`` and ``n_left_out_ci_``: a noisy count (and its 95%
    interval) of the rows left out because their label is not in ``classes``.

    Rows left out: a row whose label is not in ``classes`` is left out of the
    fit (a per-row rule). Their number, with two-sided geometric noise at the
    leaves' epsilon, is one more cell of the leaf count table (a row is in one
    leaf and class, or left out: the table's l1 sensitivity stays 1), so it
    costs nothing more. When that noisy count is at least 1% of the noisy
    total and its interval lies above zero, ``fit`` warns (``UserWarning``,
    decided from the noisy numbers only: post-processing), e.g. for
    ``classes=["no", "yes"]`` on labels "No"/"Yes".
    """

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        max_depth: int | str = "auto",
        bounds: Any = None,
        domains: dict[str, Any] | None = None,
        classes: Any = None,
        algorithm: str = "greedy",
        criterion: str = "auto",
        n_cuts: int = 32,
        leaf_share: float | None = None,
        count_share: float = 0.0,
        min_samples_split: float = 0.0,
        min_information_gain: float = 0.0,
        max_categories: int = 1024,
        smoothing: float | str = "auto",
        selector: str = "exponential",
        level_growth: float = 1.0,
        missing: str = "separate",
        random_state: Any = None,
        accountant: Any = None,
    ) -> None:
        store_parameters(self, locals())

    def fit(self, X: Any, y: Any) -> DPDecisionTreeClassifier:
        """Grow the tree on (X, y); epsilon-DP (see the class docstring). Returns self.

        Public checks first (parameters, declared classes, bounds, domains); then
        ``epsilon`` is charged to ``accountant`` (if any); only then is the tree grown.
        """
        codes, labels, n_bins, categorical, left_out = self._prepare_fit_counting(X, y)
        depth = resolve_depth(self.max_depth)
        self._spec(depth or 1, exact(self._validated_epsilon()), "gini")  # checks the rest
        fitted = fit_paid(
            self.accountant,
            Budget(exact(self.epsilon)),
            "DPDecisionTreeClassifier.fit",
            lambda: self._grow(codes, labels, n_bins, categorical, depth, left_out),
        )
        fitted._warn_left_out(float(np.maximum(fitted.leaf_counts_, 0.0).sum()))
        return fitted

    def _grow(
        self,
        codes: NDArray[np.int16],
        labels: NDArray[np.int64],
        n_bins: NDArray[np.int64],
        categorical: NDArray[np.bool_],
        depth: int | None,
        left_out: int = 0,
    ) -> DPDecisionTreeClassifier:
        rnd = randomness(self.random_state)
        eps = exact(self._validated_epsilon())
        plan_extra = BudgetPlan()
        criterion = self.criterion
        if depth is None or criterion == "auto":
            n_hat, spent = self._noisy_rows(codes.shape[0], eps, rnd.mechanism)
            plan_extra.add("row_count", spent)
            eps = eps - spent
            if depth is None:
                depth = auto_depth_rule(n_hat, float(eps), self.n_classes_, codes.shape[1])
            if criterion == "auto":
                criterion = auto_criterion(n_hat, float(eps))
        spec = self._spec(depth, eps, criterion)
        fitted = fit_classification_tree(
            codes, labels, self.n_classes_, n_bins, categorical, spec, eps, rnd
        )
        plan = fitted.plan
        for k, v in plan_extra.parts.items():
            plan.add(k, v, plan_extra.uses[k])
        if plan.total != exact(self.epsilon):  # the split is exact; anything else is a bug
            raise AssertionError("internal error: the budget split does not add up to epsilon")
        self._release_left_out(left_out, plan.parts["leaf"], rnd.mechanism)
        self.tree_: Tree = fitted.tree
        self.leaf_counts_: NDArray[np.float64] = fitted.leaf_counts[fitted.tree.feature < 0]
        self.max_depth_ = depth
        self.criterion_ = criterion
        self.n_bins_ = n_bins
        self.privacy_ = plan_report(float(self.epsilon), plan)
        return self

    def predict_proba(self, X: Any) -> NDArray[np.float64]:
        """Class probabilities of the rows' leaves (post-processing; columns follow ``classes_``)."""
        check_is_fitted(self, "tree_")
        codes = self._prepare_predict(X)
        leaf = apply(self.tree_, codes)
        return np.asarray(self.tree_.value[leaf], dtype=np.float64)

    def predict(self, X: Any) -> NDArray[Any]:
        """The most probable class of every row (ties: the first in ``classes_``)."""
        proba = self.predict_proba(X)
        return np.asarray(self.classes_[np.argmax(proba, axis=1)])

    def apply(self, X: Any) -> NDArray[np.int64]:
        """The leaf (node id of ``tree_``) of every row."""
        check_is_fitted(self, "tree_")
        return apply(self.tree_, self._prepare_predict(X))

    def export_text(self, *, decimals: int = 2) -> str:
        """The tree as readable rules ("Sex == female", "Age <= 30"), leaves with noisy counts."""
        from dpkit.trees.classification._export import export_text

        check_is_fitted(self, "tree_")
        return export_text(self, decimals=decimals)

    def export_graphviz(self, *, decimals: int = 2) -> str:
        """The tree as Graphviz DOT source (render with ``dot -Tpng``)."""
        from dpkit.trees.classification._export import export_graphviz

        check_is_fitted(self, "tree_")
        return export_graphviz(self, decimals=decimals)
