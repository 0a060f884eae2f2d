"""scikit-learn plumbing shared by every dpkit tree estimator.

Input checks go through scikit-learn's public ``validate_data`` (feature
counts and names, sparse input, empty data), then through ``_data`` (numeric vs
categorical columns, finiteness), then onto the public grid. Nothing here
looks at data values except to refuse NaN/inf, and no message contains one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from dpkit._checks import check_epsilon, finite_array
from dpkit.errors import DataError, InvalidParameterError
from dpkit.trees._data import Columns, FeatureGrid, check_n_cuts, make_grid, split_columns


def check_positive_int(value: object, name: str, *, minimum: int = 1, hint: str = "") -> int:
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or int(value) < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}{hint}.")
    return int(value)


#: The deepest tree any estimator grows. A DP tree keeps every node of every
#: level, empty ones too (its shape must not depend on the data), so depth d
#: costs 2^(d+1) nodes and a level's histograms grow with 2^d.
MAX_DEPTH = 20


def check_max_depth(value: object, name: str = "max_depth") -> int:
    """An integer depth in [0, MAX_DEPTH], with a message that says why the cap exists."""
    depth = check_positive_int(value, name, minimum=0, hint=" or 'auto'")
    if depth > MAX_DEPTH:
        raise InvalidParameterError(
            f"{name}={depth} is too deep: a DP tree keeps all 2^{name} leaves, empty ones "
            f"too (its shape must not depend on the data), so depth {depth} needs about "
            f"{2 ** (depth + 1) * 64 / 2**30:.0f} GiB. Use {name} <= {MAX_DEPTH}, or 'auto' "
            "(chosen from epsilon and a noisy row count); deep trees also split the budget "
            "into many small, noisy parts."
        )
    return depth


def check_fraction(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"{name} must be a number strictly between 0 and 1.")
    v = float(value)
    if not (math.isfinite(v) and 0 < v < 1):
        raise InvalidParameterError(f"{name} must be strictly between 0 and 1, got {v!r}.")
    return v


class DPTreeEstimatorBase(BaseEstimator):
    """Shared fit/predict input handling; subclasses implement the algorithms."""

    def _validated_epsilon(self) -> float:
        return check_epsilon(getattr(self, "epsilon", None))

    def _fit_columns(self, X: Any, y: Any) -> tuple[Columns, NDArray[Any]]:
        """Validate X, y at fit time; sets ``n_features_in_`` / ``feature_names_in_``."""
        if isinstance(X, pd.DataFrame):
            _X_checked, y_checked = validate_data(self, X, y, reset=True, skip_check_array=True)
            y_arr = np.asarray(y_checked)
            if y_arr.ndim == 2 and y_arr.shape[1] == 1:
                y_arr = y_arr.ravel()
            if X.shape[0] != y_arr.shape[0]:
                raise DataError(
                    f"X has {X.shape[0]} rows but y has {y_arr.shape[0]}; they must match."
                )
            if X.shape[0] == 0:
                raise DataError("X has no rows: a tree needs at least one training row.")
            columns = split_columns(X, getattr(self, "domains", None))
        else:
            domains = getattr(self, "domains", None)
            if domains:
                raise InvalidParameterError(
                    "domains={column: [...]} needs a pandas DataFrame with column names."
                )
            X_arr, y_arr = validate_data(
                self,
                X,
                y,
                reset=True,
                dtype=np.float64,
                ensure_all_finite=False,
                y_numeric=self._y_numeric(),
            )
            columns = split_columns(X_arr, None)
        return columns, y_arr

    def _y_numeric(self) -> bool:
        return True

    def _make_grid(self, columns: Columns) -> FeatureGrid:
        n_cuts = check_n_cuts(getattr(self, "n_cuts", 40))
        return make_grid(columns, getattr(self, "bounds", None), n_cuts)

    def _predict_codes(self, X: Any) -> NDArray[np.int16]:
        """Validate X at predict time and code it on the fitted grid."""
        check_is_fitted(self, "grid_")
        if isinstance(X, pd.DataFrame):
            validate_data(self, X, reset=False, skip_check_array=True)
            columns = split_columns(X, getattr(self, "domains", None))
            grid: FeatureGrid = self.grid_
            if list(columns.categorical) != list(grid.is_categorical):
                raise DataError(
                    "X's column types differ from those seen in fit (numeric vs categorical); "
                    "use the same dtypes and domains."
                )
        else:
            X_arr = validate_data(self, X, reset=False, dtype=np.float64, ensure_all_finite=False)
            if self.grid_.is_categorical.any():
                raise DataError(
                    "this model was fitted on a DataFrame with categorical columns; predict on one too."
                )
            columns = split_columns(X_arr, None)
        return self.grid_.encode(columns.arrays)


def target_array(y: NDArray[Any]) -> NDArray[np.float64]:
    """y as a finite float vector (DataError without values otherwise)."""
    arr = finite_array(np.asarray(y, dtype=np.float64).ravel(), name="y")
    return arr
