"""DP regression trees and forests on the shared engine (``dpkit.trees.engine``).

* ``_tree``: :class:`DPDecisionTreeRegressor`; ``_forest``: :class:`DPRandomForestRegressor`
  (partition forests, or private LAD boosting of trees in ``_boosting``).
* ``_criteria``: size-free split utilities, private median leaves, and the
  regression-tree paper's algorithms (kept for its reproduction in
  :mod:`dpkit.reproduce.regression_paper`; not DP, labelled as such).
"""
