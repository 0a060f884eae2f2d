"""What the boosted classifier and regressor share: parameters, the public plan, the paid fit."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit._checks import check_delta, check_epsilon, exact
from dpkit.accounting.budget import Budget
from dpkit.accounting.composition import largest_rho
from dpkit.errors import InvalidParameterError
from dpkit.trees.boosting._cyclic import CyclicSpec, Loss, fit_cyclic, release_size
from dpkit.trees.boosting._noise import NoisePlan, draw, gaussian_plan, laplace_plan
from dpkit.trees.engine._budget import randomness
from dpkit.trees.engine._grid import check_n_cuts
from dpkit.trees.engine._privacy import PrivacyReport, fit_paid
from dpkit.trees.engine._sklearn import check_positive_int

#: l2_regularization="auto": lambda = this x the noise std of one segment's Hessian sum.
AUTO_L2_NOISE_MULTIPLE = 0.5


def auto_learning_rate(epsilon: float) -> float:
    """learning_rate="auto": 0.05 sqrt(epsilon), kept in [0.02, 0.1] (a public rule).

    Measured on the benchmark tables (docs/trees-classification.md): small
    steps average the noise of many releases at small epsilon; with little
    noise, larger steps fit more in the same rounds.
    """
    return float(min(0.1, max(0.02, 0.05 * np.sqrt(epsilon))))


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


class BoostingMixin:
    """Parameter checks, the public plan and the paid fit of the boosted estimators."""

    epsilon: Any
    delta: Any
    max_iter: Any
    learning_rate: Any
    max_leaf_nodes: Any
    l2_regularization: Any
    n_cuts: Any
    accountant: Any
    random_state: Any

    def _check_boosting_params(self) -> None:
        check_epsilon(self.epsilon)
        check_n_cuts(self.n_cuts)
        check_delta(self.delta)
        check_positive_int(self.max_iter, "max_iter", hint=" (boosting rounds), e.g. 100")
        check_positive_int(
            self.max_leaf_nodes, "max_leaf_nodes", minimum=2, hint=" (segments per update), e.g. 8"
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

    def _boosting_plan(
        self, loss: Loss, n_bins: NDArray[np.int64], ordered: NDArray[np.int64]
    ) -> BoostingPlan:
        """Noise, cost, learning rate and lambda: from parameters and the schema only."""
        eps = exact(check_epsilon(self.epsilon))
        delta = check_delta(self.delta)
        rate = (
            auto_learning_rate(float(eps))
            if _is_auto(self.learning_rate)
            else float(self.learning_rate)
        )
        count = int(self.max_iter) * int(n_bins.size)
        size = release_size(n_bins, ordered, int(self.max_leaf_nodes), loss.n_outputs)
        if delta > 0:
            rho = largest_rho(eps, exact(delta))
            noise = gaussian_plan(count, size, loss.l2_sensitivity, rho)
            cost = Budget(eps, exact(delta), rho=rho)
        else:
            noise = laplace_plan(count, size, loss.l1_sensitivity, eps)
            cost = Budget(eps)
        lam = (
            AUTO_L2_NOISE_MULTIPLE * noise.std
            if _is_auto(self.l2_regularization)
            else float(self.l2_regularization)
        )
        spec = CyclicSpec(int(self.max_iter), rate, int(self.max_leaf_nodes), max(lam, 1e-12))
        return BoostingPlan(spec, noise, cost, ordered, loss)

    def _fit_boosted(
        self,
        plan: BoostingPlan,
        codes: NDArray[np.int16],
        targets: NDArray[np.float64],
        n_bins: NDArray[np.int64],
        init: NDArray[np.float64],
        label: str,
    ) -> tuple[NDArray[np.float64], list[NDArray[np.float64]]]:
        """Charge the plan's cost (the accountant), then fit; sets the fitted report attributes."""
        rnd = randomness(self.random_state)

        def run() -> tuple[NDArray[np.float64], list[NDArray[np.float64]]]:
            noise = draw(plan.noise, rnd.mechanism)
            return fit_cyclic(
                codes,
                targets,
                plan.loss,
                init,
                n_bins,
                plan.ordered,
                plan.spec,
                plan.noise,
                noise,
                rnd.numpy,
            )

        fitted = fit_paid(self.accountant, plan.cost, label, run)
        self.l2_regularization_ = plan.spec.l2_regularization
        self.learning_rate_ = plan.spec.learning_rate
        self.n_iter_ = plan.spec.max_iter
        zcdp = plan.noise.rho_each is not None
        each = plan.noise.rho_each if zcdp else plan.noise.epsilon_each
        self.privacy_ = PrivacyReport(
            epsilon=plan.cost.epsilon,
            delta=plan.cost.delta,
            rho=float(plan.cost.rho_exact or 0) if zcdp else None,
            split={"segment_sums": float(each or Fraction(0))},
            uses={"segment_sums": plan.noise.count},
            details={
                "accounting": "zCDP" if zcdp else "pure epsilon",
                "split_unit": "rho" if zcdp else "epsilon",
                "rounds": plan.spec.max_iter,
                "noise_std": plan.noise.std,
            },
        )
        return fitted
