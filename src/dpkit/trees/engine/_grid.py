"""Public metadata of a tree's inputs: bounds, categorical domains, the candidate grid.

Everything here is computed from *public* parameters (bounds, domains, the
number of candidate cuts), never from the data: the grid of candidate
thresholds is data-independent, so choosing among its points is the only
place the data can influence a split. Errors name columns and parameters,
never values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from dpkit._checks import check_bounds
from dpkit.errors import DataError, InvalidParameterError

BOUNDS_HELP = (
    "Pass bounds=(lo, hi) for all features, bounds=(lows, highs) with one entry per "
    "feature, or bounds={column: (lo, hi)} for a DataFrame. Bounds are public "
    "metadata: take them from a codebook or domain knowledge, never from the data "
    "(bounds computed from the data void the privacy guarantee)."
)


@dataclass(frozen=True)
class FeatureGrid:
    """The data-independent discretisation of every feature.

    A numeric feature j with public bounds (lo_j, hi_j) has ``n_cuts`` candidate
    thresholds ``lo_j + k (hi_j - lo_j) / (n_cuts + 1)``, k = 1..n_cuts (equally
    spaced interior points of its range); its code is the number of thresholds
    strictly below the value, so ``x <= threshold_k`` iff ``code <= k - 1`` and
    values outside the bounds are clipped to the first or last code. A
    categorical feature's code is the index of its value in the public domain.

    Attributes:
        lows, highs: bounds per feature (NaN for categorical features).
        categories: the public domain of each categorical feature, else None.
        n_cuts: candidate thresholds per numeric feature.
        names: column names, or None for unnamed (NumPy) input.
    """

    lows: NDArray[np.float64]
    highs: NDArray[np.float64]
    categories: tuple[tuple[Any, ...] | None, ...]
    n_cuts: int
    names: tuple[str, ...] | None = None

    @property
    def n_features(self) -> int:
        return len(self.categories)

    @property
    def is_categorical(self) -> NDArray[np.bool_]:
        return np.array([c is not None for c in self.categories], dtype=bool)

    @property
    def n_bins(self) -> NDArray[np.int64]:
        """Number of codes per feature (n_cuts + 1 numeric, domain size categorical)."""
        return np.array(
            [self.n_cuts + 1 if c is None else len(c) for c in self.categories], dtype=np.int64
        )

    def thresholds(self, feature: int) -> NDArray[np.float64]:
        """The candidate thresholds of a numeric feature, in the feature's own units."""
        lo, hi = self.lows[feature], self.highs[feature]
        k = np.arange(1, self.n_cuts + 1, dtype=np.float64)
        return lo + k * ((hi - lo) / (self.n_cuts + 1))

    def feature_name(self, feature: int) -> str:
        return self.names[feature] if self.names is not None else f"x[{feature}]"

    def encode(self, columns: Sequence[NDArray[Any]]) -> NDArray[np.int16]:
        """Codes (n, d) of the columns; see the class docstring.

        Unknown categories (possible at predict time only, since fit checks the
        domain) get the code ``len(domain)``, which no split tests for equality,
        so they follow the "not equal" branch.
        """
        n = len(columns[0]) if columns else 0
        codes = np.empty((n, self.n_features), dtype=np.int16)
        for j, col in enumerate(columns):  # a loop over features, not rows
            domain = self.categories[j]
            if domain is None:
                codes[:, j] = self._numeric_codes(j, np.asarray(col, dtype=np.float64))
            else:
                index = pd.Index(domain)
                codes[:, j] = np.where((pos := index.get_indexer(col)) < 0, len(domain), pos)
        return codes

    def _numeric_codes(self, feature: int, x: NDArray[np.float64]) -> NDArray[np.int64]:
        """Number of thresholds strictly below x: arithmetic guess, then an exact fix-up.

        The guess from (x - lo) / step can be off by one where x sits on a
        threshold (rounding); comparing with the stored thresholds themselves
        makes the result identical to ``searchsorted(thresholds, x, "left")``.
        """
        thr = self.thresholds(feature)
        lo, hi = self.lows[feature], self.highs[feature]
        # Missing (NaN, ±inf): a placeholder; the caller overwrites these codes (unusable).
        x = np.where(np.isfinite(x), x, lo)
        step = (hi - lo) / (self.n_cuts + 1)
        with np.errstate(invalid="ignore", over="ignore"):
            guess = np.ceil((np.clip(x, lo, hi) - lo) / step) - 1
        code = np.clip(guess, 0, self.n_cuts).astype(np.int64)
        up = (code < self.n_cuts) & (x > thr[np.minimum(code, self.n_cuts - 1)])
        code = code + up
        down = (code > 0) & (x <= thr[np.maximum(code - 1, 0)])
        return code - down

    def unusable(self, columns: Sequence[NDArray[Any]]) -> NDArray[np.bool_]:
        """(n, d): entries the grid cannot place: a missing number (NaN, None, ±inf: the
        package's one rule, ``docs/queries.md``, "Missing and non-finite values") in a
        numeric column, a value outside a categorical column's declared domain.

        ``fit`` never raises on these (whether it fails must not depend on one row):
        classifiers give them the missing code, regressors leave their rows out.
        """
        n = len(columns[0]) if columns else 0
        out = np.zeros((n, self.n_features), dtype=bool)
        for j, col in enumerate(columns):  # a loop over features, not rows
            domain = self.categories[j]
            if domain is None:
                out[:, j] = ~np.isfinite(np.asarray(col, dtype=np.float64))
            else:
                out[:, j] = pd.Index(domain).get_indexer(col) < 0
        return out

    def encode_training(self, columns: Sequence[NDArray[Any]]) -> NDArray[np.int16]:
        """:meth:`encode` for fit: the caller handles :meth:`unusable` entries itself."""
        with np.errstate(invalid="ignore"):
            return self.encode(columns)


def check_n_cuts(n_cuts: object) -> int:
    if (
        not isinstance(n_cuts, int | np.integer)
        or isinstance(n_cuts, bool)
        or not 1 <= n_cuts <= 1000
    ):
        raise InvalidParameterError(
            "n_cuts (the number of equally spaced candidate thresholds per feature, N_range in "
            "the paper) must be an integer between 1 and 1000, e.g. 40."
        )
    return int(n_cuts)


def _is_pair_of_scalars(bounds: object) -> bool:
    if isinstance(bounds, str | bytes | Mapping) or not isinstance(bounds, Sequence | np.ndarray):
        return False
    return len(bounds) == 2 and all(np.ndim(b) == 0 for b in bounds)


def resolve_bounds(
    bounds: object,
    n_features: int,
    names: Sequence[str] | None,
    categorical: Sequence[bool],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(lows, highs) per feature from the ``bounds`` parameter; NaN for categorical features.

    Raises InvalidParameterError (never a data value in it) when bounds are
    missing, malformed, or do not cover every numeric feature.
    """
    numeric = [j for j in range(n_features) if not categorical[j]]
    lows = np.full(n_features, np.nan)
    highs = np.full(n_features, np.nan)
    if not numeric:
        return lows, highs
    if bounds is None:
        raise InvalidParameterError("bounds is required for numeric features. " + BOUNDS_HELP)
    if isinstance(bounds, Mapping):
        if names is None:
            raise InvalidParameterError(
                "bounds given as a dict need a pandas DataFrame with column names; for "
                "NumPy input pass bounds=(lo, hi) or bounds=(lows, highs)."
            )
        unknown = [str(k) for k in bounds if k not in set(names)]
        if unknown:
            raise InvalidParameterError(
                f"bounds names columns that are not in X: {unknown}. Check the spelling."
            )
        missing = [names[j] for j in numeric if names[j] not in bounds]
        if missing:
            raise InvalidParameterError(
                f"bounds has no entry for numeric column(s) {missing}. " + BOUNDS_HELP
            )
        for j in numeric:
            lows[j], highs[j] = check_bounds(bounds[names[j]], f"bounds[{names[j]!r}]")
        return lows, highs
    if _is_pair_of_scalars(bounds):
        lo, hi = check_bounds(bounds)
        lows[numeric], highs[numeric] = lo, hi
        return lows, highs
    try:
        lo_raw, hi_raw = cast(tuple[Any, Any], bounds)
        lo_arr = np.asarray(lo_raw, dtype=np.float64)
        hi_arr = np.asarray(hi_raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError("bounds is malformed. " + BOUNDS_HELP) from None
    if lo_arr.shape != (n_features,) or hi_arr.shape != (n_features,):
        raise InvalidParameterError(
            f"bounds=(lows, highs) needs one low and one high per feature ({n_features} features). "
            + BOUNDS_HELP
        )
    for j in numeric:
        name = names[j] if names is not None else str(j)
        lows[j], highs[j] = check_bounds((lo_arr[j], hi_arr[j]), f"bounds for feature {name}")
    return lows, highs


def check_target_bounds(target_bounds: object) -> tuple[float, float]:
    if target_bounds is None:
        raise InvalidParameterError(
            "target_bounds=(lo, hi) is required: the public range of the target. Targets are "
            "clipped to it, and it sets the sensitivity of every sum and split score. Take it "
            "from domain knowledge, never from the data."
        )
    return check_bounds(target_bounds, "target_bounds")


def _column_kind(series: pd.Series, name: str, domains: Mapping[str, Sequence[Any]]) -> str:
    """Categorical when declared (``domains``); numeric otherwise.

    A column of another dtype (text, mixed) is read as numeric: values that are
    not numbers become missing, so one odd row never decides an error. (An
    undeclared ``category`` column is refused before this.)
    """
    if name in domains:
        return "categorical"
    return "numeric"


CATEGORY_DTYPE_REFUSAL = (
    "column(s) {names} have the pandas 'category' dtype but no declared domain. A dtype's "
    "categories are usually built from the data (one person's rare value adds a category "
    "that the fitted model then shows), so they are not a declaration: pass "
    "domains={{column: [...]}} with the public list of values. If the dtype's categories "
    "are public, declaring them is the explicit opt-in: "
    "domains={{column: list(X[column].cat.categories)}}."
)


def _as_numbers(series: pd.Series) -> NDArray[np.float64]:
    """A column as floats; entries that are not numbers become NaN (missing)."""
    if pd.api.types.is_bool_dtype(series.dtype) or pd.api.types.is_numeric_dtype(series.dtype):
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    return pd.to_numeric(series.astype(object), errors="coerce").to_numpy(
        dtype=np.float64, na_value=np.nan
    )


@dataclass(frozen=True)
class Columns:
    """Validated input columns: one array per feature, plus names/categorical flags."""

    arrays: list[NDArray[Any]]
    names: tuple[str, ...] | None
    categorical: list[bool]
    domains: list[tuple[Any, ...] | None]


def split_columns(X: Any, domains: Mapping[str, Sequence[Any]] | None) -> Columns:
    """Split X into per-feature arrays: floats for numeric columns, objects for categorical.

    Categorical columns are the columns named in ``domains`` (their declared
    values are the public domain). A pandas ``category`` column without a
    declared domain is refused (its categories are a function of the data
    unless declared; the message says how to declare them), whatever its
    values: the refusal depends on the frame's dtypes and the parameters only.
    Nothing here refuses a value: NaN, infinities and entries that are not
    numbers stay in the arrays (as NaN where not numbers) for the estimator's
    per-row rule (``FeatureGrid.unusable``: all of them are missing).
    """
    domains = dict(domains or {})
    if isinstance(X, pd.DataFrame):
        names = tuple(str(c) for c in X.columns)
        unknown = [k for k in domains if k not in set(names)]
        if unknown:
            raise InvalidParameterError(f"domains names columns that are not in X: {unknown}.")
        arrays: list[NDArray[Any]] = []
        categorical: list[bool] = []
        doms: list[tuple[Any, ...] | None] = []
        undeclared = [
            name
            for name, col in zip(names, X.columns)
            if isinstance(X[col].dtype, pd.CategoricalDtype) and name not in domains
        ]
        if undeclared:
            raise InvalidParameterError(CATEGORY_DTYPE_REFUSAL.format(names=undeclared))
        for name, col in zip(names, X.columns):
            series = X[col]
            kind = _column_kind(series, name, domains)
            if kind == "categorical":
                domain = tuple(domains[name])
                if len(domain) < 1:
                    raise InvalidParameterError(f"the domain of column {name!r} is empty.")
                arrays.append(series.astype(object).to_numpy())
                categorical.append(True)
                doms.append(domain)
            else:
                arrays.append(_as_numbers(series))
                categorical.append(False)
                doms.append(None)
        return Columns(arrays, names, categorical, doms)
    if domains:
        raise InvalidParameterError(
            "domains={column: [...]} needs a pandas DataFrame with column names."
        )
    arr = _as_2d_float(X)
    return Columns(
        [arr[:, j] for j in range(arr.shape[1])],
        None,
        [False] * arr.shape[1],
        [None] * arr.shape[1],
    )


def _as_2d_float(X: ArrayLike) -> NDArray[np.float64]:
    """X as a 2-D float array; entries that are not numbers become NaN (missing)."""
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):
        frame = pd.DataFrame(np.asarray(X, dtype=object))
        if frame.ndim != 2:
            raise DataError(
                "X must be 2-dimensional (rows x features); reshape a single feature with "
                "X.reshape(-1, 1)."
            ) from None
        arr = np.column_stack([_as_numbers(frame[c]) for c in frame.columns])
    if arr.ndim != 2:
        raise DataError(
            "X must be 2-dimensional (rows x features); reshape a single feature with X.reshape(-1, 1)."
        )
    return arr


def make_grid(columns: Columns, bounds: object, n_cuts: int) -> FeatureGrid:
    """The public grid for these columns (checks bounds; reads no data values)."""
    d = len(columns.arrays)
    lows, highs = resolve_bounds(bounds, d, columns.names, columns.categorical)
    return FeatureGrid(lows, highs, tuple(columns.domains), n_cuts, columns.names)


def scale_target(y: NDArray[np.float64], lo: float, hi: float) -> NDArray[np.float64]:
    """Clip y to the public [lo, hi] and map it to [0, 1] (NaN stays NaN)."""
    return (np.clip(y, lo, hi) - lo) / (hi - lo)


def as_targets(y: Any) -> NDArray[np.float64]:
    """y as a float vector; entries that are not numbers become NaN (their rows are left out)."""
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr.ravel()
    if arr.ndim != 1:
        raise DataError("y must be 1-dimensional (one target per row).")
    return _as_numbers(pd.Series(arr))


def regression_rows(
    grid: FeatureGrid, columns: Columns, y: Any, lo: float, hi: float
) -> tuple[NDArray[np.int16], NDArray[np.float64]]:
    """(codes, target scaled to [0, 1]) of the rows a regression tree can use.

    A row is left out when a numeric feature is missing (NaN, None, ±inf, or
    not a number: ``docs/queries.md``, "Missing and non-finite values"), a
    categorical value lies outside its declared domain, or the target is
    missing; finite values are clipped to the bounds. The rule looks
    at each row alone, so neighbouring datasets stay neighbouring (or become
    equal) and the guarantee is unchanged; whether ``fit`` fails never
    depends on one row.
    """
    target = as_targets(y)
    keep = ~grid.unusable(columns.arrays).any(axis=1) & np.isfinite(target)
    codes = grid.encode_training(columns.arrays)[keep]
    return codes, scale_target(target[keep], lo, hi)
