"""The matrix mechanism on a grid, Ax ⊗ Ay (issue 32, item 5).

* the factorised errors (rectangle variances, unit error, SVD bound) equal dense computations on
  the Kronecker product; the measurement is exact and least squares inverts it;
* the release: unbiased with the stated variance (Monte Carlo); transcripts of neighbouring grids
  differ only in the estimates; what it cannot do exactly is refused before the charge;
* audits: the measurement passes at its epsilon and a variant whose noise is calibrated for a
  third of the sensitivity is refuted; a Session runs it and checks its size before the charge.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.histograms._transcripts import transcript

from dpkit import histograms
from dpkit.accounting import Accountant, Budget
from dpkit.audit import audit_samples
from dpkit.errors import DataError, InvalidParameterError
from dpkit.histograms.matrix_mechanism2d import (
    MAX_CELLS,
    _measure,
    _reconstruct,
    axis_strategy,
    matrix_mechanism2d,
)
from dpkit.mechanisms import Laplace

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.PrivacyWarning")


def _dense_axis(n: int, workload: str) -> np.ndarray:
    s = axis_strategy(n, workload)
    return np.vstack([np.diag(s.a), s.b])


def _queries(n: int, workload: str) -> np.ndarray:
    """The 1-D workload matrix: prefixes, or all ranges."""
    idx = np.arange(n)
    if workload == "prefixes":
        return (idx[None, :] <= idx[:, None]).astype(float)
    lo, hi = np.triu_indices(n)
    return ((idx[None, :] >= lo[:, None]) & (idx[None, :] <= hi[:, None])).astype(float)


@pytest.mark.parametrize("workload", ["prefixes", "rectangles"])
def test_factorised_errors_equal_dense_kronecker_computations(workload: str) -> None:
    nx, ny = 12, 6
    ax, ay = _dense_axis(nx, workload), _dense_axis(ny, workload)
    a = np.kron(ax, ay)  # vec of a row-major (nx, ny) grid
    h = matrix_mechanism2d(np.ones((nx, ny)), 1.0, workload=workload, rng=1)
    d = h.details
    assert d["sensitivity"] == np.abs(a).sum(axis=0).max()  # exact, of the stored factors
    inverse = np.linalg.inv(a.T @ a)
    kind = "prefixes" if workload == "prefixes" else "ranges"
    w = np.kron(_queries(nx, kind), _queries(ny, kind))
    dense_unit = d["sensitivity"] ** 2 * np.trace(w @ inverse @ w.T) / w.shape[0]
    assert d["unit_error"] == pytest.approx(dense_unit, rel=1e-9)
    sigma = np.linalg.svd(w, compute_uv=False)
    bound = sigma.sum() ** 2 / (nx * ny * w.shape[0])
    assert d["svd_bound_rmse"] == pytest.approx(np.sqrt(2 * bound) / 1.0, rel=1e-9)
    assert d["ratio_to_bound"] >= 1.0
    noise = 2 * d["scale"] ** 2
    x0, x1, y0, y1 = (
        np.array([0, 3, 11]),
        np.array([11, 7, 11]),
        np.array([0, 1, 5]),
        np.array([5, 1, 5]),
    )
    q = np.zeros((3, nx, ny))
    for k in range(3):
        q[k, x0[k] : x1[k] + 1, y0[k] : y1[k] + 1] = 1
    flat = q.reshape(3, -1)
    dense_var = np.einsum("ij,jk,ik->i", flat, inverse, flat) * noise
    assert np.allclose(h.answer_error(x0, x1, y0, y1) ** 2, dense_var, rtol=1e-9)


def test_the_measurement_is_exact_and_least_squares_inverts_it() -> None:
    nx, ny = 12, 16
    sx, sy = axis_strategy(nx, "prefixes"), axis_strategy(ny, "prefixes")
    assert sx.b.any() and sy.b.any()  # real aggregate rows, not the identity
    rng = np.random.default_rng(4)
    x = rng.integers(0, 2**26, (nx, ny)).astype(float)
    x[0, 0] = 2.0**33 - 1 - x.sum() + x[0, 0]  # total just below 2^33
    y = _measure(sx, sy, x)
    ax, ay = _dense_axis(nx, "prefixes"), _dense_axis(ny, "prefixes")
    for k, col in ((0, 0), (nx, ny), (nx, 3), (5, ny)):  # unit, aggregate and mixed entries
        exact = sum(
            Fraction(ax[k, i]) * Fraction(int(x[i, j])) * Fraction(ay[col, j])
            for i in range(nx)
            for j in range(ny)
        )
        assert Fraction(y[k, col]) == exact
    assert np.allclose(_reconstruct(sx, sy, y), x, rtol=0, atol=1e-7 * x.max())


def test_monte_carlo_variance_agrees_with_the_exact_one() -> None:
    x = np.random.default_rng(0).integers(0, 30, (12, 12)).astype(float)
    rng = np.random.default_rng(5)
    runs = [matrix_mechanism2d(x, 1.0, workload="prefixes", rng=rng) for _ in range(300)]
    x0, x1, y0, y1 = np.array([0, 2]), np.array([11, 6]), np.array([0, 4]), np.array([11, 4])
    truth = np.array([x[0:12, 0:12].sum(), x[2:7, 4:5].sum()])
    answers = np.array([r.answer(x0, x1, y0, y1) for r in runs])
    stated = runs[0].answer_error(x0, x1, y0, y1)
    assert np.all(np.abs(answers.mean(axis=0) - truth) < 4 * stated / np.sqrt(300))
    assert np.allclose(answers.std(axis=0), stated, rtol=0.15)


def _transcript(counts: Any, **kw: Any) -> tuple[Any, ...]:
    acc = Accountant(Budget(2.0))
    ends = (np.array([0, 2]), np.array([11, 5]), np.array([0, 3]), np.array([15, 3]))
    return transcript(
        acc,
        lambda: matrix_mechanism2d(counts, 0.5, accountant=acc, **kw),
        lambda h: (
            h.method,
            h.epsilon,
            h.details,
            h.cells.tolist(),
            h.answer_error(*ends).tolist(),
            h.privacy,
        ),
    )


@pytest.mark.parametrize("workload", ["prefixes", "rectangles"])
def test_transcripts_of_neighbours_differ_only_in_the_estimates(workload: str) -> None:
    x = np.zeros((12, 16))
    x[3:9, 2:10] = np.arange(48).reshape(6, 8)
    big = x.copy()
    big[11, 15] = 1e9
    one = np.zeros((12, 16))
    pairs = []
    for base, (i, j) in ((x, (0, 0)), (x, (5, 5)), (big, (11, 15)), (x, (11, 0))):
        cell = one.copy()
        cell[i, j] = 1
        pairs.append((base, base + cell))
    for a, b in pairs:
        assert _transcript(a, rng=3, workload=workload) == _transcript(b, rng=3, workload=workload)
    first = _transcript(x, rng=3, workload=workload)
    assert first[2]["strategy"] == "kronecker_p_identity" and first[2]["workload"] == workload
    assert first[-3] == Budget(0.5)
    assert first[-2][0][0] == "histogram2d: matrix_mechanism2d"


@pytest.mark.parametrize(
    ("counts", "options", "error"),
    [
        ([[1.0, np.nan], [2.0, 0.0]], {}, DataError),
        ([[1.0, np.inf], [2.0, 0.0]], {}, DataError),
        ([[1.0, -1.0], [2.0, 0.0]], {}, DataError),
        ([[0.5, 1.0], [2.0, 0.0]], {}, DataError),  # weighted: not exactly summable
        ([[2.0**33, 0.0], [0.0, 0.0]], {}, DataError),
        ([1.0, 2.0], {}, DataError),  # not a grid
        (np.ones((4, 4)), {"workload": "ranges"}, InvalidParameterError),
        (np.ones((4, 4)), {"workload": None}, InvalidParameterError),
    ],
)
def test_what_it_cannot_do_is_refused_before_the_charge(
    counts: Any, options: dict[str, Any], error: type
) -> None:
    transcript = _transcript(counts, rng=1, **options)
    assert transcript[0] == error.__name__
    assert transcript[-3] == Budget(0.0) and transcript[-2] == []


def test_grids_beyond_the_limit_are_refused_before_the_charge() -> None:
    acc = Accountant(Budget(1.0))
    side = int(np.sqrt(MAX_CELLS)) + 1
    with pytest.raises(InvalidParameterError, match="at most"):
        matrix_mechanism2d(np.zeros((side, side)), 0.5, accountant=acc)
    # A long thin grid: few cells, but one axis beyond what the 1-D strategy takes.
    with pytest.raises(InvalidParameterError, match="unit bins"):
        matrix_mechanism2d(np.zeros((70_000, 2)), 0.5, accountant=acc)
    assert acc.spent == Budget(0.0)


def test_it_beats_laplace2d_on_rectangles_of_a_large_grid() -> None:
    h = histograms.matrix_mechanism2d(np.zeros((128, 128)), 1.0, rng=1)
    assert h.details["expected_rmse"] < 0.6 * h.details["laplace2d_expected_rmse"]


def _loss_samples(
    x: np.ndarray, i: int, j: int, runs: int, seed: int, calibrated_for: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """The Laplace log likelihood ratio of y = Ax X Ayᵀ + noise for X and X + e_ij (epsilon 1).

    ``calibrated_for`` scales the sensitivity the noise is calibrated for (1: honest).
    """
    sx, sy = axis_strategy(12, "prefixes"), axis_strategy(12, "prefixes")
    x_prime = x.copy()
    x_prime[i, j] += 1
    mean, mean_prime = _measure(sx, sy, x).ravel(), _measure(sx, sy, x_prime).ravel()
    sensitivity = sx.sensitivity * sy.sensitivity * calibrated_for
    changed = (sx.p + 1) * (sy.p + 1)
    noise = Laplace(epsilon=1.0, sensitivity=sensitivity, size=mean.size * runs, changed=changed)
    out = []
    for m, rng in ((mean, seed), (mean_prime, seed + 1)):
        y = np.asarray(noise.randomise(np.tile(m, runs), rng=rng), dtype=float).reshape(runs, -1)
        out.append((np.abs(y - mean) - np.abs(y - mean_prime)).sum(axis=1) / noise.scale)
    return out[0], out[1]


def _audit(runs: int) -> None:
    x = np.tile([3.0, 0, 5, 1, 0, 0, 2, 4, 1, 0, 0, 6], (12, 1))
    sx = axis_strategy(12, "prefixes")
    i = int(np.argmax(sx.b.sum(axis=0)))  # a cell whose column has aggregate weight
    honest = audit_samples(*_loss_samples(x, i, i, runs, 1), epsilon=1.0)
    assert honest.passed, honest
    broken = audit_samples(*_loss_samples(x, i, i, runs, 3, calibrated_for=1 / 3), epsilon=1.0)
    assert not broken.passed and broken.epsilon_lower_bound > 1.0, broken


def test_measurement_audit_passes_and_refutes_noise_for_the_wrong_sensitivity() -> None:
    _audit(3000)


@pytest.mark.audit
def test_measurement_audit_at_scale() -> None:
    _audit(50000)


def test_a_session_publishes_it_and_checks_its_size_before_the_charge() -> None:
    from dpkit.tables import Session

    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"x": rng.uniform(0, 10, 500), "y": rng.uniform(0, 10, 500)})
    s = Session.from_pandas(frame, types={"x": "DOUBLE", "y": "DOUBLE"}, epsilon=5.0, rng=1)
    r = s.histogram2d(
        "x", "y", epsilon=1.0, bins=(16, 16), bounds=((0, 10), (0, 10)), method="matrix_mechanism2d"
    )
    published = r.details["published"]
    assert published.method == "matrix_mechanism2d" and published.shape == (16, 16)
    before = s.spent
    with pytest.raises(InvalidParameterError, match="cells"):  # the memory check, or ours
        s.histogram2d(
            "x", "y", epsilon=1.0, bins=(2100, 2000), bounds=((0, 10), (0, 10)),
            method="matrix_mechanism2d",
        )  # fmt: skip
    assert s.spent == before
