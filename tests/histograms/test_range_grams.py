"""The range-workload Gram operators against dense matrices built from the queries themselves."""

from __future__ import annotations

import numpy as np
import pytest

from dpkit.errors import InvalidParameterError
from dpkit.histograms._range_grams import gram_for, svd_bound


def _queries(n: int, workload: object) -> np.ndarray:
    """The workload's query matrix W (one 0/1 row per range), built the slow, obvious way."""
    if workload == "prefixes":
        ranges = [(0, b) for b in range(n)]
    elif workload == "ranges":
        ranges = [(a, b) for a in range(n) for b in range(a, n)]
    else:
        ranges = list(zip(*workload, strict=True))  # type: ignore[call-overload]
    cols = np.arange(n)
    return np.array([((a <= cols) & (cols <= b)).astype(float) for a, b in ranges])


def _workloads(n: int) -> list[object]:
    rng = np.random.default_rng(n)
    lo = rng.integers(0, n, 25)
    hi = np.maximum(lo, rng.integers(0, n, 25))
    return ["prefixes", "ranges", (lo, hi)]


@pytest.mark.parametrize("n", [1, 2, 5, 37])
def test_gram_matches_the_dense_workload(n: int) -> None:
    rng = np.random.default_rng(0)
    for workload in _workloads(n):
        w = _queries(n, workload)
        gram = gram_for(n, workload)
        m = w.T @ w
        x = rng.standard_normal((n, 3))
        assert gram.m == w.shape[0]
        np.testing.assert_allclose(gram.matmat(x), m @ x, atol=1e-9)
        np.testing.assert_allclose(gram.matmat(x[:, 0]), m @ x[:, 0], atol=1e-9)
        np.testing.assert_allclose(gram.dense(), m)
        np.testing.assert_allclose(gram.diag(), np.diag(m))
        assert gram.trace() == pytest.approx(np.trace(m))
        expected = np.linalg.svd(w, compute_uv=False)
        expected = np.concatenate([expected, np.zeros(n - expected.size)])[:n]
        np.testing.assert_allclose(np.sort(gram.singular_values()), np.sort(expected), atol=1e-7)


def test_svd_bound_reproduces_the_published_figures() -> None:
    # HDMM (McKenna et al. 2018) reports 2.91 (prefixes) and 3.49 (all ranges) at n = 1,024.
    assert np.sqrt(svd_bound(gram_for(1024, "prefixes"))) == pytest.approx(2.91, abs=0.005)
    assert np.sqrt(svd_bound(gram_for(1024, "ranges"))) == pytest.approx(3.49, abs=0.005)


def test_large_domains_need_no_dense_matrix() -> None:
    n = 1 << 16
    gram = gram_for(n, "ranges")
    i = np.arange(n, dtype=float)
    for j in (0, 12_345, n - 1):
        unit = np.zeros(n)
        unit[j] = 1.0
        # column j of M: the ranges covering both i and j, (min + 1)(n - max)
        column = (np.minimum(i, j) + 1.0) * (n - np.maximum(i, j))
        np.testing.assert_allclose(gram.matmat(unit), column)
    assert np.isfinite(svd_bound(gram))
    with pytest.raises(InvalidParameterError):
        gram.dense()


@pytest.mark.parametrize(
    "workload",
    ["units", 3, (np.array([0.5]), np.array([1])), (np.array([2]), np.array([1])), ([0], [9])],
)
def test_bad_workloads_are_refused(workload: object) -> None:
    with pytest.raises(InvalidParameterError):
        gram_for(8, workload)
