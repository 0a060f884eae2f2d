"""DP regression trees and forests on the shared engine (``dpkit.trees.engine``).

* ``_tree``: :class:`DPDecisionTreeRegressor`; ``_forest``: :class:`DPRandomForestRegressor`
  (partition forests, or private LAD boosting of trees in ``_boosting``).
* ``_criteria``: size-free split utilities, private median and mean leaves,
  and the fit of one tree; ``_spec``: its public settings and the shared
  statistics. ``_paper``: the regression-tree paper's algorithms (not DP),
  reproduced by :mod:`dpkit.reproduce.regression_paper`.
"""
