"""The pruned dynamic programmes equal the exact O(n²)-per-row reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.histograms._optimal import backtrack, interval_costs, optimal_table
from dpkit.histograms._segmentation import (
    prefix_sums,
    segment_costs,
    sse_optimal,
    sse_penalised,
    sse_rows,
    sse_rows_backwards,
)

# Counts as they come: small integers with many ties, noisy floats, huge values.
sequences = st.one_of(
    st.lists(st.integers(0, 6).map(float), min_size=1, max_size=40),
    st.lists(st.floats(-50, 200, allow_nan=False), min_size=1, max_size=40),
    st.lists(st.sampled_from([0.0, 1e9, 3e9, 1.0]), min_size=1, max_size=30),
)


def _sse(x: np.ndarray, boundaries: np.ndarray) -> float:
    return float(
        sum(np.sum((x[a:b] - x[a:b].mean()) ** 2) for a, b in itertools.pairwise(boundaries))
    )


def _close(a: np.ndarray, b: np.ndarray, scale: float) -> bool:
    finite = np.isfinite(a)
    return bool(
        np.array_equal(finite, np.isfinite(b))
        and np.allclose(a[finite], b[finite], rtol=1e-9, atol=1e-9 * max(1.0, scale))
    )


@settings(max_examples=300, deadline=None)
@given(sequences, st.data())
def test_rows_equal_the_reference(values: list[float], data: st.DataObject) -> None:
    x = np.array(values)
    n = x.size
    k = data.draw(st.integers(1, n))
    table, _starts = optimal_table(interval_costs(x), k)
    scale = float(np.sum((x - x.mean()) ** 2))
    for j, row, _start in sse_rows(x, k):
        assert _close(row, table[j], scale)
    # Backtracked structures attain the optimum (the structure itself may differ on ties).
    boundaries = sse_optimal(x, k)
    assert boundaries[0] == 0 and boundaries[-1] == n and np.all(np.diff(boundaries) > 0)
    assert _sse(x, boundaries) == pytest.approx(table[k, n], rel=1e-9, abs=1e-9 * max(1, scale))


@settings(max_examples=200, deadline=None)
@given(sequences, st.floats(0.0, 1e4))
def test_penalised_equals_the_best_k(values: list[float], penalty: float) -> None:
    x = np.array(values)
    n = x.size
    table, _ = optimal_table(interval_costs(x), n)
    best = float(np.min(table[1:, n] + penalty * np.arange(1, n + 1)))
    boundaries, sse = sse_penalised(x, penalty)
    scale = float(np.sum((x - x.mean()) ** 2))
    assert sse + penalty * (boundaries.size - 1) == pytest.approx(
        best, rel=1e-9, abs=1e-9 * max(1.0, scale)
    )
    assert sse == pytest.approx(_sse(x, boundaries), rel=1e-9, abs=1e-9 * max(1.0, scale))


def test_structures_match_the_reference_without_ties() -> None:
    # Continuous data has no ties: the same structure, boundary for boundary.
    rng = np.random.default_rng(4)
    for _ in range(50):
        n = int(rng.integers(2, 80))
        x = rng.laplace(20, 8, n)
        k = int(rng.integers(1, n + 1))
        _, starts = optimal_table(interval_costs(x), k)
        assert np.array_equal(sse_optimal(x, k), backtrack(starts, k))


def test_split_points_are_not_monotone_so_no_shortcut_is_taken() -> None:
    # 0, 10, 0 breaks the quadrangle inequality: C(0,2) + C(1,3) > C(0,3) + C(1,2).
    costs = interval_costs(np.array([0.0, 10.0, 0.0]))
    assert costs[0, 2] + costs[1, 3] > costs[0, 3] + costs[1, 2]
    # On such data the reference's optimal starts go backwards; the pruned rows agree.
    x = np.array([0.0, 10.0, 0.0, 9.0, 1.0, 10.0, 0.0])
    table, _ = optimal_table(interval_costs(x), 3)
    for j, row, _ in sse_rows(x, 3):
        assert _close(row, table[j], 1.0)


@pytest.mark.parametrize("keep", ["values", "starts"])
def test_checkpointed_rows_equal_the_kept_rows(keep: str) -> None:
    x = np.random.default_rng(2).poisson(12, 200).astype(float)
    kept = dict(sse_rows_backwards(x, 30, keep))
    recomputed = list(sse_rows_backwards(x, 30, keep, memory=1))
    assert [j for j, _ in recomputed] == list(range(30, 0, -1))
    for j, row in recomputed:
        assert np.array_equal(row, kept[j])


@pytest.mark.parametrize("memory", [1 << 30, 1])
def test_rows_cut_at_rest_are_the_full_rows_where_computed(memory: int) -> None:
    # StructureFirst reads row j only at ends <= j + rest (rest = n - k): the cut
    # rows must be the full rows there, bit for bit, and +inf beyond.
    x = np.random.default_rng(4).poisson(9, 120).astype(float)
    max_bins, rest = 40, 120 - 41
    full = dict(sse_rows_backwards(x, max_bins, "values"))
    cut = list(sse_rows_backwards(x, max_bins, "values", memory=memory, rest=rest))
    assert [j for j, _ in cut] == list(range(max_bins, 0, -1))
    for j, row in cut:
        assert np.array_equal(row[: j + rest + 1], full[j][: j + rest + 1])
        assert np.all(np.isposinf(row[j + rest + 1 :]))


def test_segment_costs_are_the_interval_costs() -> None:
    x = np.random.default_rng(3).normal(5, 2, 30)
    costs = interval_costs(x)
    starts = np.arange(0, 31)
    assert np.allclose(segment_costs(prefix_sums(x), starts, 17)[:17], costs[:17, 17])
    assert np.all(np.isinf(segment_costs(prefix_sums(x), starts, 17)[17:]))


def test_rejects_impossible_bin_counts() -> None:
    with pytest.raises(ValueError):
        list(sse_rows(np.ones(3), 4))
    with pytest.raises(ValueError):
        list(sse_rows_backwards(np.ones(3), 0, "values"))
