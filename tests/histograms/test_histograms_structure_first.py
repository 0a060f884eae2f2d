"""StructureFirst: privacy of the boundary sampler, budget split, noise."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit import histograms
from dpkit._checks import exact
from dpkit.errors import InvalidParameterError
from dpkit.histograms.structure_first import (
    default_n_bins,
    sample_structure,
    sample_structure_joint,
    split_budget,
    structure_probabilities,
)


def _worst_log_ratio(p: dict[tuple[int, ...], float], q: dict[tuple[int, ...], float]) -> float:
    return max(abs(math.log(p[s]) - math.log(q[s])) for s in p)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(3, 6).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 6), min_size=n, max_size=n),
            st.integers(0, n - 1),
            st.sampled_from([-1, 1]),
            st.integers(2, n - 1),
        )
    ),
    st.sampled_from([0.5, 2.0, 8.0]),
)
def test_exact_structure_distribution_is_epsilon1_dp(case: tuple, epsilon: float) -> None:
    # Claim: for counts in [0, F] and neighbours differing by 1 in one count,
    # every structure's probability changes by at most a factor e^{eps_1}
    # (utility sensitivity 2F + 1 per draw, eps_1/(k-1) per draw).
    counts, position, step, k = case
    f = 6
    x = np.array(counts, dtype=float)
    y = x.copy()
    y[position] = min(f, max(0, y[position] + step))
    p = structure_probabilities(x, k, epsilon, 2 * f + 1)
    q = structure_probabilities(y, k, epsilon, 2 * f + 1)
    assert sum(p.values()) == pytest.approx(1.0)
    assert _worst_log_ratio(p, q) <= epsilon + 1e-9
    # The joint sampler: one exponential mechanism over whole structures.
    pj = structure_probabilities(x, k, epsilon, 2 * f + 1, sampler="joint")
    qj = structure_probabilities(y, k, epsilon, 2 * f + 1, sampler="joint")
    assert _worst_log_ratio(pj, qj) <= epsilon + 1e-9
    # Median variant: SAE has sensitivity 1 without any bound on counts.
    pm = structure_probabilities(x * 7, k, epsilon, 1.0, "sae")
    y7 = x * 7
    y7[position] += step if y7[position] + step >= 0 else -step
    qm = structure_probabilities(y7, k, epsilon, 1.0, "sae")
    assert _worst_log_ratio(pm, qm) <= epsilon + 1e-9


def test_the_f_dependent_constant_is_needed_for_sse() -> None:
    # With SAE's constant 1 wrongly used for SSE, a neighbouring pair breaks
    # the guarantee: SSE moves by up to 2F + 1 when one count moves by 1.
    f, eps = 20, 2.0
    x = np.array([0.0, f, 0.0, 0.0])
    y = np.array([0.0, f, 1.0, 0.0])
    right = _worst_log_ratio(
        structure_probabilities(x, 3, eps, 2 * f + 1), structure_probabilities(y, 3, eps, 2 * f + 1)
    )
    wrong = _worst_log_ratio(
        structure_probabilities(x, 3, eps, 1.0), structure_probabilities(y, 3, eps, 1.0)
    )
    assert right <= eps
    assert wrong > eps


def test_empirical_audit_of_the_boundary_sampler_on_a_neighbouring_pair() -> None:
    # The real sampler (dpkit.mechanisms.exponential) on n = 4, k = 3: the
    # empirical frequencies match the exact law, and the frequency ratios of the
    # neighbours stay within e^{eps_1} up to sampling error. Seeded.
    from dpkit.mechanisms import as_source

    f, eps1, runs = 3, 3.0, 4000
    x = np.array([0.0, 3.0, 3.0, 0.0])
    y = np.array([0.0, 3.0, 2.0, 0.0])
    results = {}
    for name, counts in (("x", x), ("y", y)):
        source = as_source(np.random.default_rng(17 if name == "x" else 18))
        seen = Counter(
            tuple(sample_structure(counts, 3, eps1, 2 * f + 1, "sse", source).tolist())
            for _ in range(runs)
        )
        exact_law = structure_probabilities(counts, 3, eps1, 2 * f + 1)
        for structure, probability in exact_law.items():
            frequency = seen[structure] / runs
            se = math.sqrt(probability * (1 - probability) / runs)
            assert abs(frequency - probability) < 5 * se + 1e-3, (structure, frequency, probability)
        results[name] = {s: seen[s] / runs for s in exact_law}
    for structure in results["x"]:
        px, py = results["x"][structure], results["y"][structure]
        if min(px, py) > 0.05:  # enough samples for a meaningful ratio
            # 5% relative slack: the sampling error of frequencies above 0.05.
            assert math.log(px / py) <= eps1 + 0.25
            assert math.log(py / px) <= eps1 + 0.25


def test_joint_sampler_draws_from_the_exact_joint_law() -> None:
    # Forward filtering / backward sampling reproduces P(H) ∝ exp(-eps1 SSE(H)/(2Δ)),
    # computed independently by enumeration. Seeded, 4,000 draws, 5 SE.
    from dpkit.mechanisms import as_source

    x = np.array([0.0, 3.0, 3.0, 0.0, 1.0])
    source = as_source(np.random.default_rng(21))
    runs = 4000
    seen = Counter(
        tuple(sample_structure_joint(x, 3, 3.0, 7.0, "sse", source).tolist()) for _ in range(runs)
    )
    law = structure_probabilities(x, 3, 3.0, 7.0, sampler="joint")
    for structure, probability in law.items():
        se = math.sqrt(probability * (1 - probability) / runs)
        assert abs(seen[structure] / runs - probability) < 5 * se + 1e-3


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        ([5.0, 5.0, 0.0, 9.0, 0.0, 9.0], [0, 2, 3, 4, 5, 6]),  # the one merge leftmost
        ([0.0, 9.0, 0.0, 9.0, 5.0, 5.0], [0, 1, 2, 3, 4, 6]),  # ... and rightmost
    ],
)
def test_every_boundary_can_reach_its_last_possible_end(
    x: list[float], expected: list[int]
) -> None:
    # The rows of T are cut at the ends the draws can read (row j at ends <= n - k + j); a cut one
    # short would give the leftmost merge probability 0. Near-deterministic draws
    # (epsilon_1 = 10^4) find the only zero-cost 5-bin structure either way.
    from dpkit.mechanisms import as_source

    source = as_source(np.random.default_rng(5))
    got = sample_structure(np.array(x), 5, 1e4, 21.0, "sse", source)
    assert got.tolist() == expected


def test_default_number_of_bins_is_public_and_grows_with_epsilon() -> None:
    assert default_n_bins(81, 0.01, 100) == round(1.2 * math.sqrt(81))
    assert (
        default_n_bins(81, 0.01, 100) < default_n_bins(81, 0.1, 100) < default_n_bins(81, 1.0, 100)
    )
    assert default_n_bins(52, 1.0, 2000) == 52  # small noise: unit bins, i.e. Laplace
    assert default_n_bins(40, 0.1, None) == 10
    h = histograms.structure_first(np.ones(52), 1.0, max_count=2000, rng=0)
    assert h.n_bins == 52 and h.details["epsilon_values"] == 1.0


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-6, 100, allow_nan=False), st.floats(0.01, 0.99))
def test_budget_split_never_exceeds_epsilon(epsilon: float, share: float) -> None:
    first, second = split_budget(epsilon, share)
    assert 0 < first and 0 < second
    assert exact(first) + exact(second) <= exact(epsilon)
    assert Fraction(first) == pytest.approx(Fraction(share) * Fraction(epsilon), rel=1e-12)


def test_values_get_the_stated_noise_given_the_structure() -> None:
    # k = 1: one public bin; its mean gets Lap(1/(eps·n)) with the whole budget.
    x = np.arange(20, dtype=float)
    gen = np.random.default_rng(8)
    runs = [
        histograms.structure_first(x, 0.5, n_bins=1, max_count=30, rng=gen) for _ in range(2000)
    ]
    means = np.array([r.bin_estimates[0] for r in runs])
    sd = math.sqrt(2) / (0.5 * 20)
    assert runs[0].details["epsilon_values"] == 0.5 and runs[0].details["epsilon_structure"] == 0.0
    assert runs[0].errors[0] == pytest.approx(sd, rel=1e-3)
    assert abs(means.mean() - x.mean()) < 5 * sd / math.sqrt(2000)
    assert means.std() == pytest.approx(sd, rel=0.1)


def test_structure_and_answers_are_consistent() -> None:
    x = np.random.default_rng(1).poisson(20, 40).astype(float)
    h = histograms.structure_first(x, 1.0, n_bins=6, max_count=60, rng=3)
    assert h.n_bins == 6 and h.bins[0] == 0 and h.bins[-1] == 40
    assert np.all(np.diff(h.bins) >= 1)
    widths = np.diff(h.bins)
    assert np.allclose(h.estimates, np.repeat(h.bin_estimates, widths))
    assert h.answer(0, 39) == pytest.approx(h.estimates.sum())
    eps1, eps2 = h.details["epsilon_structure"], h.details["epsilon_values"]
    assert eps1 == pytest.approx(0.05) and exact(eps1) + exact(eps2) <= 1
    assert h.errors == pytest.approx(np.repeat(math.sqrt(2) * h.details["scale"] / widths, widths))
    median = histograms.structure_first(x, 1.0, n_bins=6, statistic="median", rng=3)
    assert median.details["utility_sensitivity"] == 1.0 and median.details["max_count"] is None
    every = histograms.structure_first(x, 1.0, n_bins=40, max_count=60, rng=3)
    assert every.details["epsilon_values"] == 1.0  # k = n: the structure is public


def test_counts_above_the_bound_are_clipped_for_the_structure_only() -> None:
    x = np.array([0.0, 0.0, 1000.0, 1000.0, 0.0])
    h = histograms.structure_first(x, 50.0, n_bins=5, max_count=10, rng=0)
    assert h.answer(0, 4) == pytest.approx(2000, abs=5)


def test_validation() -> None:
    x = [1.0, 2.0, 3.0]
    with pytest.raises(InvalidParameterError, match="max_count"):
        histograms.structure_first(x, 1.0)
    for bad in (0, -1, float("inf")):
        with pytest.raises(InvalidParameterError):
            histograms.structure_first(x, 1.0, max_count=bad)
    for share in (0, 1, 1.5):
        with pytest.raises(InvalidParameterError):
            histograms.structure_first(x, 1.0, max_count=5, structure_share=share)
    with pytest.raises(InvalidParameterError):
        histograms.structure_first(x, 1.0, max_count=5, n_bins=4)
    with pytest.raises(InvalidParameterError):
        histograms.structure_first(x, 1.0, max_count=5, statistic="mode")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        histograms.structure_first(x, 1.0, max_count=5, sampler="greedy")  # type: ignore[arg-type]
