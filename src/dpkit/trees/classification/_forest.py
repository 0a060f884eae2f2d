"""``DPRandomForestClassifier``: a differentially private forest of decision trees."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from sklearn.utils.validation import check_is_fitted

from dpkit._checks import exact
from dpkit.accounting.budget import Budget
from dpkit.trees.classification._criteria import fit_classification_tree, hierarchical_probabilities
from dpkit.trees.classification._inputs import auto_criterion, auto_depth_rule
from dpkit.trees.classification._predict import forest_leaf_values
from dpkit.trees.classification._tree import TreeClassifierBase, resolve_depth
from dpkit.trees.engine._budget import BudgetPlan, randomness
from dpkit.trees.engine._choices import Choices
from dpkit.trees.engine._feedback import fit_progress
from dpkit.trees.engine._growth import Tree, split_roots
from dpkit.trees.engine._privacy import fit_paid, plan_report
from dpkit.trees.engine._sklearn import check_positive_int, store_parameters

#: ``partition=``: name -> whether each tree gets rows of its own (else all rows, epsilon / T).
PARTITIONS: Choices[bool] = Choices(
    "partition",
    {"disjoint": True, "shared": False},
    why="'disjoint' gives each tree its own rows and the full epsilon, 'shared' gives each tree "
    "all rows and epsilon / n_estimators",
)
ROWS_EPSILON_PER_TREE = 50_000.0
MAX_AUTO_TREES = 10


def auto_n_estimators(n_rows: float, epsilon: float) -> int:
    """A public rule: one tree per 50,000 units of n * epsilon, between 1 and 10.

    Splitting rows (or budget) between trees only pays when every tree still
    sees a large n * epsilon; below that one tree on all rows is more accurate
    (experiment in docs/trees-classification.md).
    """
    return int(min(MAX_AUTO_TREES, max(1, n_rows * epsilon // ROWS_EPSILON_PER_TREE)))


class DPRandomForestClassifier(TreeClassifierBase):
    """A forest of DP decision trees; ``fit`` is ``epsilon``-DP (add/remove one row).

    What the default is, plainly: ``n_estimators="auto"`` grows ONE tree unless
    n * epsilon >= 100,000 (then one tree per 50,000 units, at most 10), because
    under DP splitting rows or budget between trees costs more than averaging
    gains (measured, docs/trees-classification.md): below that scale this class
    gives exactly :class:`DPDecisionTreeClassifier`'s model. For a model that
    is better than one tree at the same epsilon, use
    :class:`~dpkit.trees.DPGradientBoostingClassifier` (higher accuracy and AUC
    on every benchmark table of 14,000 rows or more).

    Two ways to spend the budget on ``n_estimators`` trees (``partition=``):

    * ``"disjoint"`` (default; Xin et al., ICASSP 2019; Fletcher & Islam):
      every row is assigned to one tree by an independent uniform draw (public
      randomness, independent of the data), each tree is grown on its own rows
      with the full ``epsilon``; a row influences one tree only, so the forest
      is epsilon-DP by parallel composition. All trees grow together, one
      vectorised pass per level for the whole forest.
    * ``"shared"``: every tree sees every row with ``epsilon / n_estimators``
      (sequential composition).

    Each tree is built as by :class:`~dpkit.trees.DPDecisionTreeClassifier`
    with the same ``algorithm`` (greedy exponential-mechanism splits, noisy
    ID3 or random structure), ``criterion``, ``leaf_share`` and leaf noise; see
    its docstring for the per-query sensitivities. Leaf probabilities are
    smoothed toward the forest-wide noisy class shares (post-processing);
    ``predict_proba`` averages the trees' leaf probabilities.

    ``n_estimators="auto"``, ``max_depth="auto"`` and ``criterion="auto"``
    (the defaults) spend epsilon/20 on one noisy row count (sensitivity 1) and
    choose, by public rules, the number of trees (one per 50,000 units of
    n * epsilon, at most 10: splitting pays only when each tree still sees a
    lot), then the depth and criterion from the rows and budget each tree gets.

    Fitted attributes: ``trees_`` (list of ``dpkit.trees.engine._growth.Tree``),
    ``leaf_counts_list_``, ``classes_``, ``n_features_in_``,
    ``feature_names_in_``, ``n_estimators_``, ``max_depth_``, ``criterion_``,
    ``privacy_``, ``n_left_out_`` and ``n_left_out_ci_`` (a noisy count of the rows
    whose label is not in ``classes``, left out of the fit: one more cell of the
    leaf count table of all the disjoint trees, or of the first tree when
    ``partition="shared"``, so it costs nothing more; ``fit`` warns when it is
    large, as :class:`~dpkit.trees.DPDecisionTreeClassifier` does).
    """

    n_estimators: int | str
    partition: str

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **TreeClassifierBase._parameter_constraints,
        "partition": [PARTITIONS.constraint()],
    }

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        n_estimators: int | str = "auto",
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
        partition: str = "disjoint",
        max_categories: int = 1024,
        smoothing: float | str = "auto",
        selector: str = "exponential",
        level_growth: float = 1.0,
        missing: str = "separate",
        random_state: Any = None,
        accountant: Any = None,
    ) -> None:
        store_parameters(self, locals())

    def fit(self, X: Any, y: Any) -> DPRandomForestClassifier:
        """Grow the forest; epsilon-DP (see the class docstring). Returns self."""
        codes, labels, n_bins, categorical, left_out = self._prepare_fit_counting(X, y)
        auto_trees = isinstance(self.n_estimators, str) and self.n_estimators == "auto"
        n_trees = (
            1
            if auto_trees
            else check_positive_int(
                self.n_estimators,
                "n_estimators",
                hint=" or 'auto' (chosen from epsilon and a noisy row count)",
            )
        )
        PARTITIONS.check(self.partition)
        depth = resolve_depth(self.max_depth)
        self._spec(depth or 1, exact(self._validated_epsilon()), "gini")  # checks the rest
        fitted = fit_paid(
            self.accountant,
            Budget(exact(self.epsilon)),
            "DPRandomForestClassifier.fit",
            lambda: self._grow(
                codes, labels, n_bins, categorical, depth, n_trees, auto_trees, left_out
            ),
        )
        # Disjoint trees hold disjoint rows: their leaves together count every kept row once.
        kept = [np.maximum(c, 0.0).sum() for c in fitted.leaf_counts_list_]
        fitted._warn_left_out(float(sum(kept) if fitted.partition == "disjoint" else kept[0]))
        return fitted

    def _grow(
        self,
        codes: NDArray[np.int16],
        labels: NDArray[np.int64],
        n_bins: NDArray[np.int64],
        categorical: NDArray[np.bool_],
        depth: int | None,
        n_trees: int,
        auto_trees: bool,
        left_out: int = 0,
    ) -> DPRandomForestClassifier:
        d = codes.shape[1]
        rnd = randomness(self.random_state)
        eps = exact(self._validated_epsilon())
        plan = BudgetPlan()
        criterion = self.criterion
        disjoint = PARTITIONS.lookup(self.partition)
        if depth is None or criterion == "auto" or auto_trees:
            n_hat, spent = self._noisy_rows(codes.shape[0], eps, rnd.mechanism)
            plan.add("row_count", spent)
            eps = eps - spent
            if auto_trees:
                n_trees = auto_n_estimators(n_hat, float(eps))
            # What one tree sees: n/T rows with eps (disjoint) or n rows with eps/T (shared).
            rows_per_tree = n_hat / n_trees if disjoint else n_hat
            eps_per_tree = float(eps) if disjoint else float(eps) / n_trees
            if depth is None:
                depth = auto_depth_rule(rows_per_tree, eps_per_tree, self.n_classes_, d)
            if criterion == "auto":
                criterion = auto_criterion(rows_per_tree, eps_per_tree)
        tree_eps = eps if disjoint else eps / n_trees
        spec = self._spec(depth, tree_eps, criterion)
        trees: list[Tree] = []
        counts: list[NDArray[np.float64]] = []
        leaf_eps = Fraction(0)
        if disjoint:
            roots = np.asarray(rnd.numpy.integers(0, n_trees, size=codes.shape[0]), dtype=np.int64)
            fitted = fit_classification_tree(
                codes,
                labels,
                self.n_classes_,
                n_bins,
                categorical,
                spec,
                tree_eps,
                rnd,
                roots=roots,
                n_roots=n_trees,
            )
            trees, owner, _ = split_roots(fitted.tree, n_trees)
            for t in range(n_trees):
                counts.append(fitted.leaf_counts[owner == t])
            for k, v in fitted.plan.parts.items():
                plan.add(f"per_tree_{k}", v, fitted.plan.uses[k])
            leaf_eps = fitted.plan.parts["leaf"]
        else:
            progress = fit_progress("DPRandomForestClassifier.fit: trees", n_trees * depth, d)
            with progress as advance:
                for t in range(n_trees):
                    f = fit_classification_tree(
                        codes, labels, self.n_classes_, n_bins, categorical, spec, tree_eps, rnd
                    )
                    trees.append(f.tree)
                    counts.append(f.leaf_counts)
                    for k, v in f.plan.parts.items():
                        plan.add(f"tree{t}_{k}", v, f.plan.uses[k])
                    if t == 0:
                        leaf_eps = f.plan.parts["leaf"]
                    advance(depth)
        # The left-out rows: one more cell of the leaf table of every tree at once
        # (disjoint: the trees' leaves partition the kept rows) or of the first tree's
        # (shared); drawn after every leaf, so the trees' noise is unchanged.
        self._release_left_out(left_out, leaf_eps, rnd.mechanism)
        # Re-smooth every tree's leaves toward the forest-wide noisy class shares (post-processing).
        pooled = np.maximum(np.nan_to_num(np.concatenate(counts, axis=0), nan=0.0), 0.0).sum(axis=0)
        prior = (
            pooled / pooled.sum()
            if pooled.sum() > 0
            else np.full(self.n_classes_, 1.0 / self.n_classes_)
        )
        final = []
        for tree, c in zip(trees, counts):
            value = tree.value.copy()
            leaves = tree.feature < 0
            value[leaves] = hierarchical_probabilities(tree, c, spec.smoothing, prior)[leaves]
            final.append(tree.with_values(value))
        if plan.total != exact(self.epsilon):
            raise AssertionError("internal error: the budget split does not add up to epsilon")
        self.trees_: list[Tree] = final
        self.leaf_counts_list_ = [c[t.feature < 0] for c, t in zip(counts, trees)]
        self.max_depth_ = depth
        self.criterion_ = criterion
        self.n_estimators_ = n_trees
        self.n_bins_ = n_bins
        self.privacy_ = plan_report(
            float(self.epsilon), plan, partition=self.partition, n_estimators=n_trees
        )
        return self

    def predict_proba(self, X: Any) -> NDArray[np.float64]:
        """Average of the trees' leaf class probabilities (post-processing)."""
        check_is_fitted(self, "trees_")
        codes = self._prepare_predict(X)
        return forest_leaf_values(self.trees_, codes, self.n_classes_) / len(self.trees_)

    def predict(self, X: Any) -> NDArray[Any]:
        """The class with the largest average probability."""
        check_is_fitted(self, "trees_")
        return np.asarray(self.classes_[np.argmax(self.predict_proba(X), axis=1)])

    def export_text(self, tree_index: int = 0, *, decimals: int = 2) -> str:
        """Rules of tree ``tree_index`` (see ``DPDecisionTreeClassifier.export_text``)."""
        from dpkit.trees.classification._export import export_text

        check_is_fitted(self, "trees_")
        return export_text(self, decimals=decimals, tree_index=tree_index)

    def export_graphviz(self, tree_index: int = 0, *, decimals: int = 2) -> str:
        """Graphviz DOT source of tree ``tree_index``."""
        from dpkit.trees.classification._export import export_graphviz

        check_is_fitted(self, "trees_")
        return export_graphviz(self, decimals=decimals, tree_index=tree_index)
