"""scikit-learn plumbing shared by every dpkit tree estimator.

Input checks go through scikit-learn's public ``validate_data`` (feature
counts and names, sparse input, empty data), then through ``engine._grid`` (numeric vs
categorical columns), then onto the public grid. ``fit`` never refuses a value:
NaN, None and ±inf are missing (the package's one rule, ``docs/queries.md``,
"Missing and non-finite values") and each estimator handles missing entries
per row; ``predict`` (on the caller's own data, not a release) refuses them
where a model has no branch for them. No message contains a data value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from dpkit._checks import check_epsilon
from dpkit.errors import DataError, InvalidParameterError
from dpkit.trees.engine._grid import Columns, FeatureGrid, check_n_cuts, make_grid, split_columns


def store_parameters(estimator: BaseEstimator, arguments: dict[str, Any]) -> None:
    """scikit-learn's ``__init__`` contract in one place: store every parameter as given.

    Call it as ``store_parameters(self, locals())``, the first statement of an
    estimator's ``__init__`` (``locals()`` then holds exactly its parameters):
    each becomes an attribute holding the argument itself (no check, no copy),
    so ``get_params``, ``set_params`` and ``clone`` work as for any
    scikit-learn estimator.
    """
    for name, value in arguments.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)


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
    """Shared fit/predict input handling; subclasses implement the algorithms.

    The annotations name the parameters every estimator takes (``__init__``
    stores them with :func:`store_parameters`); they create no attribute.
    """

    epsilon: float
    bounds: Any
    domains: Any
    n_cuts: int
    random_state: Any
    accountant: Any

    def _validated_epsilon(self) -> float:
        return check_epsilon(getattr(self, "epsilon", None))

    @property
    def feature_importances_(self) -> NDArray[np.float64]:
        """Importance of each feature, summing to 1 (zeros if nothing splits); post-processing.

        Computed from the released model only (noisy-count-weighted splits for
        trees and forests, the spread of the shape functions for boosted
        models): see ``dpkit.trees.engine._importance``.
        """
        from dpkit.trees.engine._importance import shape_importances, tree_importances

        check_is_fitted(self)
        shapes = getattr(self, "shapes_", None)
        if shapes is not None:
            return shape_importances(shapes)
        trees = getattr(self, "trees_", None)
        if trees is None:
            trees = [getattr(self, "tree_")]  # noqa: B009 (set by fit; mypy does not know it)
        return tree_importances(trees, int(getattr(self, "n_features_in_")))  # noqa: B009

    def _fit_columns(self, X: Any, y: Any) -> tuple[Columns, NDArray[Any]]:
        """Validate X and y's shapes at fit time; sets ``n_features_in_`` / ``feature_names_in_``.

        Only shapes, column names and types are checked here; values are never
        refused (NaN, infinities, text in a numeric column, undeclared labels
        are handled per row by the estimator), so whether ``fit`` fails never
        depends on one row, and no message quotes a value.
        """
        if isinstance(X, pd.DataFrame):
            validate_data(self, X, reset=True, skip_check_array=True)
            columns = split_columns(X, getattr(self, "domains", None))
        else:
            domains = getattr(self, "domains", None)
            if domains:
                raise InvalidParameterError(
                    "domains={column: [...]} needs a pandas DataFrame with column names."
                )
            try:
                X_arr = validate_data(self, X, reset=True, dtype=None, ensure_all_finite=False)
            except (TypeError, ValueError) as err:
                raise DataError(_safe_message(err, "X")) from None
            columns = split_columns(X_arr, None)
        n_rows = len(columns.arrays[0]) if columns.arrays else _n_rows(X)
        if y is None:
            raise DataError(
                f"{type(self).__name__} requires y to be passed, but the target y is None."
            )
        try:
            y_arr = column_or_1d(np.asarray(y, dtype=None), warn=True)
        except (TypeError, ValueError) as err:
            raise DataError(_safe_message(err, "y")) from None
        if y_arr.shape[0] != n_rows:
            raise DataError("X and y must have the same number of rows (one target per row of X).")
        if n_rows == 0:
            raise DataError("X has no rows: a tree needs at least one training row.")
        return columns, y_arr

    def _make_grid(self, columns: Columns) -> FeatureGrid:
        n_cuts = check_n_cuts(getattr(self, "n_cuts", 40))
        return make_grid(columns, getattr(self, "bounds", None), n_cuts)

    def _predict_codes(self, X: Any) -> NDArray[np.int16]:
        """Validate X at predict time and code it on the fitted grid."""
        check_is_fitted(self, "grid_")
        if isinstance(X, pd.DataFrame):
            validate_data(self, X, reset=False, skip_check_array=True)
            columns = split_columns(X, fitted_domains(self))
            grid: FeatureGrid = self.grid_
            if list(columns.categorical) != list(grid.is_categorical):
                raise DataError(
                    "X's column types differ from those seen in fit (numeric vs categorical); "
                    "use the same dtypes and domains."
                )
        else:
            try:
                X_arr = validate_data(self, X, reset=False, dtype=None, ensure_all_finite=False)
            except (TypeError, ValueError) as err:
                raise DataError(_safe_message(err, "X")) from None
            if self.grid_.is_categorical.any():
                raise DataError(
                    "this model was fitted on a DataFrame with categorical columns; predict on one too."
                )
            columns = split_columns(X_arr, None)
        numeric_nan = self.grid_.unusable(columns.arrays) & ~self.grid_.is_categorical
        if numeric_nan.any():
            cols = np.flatnonzero(numeric_nan.any(axis=0))
            which = [self.grid_.feature_name(int(j)) for j in cols]
            raise DataError(
                f"X has missing values (NaN, ±inf, or entries that are not numbers) in column(s) "
                f"{which}; "
                "this model has no branch for them: impute them first."
            )
        return self.grid_.encode(columns.arrays)


def fitted_domains(estimator: Any) -> Any:
    """The categorical domains a fitted model predicts with: its grid's, by column name.

    The same as the ``domains`` parameter for a fit on a DataFrame; for a fit on a
    :class:`dpkit.Session` they come from the schema (the parameter is then None).
    """
    grid = getattr(estimator, "grid_", None)
    if grid is None or grid.names is None:
        return getattr(estimator, "domains", None)
    declared = {n: c for n, c in zip(grid.names, grid.categories) if c is not None}
    return declared or getattr(estimator, "domains", None)


def _n_rows(X: Any) -> int:
    shape = getattr(X, "shape", None)
    return int(shape[0]) if shape else len(X)


def _safe_message(err: Exception, name: str) -> str:
    """What to tell the user for a scikit-learn validation error, never quoting a value.

    Some of scikit-learn's messages print the array; only those that state the
    schema (feature counts, feature names) are passed on as they are.
    """
    text = str(err)
    if any(k in text for k in ("features, but", "feature names", "Sparse data", "0 feature")):
        return text  # the schema or the shape only
    if "Complex data" in text:
        return f"Complex data not supported in {name}: pass real numbers."
    if "2D array" in text:
        return (
            f"{name} must be 2-dimensional (rows x features). Reshape your data with "
            f"{name}.reshape(-1, 1) for a single feature."
        )
    if "1d array" in text or "1D array" in text:
        return f"{name} must be 1-dimensional (one value per row)."
    if "sparse" in text:
        return f"{name} is sparse; pass a dense array or a pandas DataFrame."
    if "0 sample" in text or "0 feature" in text:
        return f"{name} is empty: a tree needs at least one row and one feature."
    return (
        f"{name} could not be read as a table of numbers and categories "
        f"({type(err).__name__}); pass a 2-D array or a pandas DataFrame."
    )
