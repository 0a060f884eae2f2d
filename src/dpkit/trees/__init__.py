"""Differentially private decision trees and forests.

One tree core (``_core``: vectorised level-wise growth, dpkit's own array
representation) with two criterion families on top, classification and regression:

* :class:`DPDecisionTreeClassifier`: greedy exponential-mechanism /
  permute-and-flip splits (default), ID3 on noisy counts (the decision-tree course project), or
  random trees; leaves are noisy class counts.
* :class:`DPRandomForestClassifier`: trees on disjoint partitions or on all
  rows with epsilon split among them.

* :class:`DPDecisionTreeRegressor`: one private tree (greedy exponential-
  mechanism splits with a size-free utility and private median leaves by
  default; random trees; the regression-tree paper's algorithms (Hoang & Thuc, 2020) for reproduction).
* :class:`DPRandomForestRegressor`: private boosting (default), or forests of
  private trees on disjoint partitions.
* :class:`DPGradientBoostingClassifier` (``trees.boosting``): cyclic Newton
  boosting of an additive model with noisy gradient and Hessian sums, accounted
  in zCDP (or pure epsilon); the best ranking of dpkit's classifiers.
* :func:`export_text`, :func:`export_rules`, :func:`export_graphviz`.

Every estimator's docstring states its guarantee and budget split; the
privacy argument in full is in ``docs/trees-regression.md`` and
``docs/trees-classification.md``.
"""

from dpkit.trees._budget import BudgetPlan
from dpkit.trees._core import Tree
from dpkit.trees._data import FeatureGrid
from dpkit.trees._export import export_graphviz, export_rules, export_text
from dpkit.trees.boosting import DPGradientBoostingClassifier, DPGradientBoostingRegressor
from dpkit.trees.classifier import DPDecisionTreeClassifier
from dpkit.trees.forest import DPRandomForestRegressor
from dpkit.trees.forest_classifier import DPRandomForestClassifier
from dpkit.trees.regressor import DPDecisionTreeRegressor

__all__ = [
    "BudgetPlan",
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
