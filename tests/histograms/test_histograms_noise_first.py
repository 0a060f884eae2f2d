"""NoiseFirst: structure on noisy counts, k chosen by Algorithm 2 of Xu et al."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit import histograms
from dpkit.errors import InvalidParameterError
from dpkit.histograms._noise import laplace_median_std
from dpkit.histograms._optimal import interval_costs, optimal_histogram, optimal_table
from dpkit.histograms.noise_first import select_n_bins


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-20, 60, allow_nan=False), min_size=1, max_size=25),
    st.floats(0.05, 5.0),
    st.sampled_from(["paper", "penalised"]),
)
def test_early_stopping_finds_the_global_minimiser(
    values: list[float], variance: float, selection: str
) -> None:
    # The criterion over every k = 1..n, computed in full.
    noisy = np.array(values)
    n = noisy.size
    table, _ = optimal_table(interval_costs(noisy), n)
    ks = np.arange(1, n + 1)
    if selection == "paper":
        scores = table[1:, n] - (n - 2 * ks) * variance
    else:
        scores = table[1:, n] + variance * ks * (2 * np.log(n / ks) + 5)
    k, boundaries, score = select_n_bins(noisy, variance, selection)  # type: ignore[arg-type]
    assert scores[k - 1] == pytest.approx(scores.min(), rel=1e-9, abs=1e-6)
    assert score == pytest.approx(scores.min(), rel=1e-9, abs=1e-6)
    assert boundaries.size == k + 1 and boundaries[0] == 0 and boundaries[-1] == n
    # The returned structure attains the optimal k-bin error.
    sse = sum(interval_costs(noisy)[a, b] for a, b in itertools.pairwise(boundaries))
    assert sse == pytest.approx(table[k, n], rel=1e-9, abs=1e-6)


def test_recovers_the_true_pieces_when_noise_is_small() -> None:
    # Three flat pieces at eps = 20 (noise sd 0.07): the true boundaries are
    # among the chosen ones and every estimate is within 0.3 of the truth. The
    # paper's criterion may add a few spurious splits: the best split of pure
    # noise removes more than the 2/eps² per bin its penalty assumes.
    x = np.concatenate([np.full(10, 5.0), np.full(6, 80.0), np.full(14, 30.0)])
    h = histograms.noise_first(x, 20.0, rng=4)
    assert {10, 16} <= set(h.bins.tolist())
    assert np.max(np.abs(h.estimates - x)) < 0.3
    assert h.n_bins < 15


def test_flat_data_is_merged_heavily() -> None:
    h = histograms.noise_first(np.full(40, 10.0), 0.05, rng=1)
    assert h.n_bins <= 10
    # The penalised rule does not chase noise: one bin.
    p = histograms.noise_first(np.full(40, 10.0), 0.05, selection="penalised", rng=1)
    assert p.n_bins == 1 and p.details["selection"] == "penalised"


def test_estimates_are_bin_means_of_the_noisy_counts() -> None:
    x = np.random.default_rng(2).poisson(15, 60).astype(float)
    h = histograms.noise_first(x, 0.3, rng=9)
    noisy = h.details["noisy_counts"]
    widths = np.diff(h.bins)
    means = np.add.reduceat(noisy, h.bins[:-1]) / widths
    assert np.allclose(h.estimates, np.repeat(means, widths))
    # The structure is the optimal k-bin structure of the noisy counts.
    boundaries, _ = optimal_histogram(noisy, h.n_bins)
    assert np.array_equal(boundaries, h.bins)
    # Merging keeps every bin total: whole-bin ranges equal the Laplace sums.
    assert h.answer(h.bins[:-1], h.bins[1:] - 1) == pytest.approx(
        np.add.reduceat(noisy, h.bins[:-1])
    )
    assert h.errors == pytest.approx(np.repeat(np.sqrt(2 / widths) * h.details["scale"], widths))


def test_fixed_number_of_bins_and_median_variant() -> None:
    x = np.random.default_rng(5).poisson(15, 30).astype(float)
    h = histograms.noise_first(x, 0.5, n_bins=4, rng=1)
    assert h.n_bins == 4 and h.details["selection_score"] is None
    m = histograms.noise_first(x, 0.5, n_bins=4, statistic="median", rng=1)
    noisy = m.details["noisy_counts"]
    boundaries, _ = optimal_histogram(noisy, 4, "sae")
    assert np.array_equal(m.bins, boundaries)
    medians = [np.median(noisy[a:b]) for a, b in itertools.pairwise(boundaries)]
    assert np.allclose(m.bin_estimates, medians)
    auto = histograms.noise_first(x, 0.5, statistic="median", rng=1)
    assert auto.method == "noise_first_median" and 1 <= auto.n_bins <= 30


@pytest.mark.parametrize("width", [1, 2, 3, 7, 10])
def test_median_noise_sd_matches_simulation(width: int) -> None:
    # Claim: laplace_median_std is the sd of the median of `width` Lap(1) draws
    # (exact for odd widths, an upper bound for even ones).
    draws = np.random.default_rng(width).laplace(size=(40_000, width))
    simulated = np.median(draws, axis=1).std()
    computed = laplace_median_std(width, 1.0)
    if width % 2:
        assert computed == pytest.approx(simulated, rel=0.03)
    else:
        assert simulated <= computed * 1.02
        assert computed < 1.35 * simulated


def test_median_of_noisy_counts_beats_mean_on_flat_bins() -> None:
    # Why the median variant exists: on a flat bin the median of Laplace noise
    # has about half the variance of the mean (0.63 at width 41, 0.5 in the limit).
    assert laplace_median_std(41, 1.0) ** 2 < 0.65 * (2.0 / 41)
    ratio = laplace_median_std(3001, 1.0) ** 2 / (2.0 / 3001)
    assert 0.5 < ratio < 0.53


def test_validation() -> None:
    with pytest.raises(InvalidParameterError):
        histograms.noise_first([1.0, 2.0], 1.0, n_bins=3)
    with pytest.raises(InvalidParameterError):
        histograms.noise_first([1.0, 2.0], 1.0, n_bins=0)
    with pytest.raises(InvalidParameterError):
        histograms.noise_first([1.0, 2.0], 1.0, statistic="mode")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        histograms.noise_first([1.0, 2.0], 1.0, selection="bic")  # type: ignore[arg-type]
