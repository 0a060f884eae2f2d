"""The tree strategy with optimised level weights (issue 32: the Laplace matrix mechanism at large n).

* its exact quantities (workload error, unit and range variances, the least-squares estimate,
  the sensitivity) equal dense computations, and the measurement is exact and moves by one column;
* optimised weights are never worse than Hb's uniform ones, and beat Hb beyond 8,192 bins;
* the release: the matrix mechanism takes the tree where its error is smaller, transcripts of
  neighbouring counts differ only in the estimates, the stated variance is the Monte Carlo one;
* audits: the measurement passes at its epsilon; a broken variant (weights doubled, noise
  scaled for the old sensitivity) is refuted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.histograms._transcripts import histogram_fields, transcript

from dpkit.accounting import Accountant, Budget
from dpkit.audit import audit_samples
from dpkit.histograms._range_grams import gram_for
from dpkit.histograms._strategy_tree import (
    WeightedTree,
    from_weights,
    levels_for,
    optimise_weights,
    weighted_tree,
)
from dpkit.histograms.matrix_mechanism import laplace_strategy, matrix_mechanism
from dpkit.mechanisms import Laplace

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.PrivacyWarning")


def _dense(tree: WeightedTree) -> np.ndarray:
    """A over the padded bins, one row per measured block, as :meth:`measure` lays them out."""
    rows = []
    for w, s in zip(tree.weights, tree.sizes, strict=True):
        for k in range(tree.padded // s if w > 0 else 0):
            row = np.zeros(tree.padded)
            row[k * s : (k + 1) * s] = w
            rows.append(row)
    return np.array(rows)


def _workload(n: int, kind: str) -> Any:
    if kind != "explicit":
        return kind
    lo = np.array([0, n // 3, n - 1, 1 % n, n // 2])
    hi = np.array([n - 1, n // 2, n - 1, n // 2, n - 1])
    return (np.minimum(lo, hi), np.maximum(lo, hi))


@pytest.mark.parametrize("kind", ["prefixes", "ranges", "explicit"])
@pytest.mark.parametrize(("n", "branching"), [(1, 2), (5, 2), (16, 4), (27, 3), (37, 5)])
def test_exact_quantities_equal_dense_computations(n: int, branching: int, kind: str) -> None:
    gram = gram_for(n, _workload(n, kind))
    tree = from_weights(n, branching, optimise_weights(gram, branching))
    a = _dense(tree)
    inverse = np.linalg.inv(a.T @ a)[:n, :n]  # the padded bins are zeros: invert over all N
    dense_error = tree.sensitivity**2 * np.trace(gram.dense() @ inverse) / gram.m
    assert tree.unit_error(gram) == pytest.approx(dense_error, rel=1e-9)
    assert np.allclose(tree.unit_variances(), np.diag(inverse))
    lo, hi = np.array([0, n // 2, n - 1, 0]), np.array([n - 1, n - 1, n - 1, n // 3])
    indicators = (np.arange(n) >= lo[:, None]) & (np.arange(n) <= hi[:, None])
    stated = tree.range_variances(lo, hi)
    assert np.allclose(stated, np.einsum("qi,ij,qj->q", indicators, inverse, indicators))
    assert tree.sensitivity == np.abs(a).sum(axis=0).max()
    assert tree.size == a.shape[0] and tree.changed == np.count_nonzero(a[:, 0])
    noisy = tree.measure(np.arange(n) * 3.0) + np.random.default_rng(0).normal(size=tree.size)
    assert np.allclose(tree.reconstruct(noisy), np.linalg.lstsq(a, noisy, rcond=None)[0][:n])


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 200),
    branching=st.integers(2, 9),
    counts=st.lists(st.integers(0, 2**26), min_size=1, max_size=200),
    i=st.integers(0, 199),
)
def test_the_measurement_is_exact_and_moves_by_one_column(
    n: int, branching: int, counts: list[int], i: int
) -> None:
    """A x is exact (every value a multiple of 2⁻²⁰ computed without rounding), and a neighbour
    moves exactly one block per measured level, by w_l: an l1 change equal to the sensitivity."""
    tree = from_weights(n, branching, optimise_weights(gram_for(n, "prefixes"), branching))
    x = np.resize(np.array(counts, dtype=np.float64), n)
    i %= n
    y = tree.measure(x)
    units = np.rint(tree.weights * 2**20).astype(np.int64)
    padded = np.zeros(tree.padded, dtype=np.int64)
    padded[:n] = x.astype(np.int64)
    exact = [u * padded.reshape(-1, s).sum(axis=1) for u, s in zip(units, tree.sizes) if u]
    assert np.array_equal(y * 2**20, np.concatenate(exact).astype(np.float64))
    moved = tree.measure(x + np.eye(n)[i]) - y
    assert np.count_nonzero(moved) == tree.changed
    assert np.abs(moved).sum() == tree.sensitivity
    assert tree.levels == levels_for(n, branching)


def test_optimised_weights_beat_uniform_ones_and_hb_beyond_8192_bins() -> None:
    for kind in ("prefixes", "ranges"):
        gram = gram_for(1000, kind)
        for b in (2, 4, 10):
            uniform = from_weights(1000, b, np.full(levels_for(1000, b) + 1, 0.25))
            optimised = from_weights(1000, b, optimise_weights(gram, b))
            assert optimised.unit_error(gram) <= uniform.unit_error(gram) * (1 + 1e-6)
    for kind, n in (("prefixes", 16384), ("ranges", 65536)):
        h = matrix_mechanism(np.zeros(n), 1.0, workload=kind, rng=0)
        assert h.details["strategy"] == "weighted_tree"
        # measured: 0.905 (prefixes, 65,536 bins) and 0.854 (all ranges)
        assert h.details["expected_rmse"] < 0.95 * h.details["hb_expected_rmse"]


def test_the_release_takes_the_smaller_exact_error() -> None:
    gram = gram_for(64, "prefixes")
    chosen = laplace_strategy(gram)
    tree = weighted_tree(gram)
    assert chosen.unit_error(gram) <= tree.unit_error(gram)
    assert weighted_tree(gram_for(64, "prefixes")) is tree  # cached per workload
    big = gram_for(10000, "prefixes")
    assert laplace_strategy(big) is weighted_tree(big)  # p-Identity is not built there


def _transcript(counts: Any, **kw: Any) -> tuple[Any, ...]:
    acc = Accountant(Budget(2.0))
    return transcript(
        acc,
        lambda: matrix_mechanism(counts, 0.5, accountant=acc, **kw),
        lambda h: histogram_fields(h, np.array([0, 3]), np.array([9999, 9])),
    )


@pytest.mark.parametrize("workload", ["prefixes", "ranges"])
def test_transcripts_of_neighbours_differ_only_in_the_estimates(workload: str) -> None:
    n = 10000
    x = np.zeros(n)
    x[100:200] = np.arange(100)
    big = x.copy()
    big[n - 1] = 1e9
    pairs = [(x, x + np.eye(1, n, k)[0]) for k in (0, 150, n - 1)]
    pairs.append((big, big + np.eye(1, n, n - 1)[0]))
    for a, b in pairs:
        assert _transcript(a, rng=3, workload=workload) == _transcript(b, rng=3, workload=workload)
    first = _transcript(x, rng=3, workload=workload)
    assert first[4]["strategy"] == "weighted_tree" and first[-3] == Budget(0.5)


def test_monte_carlo_variance_agrees_with_the_exact_one() -> None:
    """Unbiased, with the stated variance: 4,000 releases of 50 bins through a ternary tree."""
    x = np.arange(50, dtype=np.float64) % 7
    tree = from_weights(50, 3, optimise_weights(gram_for(50, "prefixes"), 3))
    runs = 4000
    estimates = tree.reconstruct(_measurements(tree, x, runs, 5).T).T
    lo, hi = np.array([0, 0, 3, 7, 49]), np.array([49, 7, 11, 7, 49])
    prefix = np.concatenate((np.zeros((runs, 1)), np.cumsum(estimates, axis=1)), axis=1)
    draws = prefix[:, hi + 1] - prefix[:, lo]
    stated = tree.range_variances(lo, hi) * 2 * _noise_for(tree, 1.0, runs).scale ** 2
    tolerance = 4.5 * np.sqrt(2 / (runs - 1) + 3 / runs)
    assert np.all(np.abs(draws.var(axis=0, ddof=1) / stated - 1) < tolerance)
    truth = np.array([x[a : b + 1].sum() for a, b in zip(lo, hi, strict=True)])
    assert np.all(np.abs(draws.mean(axis=0) - truth) < 4.5 * np.sqrt(stated / runs))


# -- audits -----------------------------------------------------------------------------------


def _noise_for(tree: WeightedTree, epsilon: float, runs: int) -> Laplace:
    """The publisher's mechanism for ``runs`` releases at once (``changed`` fixes grid and scale)."""
    return Laplace(
        epsilon=epsilon, sensitivity=tree.sensitivity, size=tree.size * runs, changed=tree.changed
    )


def _measurements(tree: WeightedTree, x: np.ndarray, runs: int, rng: Any) -> np.ndarray:
    noisy = _noise_for(tree, 1.0, runs).randomise(np.tile(tree.measure(x), runs), rng=rng)
    return np.asarray(noisy).reshape(runs, tree.size)


def _loss_samples(
    tree: WeightedTree, x: np.ndarray, i: int, runs: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The Laplace log-likelihood ratio of y = A x + noise between x and x + e_i (epsilon 1)."""
    x_prime = x + np.eye(x.size)[i]
    mean, mean_prime = tree.measure(x), tree.measure(x_prime)
    scale = _noise_for(tree, 1.0, runs).scale
    out = []
    for counts, rng in ((x, seed), (x_prime, seed + 1)):
        y = _measurements(tree, counts, runs, rng)
        out.append((np.abs(y - mean) - np.abs(y - mean_prime)).sum(axis=1) / scale)
    return out[0], out[1]


def _measurement_audit(runs: int) -> None:
    n = 27
    honest = from_weights(n, 3, optimise_weights(gram_for(n, "prefixes"), 3))
    x = np.resize([3.0, 0, 5, 1, 0, 0, 2, 4], n)
    passed = audit_samples(*_loss_samples(honest, x, 4, runs, 1), epsilon=1.0)
    assert passed.passed, passed
    # Broken: every weight doubled (the l1 change is 2Δ) with the noise scaled for Δ.
    doubled = from_weights(n, 3, 2 * honest.weights)
    broken_tree = dataclasses.replace(doubled, sensitivity=honest.sensitivity)
    broken = audit_samples(*_loss_samples(broken_tree, x, 4, runs, 3), epsilon=1.0)
    assert not broken.passed and broken.epsilon_lower_bound > 1.0, broken


def test_measurement_audit_passes_and_refutes_doubled_weights() -> None:
    _measurement_audit(4000)


@pytest.mark.audit
def test_measurement_audit_at_scale() -> None:
    _measurement_audit(100000)
