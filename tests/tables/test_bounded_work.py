"""Every query ends: hostile epsilons are refused before the charge.

At ε = 1e-100 a histogram's confidence-interval search used to run forever
(holding the dataset); other kinds failed after the charge. Now every epsilon
below the documented floor (:data:`dpkit._checks.MIN_EPSILON`, per contributed
row) is refused before anything is charged, and every query at the floor itself
answers within a small time bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest
from tests._timing import finishes_within

from dpkit._checks import MIN_EPSILON
from dpkit.errors import InvalidParameterError
from dpkit.tables import Session

from ._declared import types_of

HOSTILE = [1e-100, 1e-300, 5e-324, 1e-12]

QUERIES: dict[str, Callable[[Session, float], Any]] = {
    "count": lambda s, e: s.count(epsilon=e),
    "count private keys": lambda s, e: s.count(
        epsilon=e, group_by="district", keys="private", delta=1e-6
    ),
    "histogram bins": lambda s, e: s.histogram("age", epsilon=e, bins=10, bounds=(0, 100)),
    "histogram domain": lambda s, e: s.histogram("district", epsilon=e, domain=list("ABCD")),
    "histogram private keys": lambda s, e: s.histogram(
        "age", epsilon=e, bins=8, bounds=(0, 100), group_by="district", keys="private", delta=1e-6
    ),
    "histogram dawa": lambda s, e: s.histogram(
        "age", epsilon=e, bins=16, bounds=(0, 100), method="dawa"
    ),
    "mode": lambda s, e: s.mode("district", epsilon=e, domain=list("ABCD")),
    "mode private keys": lambda s, e: s.mode(
        "district", epsilon=e, domain=list("ABCD"), group_by="smoker", keys="private", delta=1e-6
    ),
    "mean": lambda s, e: s.mean("age", epsilon=e, bounds=(0, 100)),
    "variance private keys and bounds": lambda s, e: s.variance(
        "age", epsilon=e, bounds="private", group_by="district", keys="private", delta=1e-6
    ),
    "median": lambda s, e: s.median("age", epsilon=e, bounds=(0, 100)),
}


@pytest.fixture
def small(people: pd.DataFrame) -> Session:
    frame = people.head(300)
    return Session.from_pandas(frame, types=types_of(frame), epsilon=10.0, delta=1e-3, rng=7)


@pytest.mark.parametrize("epsilon", HOSTILE)
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_hostile_epsilon_is_refused_before_the_charge(
    small: Session, name: str, epsilon: float
) -> None:
    with finishes_within(5.0), pytest.raises(InvalidParameterError, match="floor"):
        QUERIES[name](small, epsilon)
    assert small.spent.epsilon == 0 and small.spent.delta == 0


@pytest.mark.filterwarnings("ignore:bounds='private' found no coarse bin")
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_the_floor_itself_answers_within_a_bound(small: Session, name: str) -> None:
    with finishes_within(20.0):
        result = QUERIES[name](small, MIN_EPSILON)
    assert result is not None
    assert small.spent.epsilon > 0


def test_the_floor_is_per_contributed_row(people: pd.DataFrame) -> None:
    """Histogram methods spend ε/k: below the floor per row is refused before the charge."""
    frame = people.head(300)
    s = Session.from_pandas(
        frame,
        types=types_of(frame),
        epsilon=10.0,
        rng=7,
        privacy_unit="pid",
        max_contributions=4,
    )
    with pytest.raises(InvalidParameterError, match="max_contributions"):
        s.histogram("age", epsilon=2 * MIN_EPSILON, bins=10, bounds=(0, 100), method="dawa")
    assert s.spent.epsilon == 0
    with finishes_within(20.0):
        s.histogram("age", epsilon=4 * MIN_EPSILON, bins=10, bounds=(0, 100), method="dawa")


@pytest.mark.parametrize("bounds", [(-1e308, 1e308), (0.0, 5e-324)])
def test_hostile_bounds_are_refused_before_the_charge(small: Session, bounds: Any) -> None:
    with finishes_within(5.0), pytest.raises(InvalidParameterError):
        small.sum("age", epsilon=1.0, bounds=bounds)
    assert small.spent.epsilon == 0
