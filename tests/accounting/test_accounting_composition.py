"""Composition theorems: exact where they should be, valid, and as tight as claimed.

Validity is checked against exact privacy profiles of the worst cases:
randomized response for pure ε-DP composition (Kairouz et al. show it is the
worst case) and the Gaussian mechanism for ρ-zCDP.
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.stats import binom, norm

from dpkit.accounting import (
    Budget,
    advanced_composition,
    basic_composition,
    dp_to_zcdp,
    drv_composition,
    largest_rho,
    parallel_composition,
    tightest_composition,
    zcdp_composition,
    zcdp_to_dp,
    zcdp_to_dp_simple,
)
from dpkit.errors import InvalidParameterError

eps_values = st.decimals(min_value="0.001", max_value="3", places=3).map(float)
delta_values = st.sampled_from([0.0, 1e-9, 1e-7, 1e-6, 1e-5])
budgets = st.builds(Budget, eps_values, delta_values)
slacks = st.sampled_from([1e-9, 1e-6, 1e-4, 1e-2])


# --- exact privacy profiles (hockey-stick divergence δ(t)) -------------------------
def rr_delta(eps: list[float], t: float) -> float:
    """δ(t) of composing randomized responses with the given ε's, by enumeration."""
    e = np.asarray(eps, dtype=float)
    signs = np.array(list(itertools.product([1, -1], repeat=len(e))))
    loss = signs @ e
    prob = np.where(signs == 1, 1 / (1 + np.exp(-e)), 1 / (1 + np.exp(e))).prod(axis=1)
    return float(np.sum(prob * np.maximum(0.0, -np.expm1(t - loss))))


def rr_delta_homogeneous(eps: float, k: int, t: float) -> float:
    """δ(t) of k-fold randomized response with parameter ε (binomial privacy loss)."""
    j = np.arange(k + 1)
    loss = (2 * j - k) * eps
    return float(
        np.sum(binom.pmf(j, k, 1 / (1 + math.exp(-eps))) * np.maximum(0, -np.expm1(t - loss)))
    )


def gaussian_delta(rho: float, eps: float) -> float:
    """δ(ε) of the Gaussian mechanism that is exactly ρ-zCDP (Balle & Wang 2018)."""
    mu = math.sqrt(2 * rho)
    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps + norm.logcdf(-eps / mu - mu / 2)))


# --- basic and parallel -------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(budgets, max_size=8), st.randoms(use_true_random=False))
def test_basic_is_exact_sum_and_commutative(costs: list[Budget], rnd: random.Random) -> None:
    total = basic_composition(costs)
    assert total.epsilon_exact == sum((c.epsilon_exact for c in costs), Fraction(0))
    assert total.delta_exact == sum((c.delta_exact for c in costs), Fraction(0))
    shuffled = list(costs)
    rnd.shuffle(shuffled)
    assert basic_composition(shuffled) == total


@settings(max_examples=60, deadline=None)
@given(st.lists(budgets, max_size=6), budgets)
def test_basic_is_monotone(costs: list[Budget], extra: Budget) -> None:
    assert basic_composition(costs).is_within(basic_composition([*costs, extra]))


@settings(max_examples=60, deadline=None)
@given(st.lists(budgets, min_size=1, max_size=8))
def test_parallel_is_componentwise_max(costs: list[Budget]) -> None:
    total = parallel_composition(costs)
    assert total.epsilon_exact == max(c.epsilon_exact for c in costs)
    assert total.delta_exact == max(c.delta_exact for c in costs)
    assert total.is_within(basic_composition(costs))


def test_parallel_rho_is_max_when_declared() -> None:
    total = parallel_composition([Budget(1, 1e-6, rho=0.2), Budget(0.5)])
    assert total.rho_exact == Fraction(1, 5)
    assert parallel_composition([]) == Budget.zero()


# --- advanced composition -------------------------------------------------------------
def kairouz_reference(eps: list[float], slack: float) -> float:
    """Thm 3.5 of Kairouz, Oh & Viswanath (2015), written out independently in floats."""
    s = sum(e * e for e in eps)
    a = sum((math.exp(e) - 1) * e / (math.exp(e) + 1) for e in eps)
    return min(
        sum(eps),
        a + math.sqrt(2 * s * math.log(math.e + math.sqrt(s) / slack)),
        a + math.sqrt(2 * s * math.log(1 / slack)),
    )


@pytest.mark.parametrize(
    ("eps", "slack"),
    [([0.1] * 50, 1e-6), ([0.01] * 1000, 1e-6), ([0.5, 0.1, 0.02, 0.3] * 20, 1e-5), ([2.0], 1e-3)],
)
def test_advanced_matches_the_theorem_rounded_up(eps: list[float], slack: float) -> None:
    got = advanced_composition(eps, slack)
    ref = kairouz_reference(eps, slack)
    assert ref <= got.epsilon <= ref * (1 + 1e-9)
    assert got.delta == pytest.approx(slack)  # pure costs: δ = δ̃


def test_advanced_delta_combines_the_costs_deltas() -> None:
    got = advanced_composition([Budget(0.1, 1e-6)] * 10, 1e-5)
    expected = 1 - (1 - Fraction(1, 10**5)) * (1 - Fraction(1, 10**6)) ** 10
    assert got.delta_exact == expected


@settings(max_examples=40, deadline=None)
@given(st.lists(eps_values, min_size=1, max_size=10), st.sampled_from([1e-4, 1e-2, 0.1]))
def test_advanced_is_valid_for_randomized_response(eps: list[float], slack: float) -> None:
    """Heterogeneous case: the reported ε̃ really is (ε̃, δ̃)-DP for the worst case."""
    got = advanced_composition(eps, slack).epsilon
    assert rr_delta(eps, got) <= slack * (1 + 1e-9)


@pytest.mark.parametrize(
    ("eps", "k", "slack"), [(0.01, 1000, 1e-6), (0.1, 500, 1e-5), (0.001, 10000, 1e-8)]
)
def test_advanced_is_valid_and_tight_for_many_small_costs(eps: float, k: int, slack: float) -> None:
    got = advanced_composition([eps] * k, slack).epsilon
    assert rr_delta_homogeneous(eps, k, got) <= slack
    optimal = brentq(lambda t: rr_delta_homogeneous(eps, k, t) - slack, 0, k * eps)
    assert got <= 1.3 * optimal  # the bound is near-optimal here
    assert got < 0.6 * k * eps  # and far better than basic composition


@settings(max_examples=80, deadline=None)
@given(eps_values, st.integers(min_value=1, max_value=300), slacks)
def test_advanced_is_never_worse_than_drv(eps: float, k: int, slack: float) -> None:
    kov = advanced_composition([eps] * k, slack)
    drv = drv_composition(eps, k, slack)
    assert kov.epsilon_exact <= drv.epsilon_exact
    assert kov.epsilon_exact <= eps * k * (1 + Fraction(1, 10**12))


def test_drv_formula() -> None:
    eps, k, slack = 0.1, 100, 1e-6
    ref = math.sqrt(2 * k * math.log(1 / slack)) * eps + k * eps * math.expm1(eps)
    got = drv_composition(eps, k, slack)
    assert ref <= got.epsilon <= ref * (1 + 1e-9)
    assert got.delta == pytest.approx(slack)
    assert drv_composition(5.0, 3, slack).epsilon == 15.0  # min with basic


def test_slack_must_be_positive() -> None:
    with pytest.raises(InvalidParameterError, match="delta_slack must be > 0"):
        advanced_composition([0.1], 0)


# --- zCDP -------------------------------------------------------------------------
def test_zcdp_sum_and_pure_conversion() -> None:
    assert dp_to_zcdp(0.5) == Fraction(1, 8)
    total = zcdp_composition([Budget(0.5), Budget(1, 1e-6, rho=0.1)])
    assert total == Fraction(1, 8) + Fraction(1, 10)
    with pytest.raises(InvalidParameterError, match="no zCDP parameter rho"):
        zcdp_composition([Budget(1, 1e-6)])


@pytest.mark.parametrize(
    ("rho", "delta"), [(1e-8, 1e-6), (1e-4, 1e-9), (0.01, 1e-6), (0.5, 1e-6), (5, 1e-5), (50, 1e-3)]
)
def test_cks_conversion_is_valid_and_tight_for_the_gaussian(rho: float, delta: float) -> None:
    eps = zcdp_to_dp(rho, delta).epsilon
    assert gaussian_delta(rho, eps) <= delta  # the Gaussian is ρ-zCDP, so this must hold
    exact = brentq(lambda e: gaussian_delta(rho, e) - delta, 0, 2 * eps)
    assert eps <= 1.25 * exact
    assert eps < zcdp_to_dp_simple(rho, delta).epsilon


@settings(max_examples=50, deadline=None)
@given(
    st.floats(min_value=1e-9, max_value=100, allow_nan=False),
    st.sampled_from([1e-12, 1e-9, 1e-6, 1e-3, 0.1]),
)
def test_cks_never_above_the_classic_conversion(rho: float, delta: float) -> None:
    cks = zcdp_to_dp(rho, delta)
    simple = zcdp_to_dp_simple(rho, delta)
    assert cks.epsilon_exact <= simple.epsilon_exact
    assert cks.rho_exact == Fraction(repr(rho))
    classic = rho + 2 * math.sqrt(rho * math.log(1 / delta))
    assert simple.epsilon >= classic  # rounded up, never down


@pytest.mark.parametrize(("eps", "delta"), [(1.0, 1e-6), (0.1, 1e-9), (8.0, 1e-5)])
def test_largest_rho_is_verified_and_nearly_maximal(eps: float, delta: float) -> None:
    rho = largest_rho(eps, delta)
    assert zcdp_to_dp(rho, delta).epsilon_exact <= Fraction(repr(eps))
    assert zcdp_to_dp(float(rho) * 1.001, delta).epsilon > eps


# --- the best of all -------------------------------------------------------------------
def test_tightest_picks_basic_for_few_large_costs_and_advanced_for_many_small() -> None:
    assert tightest_composition([1.0, 0.5], 1e-6) == Budget(1.5)
    many = tightest_composition([0.01] * 1000, 1e-6)
    assert many.epsilon < 2 and many.delta == pytest.approx(1e-6)


def test_tightest_uses_zcdp_for_gaussian_releases() -> None:
    # 100 Gaussian releases, each (0.1, 1e-8)-DP and 0.001-zCDP
    gauss = [Budget(0.1, 1e-8, rho=0.001)] * 100
    total = tightest_composition(gauss, 1e-5)
    assert total.epsilon <= zcdp_to_dp(0.1, Fraction(1, 10**5) - 0).epsilon
    assert (
        total.epsilon
        < advanced_composition(gauss, Fraction(1, 10**5) - Fraction(100, 10**8)).epsilon
    )
    # with no δ allowed, only basic composition applies
    assert tightest_composition([0.01] * 1000, 0) == Budget(10)


@settings(max_examples=60, deadline=None)
@given(st.lists(budgets, max_size=12), st.sampled_from([0.0, 1e-6, 1e-3]))
def test_tightest_is_never_worse_than_basic(costs: list[Budget], delta: float) -> None:
    tight = tightest_composition(costs, delta)
    basic = basic_composition(costs)
    if basic.delta_exact <= Fraction(repr(delta)):
        assert tight.epsilon_exact <= basic.epsilon_exact
        assert tight.delta_exact <= Fraction(repr(delta))
    else:  # nothing fits: basic composition is reported
        assert tight == basic
