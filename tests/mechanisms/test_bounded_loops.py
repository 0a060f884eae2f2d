"""Every loop ends: hostile parameters are refused up front, searches and samplers are capped.

Each test runs the call under a small wall-clock bound (``finishes_within``): a
loop that does not end fails the test instead of hanging the suite.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from tests._timing import finishes_within

from dpkit import Accountant, Budget
from dpkit._checks import (
    MIN_EPSILON,
    MIN_SHARE_EPSILON,
    check_bounds,
    check_delta,
    check_epsilon,
    check_level,
    check_sensitivity,
    exact,
    float_at_most,
)
from dpkit.errors import InvalidParameterError
from dpkit.mechanisms import (
    DiscreteGaussian,
    Gaussian,
    Geometric,
    Laplace,
    RandomizedResponse,
    exponential,
)
from dpkit.mechanisms._base import discrete_laplace_tail_index, smallest_true
from dpkit.mechanisms._exact import discrete_gaussian, discrete_laplace
from dpkit.mechanisms._random import SamplingLimitError, rejection_rounds
from dpkit.mechanisms.gaussian import discrete_gaussian_half_width

HOSTILE_EPSILONS = [1e-100, 1e-300, 5e-324, 1e-12, 0.5e-9]


# -- public parameters: refused before anything else -----------------------------------


@pytest.mark.parametrize("epsilon", HOSTILE_EPSILONS)
def test_epsilon_below_the_floor_is_refused_with_a_fix(epsilon: float) -> None:
    with pytest.raises(InvalidParameterError, match=r"floor.*Use epsilon >= 1e-09"):
        check_epsilon(epsilon)
    assert check_epsilon(MIN_EPSILON) == MIN_EPSILON


def test_share_floor_is_the_samplers_limit() -> None:
    assert check_epsilon(1e-12, share=True) == 1e-12
    with pytest.raises(InvalidParameterError):
        check_epsilon(MIN_SHARE_EPSILON / 2, share=True)


@pytest.mark.parametrize(
    "call",
    [
        lambda: check_epsilon(10**400),
        lambda: check_delta(10**400),
        lambda: check_sensitivity(-(10**400)),
        lambda: check_bounds((0, 10**400)),
        lambda: check_level(10**400),
        lambda: check_bounds((-1e308, 1e308)),  # the width overflows
    ],
)
def test_numbers_beyond_a_double_are_invalid_parameters(call: Callable[[], Any]) -> None:
    with pytest.raises(InvalidParameterError):
        call()


@given(st.fractions(min_value=0, max_value=10**6))
def test_float_at_most_is_the_largest_float_not_above(value: Any) -> None:
    out = float_at_most(value)
    assert exact(out) <= value
    above = math.nextafter(out, math.inf)
    assert exact(above) > value or above == out


@pytest.mark.parametrize("epsilon", [1e-100, 1e-300, 5e-324, 1e-13])
@pytest.mark.parametrize(
    "build",
    [
        lambda e: Laplace(epsilon=e, sensitivity=1.0),
        lambda e: Geometric(epsilon=e),
        lambda e: Gaussian(epsilon=e, delta=1e-6, sensitivity=1.0),
        lambda e: DiscreteGaussian(epsilon=e, delta=1e-6),
        lambda e: RandomizedResponse(epsilon=e),
    ],
)
def test_mechanisms_refuse_hostile_epsilon_quickly(
    build: Callable[[float], Any], epsilon: float
) -> None:
    with finishes_within(2.0), pytest.raises(InvalidParameterError):
        build(epsilon)


@pytest.mark.parametrize(
    "build",
    [
        lambda: Laplace(epsilon=1e-9, sensitivity=1e300),  # scale overflows a double
        lambda: Laplace(epsilon=1e-12, sensitivity=1.0, size=4096),  # beyond 2**52 grid steps
        lambda: Geometric(epsilon=1e-12, sensitivity=10**4),
        lambda: Laplace(epsilon=1.0, sensitivity=5e-324),  # no normal grid step
        lambda: Gaussian(epsilon=1e-9, delta=1e-300, sensitivity=1e300),
        lambda: DiscreteGaussian(epsilon=1e-9, delta=1e-300, sensitivity=1e300),
    ],
)
def test_scales_the_samplers_cannot_hold_are_refused_at_construction(
    build: Callable[[], Any],
) -> None:
    with finishes_within(2.0), pytest.raises(InvalidParameterError, match=r"epsilon|sensitivity"):
        build()


def test_a_refused_mechanism_charges_nothing() -> None:
    accountant = Accountant(Budget(1.0))
    from dpkit.mechanisms import laplace

    with pytest.raises(InvalidParameterError):
        laplace(1.0, sensitivity=1e300, epsilon=1e-9, accountant=accountant)
    assert accountant.spent.epsilon == 0


@pytest.mark.parametrize("epsilon", [1e-9, 1e300 / 1e299, 700.0, 1e9])
def test_extreme_but_valid_parameters_release_within_a_bound(epsilon: float) -> None:
    with finishes_within(5.0), pytest.warns(Warning) if epsilon > 10 else _nothing():
        for mech in (
            Laplace(epsilon=epsilon, sensitivity=1.0),
            Geometric(epsilon=epsilon),
            Gaussian(epsilon=epsilon, delta=1e-9, sensitivity=1.0),
        ):
            release = mech.release(3.0, rng=np.random.default_rng(1))
            assert math.isfinite(release.ci[0]) and math.isfinite(release.ci[1])


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# -- confidence-interval tail searches -------------------------------------------------


def _tail_index_by_brute_force(scale: float, alpha: float) -> int:
    p = math.exp(-1.0 / scale)
    k = 0
    while 2.0 * math.exp((k + 1) * (-1.0 / scale)) / (1.0 + p) * (1 + 1e-12) > alpha:
        k += 1
    return k


@pytest.mark.parametrize("scale", [0.01, 0.3, 1.0, 2.5, 17.0, 400.0])
@pytest.mark.parametrize("alpha", [0.5, 0.05, 1e-6])
def test_laplace_tail_index_is_still_the_smallest(scale: float, alpha: float) -> None:
    assert discrete_laplace_tail_index(scale, alpha) == _tail_index_by_brute_force(scale, alpha)


@pytest.mark.parametrize("scale", [1e103, 1e300, 2.0**52, 1e-300])
def test_tail_searches_end_at_any_scale(scale: float) -> None:
    """The nudge loop that replaced these never ended at scale 1e103 (issue 26, class C7)."""
    with finishes_within(2.0):
        k = discrete_laplace_tail_index(scale, 0.05)
    assert k >= 0
    with finishes_within(2.0):
        assert discrete_gaussian_half_width(10**200, 0.05) > 0


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**70) | st.integers(0, 100), st.integers(0, 2**70) | st.integers(0, 100))
def test_smallest_true_finds_the_threshold_of_any_monotone_predicate(
    threshold: int, guess: int
) -> None:
    calls = 0

    def ok(k: int) -> bool:
        nonlocal calls
        calls += 1
        return k >= threshold

    reach = guess.bit_length() + 64
    if threshold > guess + 2 ** (reach - 1):  # beyond the search's stated reach: an error
        with pytest.raises(ValueError):
            smallest_true(ok, guess)
    else:
        assert smallest_true(ok, guess) == threshold
    assert calls <= 1 + reach + 2 * reach + 2


def test_smallest_true_reports_a_predicate_that_never_holds() -> None:
    with finishes_within(1.0), pytest.raises(ValueError):
        smallest_true(lambda k: False, 0)


# -- rejection samplers: a public cap with a negligible failure probability ------------


class _StuckSource:
    """A hostile random source: every uniform draw is its largest value, every bit True.

    With it every rejection loop rejects forever (or, for the geometric sampler,
    never stops succeeding): only the round cap ends the call.
    """

    def __init__(self, low: bool = False) -> None:
        self.low = low

    def uniform_below(self, bound: NDArray[np.int64]) -> NDArray[np.int64]:
        b = np.asarray(bound, dtype=np.int64)
        return np.zeros_like(b) if self.low else b - 1

    def bits(self, size: int) -> NDArray[np.bool_]:
        return np.ones(size, dtype=bool)

    def words(self, size: int) -> NDArray[np.uint64]:
        return np.full(size, np.iinfo(np.uint64).max, dtype=np.uint64)

    def generator(self) -> np.random.Generator:
        return np.random.default_rng(0)


@pytest.mark.parametrize(
    "call",
    [
        lambda: discrete_laplace(_StuckSource(), 7, 3, 10),  # every proposal rejected
        lambda: discrete_laplace(_StuckSource(low=True), 7, 3, 10),  # endless geometric
        lambda: discrete_gaussian(_StuckSource(), 50, 1, 10),
        lambda: exponential(
            [0.0, 0.0, 0.0, -50.0], epsilon=1.0, sensitivity=1.0, rng=_StuckSource()
        ),
        lambda: RandomizedResponse(epsilon=1.0, categories=[0, 1, 2]).randomise_codes(
            np.zeros(5, dtype=np.int64), rng=_StuckSource()
        ),
    ],
)
def test_rejection_loops_stop_at_their_public_cap(call: Callable[[], Any]) -> None:
    with finishes_within(20.0), pytest.raises(SamplingLimitError, match="round limit"):
        call()


def test_k_ary_local_response_stops_at_its_cap() -> None:
    from dpkit.local._sampling import RationalResponse

    response = RationalResponse(epsilon=1.0, k=5)
    with finishes_within(20.0), pytest.raises(SamplingLimitError):
        response.sample(np.zeros(10, dtype=np.int64), _StuckSource())  # type: ignore[arg-type]


def test_the_cap_has_the_stated_failure_probability() -> None:
    """R rounds at acceptance a leave a draw pending w.p. (1-a)^R <= (3/4)^512 < 2^-212."""
    for acceptance in (0.25, 0.5, 1e-3, 1e-6):
        rounds = len(rejection_rounds(acceptance))
        assert rounds * -math.log2(1 - acceptance) >= 512 * -math.log2(0.75) - 1e-6
    assert 48 + 512 * math.log2(0.75) < -164  # 2^48 pending draws: still below 2^-164


def _cks_acceptance(sigma2: float) -> float:
    """P(accept) of one round of CKS Algorithm 3 (discrete Laplace proposal, t = floor(sigma) + 1)."""
    t = math.floor(math.sqrt(sigma2)) + 1
    p = math.exp(-1.0 / t)
    ys = np.arange(0, int(80 * t) + 10)
    weights = np.where(ys == 0, 1.0, 2.0) * p**ys * (1 - p) / (1 + p)
    return float(np.sum(weights * np.exp(-((ys - sigma2 / t) ** 2) / (2 * sigma2))))


@pytest.mark.parametrize("sigma2", [1, 2, 3, 4, 5, 10, 99, 100, 1e4, 1e6])
def test_discrete_gaussian_accepts_above_a_quarter(sigma2: float) -> None:
    """The per-round acceptance the discrete Gaussian's cap relies on (comment in _exact.py)."""
    assert _cks_acceptance(sigma2) > 0.44
