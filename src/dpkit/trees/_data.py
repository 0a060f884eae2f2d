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
        step = (hi - lo) / (self.n_cuts + 1)
        with np.errstate(invalid="ignore", over="ignore"):
            guess = np.ceil((np.clip(x, lo, hi) - lo) / step) - 1
        code = np.clip(guess, 0, self.n_cuts).astype(np.int64)
        up = (code < self.n_cuts) & (x > thr[np.minimum(code, self.n_cuts - 1)])
        code = code + up
        down = (code > 0) & (x <= thr[np.maximum(code - 1, 0)])
        return code - down

    def unknown_categories(self, columns: Sequence[NDArray[Any]]) -> list[str]:
        """Names of categorical columns holding values outside their public domain."""
        bad = []
        for j, col in enumerate(columns):
            domain = self.categories[j]
            if domain is not None and np.any(pd.Index(domain).get_indexer(col) < 0):
                bad.append(self.feature_name(j))
        return bad

    def encode_training(self, columns: Sequence[NDArray[Any]]) -> NDArray[np.int16]:
        """:meth:`encode` for fit: values outside a declared domain are refused.

        The message names the columns (public schema), never the values.
        """
        unknown = self.unknown_categories(columns)
        if unknown:
            raise DataError(
                f"column(s) {unknown} hold values outside their declared domain; add them to "
                "domains=... (or the 'category' dtype's categories) or map them to an existing value."
            )
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
    if name in domains or isinstance(series.dtype, pd.CategoricalDtype):
        return "categorical"
    if pd.api.types.is_bool_dtype(series.dtype) or pd.api.types.is_numeric_dtype(series.dtype):
        return "numeric"
    raise DataError(
        f"column {name!r} is neither numeric nor categorical; give it a pandas 'category' "
        "dtype or declare its values with domains={column: [...]}."
    )


@dataclass(frozen=True)
class Columns:
    """Validated input columns: one array per feature, plus names/categorical flags."""

    arrays: list[NDArray[Any]]
    names: tuple[str, ...] | None
    categorical: list[bool]
    domains: list[tuple[Any, ...] | None]


def split_columns(X: Any, domains: Mapping[str, Sequence[Any]] | None) -> Columns:
    """Split X into per-feature arrays; numeric ones must be finite floats.

    Categorical columns: a pandas ``category`` dtype (its categories are the
    public domain) or a column named in ``domains``. NaN in a numeric column is
    refused (DataError) without saying where: impute it first.
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
        for name, col in zip(names, X.columns):
            series = X[col]
            kind = _column_kind(series, name, domains)
            if kind == "categorical":
                if name in domains:
                    domain = tuple(domains[name])
                else:
                    domain = tuple(series.dtype.categories)  # type: ignore[union-attr]
                if len(domain) < 1:
                    raise InvalidParameterError(f"the domain of column {name!r} is empty.")
                values = series.astype(object).to_numpy()
                if pd.isna(values).any():
                    raise DataError(
                        f"column {name!r} has missing values; add an explicit category for them "
                        "(e.g. 'missing') to its domain and fill them."
                    )
                arrays.append(values)
                categorical.append(True)
                doms.append(domain)
            else:
                arrays.append(_finite(series.to_numpy(dtype=np.float64, na_value=np.nan), name))
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


def _finite(values: NDArray[np.float64], name: str) -> NDArray[np.float64]:
    if not np.all(np.isfinite(values)):
        raise DataError(
            f"column {name!r} contains NaN or infinite values; impute or drop them first "
            "(the tree clips finite values to the public bounds, it cannot place NaN)."
        )
    return values


def _as_2d_float(X: ArrayLike) -> NDArray[np.float64]:
    try:
        arr = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(
            "X must be numeric (or a DataFrame whose text columns have a 'category' dtype "
            "or a declared domain)."
        ) from None
    if arr.ndim != 2:
        raise DataError(
            "X must be 2-dimensional (rows x features); reshape a single feature with X.reshape(-1, 1)."
        )
    if not np.all(np.isfinite(arr)):
        raise DataError(
            "X contains NaN or infinite values; impute or drop them first "
            "(the tree clips finite values to the public bounds, it cannot place NaN)."
        )
    return arr


def make_grid(columns: Columns, bounds: object, n_cuts: int) -> FeatureGrid:
    """The public grid for these columns (checks bounds; reads no data values)."""
    d = len(columns.arrays)
    lows, highs = resolve_bounds(bounds, d, columns.names, columns.categorical)
    return FeatureGrid(lows, highs, tuple(columns.domains), n_cuts, columns.names)


def scale_target(y: NDArray[np.float64], lo: float, hi: float) -> NDArray[np.float64]:
    """Clip y to the public [lo, hi] and map it to [0, 1]."""
    return (np.clip(y, lo, hi) - lo) / (hi - lo)
