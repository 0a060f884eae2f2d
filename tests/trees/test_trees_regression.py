"""The regression criterion family: sensitivities, noise scales, leaf estimators, huge-epsilon limit."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.trees.engine._budget import randomness
from dpkit.trees.engine._growth import (
    apply,
    candidate_layout,
    candidates_from_histogram,
    histograms,
)
from dpkit.trees.regression._criteria import (
    RegressionTreeSpec,
    fit_regression_tree,
    grid_median_leaves,
    noisy_leaf_stats,
    regression_channels,
    shrunk_means,
    sse_gain,
)
from dpkit.trees.regression._paper import _sae, paper_mse


def split_utilities(codes: np.ndarray, y: np.ndarray, n_bins: np.ndarray) -> np.ndarray:
    """-(SSE_left + SSE_right) for every candidate of one node (up to the node constant)."""
    width, valid = candidate_layout(n_bins, np.zeros(len(n_bins), dtype=bool))
    hist = histograms(
        codes,
        np.zeros(len(y), dtype=np.int64),
        1,
        int(n_bins.max()),
        regression_channels(y),
        None,
        0,
    )
    cands = candidates_from_histogram(hist, np.zeros(len(n_bins), dtype=bool), width, valid)
    node_sse = float(((y - y.mean()) ** 2).sum()) if y.size else 0.0
    return (sse_gain(cands) - node_sse)[0][valid]


@settings(max_examples=80, deadline=None)
@given(
    ys=st.lists(st.floats(0, 1), min_size=0, max_size=25),
    new_y=st.floats(0, 1),
    seed=st.integers(0, 10**6),
)
def test_sse_utility_has_sensitivity_one_and_is_monotonic(
    ys: list[float], new_y: float, seed: int
) -> None:
    """Adding one row (y in [0, 1]) lowers every candidate's -(SSE_l + SSE_r) by at most 1, never raises it."""
    rng = np.random.default_rng(seed)
    n_bins = np.array([5, 3])
    codes = np.stack(
        [rng.integers(0, 5, len(ys) + 1), rng.integers(0, 3, len(ys) + 1)], axis=1
    ).astype(np.int16)
    y = np.array([*ys, new_y])
    before = split_utilities(codes[:-1], y[:-1], n_bins)
    after = split_utilities(codes, y, n_bins)
    change = after - before
    assert np.all(change <= 1e-9)
    assert np.all(change >= -1 - 1e-9)


@settings(max_examples=60, deadline=None)
@given(ys=st.lists(st.floats(0, 1), min_size=0, max_size=30), new_y=st.floats(0, 1))
def test_grid_median_utility_has_sensitivity_one(ys: list[float], new_y: float) -> None:
    levels = 16

    def utility(values: np.ndarray) -> np.ndarray:
        codes = np.minimum((values * levels).astype(int), levels - 1)
        hist = np.bincount(codes, minlength=levels).astype(float)
        below = np.cumsum(hist) - hist
        above = hist.sum() - below - hist
        return -np.abs(below - above)

    y = np.array(ys)
    assert np.max(np.abs(utility(np.append(y, new_y)) - utility(y))) <= 1.0


def test_sae_from_binned_targets_is_exact_on_bin_centres() -> None:
    rng = np.random.default_rng(0)
    levels = 8
    centers = (np.arange(levels) + 0.5) / levels
    for _ in range(20):
        v = centers[rng.integers(0, levels, rng.integers(1, 15))]
        hist = np.bincount(((v * levels).astype(int)), minlength=levels).astype(float)
        expected = np.abs(v - np.sort(v)[(len(v) - 1) // 2]).sum()
        assert _sae(hist, centers) == pytest.approx(expected)


def test_leaf_noise_scale_matches_sensitivity_over_epsilon() -> None:
    """Noisy centred sums ~ Laplace(0.5/eps) (mean |noise| = scale); counts ~ geometric(1/eps)."""
    n_leaves, eps = 4000, 0.5
    leaf = np.arange(n_leaves)  # one row per leaf, y = 1/2 so the true centred sum is 0
    y = np.full(n_leaves, 0.5)
    sums, counts = noisy_leaf_stats(leaf, y, np.arange(n_leaves), n_leaves, eps, eps, 12345)
    assert np.mean(np.abs(sums)) == pytest.approx(0.5 / eps, rel=0.06)
    p = np.exp(-eps)  # discrete Laplace: Var = 2p / (1-p)^2
    assert np.var(counts - 1) == pytest.approx(2 * p / (1 - p) ** 2, rel=0.1)
    assert np.allclose(counts, np.round(counts))


def test_shrunk_means_stay_in_range_and_move_toward_prior() -> None:
    est = shrunk_means(np.array([100.0, -3.0, 0.0]), np.array([200.0, -5.0, 0.0]), 0.3, 10.0)
    assert np.all((est >= 0) & (est <= 1))
    assert est[0] == pytest.approx(0.5 + (100 + 10 * (0.3 - 0.5)) / 210)
    assert est[2] == pytest.approx(0.3)


def test_grid_median_is_exact_at_huge_epsilon() -> None:
    rng = np.random.default_rng(1)
    leaf = rng.integers(0, 50, 5000)
    y = np.clip(rng.normal(0.3 + 0.01 * leaf, 0.05), 0, 1)
    med = grid_median_leaves(leaf, y, np.arange(50), 50, 1e4, 128, 7)
    true = np.array([np.median(y[leaf == k]) for k in range(50)])
    assert np.max(np.abs(med - true)) <= 1.5 / 128


def test_grid_median_is_a_median_in_distribution_at_moderate_epsilon() -> None:
    """With 400 rows per leaf and eps = 1, private medians sit within a few percentiles of the truth."""
    rng = np.random.default_rng(2)
    leaf = np.repeat(np.arange(200), 400)
    y = rng.random(leaf.size)
    med = grid_median_leaves(leaf, y, np.arange(200), 200, 1.0, 128, 11)
    assert abs(np.median(med) - 0.5) < 0.03
    assert np.mean(np.abs(med - 0.5) < 0.1) > 0.9


@pytest.mark.parametrize("seed", [0, 1])
def test_greedy_tree_at_huge_epsilon_matches_non_private_greedy(seed: int) -> None:
    """With all budget on splits and a huge epsilon, the private tree is the non-private greedy tree."""
    from test_trees_core import brute_force_partition, same_partition

    rng = np.random.default_rng(seed)
    n_bins = np.array([8, 8, 8])
    codes = rng.integers(0, 8, size=(400, 3)).astype(np.int16)
    y = np.clip(0.1 * codes[:, 0] + 0.05 * (codes[:, 2] > 3) + rng.normal(0, 0.05, 400), 0, 1)
    spec = RegressionTreeSpec(
        algorithm="greedy", leaf="mean", max_depth=3, leaf_share=Fraction(1, 10**6)
    )
    tree, _ = fit_regression_tree(
        codes, y, n_bins, np.zeros(3, dtype=bool), spec, Fraction(10**6), randomness(seed)
    )
    leaf = apply(tree, codes)
    assert same_partition(leaf, brute_force_partition(codes, y, n_bins, 3))


def test_paper_mse_is_mean_error() -> None:
    codes = np.array([[0], [0], [1], [1]], dtype=np.int16)
    y = np.array([0.0, 0.2, 0.8, 1.0])
    width, valid = candidate_layout(np.array([2]), np.array([False]))
    hist = histograms(codes, np.zeros(4, dtype=np.int64), 1, 2, regression_channels(y), None, 0)
    cands = candidates_from_histogram(hist, np.array([False]), width, valid)
    assert paper_mse(cands)[0, 0, 0] == pytest.approx(-(0.02 + 0.02) / 4)
