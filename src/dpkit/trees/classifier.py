"""Deprecated module path: import ``DPDecisionTreeClassifier`` from :mod:`dpkit.trees`."""

import warnings

from dpkit.trees.classification._tree import DPDecisionTreeClassifier

warnings.warn(
    "dpkit.trees.classifier is deprecated; use 'from dpkit.trees import DPDecisionTreeClassifier'.",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["DPDecisionTreeClassifier"]
