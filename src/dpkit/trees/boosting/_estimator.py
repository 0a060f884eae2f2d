"""What the boosted classifier and regressor share: parameters, the public plan, the paid fit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from dpkit._checks import check_delta, check_epsilon, exact
from dpkit.accounting.budget import Budget
from dpkit.accounting.charging import as_accountant
from dpkit.accounting.composition import largest_rho
from dpkit.accounting.events import ComposedEvent, EpsilonDeltaEvent, PrivacyEvent, ZCDPEvent
from dpkit.errors import BudgetExceededError, DataError, InvalidParameterError
from dpkit.privacy import PrivacyReport
from dpkit.trees.boosting._cyclic import (
    FULL_GRADIENT,
    CyclicSpec,
    GradientSource,
    Loss,
    fit_cyclic,
    release_size,
)
from dpkit.trees.boosting._noise import (
    NoisePlan,
    draw,
    gaussian_plan,
    laplace_plan,
    plan_event,
    release,
)
from dpkit.trees.engine._budget import randomness
from dpkit.trees.engine._feedback import fit_progress
from dpkit.trees.engine._grid import check_n_cuts
from dpkit.trees.engine._privacy import fit_paid
from dpkit.trees.engine._sklearn import check_positive_int

if TYPE_CHECKING:
    import duckdb
    from matplotlib.figure import Figure

#: l2_regularization="auto": lambda = this x the noise std of one segment's sum (measured
#: with the pooled Hessian: docs/trees-boosting.md, "Pooled Hessian, clipped gradients").
AUTO_L2_NOISE_MULTIPLE = 1.0
#: max_iter / max_leaf_nodes="auto": this share of the budget buys a noisy row count ...
AUTO_COUNT_SHARE = Fraction(1, 50)
#: ... and below this many rows the fit uses SMALL_TABLE_SHAPE (rounds, segments): on a
#: few hundred rows fewer, coarser releases rank better (docs/trees-boosting.md, "Small tables").
SMALL_TABLE_ROWS = 2000.0
SMALL_TABLE_SHAPE = (20, 4)


#: Two classes: each row's gradient y - p is clipped to +-GRADIENT_CLIP, rounded to the
#: gradients' grid (public; docs/trees-boosting.md, "Pooled Hessian, clipped gradients":
#: the noise falls with the clip, the bias of the clipped steps grows).
GRADIENT_CLIP = 0.5
GRADIENT_LIMIT = round(GRADIENT_CLIP * FULL_GRADIENT)
#: Hessian sums enter a release times this (public): they cost less budget and take more
#: noise, which the pooled Hessian averages away over the rounds (``_cyclic.PooledHessian``).
HESSIAN_WEIGHT = 0.5
#: update=: "cyclic" (DP-EBM's order) or "round" (every feature against the round's model).
UPDATES = ("cyclic", "round")


def auto_learning_rate(epsilon: float, loss: Loss) -> float:
    """learning_rate="auto": a sqrt(epsilon) kept in [low, high], a public rule:
    (a, low, high) = (0.075, 0.03, 0.15) for the two-class log loss, whose clipped
    gradients take smaller steps, else (0.05, 0.02, 0.1).

    Measured on the benchmark tables (docs/trees-boosting.md): small steps
    average the noise of many releases at small epsilon; with little noise,
    larger steps fit more in the same rounds.
    """
    clipped = getattr(loss, "gradient_limit", FULL_GRADIENT) < FULL_GRADIENT
    a, low, high = (0.075, 0.03, 0.15) if clipped else (0.05, 0.02, 0.1)
    return float(min(high, max(low, a * np.sqrt(epsilon))))


def check_number(value: object, name: str, *, low: float, high: float, hint: str) -> float:
    """A real number in (low, high]; the message says what to pass."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"{name} must be a number {hint}.")
    v = float(value)
    if not (np.isfinite(v) and low < v <= high):
        raise InvalidParameterError(f"{name} must be a number {hint}, got {v!r}.")
    return v


def _is_auto(value: object) -> bool:
    return isinstance(value, str) and value == "auto"


@dataclass(frozen=True)
class BoostingPlan:
    """Everything a fit needs that is decided before the data is read."""

    spec: CyclicSpec
    noise: NoisePlan
    cost: Budget
    ordered: NDArray[np.int64]
    loss: Loss


def placed_codes(estimator: Any, codes: NDArray[np.int16]) -> NDArray[np.int16]:
    """``codes`` if the model has a value for each; else a clear error (post-processing, no data quoted).

    A value outside a categorical column's declared domain gets the grid's
    missing code; a model with no missing branch (a regressor, or
    ``missing="error"``) has no entry for it, as ``predict_sql`` gives NULL.
    """
    bad = [
        estimator.grid_.feature_name(j)
        for j, shape in enumerate(estimator.shapes_)
        if codes.size and int(codes[:, j].max()) >= len(shape)
    ]
    if bad:
        raise DataError(
            f"X has values outside the declared domain of column(s) {bad}, and this model has no "
            "branch for them (regressors and missing='error' have none): map them to declared "
            "values, or refit a classifier with missing='separate'."
        )
    return codes


class BoostingMixin:
    """Parameter checks, the public plan and the paid fit of the boosted estimators."""

    epsilon: Any
    delta: Any
    max_iter: Any
    learning_rate: Any
    max_leaf_nodes: Any
    l2_regularization: Any
    update: Any
    n_cuts: Any
    accountant: Any
    random_state: Any

    def plot_shapes(self, features: Any = None, *, ncols: int = 3) -> Figure:
        """One panel per feature: its shape function with a noise band (a Matplotlib Figure).

        The model is F(x) = intercept + sum_j f_j(x_j): panel j draws f_j over
        the feature's public bins (a step line for a numeric feature, one point
        per category of its public domain), in log-odds for a classifier (one
        line per class with three or more classes) and in the target's units
        for a regressor (before ``predict`` clips to ``target_bounds``). For
        these cyclic (one feature per update) models the shape is exact: it is
        the sum of every released update of that feature. The missing-value
        code is not drawn.

        The band is +-1.96 times each bin's noise standard deviation
        (``shape_noise_std_``), accumulated over the updates as independent
        variances: each update's std is learning_rate x the gradient noise std
        / (the pooled Hessian sum + lambda). A first-order account (it
        leaves out the Hessian's own noise and feedback between updates),
        measured on the released values only.

        Privacy: pure post-processing of the released model (``shapes_``,
        ``shape_noise_std_``, the public grid); no row is read, no budget
        spent. ``features``: None (all), or column names / positions;
        ``ncols``: panels per row. Save with ``fig.savefig("shapes.png")``.
        """
        from dpkit.trees.boosting._plot import plot_shapes

        scale, ylabel = self._shape_units()
        return plot_shapes(self, features, ncols=ncols, scale=scale, ylabel=ylabel)

    def predict_sql(
        self,
        data: Any,
        *,
        columns: Sequence[str] | None = None,
        keep: Sequence[str] | None = None,
    ) -> duckdb.DuckDBPyRelation:
        """Score every row of a table inside DuckDB: a lazy DuckDB relation, no row in Python.

        ``data``: a :class:`dpkit.Session` on DuckDB (its table, read under the
        session's lock) or a ``duckdb.DuckDBPyRelation``. ``columns``: the table
        column of each feature, in the fit's order (default: the fit's feature
        names). ``keep``: the table's columns to carry along (default: all).
        The relation has the ``keep`` columns, then: for a classifier with two
        classes ``decision`` (``decision_function``), ``proba_0``, ``proba_1``
        (``predict_proba``'s columns) and ``prediction`` (``predict``); with K
        classes ``decision_0`` .. ``decision_{K-1}``, ``proba_0`` ..; for a
        regressor ``prediction``. Nothing runs until it is read: write it out
        (``.write_parquet(path)``, ``.create(name)``), aggregate it
        (``.aggregate("avg(proba_1)")``) or fetch it (``.df()``).

        Each row is scored as ``decision_function`` / ``predict_proba`` /
        ``predict`` score it on arrays: the same bins (a value equal to a
        threshold falls in the lower bin; values beyond the bounds in the end
        bins), missing values (NULL, NaN, ±inf, a category outside the domain)
        in the missing bin. Where ``predict`` refuses a value (a model without a
        missing bin: a regressor, or ``missing="error"``), the row's outputs
        are NULL. Text in a numeric feature's column is a number if it reads as
        one, else missing. Scores and regression predictions are equal bit for
        bit; probabilities use DuckDB's ``exp`` (within 1e-15 of SciPy's).

        Privacy: the model is a DP release, so scoring with it is
        post-processing of the fit: it reads no training row and charges
        nothing. The output, though, is one row per row of ``data``, as private
        as ``data`` itself: it is the data owner's tool, not a release (a
        session's in-process caller can read its table anyway,
        docs/threat-model.md); publish only DP statistics of it.
        """
        from dpkit.trees.boosting._in_engine import predict_sql

        return predict_sql(self, data, columns, keep)

    def decision_sql(
        self,
        output: str | None = None,
        *,
        columns: Sequence[str] | None = None,
        data: Any = None,
        dialect: str = "duckdb",
    ) -> str:
        """One SQL expression of a model output over a table's own columns.

        ``output``: ``"decision"`` (default, two classes), ``"proba_1"``,
        ``"prediction"`` (default for a regressor), ... (the names
        :meth:`predict_sql` gives). ``columns``: as for :meth:`predict_sql`.
        ``data`` (optional, a Session or a relation): the table whose column
        types type the categories' literals and checks the columns. Use it in
        any query: ``f"SELECT id, {model.decision_sql()} AS score FROM t"``.
        ``dialect="spark"``: Spark SQL, a Spark column with
        ``pyspark.sql.functions.expr(model.decision_sql(dialect="spark"))``
        (categories are compared as written: declare them with the column's
        type). The same values as on arrays (:meth:`predict_sql`).
        Post-processing of the model (nothing read, nothing charged).
        """
        from dpkit.trees.boosting._in_engine import expression

        return expression(self, output, columns, data, dialect)

    def _shape_units(self) -> tuple[float, str]:
        """(factor from the shapes' units to the plotted units, the y label)."""
        return 1.0, "contribution to the score"

    def _check_boosting_params(self) -> None:
        if self.update not in UPDATES:
            raise InvalidParameterError(
                f"update must be one of {list(UPDATES)}: 'cyclic' (each update sees the "
                "model its predecessors moved) or 'round' (one pass over the rows per round)."
            )
        check_epsilon(self.epsilon)
        check_n_cuts(self.n_cuts)
        check_delta(self.delta)
        if not _is_auto(self.max_iter):
            check_positive_int(
                self.max_iter, "max_iter", hint=" (boosting rounds), e.g. 100, or 'auto'"
            )
        if not _is_auto(self.max_leaf_nodes):
            check_positive_int(
                self.max_leaf_nodes,
                "max_leaf_nodes",
                minimum=2,
                hint=" (segments per update), e.g. 8, or 'auto'",
            )
        if not _is_auto(self.learning_rate):
            check_number(
                self.learning_rate,
                "learning_rate",
                low=0.0,
                high=10.0,
                hint="in (0, 10], e.g. 0.05, or 'auto'",
            )
        if not _is_auto(self.l2_regularization):
            check_number(
                self.l2_regularization,
                "l2_regularization",
                low=0.0,
                high=1e12,
                hint="> 0 (rows' worth of Hessian added to every segment) or 'auto'",
            )

    #: (rounds, segments) that "auto" means on tables of SMALL_TABLE_ROWS rows or more.
    _auto_shape: tuple[int, int] = (100, 8)

    def _cost(self) -> Budget:
        """The whole fit's cost, fixed before anything is read: (epsilon, delta[, rho])."""
        eps = exact(check_epsilon(self.epsilon))
        delta = check_delta(self.delta)
        if delta > 0:
            return Budget(eps, exact(delta), rho=largest_rho(eps, exact(delta)))
        return Budget(eps)

    def _count_share(self) -> Fraction:
        """The budget share of the noisy row count: spent only when a shape is "auto"."""
        return (
            AUTO_COUNT_SHARE
            if _is_auto(self.max_iter) or _is_auto(self.max_leaf_nodes)
            else Fraction(0)
        )

    def _shape(self, n_hat: float | None) -> tuple[int, int]:
        """(rounds, segments): the parameters, or the public rule of the noisy count n_hat."""
        small = n_hat is not None and n_hat < SMALL_TABLE_ROWS
        auto_rounds, auto_leaves = SMALL_TABLE_SHAPE if small else self._auto_shape
        rounds = auto_rounds if _is_auto(self.max_iter) else int(self.max_iter)
        leaves = auto_leaves if _is_auto(self.max_leaf_nodes) else int(self.max_leaf_nodes)
        return rounds, leaves

    def _boosting_plan(
        self,
        loss: Loss,
        n_bins: NDArray[np.int64],
        ordered: NDArray[np.int64],
        shape: tuple[int, int],
        share: Fraction,
    ) -> BoostingPlan:
        """Noise, learning rate and lambda for ``share`` of the cost: public inputs only."""
        cost = self._cost()
        rate = (
            auto_learning_rate(cost.epsilon, loss)
            if _is_auto(self.learning_rate)
            else float(self.learning_rate)
        )
        rounds, leaves = shape
        count = rounds * int(n_bins.size)
        size = release_size(n_bins, ordered, leaves, loss.n_outputs)
        if cost.delta > 0:
            rho = cost.rho_exact
            assert rho is not None
            noise = gaussian_plan(count, size, loss.l2_sensitivity, rho * share)
        else:
            noise = laplace_plan(count, size, loss.l1_sensitivity, cost.epsilon_exact * share)
        lam = (
            AUTO_L2_NOISE_MULTIPLE * noise.std
            if _is_auto(self.l2_regularization)
            else float(self.l2_regularization)
        )
        spec = CyclicSpec(rounds, rate, leaves, max(lam, 1e-12), str(self.update))
        return BoostingPlan(spec, noise, cost, ordered, loss)

    def _count_plan(self, share: Fraction) -> NoisePlan:
        """The noisy row count's noise (sensitivity 1) for ``share`` of the cost."""
        cost = self._cost()
        if cost.delta > 0:
            assert cost.rho_exact is not None
            return gaussian_plan(1, 1, 1.0, cost.rho_exact * share)
        return laplace_plan(1, 1, 1.0, cost.epsilon_exact * share)

    def _event(
        self, loss: Loss, n_bins: NDArray[np.int64], ordered: NDArray[np.int64]
    ) -> PrivacyEvent:
        """The fit's privacy event from public inputs only; its ``budget()`` is the cost.

        A fixed shape: the segment sums' discrete Gaussian (zCDP) or Laplace
        releases. An "auto" shape: the noisy row count's release, then the
        segment sums at the rest of the budget, recorded by their ρ-zCDP
        (or pure-ε) share only, since their number follows the noisy count.
        """
        cost = self._cost()
        share = self._count_share()
        if share == 0:
            plan = self._boosting_plan(loss, n_bins, ordered, self._shape(None), Fraction(1))
            return plan_event(plan.noise, cost)
        part = Budget(
            cost.epsilon_exact * share,
            cost.delta_exact * share,
            rho=None if cost.rho_declared is None else cost.rho_declared * share,
        )
        rest = 1 - share
        rest_event: PrivacyEvent
        if cost.rho_declared is not None:
            rest_event = ZCDPEvent(
                cost.rho_declared * rest, cost.epsilon_exact * rest, cost.delta_exact * rest
            )
        else:
            rest_event = EpsilonDeltaEvent(cost.epsilon_exact * rest)
        return ComposedEvent((plan_event(self._count_plan(share), part), rest_event))

    def _fit_boosted(
        self,
        loss: Loss,
        source: GradientSource,
        n_bins: NDArray[np.int64],
        ordered: NDArray[np.int64],
        init: NDArray[np.float64],
        label: str,
        accountant: Any = None,
    ) -> tuple[NDArray[np.float64], list[NDArray[np.float64]]]:
        """Charge the cost (the accountant), then fit; sets the fitted report attributes.

        ``source`` holds the rows (in memory, or an engine's table: ``_engine_fit``);
        it is read only inside the paid part. ``accountant``: who pays (default: the
        estimator's ``accountant`` parameter).

        With an "auto" shape, ``AUTO_COUNT_SHARE`` of the budget first buys a noisy
        count of the rows (sensitivity 1; discrete Gaussian or Laplace like every
        other release), and the shape follows from it by a public rule
        (post-processing); the rest pays for the segment sums. Both parts are
        planned as exact fractions of the cost charged up front.
        """
        cost = self._cost()
        count_share = self._count_share()
        self._boosting_plan(loss, n_bins, ordered, self._shape(None), 1 - count_share)  # checks
        rnd = randomness(self.random_state)

        def run() -> tuple[
            tuple[NDArray[np.float64], list[NDArray[np.float64]], list[NDArray[np.float64]]],
            BoostingPlan,
            Any,
        ]:
            n_hat, count_plan = None, None
            if count_share > 0:
                count_plan = self._count_plan(count_share)
                rows = np.array([float(source.rows())])
                n_hat = float(release(count_plan, rows, draw(count_plan, rnd.mechanism)[0])[0])
            plan = self._boosting_plan(loss, n_bins, ordered, self._shape(n_hat), 1 - count_share)
            noise = draw(plan.noise, rnd.mechanism)
            rounds = plan.spec.max_iter
            with fit_progress(f"{label}: boosting rounds", rounds, int(n_bins.size)) as advance:
                fitted = fit_cyclic(
                    source,
                    plan.loss,
                    init,
                    n_bins,
                    plan.ordered,
                    plan.spec,
                    plan.noise,
                    noise,
                    rnd.numpy,
                    advance,
                )
            return fitted, plan, count_plan

        payer = as_accountant(self.accountant if accountant is None else accountant)
        event = self._event(loss, n_bins, ordered)
        try:
            fitted, plan, count_plan = fit_paid(payer, cost, label, run, event=event)
        except BudgetExceededError as refused:
            raise _with_delta_hint(refused, cost, type(self).__name__) from None
        finally:
            close = getattr(source, "close", None)  # an engine source's kept rows
            if close is not None:
                close()
        intercept, shapes, shape_std = fitted
        self.shape_noise_std_ = shape_std
        self.l2_regularization_ = plan.spec.l2_regularization
        self.learning_rate_ = plan.spec.learning_rate
        self.n_iter_ = plan.spec.max_iter
        self.max_leaf_nodes_ = plan.spec.max_leaf_nodes
        zcdp = plan.noise.rho_each is not None
        split = {"segment_sums": float(_each(plan.noise))}
        uses = {"segment_sums": plan.noise.count}
        if count_plan is not None:
            split["row_count"] = float(_each(count_plan))
            uses["row_count"] = 1
        self.privacy_ = PrivacyReport(
            epsilon=cost.epsilon,
            delta=cost.delta,
            rho=float(cost.rho_exact or 0) if zcdp else None,
            mechanisms=tuple(split),
            remaining=None if payer is None else payer.remaining_seen,
            split=split,
            uses=uses,
            details={
                "accounting": "zCDP" if zcdp else "pure epsilon",
                "split_unit": "rho" if zcdp else "epsilon",
                "rounds": plan.spec.max_iter,
                "noise_std": plan.noise.std,
            },
        )
        return intercept, shapes


def _with_delta_hint(
    refused: BudgetExceededError, cost: Budget, estimator: str
) -> BudgetExceededError:
    """The refusal, saying how to fit with pure epsilon when it is delta that is short.

    Only public values (the cost and the budget left) decide it, before anything is read.
    """
    left = refused.remaining
    if not (cost.delta > 0 and isinstance(left, Budget) and cost.delta_exact > left.delta_exact):
        return refused
    return BudgetExceededError(
        f"{refused} This fit asks for delta={cost.delta:g} (zCDP accounting; 1e-6 is the "
        f"default), but only delta={left.delta:g} is left: pass delta=0 to the "
        f"estimator ({estimator}(delta=0, ...)) for a pure "
        "epsilon-DP fit (Laplace noise), which needs no delta.",
        requested=refused.requested,
        remaining=left,
    )


def _each(plan: NoisePlan) -> Fraction:
    """The cost of one release of a plan (rho or epsilon)."""
    each = plan.rho_each if plan.rho_each is not None else plan.epsilon_each
    return each if each is not None else Fraction(0)
