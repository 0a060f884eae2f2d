"""Input handling shared by the DP tree classifiers: classes, missing values, codes.

Public metadata only: the classes, the bounds, the categorical domains and the
missing-value policy are parameters; nothing here derives them from the data.
Messages name columns and parameters, never values.

Missing values (``missing=``):

* ``"separate"`` (default): every feature gets one extra code for "missing"
  (for every feature, whether or not it has missing values, so the layout
  stays data-independent). Numeric: the code after the largest value, so a
  threshold test "x <= t" sends missing values right and "x is not missing"
  is one more candidate split; categorical: one more category. Entries that
  cannot be placed (text in a numeric column, a value outside a declared
  domain) count as missing, at fit and at predict time.
* ``"error"``: such entries are refused with a DataError that names the
  column. Whether fit fails then depends on single rows, so choosing it
  raises a :class:`~dpkit.errors.PrivacyWarning`.

Rows whose label is not among the declared ``classes`` are left out of the
fit (a rule applied to each row alone: the guarantee is unchanged). How many
were left out is released as a noisy count (``n_left_out_``) at no extra cost:
it is one more cell of the leaves' noisy count table (see :func:`noisy_left_out`),
and a fit warns when that noisy count says many rows were left out.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from sklearn.base import ClassifierMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from dpkit.errors import DataError, InvalidParameterError, PrivacyWarning
from dpkit.trees.classification._criteria import ALGORITHMS, CRITERIA
from dpkit.trees.engine._budget import as_float_at_most
from dpkit.trees.engine._choices import Choices
from dpkit.trees.engine._grid import Columns, FeatureGrid, check_n_cuts, make_grid
from dpkit.trees.engine._rules import noisy_row_count
from dpkit.trees.engine._sklearn import (
    DPTreeEstimatorBase,
    check_fraction,
    check_positive_int,
    fitted_domains,
)

#: ``missing=``: name -> the extra codes per feature for missing values.
MISSING_POLICIES: Choices[int] = Choices(
    "missing",
    {"separate": 1, "error": 0},
    why="'error' refuses missing values, 'separate' gives them a code of their own in every "
    "feature",
)

CLASSES_HELP = (
    "Pass classes=[...] with every label y can take (public metadata, e.g. [0, 1] or "
    "['died', 'survived']): the set of labels present in private data is itself private."
)


def check_classes(classes: object) -> NDArray[Any]:
    """The declared classes as a sorted array (InvalidParameterError if missing/malformed)."""
    if classes is None:
        raise InvalidParameterError("classes is required. " + CLASSES_HELP)
    if isinstance(classes, str | bytes) or not isinstance(
        classes, Sequence | np.ndarray | pd.Index
    ):
        raise InvalidParameterError("classes must be a list of labels. " + CLASSES_HELP)
    values = list(classes)
    if len(values) < 1:
        raise InvalidParameterError("classes must list at least one label. " + CLASSES_HELP)
    if len(set(values)) != len(values):
        raise InvalidParameterError("classes lists a label twice; labels must be distinct.")
    try:
        return np.asarray(sorted(values))
    except TypeError:
        return np.asarray(values, dtype=object)


def label_positions(y: NDArray[Any], classes: NDArray[Any]) -> NDArray[np.int64]:
    """Index of every label in ``classes``, -1 for labels that are not declared (or missing)."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise DataError("y must be 1-dimensional (one label per row).")
    index = pd.Index(classes)
    try:
        pos = index.get_indexer(pd.Index(y))
    except (TypeError, ValueError):
        pos = np.full(y.size, -1)
    return np.asarray(pos, dtype=np.int64)


MISSING_ERROR_WARNING = (
    "missing='error' makes fit fail when any row has a missing or undeclared value, and that "
    "failure tells whoever sees it that such a row exists (one row decides it). "
    "missing='separate' (the default) gives those values a branch of their own instead."
)


def check_missing(missing: object) -> str:
    return MISSING_POLICIES.check(missing)


def _infinite(X: pd.DataFrame) -> NDArray[np.bool_]:
    """(n, d): ±inf in float columns (missing, like NaN)."""
    out = np.zeros(X.shape, dtype=bool)
    for j in range(X.shape[1]):  # a loop over features, not rows
        series = X.iloc[:, j]
        if pd.api.types.is_float_dtype(series.dtype):
            out[:, j] = np.isinf(series.to_numpy(dtype=np.float64, na_value=np.nan))
    return out


def _missing_masks(X: Any, domains: Any = None) -> tuple[Any, NDArray[np.bool_], list[str] | None]:
    """(X with missing entries filled by a placeholder, mask (n, d), column names).

    Placeholders are public (0.0, or the first value of the public domain);
    the caller overwrites their codes with the missing code.
    """
    domains = dict(domains or {})
    if isinstance(X, pd.DataFrame):
        # Missing: NaN/None, and ±inf in a numeric column (docs/queries.md,
        # "Missing and non-finite values"); an infinite placeholder needs no fill.
        mask = X.isna().to_numpy() | _infinite(X)
        if not mask.any():
            return X, mask, [str(c) for c in X.columns]
        filled = X.copy()
        for j, col in enumerate(X.columns):
            if not mask[:, j].any():
                continue
            series = X[col]
            if str(col) in domains and len(domains[str(col)]) > 0:
                first = next(iter(domains[str(col)]))
                filled[col] = series.astype(object).where(~series.isna(), other=first)
            elif pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(
                series.dtype
            ):
                # NaN and ±inf alike (fillna would leave ±inf, and predict refuse it)
                filled[col] = series.astype(np.float64).where(~mask[:, j], 0.0)
        return filled, mask, [str(c) for c in X.columns]
    try:
        arr = np.asarray(X)
    except (TypeError, ValueError):
        return X, np.zeros((0, 0), dtype=bool), None
    # Only float arrays hold NaN; validation refuses the rest with its own message.
    if arr.ndim != 2 or arr.dtype.kind != "f":
        return X, np.zeros((0, 0), dtype=bool), None
    mask = ~np.isfinite(arr)  # NaN and ±inf are missing
    if mask.any():
        arr = np.where(mask, 0.0, arr)
        return arr, mask, None
    return X, mask, None


def encode_frame(
    X: pd.DataFrame, grid: FeatureGrid
) -> tuple[NDArray[np.int16], NDArray[np.bool_]] | None:
    """Fast codes of a DataFrame whose categorical columns have a pandas ``category`` dtype.

    The same codes as ``FeatureGrid.encode`` (numeric: number of public
    thresholds strictly below the value; categorical: position in the public
    domain, ``len(domain)`` for values outside it), computed from the
    category codes through a table of at most ``len(categories)`` entries
    instead of a per-row lookup. Returns (codes, missing mask), or None when a
    categorical column has another dtype (the caller then uses the general path).
    """
    n, d = X.shape
    codes = np.empty((n, d), dtype=np.int16)
    missing = np.zeros((n, d), dtype=bool)
    for j, col in enumerate(X.columns):  # a loop over features, not rows
        series = X[col]
        domain = grid.categories[j]
        if domain is None:
            if not (
                pd.api.types.is_numeric_dtype(series.dtype)
                or pd.api.types.is_bool_dtype(series.dtype)
            ):
                return None
            values = series.to_numpy(dtype=np.float64, na_value=np.nan)
            missing[:, j] = ~np.isfinite(values)  # NaN and ±inf are missing
            codes[:, j] = np.searchsorted(grid.thresholds(j), values, side="left")
        else:
            if not isinstance(series.dtype, pd.CategoricalDtype):
                return None
            table = pd.Index(domain).get_indexer(series.cat.categories)
            table = np.where(table < 0, len(domain), table)
            cat = series.cat.codes.to_numpy()
            missing[:, j] = cat < 0
            codes[:, j] = np.where(
                cat < 0, len(domain), table[np.maximum(cat, 0)] if table.size else len(domain)
            )
    return codes, missing


class DPClassifierBase(ClassifierMixin, DPTreeEstimatorBase):
    """Shared fit/predict plumbing of the DP tree classifiers (not public)."""

    classes: Any
    missing: str
    max_categories: int

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = getattr(self, "missing", "separate") == "separate"
        tags.non_deterministic = getattr(self, "random_state", None) is None
        return tags

    # ----- public metadata (a test harness may override this hook) -----
    def _public_metadata(self, columns: Columns, y: NDArray[Any]) -> tuple[object, NDArray[Any]]:
        """(bounds, classes) from the parameters: never from the data."""
        return getattr(self, "bounds", None), check_classes(getattr(self, "classes", None))

    def _check_common_params(self) -> None:
        ALGORITHMS.check(self.algorithm)
        CRITERIA.check(self.criterion)
        check_missing(getattr(self, "missing", "separate"))
        check_n_cuts(getattr(self, "n_cuts", 32))
        check_positive_int(getattr(self, "max_categories", 1024), "max_categories", minimum=2)
        if self.leaf_share is not None:
            check_fraction(self.leaf_share, "leaf_share")

    def _prepare_fit(
        self, X: Any, y: Any
    ) -> tuple[NDArray[np.int16], NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_]]:
        codes, labels, n_bins, categorical, _ = self._prepare_fit_counting(X, y)
        return codes, labels, n_bins, categorical

    def _prepare_fit_counting(
        self, X: Any, y: Any
    ) -> tuple[NDArray[np.int16], NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_], int]:
        """Validate inputs; set classes_, grid_, n_features_in_ ...; return (codes, labels, n_bins, categorical, left out).

        Public things (parameters, declared classes, bounds and domains, shapes)
        are checked; values are not refused. Per row, data-independently: a
        missing or unplaceable entry (NaN, text in a numeric column, a value
        outside a declared domain) gets the feature's missing code
        (``missing="separate"``); a row whose label is not a declared class is
        left out. Leaving rows out by a rule that looks at each row alone keeps
        neighbouring datasets neighbours, so the guarantee is unchanged.
        ``missing="error"`` refuses such entries instead, which tells whoever
        sees the error that some row has one: it warns so. The last value, the
        exact number of rows left out, is private: it may only reach the model
        through :func:`noisy_left_out`.
        """
        self._validated_epsilon()
        self._check_common_params()
        missing = check_missing(getattr(self, "missing", "separate"))
        if missing == "error":
            warnings.warn(MISSING_ERROR_WARNING, PrivacyWarning, stacklevel=3)
        columns, y_arr = self._fit_columns(X, y)
        bounds, classes = self._public_metadata(columns, y_arr)
        max_categories = int(getattr(self, "max_categories", 1024))
        for j, dom in enumerate(columns.domains):
            if dom is not None and len(dom) > max_categories:
                name = columns.names[j] if columns.names is not None else str(j)
                raise InvalidParameterError(
                    f"categorical column {name!r} has {len(dom)} categories in its domain, more "
                    f"than max_categories={max_categories}; group rare categories into 'other' "
                    "or raise max_categories."
                )
        grid = make_grid(columns, bounds, check_n_cuts(getattr(self, "n_cuts", 32)))
        mask = grid.unusable(columns.arrays)
        if mask.any() and missing == "error":
            cols = np.flatnonzero(mask.any(axis=0))
            which = [grid.feature_name(int(j)) for j in cols]
            raise DataError(
                f"X has missing values (NaN, ±inf, or values outside the declared domain) in column(s) "
                f"{which}. Impute them, or pass missing='separate' to give them a branch of their own."
            )
        codes = grid.encode_training(columns.arrays)
        extra = MISSING_POLICIES.lookup(missing)
        n_bins = grid.n_bins + extra
        if mask.any():
            rows, cols = np.nonzero(mask)
            codes[rows, cols] = grid.n_bins[cols]
        labels = label_positions(y_arr, classes)
        keep = labels >= 0  # rows with an undeclared label are left out (per-row rule)
        self.grid_: FeatureGrid = grid
        self.classes_ = classes
        self.n_classes_ = int(classes.size)
        self.missing_code_: NDArray[np.int64] | None = grid.n_bins.copy() if extra else None
        left_out = int(keep.size - np.count_nonzero(keep))
        return codes[keep], labels[keep], n_bins, grid.is_categorical, left_out

    def _release_left_out(
        self, n_left_out: int, leaf_epsilon: Fraction, rng: np.random.Generator | None
    ) -> None:
        """Set ``n_left_out_`` and ``n_left_out_ci_`` (see :func:`noisy_left_out`)."""
        noisy, half = noisy_left_out(n_left_out, leaf_epsilon, rng)
        self.n_left_out_ = float(max(noisy, 0.0))
        self.n_left_out_ci_ = (max(noisy - half, 0.0), max(noisy + half, 0.0))

    def _warn_left_out(self, noisy_kept: float) -> None:
        """Warn when the released noisy count says many rows were left out (post-processing)."""
        message = left_out_warning(
            self.n_left_out_, self.n_left_out_ci_, noisy_kept, self.classes_.tolist()
        )
        if message is not None:
            warnings.warn(message, UserWarning, stacklevel=3)

    def _prepare_predict(self, X: Any) -> NDArray[np.int16]:
        check_is_fitted(self, "grid_")
        if isinstance(X, pd.DataFrame) and not fitted_domains(self):
            validate_data(self, X, reset=False, skip_check_array=True)
            fast = encode_frame(X, self.grid_)
            if fast is not None:
                codes, mask = fast  # ±inf is missing, like NaN (docs/queries.md)
                return self._apply_missing(codes, mask, [str(c) for c in X.columns])
        X_filled, mask, names = _missing_masks(X, fitted_domains(self))
        if mask.any() and self.missing_code_ is None:
            cols = np.flatnonzero(mask.any(axis=0))
            which = [names[j] for j in cols] if names is not None else [int(j) for j in cols]
            raise DataError(
                f"X has missing values (NaN, ±inf) in column(s) {which}, but the model was fitted with "
                "missing='error'; impute them or refit with missing='separate'."
            )
        codes = self._predict_codes(X_filled)
        return self._apply_missing(codes, mask, names)

    def _apply_missing(
        self, codes: NDArray[np.int16], mask: NDArray[np.bool_], names: list[str] | None
    ) -> NDArray[np.int16]:
        """Give missing entries the missing code, or refuse them (missing='error')."""
        if not mask.any():
            return codes
        if self.missing_code_ is None:
            cols = np.flatnonzero(mask.any(axis=0))
            which = [names[j] for j in cols] if names is not None else [int(j) for j in cols]
            raise DataError(
                f"X has missing values (NaN, ±inf) in column(s) {which}, but the model was fitted with "
                "missing='error'; impute them or refit with missing='separate'."
            )
        rows, cols = np.nonzero(mask)
        codes[rows, cols] = self.missing_code_[cols]
        return codes

    def _noisy_rows(
        self, n_rows: int, epsilon: Fraction, rng: np.random.Generator | None
    ) -> tuple[float, Fraction]:
        """A noisy count of the training rows, (n_hat >= 1, epsilon spent).

        Costs AUTO_COUNT_SHARE of epsilon; the count has sensitivity 1 and
        geometric noise makes it eps_count-DP. Settings chosen from it by public
        rules (``auto_depth_rule``, ``auto_criterion``) are post-processing.
        """
        spent = epsilon * AUTO_COUNT_SHARE
        return noisy_row_count(n_rows, spent, rng), spent


#: warn when the noisy count of left-out rows is at least this share of all (noisy) rows ...
LEFT_OUT_WARN_SHARE = 0.01
#: ... and its interval at this level lies above zero.
LEFT_OUT_LEVEL = 0.95


def noisy_left_out(
    n_left_out: int, leaf_epsilon: Fraction, rng: np.random.Generator | None
) -> tuple[float, float]:
    """(noisy number of rows whose label is not in ``classes``, 95% half-width).

    Privacy, at no cost beyond the leaves': the leaves' class counts are one
    table in which every kept row is in exactly one (leaf, class) cell; the
    left-out rows are one more cell of that table. Adding or removing a row
    still changes the whole table by 1 in l1, so two-sided geometric noise of
    scale 1/eps_leaf on every cell, this one included, is eps_leaf-DP for the
    table (parallel composition over disjoint cells). Call it after the
    leaves' own draws, so their noise stays what it was for a given seed.
    """
    from dpkit.mechanisms import Geometric

    mechanism = Geometric(epsilon=as_float_at_most(leaf_epsilon), sensitivity=1)
    noisy = float(mechanism.randomise(int(n_left_out), rng))
    return noisy, mechanism.half_width(LEFT_OUT_LEVEL)


def left_out_warning(
    noisy: float, ci: tuple[float, float], noisy_kept: float, classes: list[Any]
) -> str | None:
    """The warning for many left-out rows, or None: a function of released values only.

    It looks at the noisy counts, never at the exact one, so whether it is shown
    is post-processing of the release (it tells nothing the release does not).
    """
    total = noisy + max(noisy_kept, 0.0)
    if ci[0] <= 0 or total <= 0 or noisy < LEFT_OUT_WARN_SHARE * total:
        return None
    return (
        f"about {noisy:,.0f} training rows (95% interval {ci[0]:,.0f} to {ci[1]:,.0f}; a noisy "
        f"count) have a label that is not in classes={classes!r} and were left out of the "
        "fit. Check the spelling, case and type of classes (upper vs lower case, 1 vs '1'); "
        "the noisy count is in n_left_out_."
    )


AUTO_COUNT_SHARE = Fraction(1, 20)
# n_hat * epsilon below this: the max operator (see auto_criterion)
AUTO_MAX_OPERATOR_BELOW = 1000.0
AUTO_LEAF_ROWS = 24.0  # target signal-to-noise of a leaf's noisy counts (see docs)
MAX_AUTO_DEPTH = 10


def auto_depth_rule(n_rows: float, epsilon: float, n_classes: int, n_features: int) -> int:
    """A public rule: the deepest tree whose average leaf still holds about
    ``AUTO_LEAF_ROWS / epsilon`` rows per class.

    With 2^D leaves of n / 2^D rows and leaf noise of scale ~1/(epsilon/2),
    the leaves' majority votes stay meaningful while n / 2^D >= K * c / epsilon.
    Chosen by experiment (docs/trees-classification.md).
    """
    target = AUTO_LEAF_ROWS * n_classes / max(epsilon, 1e-9)
    depth = math.floor(math.log2(max(n_rows / target, 1.0)))
    return max(1, min(MAX_AUTO_DEPTH, depth))


def auto_criterion(n_rows: float, epsilon: float) -> str:
    """A public rule: the max operator when n * epsilon < 1000, else Gini.

    The max operator's utility has sensitivity 1 (Gini's: 2), which wins when
    data are scarce and the best splits change the children's majority
    classes; Gini finds better trees when there is budget to see past the
    majority. The threshold comes from the experiment in
    docs/trees-classification.md.
    """
    return "max" if n_rows * epsilon < AUTO_MAX_OPERATOR_BELOW else "gini"
