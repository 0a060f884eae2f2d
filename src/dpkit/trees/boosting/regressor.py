"""``DPGradientBoostingRegressor``: differentially private boosting of an additive regression model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import RegressorMixin
from sklearn.utils.validation import check_is_fitted

from dpkit.errors import InvalidParameterError
from dpkit.trees.boosting._cyclic import ArraySource, SquaredLoss, decision_scores, to_units
from dpkit.trees.boosting._engine_fit import (
    EngineSource,
    declared_bounds,
    is_session,
    refuse_array_filter,
    session_table,
)
from dpkit.trees.boosting._estimator import BoostingMixin, placed_codes
from dpkit.trees.engine._choices import Choices
from dpkit.trees.engine._grid import check_target_bounds, regression_rows
from dpkit.trees.engine._sklearn import DPTreeEstimatorBase, store_parameters

#: ``loss=``: name -> the loss whose clipped gradients the visits release.
LOSSES: Choices[SquaredLoss] = Choices(
    "loss",
    {"absolute_error": SquaredLoss(absolute=True), "squared_error": SquaredLoss(absolute=False)},
    why="'absolute_error' moves towards the residuals' median (robust; the default), "
    "'squared_error' towards their mean",
)


class DPGradientBoostingRegressor(BoostingMixin, RegressorMixin, DPTreeEstimatorBase):
    """Gradient-boosted additive regressor with a differential privacy guarantee.

    Guarantee: ``fit`` is (``epsilon``, ``delta``)-DP with respect to adding
    or removing one training row (features and target together): rho-zCDP
    with rho the largest value fitting within (epsilon, delta) when
    ``delta > 0`` (default 1e-6), pure epsilon-DP when ``delta=0``. ``predict``
    only post-processes the fitted model, as do ``predict_sql`` and
    ``decision_sql`` (the same predictions inside DuckDB or Spark SQL).

    The target is clipped to the public ``target_bounds`` and scaled to [0, 1];
    the model F(x) = b + sum_j f_j(x_j) starts at 0.5 (the middle of the
    bounds) and is fitted by the same boosting (``update``) as
    :class:`DPGradientBoostingClassifier`. ``loss="absolute_error"`` (default):
    a visit to feature j releases, per random segment of its public bins, the
    sum of the residuals' signs and the number of rows, and moves the segment
    by ``learning_rate`` x sum / (count + lambda), a step towards the segment's
    median residual (the count in the denominator is pooled: a least-squares
    estimate from every release of the feature so far, post-processing);
    ``"squared_error"``: the same with residuals clipped to [-1, 1] (towards
    the mean). One row adds at most 1 to one sum and 1 to one
    count: l2 norm <= sqrt(2), l1 <= 2. The defaults (absolute error, random
    stumps: ``max_leaf_nodes=2``) are the best measured on the regression-tree
    paper's protocol (docs/trees-regression.md); many random stumps average
    into smooth shape functions. The model is a function of earlier releases only,
    so the ``max_iter x n_features`` releases compose adaptively (zCDP: rho
    / releases each, discrete Gaussian; pure: epsilon / releases each,
    discrete Laplace). Predictions are mapped back to the target's units and
    clipped to ``target_bounds``.

    Public metadata (required): ``bounds`` of numeric features, categorical
    ``domains`` (or a pandas ``category`` dtype), ``target_bounds``.
    ``accountant``: None, an Accountant, a ledger path or a Session, charged
    after the public checks and before the rows are read.

    Fitted attributes: ``intercept_``, ``shapes_`` (one array per feature, in
    the scaled target's units), ``shape_noise_std_`` (their noise standard
    deviations, see :meth:`plot_shapes`), ``grid_``, ``target_bounds_``,
    ``learning_rate_``, ``l2_regularization_``, ``privacy_``.
    """

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        max_iter: int = 100,
        learning_rate: float | str = "auto",
        max_leaf_nodes: int = 2,
        l2_regularization: float | str = "auto",
        update: str = "round",
        n_cuts: int = 31,
        bounds: Any = None,
        domains: dict[str, Any] | None = None,
        target_bounds: Any = None,
        accountant: Any = None,
        random_state: Any = None,
        loss: str = "absolute_error",
    ) -> None:
        store_parameters(self, locals())

    _auto_shape = (100, 2)  # what "auto" means from 2,000 rows on (measured defaults)
    target_bounds: Any
    loss: str
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {"loss": [LOSSES.constraint()]}

    def fit(
        self,
        X: Any,
        y: ArrayLike | str,
        *,
        features: Sequence[str] | None = None,
        where: Any = None,
    ) -> DPGradientBoostingRegressor:
        """Boost the additive model on (X, y); (epsilon, delta)-DP (see the class docstring).

        ``fit(session, y="target", features=[...])``: the same fit on a
        :class:`dpkit.Session`'s table, every update one aggregation inside its
        engine (DuckDB or Spark), paid by the session's accountant; the rows never leave
        the engine (``trees.boosting._engine_fit``). ``where``: a filter of the
        table's rows, as a query's ``where=`` (columns and literals checked against
        the schema before the charge); the fit uses the rows it keeps. Rows with a missing feature
        or target are left out, as in the array fit; no privacy unit.
        """
        if is_session(X):
            return self._fit_session(X, y, features, where)
        refuse_array_filter(where)
        self._check_boosting_params()
        loss = LOSSES.lookup(self.loss)
        lo, hi = check_target_bounds(self.target_bounds)
        columns, y_raw = self._fit_columns(X, y)
        grid = self._make_grid(columns)
        codes, y_unit = regression_rows(grid, columns, y_raw, lo, hi)
        n_bins = grid.n_bins
        ordered = np.where(grid.is_categorical, 0, n_bins).astype(np.int64)
        self.grid_ = grid
        self.target_bounds_ = (lo, hi)
        init = np.array([0.5])
        self.intercept_, self.shapes_ = self._fit_boosted(
            loss,
            ArraySource(codes, y_unit[:, None], loss, to_units(init), n_bins),
            n_bins,
            ordered,
            init,
            "DPGradientBoostingRegressor.fit",
        )
        return self

    def _fit_session(
        self, session: Any, y: Any, features: Any, where: Any
    ) -> DPGradientBoostingRegressor:
        """The session fit: public checks, then the paid loop over engine passes."""
        self._check_boosting_params()
        loss = LOSSES.lookup(self.loss)
        table = session_table(self, session, y, features, where)
        if session.column_kinds.get(table.label) != "numeric":
            raise InvalidParameterError(
                f"the target column {table.label!r} must be numeric for a regressor."
            )
        declared = (
            self.target_bounds
            if self.target_bounds is not None
            else declared_bounds(session, table.label)
        )
        lo, hi = check_target_bounds(declared)
        grid = table.grid
        self.grid_ = grid
        self.target_bounds_ = (lo, hi)
        self.n_features_in_ = grid.n_features
        self.feature_names_in_ = np.asarray(grid.names, dtype=object)
        n_bins = grid.n_bins
        ordered = np.where(grid.is_categorical, 0, n_bins).astype(np.int64)
        source = EngineSource(table, loss, target_bounds=(lo, hi))
        self.intercept_, self.shapes_ = self._fit_boosted(
            loss,
            source,
            n_bins,
            ordered,
            np.array([0.5]),
            "DPGradientBoostingRegressor.fit",
            accountant=session.accountant,
        )
        return self

    def _shape_units(self) -> tuple[float, str]:
        lo, hi = self.target_bounds_
        return hi - lo, "contribution to the prediction (target units)"

    def predict(self, X: Any) -> NDArray[np.float64]:
        """Predictions in the target's units, clipped to ``target_bounds`` (post-processing)."""
        check_is_fitted(self, "shapes_")
        lo, hi = self.target_bounds_
        codes = placed_codes(self, self._predict_codes(X))
        scores = decision_scores(self.intercept_, self.shapes_, codes)[:, 0]
        return np.asarray(lo + np.clip(scores, 0.0, 1.0) * (hi - lo), dtype=np.float64)
