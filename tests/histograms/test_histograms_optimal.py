"""The v-optimal dynamic programme against brute force (Xu et al. 2013, Section 2)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.histograms._optimal import (
    backtrack,
    bin_statistic,
    interval_costs,
    optimal_histogram,
    optimal_rows,
    optimal_table,
)


def _cost(segment: np.ndarray, objective: str) -> float:
    if objective == "sse":
        return float(np.sum((segment - segment.mean()) ** 2))
    return float(np.sum(np.abs(segment - np.median(segment))))


def _structure_cost(x: np.ndarray, boundaries: np.ndarray, objective: str) -> float:
    return sum(_cost(x[a:b], objective) for a, b in itertools.pairwise(boundaries))


def _brute_force(x: np.ndarray, k: int, objective: str) -> float:
    n = x.size
    return min(
        _structure_cost(x, np.array([0, *cuts, n]), objective)
        for cuts in itertools.combinations(range(1, n), k - 1)
    )


counts_strategy = st.lists(
    st.one_of(st.integers(0, 30).map(float), st.floats(0, 30, allow_nan=False)),
    min_size=1,
    max_size=7,
)


@settings(max_examples=120, deadline=None)
@given(counts_strategy, st.sampled_from(["sse", "sae"]))
def test_table_equals_brute_force(values: list[float], objective: str) -> None:
    x = np.array(values)
    n = x.size
    table, starts = optimal_table(interval_costs(x, objective), n)
    for k in range(1, n + 1):
        best = _brute_force(x, k, objective)
        assert table[k, n] == pytest.approx(best, rel=1e-9, abs=1e-7)
        boundaries = backtrack(starts, k)
        assert boundaries[0] == 0 and boundaries[-1] == n
        assert np.all(np.diff(boundaries) >= 1)
        assert _structure_cost(x, boundaries, objective) == pytest.approx(best, rel=1e-9, abs=1e-7)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=12),
    st.sampled_from(["sse", "sae"]),
)
def test_interval_costs_match_direct_computation(values: list[float], objective: str) -> None:
    x = np.array(values)
    costs = interval_costs(x, objective)
    n = x.size
    for a in range(n + 1):
        for b in range(n + 1):
            if a >= b:
                assert costs[a, b] == np.inf
            else:
                assert costs[a, b] == pytest.approx(_cost(x[a:b], objective), rel=1e-7, abs=1e-6)


def test_known_example_from_the_paper() -> None:
    # Figure 3 of the source: the optimal 3-bin histogram of this sequence is
    # {(1,3), (4,5), (6,7)} with error 2.67 (1-based, inclusive bins).
    x = np.array([1.0, 2.0, 1.0, 3.0, 5.0, 1.0, 1.0])
    boundaries, error = optimal_histogram(x, 3)
    assert boundaries.tolist() == [0, 3, 5, 7]
    assert error == pytest.approx(2 / 3 + 2 + 0)


def test_rows_reject_impossible_bin_counts() -> None:
    costs = interval_costs(np.ones(4))
    with pytest.raises(ValueError):
        next(optimal_rows(costs, 5))


def test_bin_statistic() -> None:
    x = np.array([1.0, 3.0, 5.0, 10.0, 0.0])
    b = np.array([0, 3, 5])
    assert bin_statistic(x, b, "mean").tolist() == [3.0, 5.0]
    assert bin_statistic(x, b, "median").tolist() == [3.0, 5.0]


def test_exact_table_over_every_k_at_n_1024_is_monotone() -> None:
    # The reference table at a realistic size (its speed is measured in
    # benchmarks/histograms.py, not here): one bin per unit costs nothing and
    # more bins never hurt.
    x = np.random.default_rng(0).poisson(30, 1024).astype(float)
    table, _ = optimal_table(interval_costs(x), 1024)
    assert table[1024, 1024] == pytest.approx(0.0, abs=1e-6)
    assert np.all(np.diff(table[1:, 1024]) <= 1e-6)
