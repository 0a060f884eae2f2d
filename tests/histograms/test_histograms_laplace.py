"""The Laplace baseline: unbiased, variance 2/epsilon² per unit bin, range queries."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit import histograms
from dpkit.errors import DataError, InvalidParameterError


def test_unbiased_with_the_closed_form_variance() -> None:
    # Claim: x̂_i = x_i + Lap(1/eps): E = x_i, Var = 2/eps². 400 reps × 50 bins.
    eps = 0.5
    x = np.arange(50, dtype=float)
    gen = np.random.default_rng(11)
    draws = np.stack([histograms.laplace(x, eps, rng=gen).estimates for _ in range(400)])
    noise = draws - x
    variance = 2 / eps**2
    # Mean: 20,000 draws, standard error sqrt(8/20000) = 0.02; allow 5 SE.
    assert abs(noise.mean()) < 5 * np.sqrt(variance / noise.size)
    # Variance: Laplace kurtosis 6, so SE of the sample variance ~ sqrt(5/N)·var = 1.6%.
    assert noise.var() == pytest.approx(variance, rel=0.08)
    # Per bin means are unbiased too (none is off by more than 5 SE of 400 draws).
    assert np.all(np.abs(noise.mean(axis=0)) < 5 * np.sqrt(variance / 400))


def test_errors_and_range_errors_match_closed_form() -> None:
    h = histograms.laplace(np.ones(10), 0.25, rng=1)
    assert h.errors == pytest.approx(np.full(10, np.sqrt(2) / 0.25), rel=1e-3)
    assert h.answer_error(2, 5) == pytest.approx(np.sqrt(4 * 2) / 0.25, rel=1e-3)
    assert h.bins.tolist() == list(range(11))
    assert h.epsilon == 0.25 and h.method == "laplace"


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 40), st.data())
def test_range_answer_is_the_sum_of_estimates(n: int, data: st.DataObject) -> None:
    h = histograms.laplace(np.zeros(n), 1.0, rng=data.draw(st.integers(0, 10**6)))
    left = data.draw(st.integers(0, n - 1))
    right = data.draw(st.integers(left, n - 1))
    assert h.answer(left, right) == pytest.approx(h.estimates[left : right + 1].sum(), abs=1e-9)
    assert histograms.answer(h, left, right) == h.answer(left, right)
    many = h.answer(np.array([left, 0]), np.array([right, n - 1]))
    assert many[1] == pytest.approx(h.estimates.sum(), abs=1e-9)


def test_seeded_runs_are_reproducible() -> None:
    x = np.arange(8.0)
    assert np.array_equal(
        histograms.laplace(x, 1, rng=5).estimates, histograms.laplace(x, 1, rng=5).estimates
    )


@pytest.mark.parametrize(
    ("counts", "error"),
    [
        ([1.0, -1.0], DataError),
        ([1.0, np.nan], DataError),
        ([[1.0, 2.0]], DataError),
        ([], DataError),
        (["a"], DataError),
    ],
)
def test_bad_counts_are_refused_without_values(counts: object, error: type) -> None:
    with pytest.raises(error) as info:
        histograms.laplace(counts, 1.0)  # type: ignore[arg-type]
    assert "-1.0" not in str(info.value)  # the message never quotes a count


@pytest.mark.parametrize("epsilon", [0, -1, float("inf"), float("nan")])
def test_bad_epsilon(epsilon: float) -> None:
    with pytest.raises(InvalidParameterError):
        histograms.laplace([1.0, 2.0], epsilon)


def test_bad_ranges_and_edges() -> None:
    h = histograms.laplace([1.0, 2.0, 3.0], 1.0, rng=0, edges=[0, 10, 20, 30])
    for left, right in [(-1, 1), (0, 3), (2, 1)]:
        with pytest.raises(InvalidParameterError):
            h.answer(left, right)
    with pytest.raises(InvalidParameterError):
        h.answer(0.5, 1)
    assert h.bin_edges.tolist() == [0, 10, 20, 30]
    with pytest.raises(InvalidParameterError):
        histograms.laplace([1.0, 2.0], 1.0, edges=[0, 1])
    with pytest.raises(InvalidParameterError):
        histograms.laplace([1.0, 2.0], 1.0, edges=[0, 2, 1])
