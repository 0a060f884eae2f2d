"""Deprecated module path: import ``DPRandomForestClassifier`` from :mod:`dpkit.trees`."""

import warnings

from dpkit.trees.classification._forest import DPRandomForestClassifier

warnings.warn(
    "dpkit.trees.forest_classifier is deprecated; use 'from dpkit.trees import DPRandomForestClassifier'.",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["DPRandomForestClassifier"]
