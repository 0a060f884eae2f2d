"""Every tree fit charges its privacy event (issue 29): boosting its discrete Gaussian / Laplace noise.

The ledger row of a fit holds an event whose ``budget()`` is the charge
exactly; boosted models (zCDP when δ > 0) record the noise of their segment
sums (σ, grid sensitivity, ρ per release, how many releases), so a tight
accountant can compose them; the other estimators their pure-ε charge.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest

from dpkit import Accountant, Budget
from dpkit.accounting.events import (
    ComposedEvent,
    DiscreteGaussianEvent,
    EpsilonDeltaEvent,
    GeometricEvent,
    RepeatedEvent,
    ZCDPEvent,
    event_from_json,
)
from dpkit.trees import (
    DPDecisionTreeClassifier,
    DPDecisionTreeRegressor,
    DPGradientBoostingClassifier,
    DPGradientBoostingRegressor,
    DPRandomForestClassifier,
    DPRandomForestRegressor,
)


def _data(n: int = 240, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 3))
    y = (X[:, 0] + 0.2 * rng.normal(size=n) > 0.5).astype(int)
    return X, y


def _fit(model: Any, regression: bool = False) -> Any:
    X, y = _data()
    acc = Accountant(Budget(10.0, 1e-3))
    model.set_params(accountant=acc, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(X, y.astype(float) if regression else y)
    (row,) = acc.history
    assert row.event is not None
    assert row.event.budget() == row.cost
    spent = row.event.budget()
    assert (spent.epsilon_exact, spent.delta_exact) == (
        acc.spent.epsilon_exact,
        acc.spent.delta_exact,
    )
    assert event_from_json(row.event.to_json()) == row.event
    return row.event


def test_boosting_in_zcdp_records_its_discrete_gaussian_releases() -> None:
    model = DPGradientBoostingClassifier(
        epsilon=1.0, delta=1e-6, bounds=(0, 1), classes=[0, 1], max_iter=10, max_leaf_nodes=4
    )
    event = _fit(model)
    assert isinstance(event, RepeatedEvent)
    assert event.count == 10 * 3  # a release per round and feature
    each = event.event
    assert isinstance(each, DiscreteGaussianEvent)
    assert each.rho is not None and each.proven_rho() <= each.rho
    assert model.privacy_.rho == pytest.approx(float(event.budget().rho_exact or 0))


def test_boosting_in_pure_epsilon_records_its_laplace_releases() -> None:
    model = DPGradientBoostingRegressor(
        epsilon=1.0, delta=0.0, bounds=(0, 1), target_bounds=(0, 1), max_iter=5, max_leaf_nodes=4
    )
    event = _fit(model, regression=True)
    assert isinstance(event, RepeatedEvent) and isinstance(event.event, GeometricEvent)
    assert event.count == 5 * 3
    assert event.event.epsilon is not None
    assert event.budget() == Budget(1.0)
    assert math.isclose(float(event.event.epsilon), 1.0 / 15)


def test_boosting_with_an_auto_shape_records_the_count_then_the_rest_by_its_rho() -> None:
    model = DPGradientBoostingClassifier(
        epsilon=1.0, delta=1e-6, bounds=(0, 1), classes=[0, 1]
    )  # max_iter="auto": a noisy row count chooses the shape
    event = _fit(model)
    assert isinstance(event, ComposedEvent)
    count, rest = event.events
    assert isinstance(count, DiscreteGaussianEvent) and count.sensitivity >= 1
    assert isinstance(rest, ZCDPEvent)


@pytest.mark.parametrize(
    "make, regression",
    [
        (lambda: DPDecisionTreeClassifier(epsilon=1.0, bounds=(0, 1), classes=[0, 1]), False),
        (lambda: DPRandomForestClassifier(epsilon=1.0, bounds=(0, 1), classes=[0, 1]), False),
        (
            lambda: DPDecisionTreeRegressor(epsilon=1.0, bounds=(0, 1), target_bounds=(0, 1)),
            True,
        ),
        (
            lambda: DPRandomForestRegressor(epsilon=1.0, bounds=(0, 1), target_bounds=(0, 1)),
            True,
        ),
    ],
)
def test_trees_and_forests_record_their_pure_epsilon_charge(make: Any, regression: bool) -> None:
    event = _fit(make(), regression)
    assert isinstance(event, EpsilonDeltaEvent)
    assert event.budget() == Budget(1.0)
