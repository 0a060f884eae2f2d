"""Budget: exact, validated, immutable privacy amounts."""

from __future__ import annotations

import pickle
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.accounting import Budget
from dpkit.errors import InvalidParameterError

decimals = st.decimals(min_value="0", max_value="10", places=4).map(float)


def test_float_is_read_as_its_decimal() -> None:
    assert Budget(0.1).epsilon_exact == Fraction(1, 10)
    assert Budget(0.5, 1e-6).delta_exact == Fraction(1, 10**6)
    assert sum([Budget(0.1)] * 10) == Budget(1.0)
    assert Budget(0.1) * 10 == Budget(1)
    # the float sum drifts; the exact one does not
    assert sum([0.1] * 10) != 1.0


@settings(max_examples=60, deadline=None)
@given(decimals, st.integers(min_value=1, max_value=200))
def test_repeated_addition_is_exact(eps: float, k: int) -> None:
    total = Budget.zero()
    for _ in range(k):
        total = total + Budget(eps)
    assert total.epsilon_exact == Fraction(repr(eps)) * k
    assert total == Budget(eps) * k


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((-0.1,), {}, "epsilon must be >= 0"),
        ((float("inf"),), {}, "epsilon must be finite"),
        ((float("nan"),), {}, "epsilon must be finite"),
        (("1",), {}, "epsilon must be a number"),
        ((True,), {}, "epsilon must be a number"),
        ((1.0, 1.0), {}, r"delta must be in \[0, 1\)"),
        ((1.0, -1e-9), {}, "delta must be >= 0"),
        ((1.0,), {"rho": -1}, "rho must be >= 0"),
    ],
)
def test_invalid_amounts_are_refused(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        Budget(*args, **kwargs)


def test_zero_and_numpy_scalars() -> None:
    assert Budget.zero().is_zero
    assert Budget(0).is_zero
    assert Budget(np.float64(0.25)).epsilon_exact == Fraction(1, 4)
    assert Budget(np.int64(2)).epsilon_exact == 2
    assert Budget(Fraction(1, 3)).epsilon_exact == Fraction(1, 3)


def test_float_views_and_rho() -> None:
    b = Budget(0.5)
    assert b.epsilon == 0.5 and b.delta == 0.0
    assert b.rho_exact == Fraction(1, 8)  # implicit ε²/2 for a pure amount
    assert b.rho_declared is None
    g = Budget(0.9, 1e-6, rho=0.05)
    assert g.rho == 0.05 and g.rho_declared == Fraction(1, 20)
    assert Budget(0.9, 1e-6).rho is None  # (ε, δ) says nothing about zCDP


def test_addition_carries_rho_only_when_declared() -> None:
    assert (Budget(0.1) + Budget(0.2)).rho_declared is None
    mixed = Budget(0.3) + Budget(1, 1e-6, rho=0.1)
    assert mixed.rho_exact == Fraction(9, 200) + Fraction(1, 10)
    no_rho = Budget(0.3) + Budget(1, 1e-6)
    assert no_rho.rho is None and no_rho.delta_exact == Fraction(1, 10**6)


def test_comparisons_are_componentwise() -> None:
    assert Budget(0.5) <= Budget(1.0)
    assert Budget(0.5, 1e-6) <= Budget(0.5, 1e-6)
    assert not Budget(0.5, 1e-5) <= Budget(1.0, 1e-6)
    assert Budget(1.0, 1e-6) >= Budget(0.5)
    assert not Budget(0.5, 1e-5).is_within(Budget(1.0, 1e-6))
    with pytest.raises(TypeError):
        _ = Budget(1) < Budget(2)  # type: ignore[operator]  # a partial order: no strict <


def test_subtraction() -> None:
    assert Budget(1.0, 1e-6) - Budget(0.3) == Budget(0.7, 1e-6)
    with pytest.raises(InvalidParameterError, match="negative"):
        Budget(0.3) - Budget(1.0)


def test_text() -> None:
    assert str(Budget(0.5, 1e-6)) == "ε=0.5, δ=1e-06"
    assert str(Budget(1)) == "ε=1, δ=0"
    assert str(Budget(1, 1e-6, rho=0.25)) == "ε=1, δ=1e-06, ρ=0.25"
    assert repr(Budget(0.5, 1e-6)) == "Budget(epsilon=0.5, delta=1e-06)"
    assert repr(Budget(Fraction(1, 3))) == "Budget(epsilon=Fraction(1, 3))"


def test_immutable_hashable_picklable() -> None:
    b = Budget(0.5, 1e-6, rho=0.1)
    with pytest.raises(AttributeError):
        b._epsilon = Fraction(2)
    assert {b, Budget(0.5, 1e-6, rho=0.1)} == {b}
    assert pickle.loads(pickle.dumps(b)) == b
    assert Budget(0.5) == Budget(0.5, rho=0.125)  # the implicit ρ, stated


def test_coerce() -> None:
    assert Budget.coerce(0.2) == Budget(0.2)
    b = Budget(1, 1e-6)
    assert Budget.coerce(b) is b
    with pytest.raises(InvalidParameterError, match="cost must be a Budget or a number"):
        Budget.coerce("lots")  # type: ignore[arg-type]
