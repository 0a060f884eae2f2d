"""Exact budget splits: parts add up to epsilon and are never rounded up."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit._checks import exact
from dpkit.errors import InvalidParameterError
from dpkit.trees.engine._budget import BudgetPlan, as_float_at_most, randomness


@settings(max_examples=200, deadline=None)
@given(num=st.integers(1, 10**9), den=st.integers(1, 10**9))
def test_float_handed_to_mechanisms_never_exceeds_the_fraction(num: int, den: int) -> None:
    x = Fraction(num, den)
    f = as_float_at_most(x)
    assert exact(f) <= x
    assert abs(f - float(x)) <= 4 * np.spacing(float(x))


def test_plan_total_counts_uses() -> None:
    plan = BudgetPlan()
    plan.add("split", Fraction(1, 10), 4)
    plan.add("leaf", Fraction(3, 5))
    assert plan.total == 1
    assert plan.as_dict()["split"] == {"epsilon": 0.1, "uses": 4}


def test_randomness_resolution() -> None:
    secure = randomness(None)
    assert secure.mechanism is None and isinstance(secure.numpy, np.random.Generator)
    seeded = randomness(3)
    assert seeded.mechanism is seeded.numpy
    gen = np.random.default_rng(1)
    assert randomness(gen).mechanism is gen
    assert isinstance(randomness(np.random.RandomState(0)).mechanism, np.random.Generator)
    with pytest.raises(InvalidParameterError):
        randomness("seed")
