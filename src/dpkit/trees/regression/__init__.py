"""DP regression trees and forests on the shared engine (``dpkit.trees.engine``).

* ``_tree``: :class:`DPDecisionTreeRegressor`; ``_forest``: :class:`DPRandomForestRegressor`
  (partition forests, or private LAD boosting of trees in ``_boosting``).
* ``_criteria``: size-free split utilities, private median and mean leaves,
  and the fit of one tree. The regression-tree paper's algorithms (not DP)
  live with its reproduction, in :mod:`dpkit.reproduce._paper_trees`.
"""
