"""DP classification trees and forests on the shared engine (``dpkit.trees.engine``).

* ``_tree``: :class:`DPDecisionTreeClassifier`; ``_forest``: :class:`DPRandomForestClassifier`.
* ``_criteria``: split utilities (gini, max, capped entropy) with their
  sensitivities, and the fit of one tree; ``_spec``: its public settings.
* ``_id3``: ID3 on noisy counts (the decision-tree course project).
* ``_inputs``: classes, missing values and codes; ``_predict`` / ``_export``:
  forest prediction and the classifiers' readable exports.
"""
