"""The pure math of dpkit.tables.queries: splits, error bounds, utilities, thresholds."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dpkit._checks import exact
from dpkit.errors import InvalidParameterError
from dpkit.tables import queries as Q

# ------------------------------------------------------------------ budget splits


@pytest.mark.parametrize("weights", [[1.0, 1.0], [1.0, 2.0, 1.0], [3.0, 0.5], [1.0, 4.0, 9.0]])
def test_optimal_split_beats_every_point_of_a_simplex_grid(weights: list[float]) -> None:
    w = np.asarray(weights)
    best = Q.optimal_split(w)
    assert best.sum() == pytest.approx(1.0)
    objective = float(np.sum(w / best))
    grid = np.linspace(0.01, 0.99, 99)
    if w.size == 2:
        candidates = np.stack([grid, 1 - grid], axis=1)
    else:
        a, b = np.meshgrid(grid, grid)
        c = 1 - a - b
        ok = c > 0.005
        candidates = np.stack([a[ok], b[ok], c[ok]], axis=1)
    assert objective <= np.min(np.sum(w / candidates, axis=1)) + 1e-9


def test_variance_split_is_not_thirds() -> None:
    eq, es, ec = Q.variance_split(1.0)
    assert es / eq == pytest.approx(math.sqrt(2), rel=1e-9)
    assert ec == pytest.approx(eq, rel=1e-9)
    assert es > 0.4 and eq < 0.3
    a, b = Q.mean_split(0.3)
    assert a == pytest.approx(b, rel=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    eps=st.floats(min_value=1e-6, max_value=1e3, allow_nan=False),
    raw=st.lists(st.floats(min_value=0.01, max_value=1.0), min_size=1, max_size=5),
)
def test_split_epsilon_never_exceeds_the_charge(eps: float, raw: list[float]) -> None:
    fractions = np.asarray(raw) / np.sum(raw)
    assume(np.all(fractions > 1e-6))
    parts = Q.split_epsilon(eps, list(fractions))
    assert all(p > 0 for p in parts)
    total = sum((exact(p) for p in parts), Fraction(0))
    assert total <= exact(eps)
    assert float(total) == pytest.approx(eps, rel=1e-9)


def test_split_epsilon_rejects_bad_fractions() -> None:
    with pytest.raises(InvalidParameterError):
        Q.split_epsilon(1.0, [0.5, 0.6])
    with pytest.raises(InvalidParameterError):
        Q.split_epsilon(1.0, [1.5, -0.5])
    with pytest.raises(InvalidParameterError):
        Q.optimal_split([1.0, 0.0])


# ------------------------------------------------------------------ error bounds


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.floats(min_value=-5, max_value=20), min_size=1, max_size=30),
    h_s=st.floats(min_value=0, max_value=50),
    h_n=st.floats(min_value=0, max_value=10),
    u_s=st.floats(min_value=-1, max_value=1),
    u_n=st.floats(min_value=-1, max_value=1),
)
def test_mean_interval_contains_the_clipped_mean_when_noise_is_within_bounds(
    values: list[float], h_s: float, h_n: float, u_s: float, u_n: float
) -> None:
    lo, hi = 0.0, 10.0
    mid = 5.0
    x = np.clip(values, lo, hi)
    s, n = float(np.sum(x - mid)), len(x)
    noisy_s, noisy_n = s + u_s * h_s, n + u_n * h_n  # noise within its half-width
    low, high = Q.mean_interval(noisy_s, noisy_n, h_s, h_n, (lo, hi))
    assert float(low) - 1e-9 <= float(np.mean(x)) <= float(high) + 1e-9
    est = float(Q.mean_estimate(noisy_s, noisy_n, (lo, hi)))
    assert lo <= est <= hi


def test_mean_interval_is_the_whole_range_when_the_group_may_be_empty() -> None:
    low, high = Q.mean_interval(3.0, 2.0, 1.0, 5.0, (0.0, 10.0))
    assert (float(low), float(high)) == (0.0, 10.0)
    assert float(Q.mean_estimate(100.0, 0.0, (0.0, 10.0))) == 5.0


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.floats(min_value=-5, max_value=20), min_size=1, max_size=30),
    hs=st.tuples(
        st.floats(min_value=0, max_value=200), st.floats(min_value=0, max_value=30), st.floats(0, 5)
    ),
    us=st.tuples(st.floats(-1, 1), st.floats(-1, 1), st.floats(-1, 1)),
)
def test_variance_interval_contains_the_clipped_variance(
    values: list[float], hs: tuple[float, float, float], us: tuple[float, float, float]
) -> None:
    lo, hi = 0.0, 10.0
    x = np.clip(values, lo, hi) - 5.0
    q, s, n = float(np.sum(x * x)), float(np.sum(x)), len(x)
    noisy = (q + us[0] * hs[0], s + us[1] * hs[1], n + us[2] * hs[2])
    low, high = Q.variance_interval(*noisy, *hs, (lo, hi))
    truth = float(np.var(x))
    assert float(low) - 1e-7 <= truth <= float(high) + 1e-7
    est = float(Q.variance_estimate(*noisy, (lo, hi)))
    assert 0.0 <= est <= 25.0


def test_intervals_are_exact_when_there_is_no_noise() -> None:
    x = np.array([1.0, 2.0, 4.0, 9.0]) - 5.0
    low, high = Q.mean_interval(x.sum(), 4, 0.0, 0.0, (0.0, 10.0))
    assert float(low) == float(high) == pytest.approx(4.0)
    vlow, vhigh = Q.variance_interval((x * x).sum(), x.sum(), 4, 0.0, 0.0, 0.0, (0.0, 10.0))
    assert float(vlow) == pytest.approx(np.var(x)) and float(vhigh) == pytest.approx(np.var(x))


# ------------------------------------------------------------------ quantiles


def _codes(x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Reference grid-position counts by direct comparison with the grid points."""
    codes = np.zeros(2 * grid.size - 1)
    for v in x:
        j = np.searchsorted(grid, v, side="right") - 1
        codes[2 * j if grid[j] == v else 2 * j + 1] += 1
    return codes


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(st.integers(0, 10), min_size=0, max_size=40),
    q=st.floats(0, 1),
)
def test_quantile_utilities_match_the_definition(data: list[int], q: float) -> None:
    grid = np.arange(0.0, 11.0)  # points 0..10, data on and between them
    x = np.asarray(data, dtype=float) + np.where(np.arange(len(data)) % 3 == 0, 0.5, 0.0)
    x = np.clip(x, 0, 10)
    u = Q.quantile_utilities(_codes(x, grid), q)
    n = len(x)
    for j, c in enumerate(grid):
        below, above = np.sum(x < c), np.sum(x > c)
        assert u[j] == pytest.approx(-max(below - q * n, above - (1 - q) * n, 0.0))
    if n:
        # every exact q-quantile on the grid has the best utility, 0
        best = np.flatnonzero(u == 0)
        for j in best:
            assert np.sum(x < grid[j]) <= q * n + 1e-9 and np.sum(x > grid[j]) <= (1 - q) * n + 1e-9


def test_quantile_utility_sensitivity_is_max_q_one_minus_q() -> None:
    rng = np.random.default_rng(3)
    grid = np.linspace(0, 10, 21)
    for _ in range(200):
        x = np.round(rng.uniform(0, 10, rng.integers(1, 30)) * 2) / 2
        extra = np.round(rng.uniform(0, 10) * 4) / 4
        q = rng.uniform()
        u = Q.quantile_utilities(_codes(x, grid), q)
        u2 = Q.quantile_utilities(_codes(np.append(x, extra), grid), q)
        assert np.max(np.abs(u - u2)) <= max(q, 1 - q) + 1e-12


def test_grids() -> None:
    g = Q.uniform_grid((0.0, 1.0), 11)
    assert g[0] == 0.0 and g[-1] == pytest.approx(1.0) and g.size == 11
    with pytest.raises(InvalidParameterError):
        Q.uniform_grid((0.0, 1.0), 1)
    c = Q.coarse_grid()
    assert np.all(np.diff(c) > 0) and 0.0 in c and c[-1] == 2.0**60
    r = Q.coarse_grid((0.0, 1000.0))
    assert r[0] == 0.0 and r[-1] == 1000.0 and np.all(np.diff(r) > 0)


def test_em_rank_error_formula() -> None:
    assert Q.em_rank_error(1.0, 1.0, 100, 0.95) == pytest.approx(2 * math.log(100 / 0.05))
    assert Q.em_rank_error(0.5, 2.0, 100, 0.95) == pytest.approx(8 * math.log(100 / 0.05))


# ------------------------------------------------------------------ partition selection


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-6, 1e-3])
@pytest.mark.parametrize("k", [1, 2, 5])
def test_partition_threshold_bounds_the_probability_of_a_new_key(
    eps: float, delta: float, k: int
) -> None:
    tau = Q.partition_threshold(eps, delta, k)
    # one person creates at most k keys with at most k rows each (union bound)
    assert k * Q.partition_release_probability(k, eps, tau, k) <= delta * (1 + 1e-12)
    if k == 1:
        # and the threshold is the smallest integer that works
        assert Q.partition_release_probability(1, eps, tau - 1, 1) > delta


def test_partition_threshold_closed_form_for_one_row() -> None:
    eps, delta = 1.0, 1e-6
    a = math.exp(-eps)
    assert Q.partition_threshold(eps, delta) == 1 + math.ceil(math.log(1 / (delta * (1 + a))) / eps)
    # The release probability of a key with a large count approaches 1.
    assert Q.partition_release_probability(100, eps, Q.partition_threshold(eps, delta)) > 0.999
    with pytest.raises(InvalidParameterError):
        Q.partition_threshold(1.0, 0.0)


def test_release_probability_matches_simulated_geometric_noise() -> None:
    rng = np.random.default_rng(5)
    eps = 0.7
    a = math.exp(-eps)
    # two-sided geometric = difference of two geometric variables
    z = rng.geometric(1 - a, 400_000) - rng.geometric(1 - a, 400_000)
    for count, tau in [(1, 3), (4, 2), (2, 2), (0, 1)]:
        empirical = np.mean(count + z >= tau)
        assert empirical == pytest.approx(
            Q.partition_release_probability(count, eps, tau), abs=3e-3
        )


def test_private_bounds_threshold_and_selection() -> None:
    eps, bins = 0.5, 162
    tau = Q.private_bounds_threshold(eps, bins)
    a = math.exp(-eps)
    assert bins * a**tau / (1 + a) <= Q.PRIVATE_BOUNDS_FAILURE
    grid = np.array([0.0, 1.0, 2.0, 4.0, 8.0])
    assert Q.private_bounds([0, 50, 60, 0], grid, 10) == (1.0, 4.0)
    assert Q.private_bounds([0, 5, 5, 0], grid, 10) == (0.0, 8.0)  # nothing passes: whole range
    with pytest.raises(InvalidParameterError):
        Q.private_bounds([1, 2], grid, 1)


def test_quantile_selection_probabilities_respect_epsilon_on_neighbours() -> None:
    """Privacy audit: P(c | D) / P(c | D + one row) <= e^ε for the calibrated Δ = max(q, 1 - q)."""
    from dpkit.mechanisms import exponential_probabilities

    rng = np.random.default_rng(8)
    grid = np.linspace(0, 10, 41)
    eps = 0.8
    worst = 0.0
    for _ in range(300):
        x = np.round(rng.uniform(0, 10, rng.integers(1, 25)) * 4) / 4
        extra = np.round(rng.uniform(0, 10) * 4) / 4
        q = float(rng.choice([0.5, 0.01, 0.99, rng.uniform()]))
        delta = max(q, 1 - q)
        p = exponential_probabilities(
            Q.quantile_utilities(_codes(x, grid), q), epsilon=eps, sensitivity=delta
        )
        p2 = exponential_probabilities(
            Q.quantile_utilities(_codes(np.append(x, extra), grid), q),
            epsilon=eps,
            sensitivity=delta,
        )
        worst = max(worst, float(np.max(np.abs(np.log(p) - np.log(p2)))))
    assert worst <= eps + 1e-9
    assert worst > 0.5 * eps  # the bound is nearly attained: Δ is not needlessly large
