"""Differentially private decision trees, forests and boosted models (scikit-learn estimators).

The package mirrors its design:

* ``engine``: what every tree shares: the public grid of each feature
  (``_grid``), the array tree and its vectorised level-wise growth
  (``_growth``), split policies (``_policies``), exact budget splits
  (``_budget``), the ``privacy_`` report and the paid fit (``_privacy``), the
  scikit-learn plumbing (``_sklearn``) and the exports (``_export``).
* ``classification``: :class:`DPDecisionTreeClassifier` (greedy exponential-
  mechanism / permute-and-flip splits, ID3 on noisy counts, or random trees;
  noisy class counts in the leaves) and :class:`DPRandomForestClassifier`.
* ``regression``: :class:`DPDecisionTreeRegressor` (size-free split utility,
  private median leaves) and :class:`DPRandomForestRegressor` (partition
  forests or private LAD boosting of trees); the regression-tree paper's
  algorithms for :mod:`dpkit.reproduce.regression_paper`.
* ``boosting``: :class:`DPGradientBoostingClassifier` and
  :class:`DPGradientBoostingRegressor`, cyclic Newton boosting of additive
  models accounted in zCDP (or pure epsilon): the most accurate models here.
* :func:`export_text`, :func:`export_rules`, :func:`export_graphviz`.
* :data:`CRITERIA`: the classifiers' split criteria by name (register a
  :class:`Criterion` with its sensitivity to add one; ``docs/architecture.md``).

Every estimator states its guarantee and budget split in its docstring, takes
``accountant=`` (charged before the rows are read) and carries ``privacy_`` in
one format; the arguments in full are in ``docs/trees-classification.md``,
``docs/trees-regression.md`` and ``docs/trees-boosting.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._lazy import lazy_exports

if TYPE_CHECKING:
    from dpkit.trees.boosting import DPGradientBoostingClassifier, DPGradientBoostingRegressor
    from dpkit.trees.classification._criteria import CRITERIA, Criterion
    from dpkit.trees.classification._forest import DPRandomForestClassifier
    from dpkit.trees.classification._tree import DPDecisionTreeClassifier
    from dpkit.trees.engine._budget import BudgetPlan
    from dpkit.trees.engine._export import export_graphviz, export_rules, export_text
    from dpkit.trees.engine._grid import FeatureGrid
    from dpkit.trees.engine._growth import Tree
    from dpkit.trees.regression._forest import DPRandomForestRegressor
    from dpkit.trees.regression._tree import DPDecisionTreeRegressor

__all__ = [
    "CRITERIA",
    "BudgetPlan",
    "Criterion",
    "DPDecisionTreeClassifier",
    "DPDecisionTreeRegressor",
    "DPGradientBoostingClassifier",
    "DPGradientBoostingRegressor",
    "DPRandomForestClassifier",
    "DPRandomForestRegressor",
    "FeatureGrid",
    "Tree",
    "export_graphviz",
    "export_rules",
    "export_text",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "BudgetPlan": "dpkit.trees.engine._budget",
        "CRITERIA": "dpkit.trees.classification._criteria",
        "Criterion": "dpkit.trees.classification._criteria",
        "DPDecisionTreeClassifier": "dpkit.trees.classification._tree",
        "DPDecisionTreeRegressor": "dpkit.trees.regression._tree",
        "DPGradientBoostingClassifier": "dpkit.trees.boosting",
        "DPGradientBoostingRegressor": "dpkit.trees.boosting",
        "DPRandomForestClassifier": "dpkit.trees.classification._forest",
        "DPRandomForestRegressor": "dpkit.trees.regression._forest",
        "FeatureGrid": "dpkit.trees.engine._grid",
        "Tree": "dpkit.trees.engine._growth",
        "export_graphviz": "dpkit.trees.engine._export",
        "export_rules": "dpkit.trees.engine._export",
        "export_text": "dpkit.trees.engine._export",
    },
)
