"""Deprecated module path: import ``DPRandomForestRegressor`` from :mod:`dpkit.trees`."""

import warnings

from dpkit.trees.regression._forest import DPRandomForestRegressor

warnings.warn(
    "dpkit.trees.forest is deprecated; use 'from dpkit.trees import DPRandomForestRegressor'.",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["DPRandomForestRegressor"]
