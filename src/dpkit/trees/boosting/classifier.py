"""``DPGradientBoostingClassifier``: differentially private boosting of an additive model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from sklearn.utils.validation import check_is_fitted

from dpkit.errors import InvalidParameterError
from dpkit.trees.boosting._cyclic import (
    ArraySource,
    LogLoss,
    decision_scores,
    probabilities,
    to_units,
)
from dpkit.trees.boosting._engine_fit import (
    EngineSource,
    check_values,
    declared_domain,
    is_session,
    refuse_array_filter,
    session_table,
)
from dpkit.trees.boosting._estimator import (
    GRADIENT_LIMIT,
    HESSIAN_WEIGHT,
    BoostingMixin,
    placed_codes,
)
from dpkit.trees.classification._inputs import MISSING_POLICIES, DPClassifierBase, check_classes
from dpkit.trees.engine._sklearn import store_parameters


class DPGradientBoostingClassifier(BoostingMixin, DPClassifierBase):
    """Gradient-boosted additive classifier (binary and multiclass) with a differential privacy guarantee.

    Guarantee: ``fit`` is (``epsilon``, ``delta``)-DP with respect to adding
    or removing one training row (features and label together). With
    ``delta > 0`` (default 1e-6) the fit is accounted in zero-concentrated DP:
    it is rho-zCDP with rho the largest value whose conversion (Canonne, Kamath
    & Steinke 2020) fits within (epsilon, delta), reported in ``privacy_.rho``;
    with ``delta=0`` it is pure epsilon-DP (Laplace noise, sequential
    composition). ``predict``, ``predict_proba`` and ``decision_function`` only
    post-process the fitted model, as do ``predict_sql`` and ``decision_sql``,
    which score a table inside DuckDB (or Spark SQL) with the same values.

    The model is additive, F(x) = sum_j f_j(x_j) (one shape function per
    feature, one score per class for more than two classes), fitted by
    Newton boosting as in DP-EBM (Nori et al., ICML 2021): ``max_iter`` rounds,
    each visiting every feature once (``update="round"``, the default: every
    visit of a round reads the gradients at the round's starting model, so a
    fit through an engine makes one pass per round; ``"cyclic"``: each visit
    reads the model its predecessors moved, DP-EBM's order, one pass per
    visit; measured alike in docs/trees-boosting.md); a visit cuts the feature's public bins
    into at most ``max_leaf_nodes`` segments at random (data-independent),
    releases the per-segment sums of the log-loss gradient and Hessian with
    noise, and moves each segment by ``learning_rate`` x a damped Newton step.
    Differences from DP-EBM, each measured (``benchmarks/trees_classification.py``,
    docs/trees-boosting.md): Newton steps with the Hessian released in the
    same vector, its noise averaged over all releases of the feature (the
    pooled Hessian, post-processing); two classes: each row's gradient y - p
    clipped to +-0.5 and the Hessian weighted 1/2 in the release, which
    halves the sensitivity (from 1.03 to 0.52); a ridge ``l2_regularization``
    tied to the noise level that shrinks sparse segments; bins on the declared
    public bounds (no budget spent on private binning); zCDP accounting.

    Privacy argument (details in ``trees.boosting._cyclic``): one visit is one
    vector release in which a row lands in exactly one segment; its (gradient,
    weighted Hessian) contribution has l2 norm <= sqrt(0.5^2 + 0.5^2/16)
    (two classes: |g| <= 0.5 by the clip, applied to every row, and
    p (1 - p) <= 1/4) or sqrt(2 + 1/4) (more), l1 norm <= 0.625 or 3. The model used for the
    gradients is a function of earlier releases only, so the
    ``max_iter x n_features`` releases compose adaptively: rho / releases each
    (discrete Gaussian, exact) or epsilon / releases each (discrete Laplace).
    Segment cuts and the feature order come from ``random_state``'s
    non-mechanism stream and never depend on the data.

    Public metadata (required, never derived from the data): ``classes``,
    ``bounds`` of numeric features (values are clipped to them, bins are
    ``n_cuts`` equally spaced cuts inside them), categorical ``domains`` (or a
    pandas ``category`` dtype; every category is its own segment, so there is
    no cap on their number). ``missing="separate"`` (default) gives NaN a bin
    of its own in every feature.

    ``accountant``: None, a :class:`dpkit.Accountant`, a ledger path or a
    :class:`dpkit.Session`; the fit's cost is charged to it after the public
    checks and before any row is read, so models and queries on one dataset
    share one budget.

    Defaults: ``max_iter`` and ``max_leaf_nodes`` "auto" spend 1/50 of the
    budget on a noisy row count n_hat (sensitivity 1) and take 150 rounds of 8
    segments, or 20 rounds of 4 below 2,000 rows (a public rule; measured in
    docs/trees-boosting.md, "Small tables"); 64 bins; learning rate
    0.075 sqrt(epsilon) in [0.03, 0.15] for two classes (0.05 sqrt(epsilon) in
    [0.02, 0.1] for more); lambda = 1 x the noise std. Pass
    integers to spend nothing on the count.

    Fitted attributes: ``classes_``, ``n_classes_``, ``n_features_in_``,
    ``feature_names_in_`` (DataFrames), ``shapes_`` (one array per feature, bins
    x outputs), ``shape_noise_std_`` (their noise standard deviations, see
    :meth:`plot_shapes`), ``grid_``, ``l2_regularization_`` (the lambda used),
    ``privacy_`` (:class:`dpkit.PrivacyReport`).
    """

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        max_iter: int | str = "auto",
        learning_rate: float | str = "auto",
        max_leaf_nodes: int | str = "auto",
        l2_regularization: float | str = "auto",
        update: str = "round",
        n_cuts: int = 63,
        bounds: Any = None,
        domains: dict[str, Any] | None = None,
        classes: Any = None,
        missing: str = "separate",
        accountant: Any = None,
        random_state: Any = None,
    ) -> None:
        store_parameters(self, locals())

    # every category is a segment of its own: no cap needed (codes are int16)
    max_categories = 30_000
    _auto_shape = (150, 8)
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "missing": [MISSING_POLICIES.constraint()]
    }

    def _check_common_params(self) -> None:
        MISSING_POLICIES.check(self.missing)
        self._check_boosting_params()

    def fit(
        self,
        X: Any,
        y: Any,
        *,
        features: Sequence[str] | None = None,
        where: Any = None,
    ) -> DPGradientBoostingClassifier:
        """Boost the additive model on (X, y); (epsilon, delta)-DP (see the class docstring).

        ``fit(session, y="label", features=[...])``: the same fit on a
        :class:`dpkit.Session`'s table, every update one aggregation inside its
        engine (DuckDB or Spark), paid by the session's accountant; the rows never leave
        the engine (``trees.boosting._engine_fit``). ``where``: a filter of the
        table's rows, as a query's ``where=`` (columns and literals checked against
        the schema before the charge); the fit uses the rows it keeps. Two classes, ``missing="separate"``,
        no privacy unit; features' codes from the schema's declared domains or bounds.
        """
        if is_session(X):
            return self._fit_session(X, y, features, where)
        refuse_array_filter(where)
        self._check_common_params()  # every public check before the data is looked at
        codes, labels, n_bins, categorical = self._prepare_fit(X, y)
        ordered = np.where(categorical, 0, self.grid_.n_bins).astype(np.int64)
        loss = self._log_loss(self.n_classes_)
        if loss.n_outputs == 1:
            targets = (labels == 1).astype(np.float64)[:, None]
        else:
            targets = np.eye(loss.n_outputs)[labels]
        init = np.zeros(loss.n_outputs)
        self.intercept_, self.shapes_ = self._fit_boosted(
            loss,
            ArraySource(codes, targets, loss, to_units(init), n_bins),
            n_bins,
            ordered,
            init,
            "DPGradientBoostingClassifier.fit",
        )
        return self

    def _fit_session(
        self, session: Any, y: Any, features: Any, where: Any
    ) -> DPGradientBoostingClassifier:
        """The session fit: public checks, then the paid loop over engine passes."""
        self._check_common_params()
        if self.missing != "separate":
            raise InvalidParameterError(
                "fit(session, ...) supports missing='separate' only (missing='error' would make "
                "the fit fail on one row's value after the charge)."
            )
        table = session_table(self, session, y, features, where)
        declared = (
            self.classes if self.classes is not None else declared_domain(session, table.label)
        )
        classes = check_classes(declared)
        if classes.size > 2:
            raise InvalidParameterError(
                "fit(session, ...) fits two classes for now; fit several classes on arrays."
            )
        check_values(session, table.label, classes.tolist(), "class")
        grid = table.grid
        self.grid_ = grid
        self.classes_ = classes
        self.n_classes_ = int(classes.size)
        self.missing_code_ = grid.n_bins.copy()
        self.n_features_in_ = grid.n_features
        self.feature_names_in_ = np.asarray(grid.names, dtype=object)
        n_bins = grid.n_bins + 1
        ordered = np.where(grid.is_categorical, 0, grid.n_bins).astype(np.int64)
        loss = self._log_loss(2)
        source = EngineSource(table, loss, classes=tuple(classes.tolist()))
        self.intercept_, self.shapes_ = self._fit_boosted(
            loss,
            source,
            n_bins,
            ordered,
            np.zeros(1),
            "DPGradientBoostingClassifier.fit",
            accountant=session.accountant,
        )
        return self

    @staticmethod
    def _log_loss(n_classes: int) -> LogLoss:
        """The loss: two classes clip each row's gradient to +-GRADIENT_CLIP and weight
        the Hessian sums by HESSIAN_WEIGHT in a release (both public constants);
        several classes (softmax) do neither."""
        if n_classes > 2:
            return LogLoss(n_classes)
        return LogLoss(1, GRADIENT_LIMIT, HESSIAN_WEIGHT)

    def _shape_units(self) -> tuple[float, str]:
        if self.n_classes_ <= 2:
            return 1.0, f"contribution to the log-odds of {self.classes_.tolist()[-1]!r}"
        return 1.0, "contribution to each class's score (softmax)"

    def decision_function(self, X: Any) -> NDArray[np.float64]:
        """Scores F(x): log-odds of ``classes_[1]`` (two classes) or one score per class."""
        check_is_fitted(self, "shapes_")
        scores = decision_scores(
            self.intercept_, self.shapes_, placed_codes(self, self._prepare_predict(X))
        )
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict_proba(self, X: Any) -> NDArray[np.float64]:
        """Class probabilities (columns follow ``classes_``; post-processing)."""
        check_is_fitted(self, "shapes_")
        scores = decision_scores(
            self.intercept_, self.shapes_, placed_codes(self, self._prepare_predict(X))
        )
        p = probabilities(scores)
        if p.shape[1] == 1:
            return np.column_stack([1.0 - p[:, 0], p[:, 0]])
        return p

    def predict(self, X: Any) -> NDArray[Any]:
        """The most probable class of every row (ties: the first in ``classes_``)."""
        return np.asarray(self.classes_[np.argmax(self.predict_proba(X), axis=1)])
