"""The matrix mechanism with the optimised p-Identity strategy (issue 32).

* the strategy's exact errors (unit error, unit and range variances) equal dense computations,
  least squares inverts the measurement, the strategy is deterministic and public;
* the release: unbiased with the stated (exact) variance (Monte Carlo), transcripts of
  neighbouring counts differ only in the estimates, hostile counts are refused before the charge;
* audits: the measurement passes at its epsilon and a broken variant (columns not normalised,
  so the true l1 sensitivity exceeds the one the noise is calibrated for) is refuted.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.histograms._transcripts import histogram_fields, transcript

from dpkit import histograms
from dpkit.accounting import Accountant, Budget
from dpkit.audit import audit_samples
from dpkit.errors import DataError, InvalidParameterError
from dpkit.histograms import _strategy_l1
from dpkit.histograms._range_grams import Gram, gram_for, svd_bound
from dpkit.histograms._strategy_l1 import PIdentity, assemble, objective, p_identity
from dpkit.histograms._workload import workload_ranges
from dpkit.histograms.hb import expected_variance as hb_variance
from dpkit.histograms.matrix_mechanism import expected_variance, matrix_mechanism
from dpkit.mechanisms import Laplace

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.PrivacyWarning")

EXPLICIT = (np.array([0, 2, 5, 5, 9, 0]), np.array([3, 7, 5, 17, 23, 23]))
WORKLOADS: list[Any] = ["prefixes", "ranges", EXPLICIT]


def _dense(strategy: PIdentity) -> np.ndarray:
    return np.vstack([np.diag(strategy.a), strategy.b])


@pytest.mark.parametrize("workload", WORKLOADS, ids=["prefixes", "ranges", "explicit"])
def test_exact_errors_equal_dense_computations(workload: Any) -> None:
    gram = gram_for(24, workload)
    strategy = p_identity(gram, 4)
    a = _dense(strategy)
    # Sensitivity: the exact maximum column l1 norm of the stored (quantised) strategy.
    assert strategy.sensitivity == np.abs(a).sum(axis=0).max()
    assert abs(strategy.sensitivity - 1.0) < 1e-4
    inverse = np.linalg.inv(a.T @ a)
    dense_error = strategy.sensitivity**2 * np.trace(gram.dense() @ inverse) / gram.m
    assert strategy.unit_error(gram) == pytest.approx(dense_error, rel=1e-7)
    assert np.allclose(strategy.unit_variances(), np.diag(inverse), rtol=1e-7)
    lo, hi = np.triu_indices(24)
    q = (np.arange(24)[None, :] >= lo[:, None]) & (np.arange(24)[None, :] <= hi[:, None])
    dense_ranges = np.einsum("ij,jk,ik->i", q, inverse, q)
    assert np.allclose(strategy.range_variances(lo, hi), dense_ranges, rtol=1e-7)
    # Never worse than the identity strategy, never below the SVD bound.
    assert svd_bound(gram) <= strategy.unit_error(gram) <= gram.trace() / gram.m


def test_least_squares_inverts_the_measurement() -> None:
    strategy = p_identity(gram_for(24, "ranges"), 4)
    x = np.random.default_rng(0).poisson(30, 24).astype(float)
    assert np.allclose(strategy.reconstruct(strategy.measure(x)), x, atol=1e-9)
    y = np.random.default_rng(1).normal(size=28)
    a = _dense(strategy)
    assert np.allclose(strategy.reconstruct(y), np.linalg.lstsq(a, y, rcond=None)[0])


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(0, 2**28), min_size=32, max_size=32),
    st.integers(0, 31),
    st.sampled_from(["prefixes", "ranges"]),
)
def test_the_measurement_is_exact_and_moves_by_one_column(
    counts: list[int], i: int, workload: str
) -> None:
    """What the mechanism is fed: A x without rounding (integer counts, total < 2^33), and
    a neighbour's A x' - A x is exactly the column A e_i, of l1 norm <= the sensitivity."""
    strategy = p_identity(gram_for(32, workload), 4)
    x = np.array(counts, dtype=np.float64)
    exact_a = [Fraction(v) for v in strategy.a]
    exact_b = [[Fraction(v) for v in row] for row in strategy.b]
    expected = [exact_a[j] * counts[j] for j in range(32)]
    expected += [sum(row[j] * counts[j] for j in range(32)) for row in exact_b]
    measured = strategy.measure(x)
    assert [Fraction(v) for v in measured] == expected
    change = strategy.measure(x + np.eye(32)[i]) - measured
    assert np.array_equal(change, _dense(strategy)[:, i])
    assert np.abs(change).sum() <= strategy.sensitivity
    assert np.count_nonzero(change) <= strategy.p + 1  # the mechanism's ``changed``


def test_objective_gradient_matches_finite_differences() -> None:
    gram = gram_for(12, "prefixes")
    theta = np.random.default_rng(2).random((3, 12))
    f, grad = objective(theta, gram, gram.diag())
    d = 1.0 + theta.sum(axis=0)
    a = np.vstack([np.eye(12), theta]) / d[None, :]
    assert f == pytest.approx(np.trace(gram.dense() @ np.linalg.inv(a.T @ a)), rel=1e-10)
    step = np.random.default_rng(3).normal(size=theta.shape) * 1e-6
    f_plus, _ = objective(theta + step, gram, gram.diag())
    f_minus, _ = objective(theta - step, gram, gram.diag())
    assert (f_plus - f_minus) / 2 == pytest.approx(float(np.sum(grad * step)), rel=1e-5)


def test_the_strategy_is_deterministic_and_public() -> None:
    gram = gram_for(32, "prefixes")
    first = p_identity(gram, 4)
    _strategy_l1._cached.cache_clear()
    again = p_identity(gram_for(32, "prefixes"), 4)
    assert again is not first
    assert np.array_equal(again.theta, first.theta) and np.array_equal(again.b, first.b)
    assert p_identity(gram_for(32, "prefixes"), 4) is again  # cached per (workload, p)
    # An explicit workload is keyed by its ranges: the same ranges, the same strategy.
    one = p_identity(gram_for(24, EXPLICIT), 4)
    assert p_identity(gram_for(24, tuple(e.copy() for e in EXPLICIT)), 4) is one
    # The optimised strategy beats the identity and Hb's tree on prefixes.
    assert first.unit_error(gram) < 0.7 * gram.trace() / gram.m


def _noise_for(strategy: PIdentity, epsilon: float, runs: int) -> Laplace:
    """The publisher's mechanism for ``runs`` releases at once: with ``changed`` given, the
    grid and scale do not depend on ``size``, so one call draws ``runs`` independent releases."""
    return Laplace(
        epsilon=epsilon,
        sensitivity=strategy.sensitivity,
        size=(strategy.n + strategy.p) * runs,
        changed=strategy.p + 1,
    )


def _measurements(strategy: PIdentity, x: np.ndarray, runs: int, rng: Any) -> np.ndarray:
    """``runs`` noisy measurements A x + noise (rows), as the publisher draws them."""
    mechanism = _noise_for(strategy, 1.0, runs)
    noisy = mechanism.randomise(np.tile(strategy.measure(x), runs), rng=rng)
    return np.asarray(noisy).reshape(runs, strategy.n + strategy.p)


def test_monte_carlo_variance_agrees_with_the_exact_one() -> None:
    """Unbiased, with the stated variance: 4,000 seeded releases of 16 bins.

    The sample variance s² of R draws has sd sigma² sqrt(2/(R-1) + kappa/R) with kappa
    the excess kurtosis (at most 3 for a sum of Laplace terms): 4.5 such sds allowed.
    """
    x = np.array([5.0, 0, 3, 9, 2, 0, 0, 1, 7, 4, 4, 0, 2, 8, 1, 3])
    lo, hi = np.array([0, 0, 3, 7, 15]), np.array([15, 7, 11, 7, 15])
    h = matrix_mechanism(x, 1.0, workload="prefixes", rng=0)
    strategy = p_identity(gram_for(16, "prefixes"))
    runs = 4000
    assert _noise_for(strategy, 1.0, runs).scale == h.details["scale"]
    estimates = strategy.reconstruct(_measurements(strategy, x, runs, 5).T).T
    prefix = np.concatenate((np.zeros((runs, 1)), np.cumsum(estimates, axis=1)), axis=1)
    draws = prefix[:, hi + 1] - prefix[:, lo]
    stated = h.answer_error(lo, hi) ** 2
    tolerance = 4.5 * np.sqrt(2 / (runs - 1) + 3 / runs)
    assert np.all(np.abs(draws.var(axis=0, ddof=1) / stated - 1) < tolerance)
    truth = np.array([x[a : b + 1].sum() for a, b in zip(lo, hi, strict=True)])
    assert np.all(np.abs(draws.mean(axis=0) - truth) < 4.5 * np.sqrt(stated / runs))
    assert np.allclose(h.errors**2, h.answer_error(np.arange(16), np.arange(16)) ** 2)
    # The publisher's own draws: 200 releases, their mean within 5 sds of the truth.
    rng = np.random.default_rng(6)
    own = np.array(
        [matrix_mechanism(x, 1.0, workload="prefixes", rng=rng).answer(lo, hi) for _ in range(200)]
    )
    assert np.all(np.abs(own.mean(axis=0) - truth) < 5 * np.sqrt(stated / 200))


def _transcript(counts: Any, **kw: Any) -> tuple[Any, ...]:
    acc = Accountant(Budget(2.0))
    return transcript(
        acc,
        lambda: matrix_mechanism(counts, 0.5, accountant=acc, **kw),
        lambda h: histogram_fields(h, np.array([0, 3]), np.array([31, 9])),
    )


@pytest.mark.parametrize("workload", ["prefixes", "ranges"])
def test_transcripts_of_neighbours_differ_only_in_the_estimates(workload: str) -> None:
    x = np.zeros(32)
    x[8:20] = np.arange(12)
    big = x.copy()
    big[30] = 1e9
    pairs = [(x, x + np.eye(32)[0]), (x, x + np.eye(32)[12]), (big, big + np.eye(32)[30])]
    for a, b in pairs:
        assert _transcript(a, rng=11, workload=workload) == _transcript(
            b, rng=11, workload=workload
        )
    first = _transcript(x, rng=11, workload=workload)
    assert first[4]["strategy"] == "p_identity" and first[4]["workload"] == workload
    assert first[-3] == Budget(0.5)


@pytest.mark.parametrize(
    ("counts", "error"),
    [
        ([1.0, np.nan, 2.0], DataError),
        ([1.0, np.inf, 2.0], DataError),
        ([1.0, -1.0, 2.0], DataError),
        (["a", "b"], DataError),
        ([[1.0, 2.0]], DataError),
        ([], DataError),
    ],
)
def test_hostile_counts_are_refused_before_the_charge(counts: Any, error: type) -> None:
    transcript = _transcript(counts, rng=1)
    assert transcript[0] == error.__name__
    assert transcript[-3] == Budget(0.0) and transcript[-2] == []


@pytest.mark.parametrize(
    "options",
    [
        {"workload": "units"},
        {"workload": (np.array([0]), np.array([40]))},
        {"rows": 0},
        {"rows": 2.5},
        {"rows": 2000},
        {"edges": [0, 1]},
    ],
)
def test_bad_options_are_refused_before_the_charge(options: dict[str, Any]) -> None:
    acc = Accountant(Budget(1.0))
    with pytest.raises(InvalidParameterError):
        matrix_mechanism(np.ones(8), 0.5, accountant=acc, **options)
    assert acc.spent == Budget(0.0)


def test_details_state_the_error_and_the_bound() -> None:
    h = histograms.matrix_mechanism(np.ones(64), 0.5, workload="prefixes", rng=1)
    d = h.details
    gram = gram_for(64, "prefixes")
    assert d["ratio_to_bound"] == pytest.approx(np.sqrt(d["unit_error"] / svd_bound(gram)))
    assert d["svd_bound_rmse"] < d["expected_rmse"] < d["hb_expected_rmse"]
    lo, hi = np.zeros(64, np.int64), np.arange(64)
    assert np.mean(h.answer_error(lo, hi) ** 2) == pytest.approx(d["expected_rmse"] ** 2)
    assert h.privacy.epsilon == 0.5 and h.method == "matrix_mechanism"
    # The public rule's number (auto): the mean variance over Hb's sample of the workload,
    # with the nominal Laplace scale (the sampler's grid adds at most 2^-10).
    sample_lo, sample_hi = workload_ranges(64, "prefixes")
    stated = float(np.mean(h.answer_error(sample_lo, sample_hi) ** 2))
    assert expected_variance(64, 0.5, "prefixes") == pytest.approx(stated, rel=2e-3)
    assert expected_variance(64, 0.5, "prefixes") < hb_variance(64, 0.5, "prefixes")


# -- audits -----------------------------------------------------------------------------------


def _unnormalised(strategy: PIdentity) -> PIdentity:
    """The broken variant: A = [I; Θ] without D, but still claiming sensitivity 1."""
    b = np.floor(strategy.theta * 2.0**20) / 2.0**20
    broken = assemble(np.ones(strategy.n), b, strategy.theta)
    return dataclasses.replace(broken, sensitivity=1.0)


def _loss_samples(
    strategy: PIdentity, x: np.ndarray, i: int, runs: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The privacy-loss statistic of the measurement y = A x + noise (epsilon 1), for x and x + e_i.

    L(y) = sum_k (|y_k - (Ax)_k| - |y_k - (Ax')_k|) / b is the log likelihood ratio of
    continuous Laplace noise: threshold events on it are the most telling ones.
    """
    x_prime = x + np.eye(x.size)[i]
    mean, mean_prime = strategy.measure(x), strategy.measure(x_prime)
    scale = _noise_for(strategy, 1.0, runs).scale
    out = []
    for counts, rng in ((x, seed), (x_prime, seed + 1)):
        y = _measurements(strategy, counts, runs, rng)
        out.append((np.abs(y - mean) - np.abs(y - mean_prime)).sum(axis=1) / scale)
    return out[0], out[1]


def _measurement_audit(gram: Gram, rows: int, runs: int) -> None:
    honest = p_identity(gram, rows)
    x = np.tile([3.0, 0, 5, 1, 0, 0, 2, 4], gram.n // 8)
    i = int(np.argmax(honest.theta.sum(axis=0)))  # the column with the most aggregate weight
    passed = audit_samples(*_loss_samples(honest, x, i, runs, 1), epsilon=1.0)
    assert passed.passed, passed
    broken_strategy = _unnormalised(honest)
    assert np.abs(_dense(broken_strategy)).sum(axis=0).max() > 1.5  # really broken
    broken = audit_samples(*_loss_samples(broken_strategy, x, i, runs, 3), epsilon=1.0)
    assert not broken.passed and broken.epsilon_lower_bound > 1.0, broken
    # Subtler: every column's l1 norm is 2 but the noise is scaled for the stated 1.
    doubled = dataclasses.replace(
        assemble(2 * honest.a, 2 * honest.b, honest.theta), sensitivity=honest.sensitivity
    )
    broken = audit_samples(*_loss_samples(doubled, x, i, runs, 5), epsilon=1.0)
    assert not broken.passed and broken.epsilon_lower_bound > 1.0, broken


def test_measurement_audit_passes_and_refutes_unnormalised_columns() -> None:
    _measurement_audit(gram_for(32, "prefixes"), 4, 4000)


@pytest.mark.audit
@pytest.mark.parametrize(("workload", "n", "rows"), [("prefixes", 32, 4), ("ranges", 64, 8)])
def test_measurement_audit_at_scale(workload: str, n: int, rows: int) -> None:
    # (All ranges over 32 bins with 4 rows: the identity is optimal, nothing to break.)
    _measurement_audit(gram_for(n, workload), rows, 100000)


@pytest.mark.audit
def test_released_estimates_audit_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Audit what is published: (AᵀA x̂)_i = (Aᵀy)_i, a function of the estimates only."""
    x = np.tile([3.0, 0, 5, 1, 0, 0, 2, 4], 4)
    honest = p_identity(gram_for(32, "prefixes"), 4)
    i = int(np.argmax(honest.theta.sum(axis=0)))

    def statistic(strategy: PIdentity, counts: np.ndarray, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        out = []
        for _ in range(5000):
            est = matrix_mechanism(counts, 1.0, workload="prefixes", rows=4, rng=rng).estimates
            out.append(strategy.a[i] ** 2 * est[i] + strategy.b[:, i] @ (strategy.b @ est))
        return np.array(out)

    x_prime = x + np.eye(32)[i]
    honest_audit = audit_samples(
        statistic(honest, x, 1), statistic(honest, x_prime, 2), epsilon=1.0
    )
    assert honest_audit.passed, honest_audit
    broken = _unnormalised(honest)
    monkeypatch.setattr(_strategy_l1, "p_identity", lambda gram, rows: broken)
    broken_audit = audit_samples(
        statistic(broken, x, 3), statistic(broken, x_prime, 4), epsilon=1.0
    )
    assert not broken_audit.passed, broken_audit


@pytest.mark.parametrize("counts", [np.full(8, 0.5), np.array([2.0**33] + [0.0] * 7)])
def test_counts_it_cannot_sum_exactly_are_refused_before_the_charge(counts: np.ndarray) -> None:
    # Fractional counts, or a total of 2**33 rows: A x would not be exact (the proof needs it).
    acc = Accountant(Budget(1.0))
    with pytest.raises(DataError, match="whole-number counts") as caught:
        matrix_mechanism(counts, 0.5, accountant=acc)
    assert "0.5" not in str(caught.value) and acc.spent == Budget(0.0)
    matrix_mechanism(np.full(8, 2.0**29), 0.5, rng=1)  # whole, 2**32 in all: fine


def test_domains_beyond_its_limit_are_refused_before_the_charge() -> None:
    from dpkit.histograms.matrix_mechanism import MAX_BINS

    acc = Accountant(Budget(1.0))
    with pytest.raises(InvalidParameterError, match="at most 65,536 unit bins"):
        matrix_mechanism(np.zeros(MAX_BINS + 1), 0.5, accountant=acc)
    with pytest.raises(InvalidParameterError, match="GiB of memory"):
        matrix_mechanism(np.zeros(MAX_BINS), 0.5, rows=256, accountant=acc)
    assert acc.spent == Budget(0.0)


def test_a_session_histogram_checks_the_domain_before_the_charge() -> None:
    import pandas as pd

    from dpkit.tables import Session

    frame = pd.DataFrame({"age": np.arange(200) % 90})
    session = Session.from_pandas(frame, epsilon=2.0, types={"age": "float"})
    with pytest.raises(InvalidParameterError, match="at most 65,536 unit bins"):
        session.histogram(
            "age", epsilon=1.0, bins=70_000, bounds=(0, 90), method="matrix_mechanism"
        )
    assert session.accountant.spent == Budget(0.0)
    r = session.histogram("age", epsilon=1.0, bins=90, bounds=(0, 90), method="matrix_mechanism")
    assert r.mechanism == "matrix_mechanism" and len(r.value) == 90
    assert r.details["published"].details["strategy"] == "p_identity"
