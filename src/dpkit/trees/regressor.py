"""Deprecated module path: import ``DPDecisionTreeRegressor`` from :mod:`dpkit.trees`."""

import warnings

from dpkit.trees.regression._tree import DPDecisionTreeRegressor

warnings.warn(
    "dpkit.trees.regressor is deprecated; use 'from dpkit.trees import DPDecisionTreeRegressor'.",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["DPDecisionTreeRegressor"]
