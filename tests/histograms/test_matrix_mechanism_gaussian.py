"""The Gaussian matrix mechanism with stored ℓ2 designs (issue 32).

* the stored strategies: A x is exact (integer cross-check, totals near 2^33), the sensitivity
  is the exact maximum column 2-norm of the stored matrix, and the stated errors (unit error,
  unit and range variances) equal dense computations for the stored (quantised) matrix;
* the release: transcripts of neighbouring counts differ only in the estimates, the accountant
  records (epsilon, delta) with rho, bad options are refused before the charge, and the error
  after quantisation is within the issue's floors of the SVD bound;
* audits: the measurement passes at its (epsilon, delta) and a variant whose noise is calibrated
  for a third of the true sensitivity is refuted.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from tests.histograms._transcripts import histogram_fields, transcript

from dpkit.accounting import Accountant, Budget
from dpkit.accounting.composition import largest_rho
from dpkit.audit import audit_samples
from dpkit.errors import DataError, InvalidParameterError
from dpkit.histograms import _strategy_exact
from dpkit.histograms._range_grams import gram_for, svd_bound
from dpkit.histograms._strategy_exact import (
    ExactStrategy,
    dense_exact,
    exact_strategy,
    toeplitz_exact,
)
from dpkit.histograms.matrix_mechanism import matrix_mechanism
from dpkit.mechanisms import Gaussian
from dpkit.mechanisms._exact import discrete_gaussian
from dpkit.mechanisms._random import as_source

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.PrivacyWarning")

EXPLICIT = (np.array([0, 2, 5, 5, 9, 0]), np.array([3, 7, 5, 17, 23, 23]))


def _strategies() -> list[ExactStrategy]:
    out: list[ExactStrategy] = []
    for n, kind in ((24, "prefixes"), (31, "ranges")):
        dense = dense_exact(gram_for(n, kind))
        assert dense is not None
        out += [dense, toeplitz_exact(gram_for(n, kind))]
    # More than one Toeplitz block (BLOCK = 512), and an explicit workload.
    out += [toeplitz_exact(gram_for(1100, "prefixes")), toeplitz_exact(gram_for(24, EXPLICIT))]
    return out


STRATEGIES = _strategies()
IDS = [f"{s.name}-{s.n}-{s.kind}" for s in STRATEGIES]


def _numerators(strategy: ExactStrategy) -> np.ndarray:
    """The stored matrix as integers (entries are whole multiples of 2^-20, at most 1)."""
    scaled = strategy.dense() * 2.0**20
    whole = scaled.astype(np.int64)
    assert np.array_equal(whole, scaled) and np.abs(whole).max() <= 2**20
    return whole


@pytest.mark.parametrize("strategy", STRATEGIES, ids=IDS)
def test_the_measurement_is_exact_for_totals_up_to_2_to_33(strategy: ExactStrategy) -> None:
    """A x equals the integer product / 2^20 exactly (int64: every term and sum < 2^53)."""
    q = _numerators(strategy)
    rng = np.random.default_rng(strategy.n)
    for total in (10**6, 2**33 - 1):
        raw = rng.random(strategy.n) ** 3
        x = np.floor(raw / raw.sum() * total).astype(np.int64)
        x[rng.integers(strategy.n)] += total - int(x.sum())  # the total exactly
        assert int(x.sum()) == total
        exact = q @ x  # int64 exact: |q|·Σx < 2^53
        assert np.array_equal(strategy.measure(x.astype(np.float64)) * 2.0**20, exact)
    with_one = np.zeros(strategy.n)
    with_one[strategy.n // 2] = 1.0
    assert np.array_equal(strategy.measure(with_one), strategy.dense()[:, strategy.n // 2])


@pytest.mark.parametrize("strategy", STRATEGIES, ids=IDS)
def test_the_sensitivity_is_the_stored_matrix_max_column_norm(strategy: ExactStrategy) -> None:
    q = _numerators(strategy)
    largest = int((q * q).sum(axis=0).max())
    steps = round(strategy.sensitivity * 2**20)
    assert steps == strategy.sensitivity * 2**20  # on the 2^-20 grid
    assert steps * steps >= largest > (steps - 1) ** 2  # sqrt, rounded up onto the grid
    assert abs(strategy.sensitivity - 1.0) < 1e-5


@pytest.mark.parametrize("strategy", STRATEGIES, ids=IDS)
def test_errors_equal_dense_computations_for_the_stored_matrix(strategy: ExactStrategy) -> None:
    a = strategy.dense()
    inverse = np.linalg.inv(a.T @ a)
    workload = EXPLICIT if strategy.kind == "explicit" else strategy.kind
    gram = gram_for(strategy.n, workload)
    if strategy.n <= 64:
        assert strategy.trace == pytest.approx(np.trace(gram.dense() @ inverse) / gram.m, rel=1e-9)
        lo, hi = np.triu_indices(strategy.n)
    else:
        lo, hi = np.sort(np.random.default_rng(3).integers(0, strategy.n, (2, 300)), axis=0)
    assert np.allclose(strategy.unit_variances(), np.diag(inverse), rtol=1e-8)
    q = (np.arange(strategy.n)[None, :] >= lo[:, None]) & (
        np.arange(strategy.n)[None, :] <= hi[:, None]
    )
    dense_ranges = np.einsum("ij,jk,ik->i", q, inverse, q)
    assert np.allclose(strategy.range_variances(lo, hi), dense_ranges, rtol=1e-8)
    assert strategy.svd_bound == svd_bound(gram) <= strategy.unit_error
    # Least squares: A is square, so the estimate inverts the measurement.
    y = np.random.default_rng(4).normal(size=strategy.n) * 50
    assert np.allclose(strategy.reconstruct(y), np.linalg.solve(a, y), atol=1e-7)


def test_the_choice_is_public_and_cached() -> None:
    gram = gram_for(48, "ranges")
    first = exact_strategy(gram)
    assert first.name == "dense_weighted_eigen"
    assert exact_strategy(gram_for(48, "ranges")) is first
    _strategy_exact._CACHE.clear()
    again = exact_strategy(gram)
    assert again is not first and np.array_equal(again.dense(), first.dense())
    assert exact_strategy(gram_for(24, EXPLICIT)).name == "square_root"


@pytest.mark.parametrize("kind", ["prefixes", "ranges"])
def test_the_dense_build_is_three_cubic_lapack_calls_in_place(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The work budget of the 4,096-bin build (issue 32: <= 10 s), pinned as work, not time.

    Beyond the design's one tridiagonal eigendecomposition, the dense stage is one
    ``dsyrk`` (n³ flops), one ``dpotrf`` and one ``dtrtri`` (n³/3 each) and O(n²)
    passes, with at most ~3 n × n doubles alive (C, AᵀA / R in place, the prefix
    sums; before: 5). At 4,096 bins that is ~1.2e11 flops and 400 MB.
    """
    import tracemalloc

    from scipy.linalg import blas, lapack

    from dpkit.histograms import _strategy_l2 as l2

    n = 256
    gram = gram_for(n, kind)
    l2.best_l2_strategy(gram)  # the design's eigendecomposition is pinned in test_strategy_l2
    calls: dict[str, int] = {}

    def counted(module: Any, name: str) -> None:
        original = getattr(module, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] = calls.get(name, 0) + 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    for name in ("dsyrk", "dgemm"):
        counted(blas, name)
    for name in ("dpotrf", "dtrtri", "dgetrf", "dgetri", "dtrtrs", "dsyevd", "dstevd"):
        counted(lapack, name)
    tracemalloc.start()
    try:
        strategy = dense_exact(gram)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        monkeypatch.undo()
    assert strategy is not None
    assert calls == {"dsyrk": 1, "dpotrf": 1, "dtrtri": 1}, calls
    assert peak < 3.2 * 8 * n * n, peak / (8 * n * n)


def test_the_cache_keeps_two_strategies_and_frees_before_a_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two dense strategies at 4,096 bins hold 512 MB; a third build runs after the eviction,
    and the design's n × n eigenvectors are not kept beside the stored strategy."""
    from dpkit.histograms import _strategy_l2 as l2

    assert _strategy_exact.CACHE_SIZE == 2
    _strategy_exact._CACHE.clear()
    l2._CACHE.clear()
    exact_strategy(gram_for(40, "prefixes"))
    exact_strategy(gram_for(40, "ranges"))
    assert not l2._CACHE  # the design was used once, not cached
    seen: list[int] = []
    build = _strategy_exact.dense_exact

    def watched(gram: Any) -> Any:
        seen.append(len(_strategy_exact._CACHE))
        return build(gram)

    monkeypatch.setattr(_strategy_exact, "dense_exact", watched)
    exact_strategy(gram_for(41, "prefixes"))
    assert seen == [1]
    assert list(_strategy_exact._CACHE) == [
        gram_for(40, "ranges").key,
        gram_for(41, "prefixes").key,
    ]


# -- the release ------------------------------------------------------------------------------


def _transcript(counts: Any, composition: str = "zcdp", **kw: Any) -> tuple[Any, ...]:
    acc = Accountant(Budget(2.0, 1e-5), composition=composition)  # type: ignore[arg-type]
    return transcript(
        acc,
        lambda: matrix_mechanism(counts, accountant=acc, noise="gaussian", **kw),
        lambda h: histogram_fields(h, np.array([0, 3]), np.array([31, 9])),
    )


@pytest.mark.parametrize(
    ("workload", "budget"),
    [
        ("prefixes", {"epsilon": 0.5, "delta": 1e-6}),
        ("ranges", {"rho": 0.05, "delta": 1e-6}),
        (EXPLICIT, {"epsilon": 0.5, "delta": 1e-6}),
    ],
    ids=["prefixes", "ranges-rho", "explicit"],
)
def test_transcripts_of_neighbours_differ_only_in_the_estimates(
    workload: Any, budget: dict[str, float]
) -> None:
    x = np.zeros(32)
    x[8:20] = np.arange(12)
    big = x.copy()
    big[30] = 1e9
    pairs = [(x, x + np.eye(32)[0]), (x, x + np.eye(32)[12]), (big, big + np.eye(32)[30])]
    for a, b in pairs:
        first = _transcript(a, rng=11, workload=workload, **budget)
        assert first == _transcript(b, rng=11, workload=workload, **budget)
        assert first[0] == "matrix_mechanism"
    rho = first[3]
    assert first[4]["noise"] == "gaussian" and first[-2][0][1] == Budget(first[1], 1e-6, rho=rho)


def test_the_accountant_records_epsilon_delta_and_rho() -> None:
    x = np.arange(32.0)
    h = matrix_mechanism(x, 1.0, noise="gaussian", delta=1e-6, workload="prefixes", rng=1)
    # Calibrated to the largest rho that implies (1, 1e-6) (the multi-value zCDP check).
    assert h.rho is not None and h.rho <= float(largest_rho(1.0, 1e-6))
    assert h.privacy.epsilon == 1.0 and h.privacy.delta == 1e-6 and h.privacy.rho == h.rho
    for composition in ("basic", "zcdp"):
        acc = Accountant(Budget(3.0, 1e-5), composition=composition)  # type: ignore[arg-type]
        g = matrix_mechanism(x, 1.0, noise="gaussian", delta=1e-6, accountant=acc, rng=1)
        assert acc.history[0].cost == Budget(1.0, 1e-6, rho=g.rho)
        matrix_mechanism(x, noise="gaussian", rho=0.05, delta=1e-6, accountant=acc, rng=1)
        assert acc.history[1].cost.rho == pytest.approx(0.05)
    assert acc.spent.rho == pytest.approx(0.05 + float(g.rho or 0))
    # The Laplace default is unchanged: epsilon-DP, no rho.
    laplace = matrix_mechanism(x, 1.0, rng=1)
    assert (
        laplace.delta == 0.0 and laplace.rho is None and laplace.details["strategy"] == "p_identity"
    )


def test_the_stated_error_is_the_noise_of_the_stored_strategy() -> None:
    """Monte Carlo: 3,000 measurements of 16 bins; the sample variance within 4.5 sds."""
    x = np.array([5.0, 0, 3, 9, 2, 0, 0, 1, 7, 4, 4, 0, 2, 8, 1, 3])
    h = matrix_mechanism(x, 1.0, noise="gaussian", delta=1e-6, workload="prefixes", rng=0)
    strategy = exact_strategy(gram_for(16, "prefixes"))
    runs = 3000
    y = strategy.measure(x)[None, :] + _noise(h.details["sigma"], runs * 16, 7).reshape(runs, 16)
    estimates = np.array([strategy.reconstruct(row) for row in y])
    lo, hi = np.array([0, 0, 3, 7, 15]), np.array([15, 7, 11, 7, 15])
    prefix = np.concatenate((np.zeros((runs, 1)), np.cumsum(estimates, axis=1)), axis=1)
    draws = prefix[:, hi + 1] - prefix[:, lo]
    stated = h.answer_error(lo, hi) ** 2
    assert np.all(np.abs(draws.var(axis=0, ddof=1) / stated - 1) < 4.5 * np.sqrt(2 / runs))
    gram = gram_for(16, "prefixes")
    all_lo, all_hi = np.zeros(16, np.int64), np.arange(16)
    assert np.mean(h.answer_error(all_lo, all_hi) ** 2) == pytest.approx(
        h.details["expected_rmse"] ** 2
    )
    d = h.details
    assert d["ratio_to_bound"] == pytest.approx(np.sqrt(d["unit_error"] / svd_bound(gram)))
    assert d["svd_bound_rmse"] < d["expected_rmse"] < 1.05 * d["svd_bound_rmse"]


@pytest.mark.parametrize(
    "options",
    [
        {"epsilon": 0.5},  # no delta
        {"epsilon": 0.5, "rho": 0.1, "delta": 1e-6},  # both budgets
        {"delta": 1e-6},  # neither
        {"epsilon": 0.5, "delta": 1.5},
        {"epsilon": 0.5, "delta": 1e-6, "rows": 4},
        {"epsilon": 0.5, "delta": 1e-6, "workload": "units"},
        {"rho": -1.0, "delta": 1e-6},
    ],
)
def test_bad_gaussian_options_are_refused_before_the_charge(options: dict[str, Any]) -> None:
    acc = Accountant(Budget(1.0, 1e-5))
    with pytest.raises(InvalidParameterError):
        matrix_mechanism(np.ones(8), accountant=acc, noise="gaussian", **options)
    with pytest.raises(InvalidParameterError):
        matrix_mechanism(np.ones(8), 0.5, accountant=acc, delta=1e-6)  # delta needs gaussian
    with pytest.raises(InvalidParameterError):
        matrix_mechanism(np.ones(8), 0.5, accountant=acc, noise="normal")
    assert acc.spent == Budget(0.0)


@pytest.mark.parametrize("counts", [np.full(8, 0.5), np.array([2.0**33] + [0.0] * 7)])
def test_counts_it_cannot_sum_exactly_are_refused_before_the_charge(counts: np.ndarray) -> None:
    acc = Accountant(Budget(1.0, 1e-5))
    with pytest.raises(DataError, match="whole-number counts") as caught:
        matrix_mechanism(counts, 0.5, noise="gaussian", delta=1e-6, accountant=acc)
    assert "0.5" not in str(caught.value) and acc.spent == Budget(0.0)


@pytest.mark.parametrize(
    ("n", "floor"),
    [(256, 1.05), (1024, 1.05), pytest.param(4096, 1.05, marks=pytest.mark.slow)],
)
def test_the_error_after_quantisation_is_within_the_floor(n: int, floor: float) -> None:
    for kind in ("prefixes", "ranges"):
        strategy = exact_strategy(gram_for(n, kind))
        assert np.sqrt(strategy.unit_error / strategy.svd_bound) < floor, (kind, strategy.name)


# -- audits -----------------------------------------------------------------------------------


def _noise(sigma: float, size: int, seed: int) -> np.ndarray:
    """Discrete Gaussian noise on the publisher's 2^-20 grid with standard deviation ~sigma."""
    grid = 2.0**-20
    sigma2 = round((sigma / grid) ** 2)
    return discrete_gaussian(as_source(np.random.default_rng(seed)), sigma2, 1, size) * grid


def _loss_samples(
    strategy: ExactStrategy, sigma: float, x: np.ndarray, i: int, runs: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The Gaussian log likelihood ratio of y = A x + noise for x and x + e_i (a linear statistic:
    the projection of y - A x on the shift A e_i), the most telling threshold events."""
    x_prime = x + np.eye(x.size)[i]
    mean, shift = strategy.measure(x), strategy.measure(x_prime) - strategy.measure(x)
    out = []
    for k, counts in enumerate((x, x_prime)):
        y = strategy.measure(counts)[None, :] + _noise(sigma, runs * x.size, seed + k).reshape(
            runs, x.size
        )
        out.append((y - mean) @ shift / sigma**2)
    return out[0], out[1]


def _measurement_audit(n: int, runs: int) -> None:
    # (epsilon, delta) = (1, 0.01): a claim an audit of this size can come near.
    epsilon, delta = 1.0, 0.01
    honest = exact_strategy(gram_for(n, "prefixes"))
    sigma = Gaussian(
        epsilon=epsilon, delta=delta, sensitivity=honest.sensitivity, size=n, granularity=2.0**-20
    ).sigma
    x = np.tile([3.0, 0, 5, 1, 0, 0, 2, 4], n // 8)
    q = _numerators(honest)
    i = int(np.argmax((q * q).sum(axis=0)))  # the column of largest norm
    passed = audit_samples(*_loss_samples(honest, sigma, x, i, runs, 1), epsilon=1.0, delta=delta)
    assert passed.passed, passed
    # Broken: the noise is calibrated for a third of the true sensitivity.
    broken_sigma = Gaussian(
        epsilon=epsilon,
        delta=delta,
        sensitivity=honest.sensitivity / 3,
        size=n,
        granularity=2.0**-20,
    ).sigma
    broken = audit_samples(
        *_loss_samples(honest, broken_sigma, x, i, runs, 3), epsilon=1.0, delta=delta
    )
    assert not broken.passed and broken.epsilon_lower_bound > 1.0, broken


def test_measurement_audit_passes_and_refutes_the_wrong_sensitivity() -> None:
    _measurement_audit(16, 5000)


@pytest.mark.audit
def test_measurement_audit_at_scale() -> None:
    _measurement_audit(64, 100000)


@pytest.mark.audit
def test_released_estimates_audit_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Audit what is published: the statistic (A e_i)ᵀ A x̂, a function of the estimates only.

    Calibrated to rho (its (epsilon, delta) conversion is the claim), so each of the
    4 × 5,000 releases reuses the cached conversion.
    """
    n, delta = 16, 0.01
    rho = float(largest_rho(1.0, delta))
    x = np.tile([3.0, 0, 5, 1, 0, 0, 2, 4], n // 8)
    honest = exact_strategy(gram_for(n, "prefixes"))
    q = _numerators(honest)
    i = int(np.argmax((q * q).sum(axis=0)))
    projection = honest.dense()[:, i] @ honest.dense()

    def statistic(counts: np.ndarray, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        out = [
            projection
            @ matrix_mechanism(
                counts, noise="gaussian", rho=rho, delta=delta, workload="prefixes", rng=rng
            ).estimates
            for _ in range(5000)
        ]
        return np.array(out)

    claim = matrix_mechanism(x, noise="gaussian", rho=rho, delta=delta, workload="prefixes").epsilon
    assert claim <= 1.0
    x_prime = x + np.eye(n)[i]
    passed = audit_samples(statistic(x, 1), statistic(x_prime, 2), epsilon=claim, delta=delta)
    assert passed.passed, passed
    # Broken: the publisher believes the sensitivity is a third of the truth.
    broken = dataclasses.replace(honest, sensitivity=honest.sensitivity / 3)
    monkeypatch.setattr(_strategy_exact, "exact_strategy", lambda gram: broken)
    refuted = audit_samples(statistic(x, 3), statistic(x_prime, 4), epsilon=claim, delta=delta)
    assert not refuted.passed and refuted.epsilon_lower_bound > 1.0, refuted
