"""Hierarchical histograms: consistency, equality with least squares, exact variances."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit import histograms
from dpkit.errors import InvalidParameterError
from dpkit.histograms.hierarchical import (
    constrained_inference,
    range_variance,
    tree_levels,
)


def _query_matrix(leaves: int, branching: int) -> np.ndarray:
    rows = []
    block = 1
    while block <= leaves:
        for start in range(0, leaves, block):
            row = np.zeros(leaves)
            row[start : start + block] = 1
            rows.append(row)
        block *= branching
    return np.array(rows)


def test_parent_equals_sum_of_children_after_inference() -> None:
    h = histograms.hierarchical(np.arange(20, dtype=float), 0.5, branching=3, rng=2)
    nodes = h.details["nodes"]
    for child, parent in itertools.pairwise(nodes):
        assert np.allclose(child.reshape(-1, 3).sum(axis=1), parent, atol=1e-8)
    assert np.allclose(h.estimates, nodes[0][:20])
    # Range answers are then consistent with the internal nodes: e.g. the root.
    assert h.answer(0, 19) == pytest.approx(nodes[-1][0] - nodes[0][20:].sum())


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([2, 3, 4]), st.integers(1, 3), st.integers(0, 10**6))
def test_inference_is_ordinary_least_squares(branching: int, depth: int, seed: int) -> None:
    leaves = branching**depth
    x_matrix = _query_matrix(leaves, branching)
    y = np.random.default_rng(seed).normal(size=x_matrix.shape[0])
    sizes = [leaves // branching**level for level in range(depth + 1)]
    levels = np.split(y, np.cumsum(sizes)[:-1])
    estimate = constrained_inference(levels, branching)[0]
    ols = np.linalg.lstsq(x_matrix, y, rcond=None)[0]
    assert np.allclose(estimate, ols, atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([2, 3, 4]), st.integers(1, 3), st.data())
def test_range_variance_equals_least_squares_covariance(
    branching: int, depth: int, data: st.DataObject
) -> None:
    leaves = branching**depth
    x_matrix = _query_matrix(leaves, branching)
    covariance = np.linalg.inv(x_matrix.T @ x_matrix)
    left = data.draw(st.integers(0, leaves - 1))
    right = data.draw(st.integers(left, leaves - 1))
    w = np.zeros(leaves)
    w[left : right + 1] = 1
    got = range_variance(np.array([left]), np.array([right]), branching, depth + 1, 1.0)[0]
    assert got == pytest.approx(w @ covariance @ w, rel=1e-9)


def test_empirical_variance_matches_the_formula_and_beats_laplace_on_long_ranges() -> None:
    # Claim: estimates are unbiased with the stated variances; long ranges have
    # lower variance than the Laplace baseline's 2·length/eps².
    eps, n = 1.0, 256
    x = np.random.default_rng(0).poisson(20, n).astype(float)
    gen = np.random.default_rng(3)
    runs = [histograms.hierarchical(x, eps, branching=4, rng=gen) for _ in range(300)]
    estimates = np.stack([r.estimates for r in runs])
    long_answers = np.array([r.answer(3, 250) for r in runs])
    h = runs[0]
    assert abs((estimates - x).mean()) < 5 * h.errors[0] / np.sqrt(estimates.size)
    assert (estimates - x).var() == pytest.approx(h.errors[0] ** 2, rel=0.1)
    long_sd = h.answer_error(3, 250)
    assert long_answers.std() == pytest.approx(long_sd, rel=0.15)
    laplace_sd = np.sqrt(2 * 248) / eps
    assert long_sd < 0.65 * laplace_sd
    assert long_answers.std() < 0.75 * laplace_sd


def test_inference_reduces_leaf_variance_below_the_raw_tree() -> None:
    # Without inference a leaf is one noisy node: variance 2 h²/eps².
    h = histograms.hierarchical(np.zeros(81), 1.0, branching=3, rng=0)
    levels = tree_levels(81, 3)
    raw = np.sqrt(2.0) * h.details["scale"]
    assert levels == 5 and h.details["scale"] == pytest.approx(levels, rel=1e-3)
    assert np.all(h.errors < raw)


def test_padding_and_single_bin() -> None:
    h = histograms.hierarchical([5.0, 7.0, 1.0], 1.0, branching=2, rng=0)
    assert h.estimates.shape == (3,) and h.details["levels"] == 3
    one = histograms.hierarchical([5.0], 1.0, rng=0)
    assert one.details["levels"] == 1 and one.errors[0] == pytest.approx(np.sqrt(2), rel=1e-3)


@pytest.mark.parametrize("branching", [1, 0, 2.5, True])
def test_bad_branching(branching: object) -> None:
    with pytest.raises(InvalidParameterError):
        histograms.hierarchical([1.0, 2.0], 1.0, branching=branching)  # type: ignore[arg-type]
