"""Large domains: oracles never materialise a domain given as a size.

OLH and Hadamard response perturb in O(n) memory whatever d (checked with
tracemalloc at d = 2^26 and 2^40); estimates over declared candidates are
unbiased with the closed-form variance (seeded repetitions, z-test and variance
ratio), and the same check refutes a deliberately broken variant (OLH hashing
modulo a prime below d, where values P apart share every hash).
"""

from __future__ import annotations

import math
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpkit._checks import MEMORY_CEILING
from dpkit.errors import InvalidParameterError
from dpkit.local import (
    GeneralizedRandomizedResponse,
    HadamardResponse,
    OptimizedLocalHashing,
    OptimizedUnaryEncoding,
    SymmetricUnaryEncoding,
    best_oracle,
)
from dpkit.local.frequency_oracles import HASH_PRIME, LARGE_HASH_PRIME, _mulmod61

#: Peak bytes allowed for perturbing 10,000 reports; one array of d = 2^26 int64 is 512 MiB.
PEAK_BOUND = 16 * 2**20


@pytest.mark.parametrize("cls", [OptimizedLocalHashing, HadamardResponse])
@pytest.mark.parametrize("d", [2**26, 2**40])
def test_perturbation_memory_does_not_grow_with_the_domain(cls: Any, d: int) -> None:
    oracle = cls(epsilon=1.0, domain=d)
    values = np.random.default_rng(1).integers(0, d, 10_000)
    oracle.perturb(values[:10], rng=0)  # compiled kernels load outside the measurement
    tracemalloc.start()
    try:
        reports = oracle.perturb(values, rng=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BOUND
    assert len(reports) == 10_000
    assert oracle.d == d and len(oracle.domain) == d  # a range, not a list


def _z_and_ratio(
    oracle: Any, values: np.ndarray, candidates: list[int], reps: int
) -> tuple[float, float]:
    """Largest |z| of the mean estimate and the variance ratio range, over seeded repetitions."""
    truth = np.array([(values == c).sum() for c in candidates])
    rng = np.random.default_rng(2026)
    estimates = np.array(
        [
            oracle.estimate(
                oracle.perturb(values, rng=int(rng.integers(2**31))), candidates=candidates
            ).counts
            for _ in range(reps)
        ]
    )
    variance = oracle.variance(values.size, counts=truth)
    z = (estimates.mean(axis=0) - truth) / np.sqrt(variance / reps)
    ratio = estimates.var(axis=0, ddof=1) / variance
    return float(np.abs(z).max()), float(np.abs(np.log(ratio)).max())


def _spread_values(d: int, n: int) -> tuple[np.ndarray, list[int]]:
    """Values on four far-apart points of the domain, and candidates incl. an absent one."""
    points = np.array([3, d // 3, d // 2 + 5, d - 1])
    values = points[np.random.default_rng(7).integers(0, 4, n)]
    return values, [*map(int, points), 11]


@pytest.mark.parametrize(
    ("cls", "d"),
    [
        (OptimizedLocalHashing, 2**26),
        (OptimizedLocalHashing, 2**40),
        (HadamardResponse, 2**26),
        (HadamardResponse, 2**40),
    ],
)
def test_candidate_estimates_are_unbiased_with_the_closed_form_variance(cls: Any, d: int) -> None:
    """Claim: E[count_v] = n_v and Var = the oracle's formula, at d far beyond memory.

    80 seeded surveys of 2,000 reports; |z| < 4.5 over 5 candidates and the
    empirical variance within a factor 1.8 of the formula (a chi-square with 79
    degrees of freedom over 79 is outside [1/1.8, 1.8] with probability < 1e-4).
    """
    values, candidates = _spread_values(d, 2000)
    z, log_ratio = _z_and_ratio(cls(epsilon=1.0, domain=d), values, candidates, reps=80)
    assert z < 4.5
    assert log_ratio < math.log(1.8)


def test_the_check_refutes_olh_hashing_modulo_a_prime_below_d() -> None:
    """Broken variant: OLH with P = 2^31 - 1 at d = 2^40: v and v + P share every hash."""
    d = 2**40
    oracle = OptimizedLocalHashing(epsilon=1.0, domain=d)
    oracle.prime = HASH_PRIME  # the broken variant
    values = np.full(2000, 5 + HASH_PRIME)
    z, _ = _z_and_ratio(oracle, values, [5, 5 + HASH_PRIME], reps=20)
    assert z > 20  # 5 is credited with all of 5 + P's reports


@pytest.mark.parametrize(
    "cls",
    [
        GeneralizedRandomizedResponse,
        OptimizedUnaryEncoding,
        SymmetricUnaryEncoding,
        OptimizedLocalHashing,
        HadamardResponse,
    ],
)
def test_candidate_counts_are_the_full_domain_counts(cls: Any) -> None:
    oracle = cls(epsilon=1.5, domain=40)
    reports = oracle.perturb(np.arange(400) % 40, rng=3)
    full = oracle.estimate(reports)
    picked = oracle.estimate(reports, candidates=[7, 0, 39])
    assert picked.domain == (7, 0, 39)
    np.testing.assert_array_equal(picked.counts, full.counts[[7, 0, 39]])
    np.testing.assert_array_equal(picked.variance, full.variance[[7, 0, 39]])


def test_candidates_with_labels_are_labels() -> None:
    oracle = OptimizedLocalHashing(epsilon=1.0, domain=["a", "b", "c"])
    reports = oracle.perturb(["a", "c", "c"], rng=1)
    assert oracle.estimate(reports, candidates=["c"]).domain == ("c",)
    with pytest.raises(InvalidParameterError, match="declared domain"):
        oracle.estimate(reports, candidates=["z"])


@pytest.mark.parametrize("candidates", [[], [1, 1], [2**40], [-1], "abc", [True]])
def test_bad_candidates_are_refused(candidates: Any) -> None:
    oracle = OptimizedLocalHashing(epsilon=1.0, domain=2**30)
    reports = oracle.perturb([1, 2, 3], rng=1)
    with pytest.raises(InvalidParameterError):
        oracle.estimate(reports, candidates=candidates)


@pytest.mark.parametrize("cls", [OptimizedLocalHashing, HadamardResponse])
def test_a_full_domain_estimate_beyond_memory_asks_for_candidates(cls: Any) -> None:
    oracle = cls(epsilon=1.0, domain=2**30)
    reports = oracle.perturb([1, 2, 3], rng=1)
    with pytest.raises(InvalidParameterError, match="candidates="):
        oracle.estimate(reports)


@pytest.mark.parametrize(
    "cls", [GeneralizedRandomizedResponse, OptimizedUnaryEncoding, SymmetricUnaryEncoding]
)
def test_oracles_that_need_the_domain_refuse_huge_ones_up_front(cls: Any) -> None:
    with pytest.raises(InvalidParameterError, match="OLH or Hadamard"):
        cls(epsilon=1.0, domain=2**40)


def test_unary_reports_beyond_the_memory_ceiling_are_refused_before_any_work() -> None:
    oracle = OptimizedUnaryEncoding(epsilon=1.0, domain=2**30)
    n = MEMORY_CEILING // 2**30 + 1
    with pytest.raises(InvalidParameterError, match="batches"):
        oracle.perturb(np.zeros(n, dtype=np.int64), rng=1)


def test_best_oracle_for_a_huge_domain_is_olh() -> None:
    assert isinstance(best_oracle(epsilon=1.0, domain=2**40), OptimizedLocalHashing)


def test_values_outside_a_sized_domain_are_refused() -> None:
    oracle = HadamardResponse(epsilon=1.0, domain=2**40)
    for bad in ([2**40], [-1], [1.5], [True], ["1"]):
        with pytest.raises(Exception, match="outside the declared domain"):
            oracle.perturb(np.asarray(bad, dtype=object), rng=1)
    assert oracle.perturb_one(2**40 - 1, rng=1) >= 0


@given(st.integers(0, LARGE_HASH_PRIME - 1), st.integers(0, LARGE_HASH_PRIME - 1))
def test_the_61_bit_hash_product_is_exact(a: int, v: int) -> None:
    got = int(_mulmod61(np.array([a], dtype=np.int64), np.array([v], dtype=np.int64))[0])
    assert got == (a * v) % LARGE_HASH_PRIME
