"""Merged cells (``dpkit.synth.compression``): post-processing that keeps every sensitivity at 1.

* ``merged_cells`` keeps exactly the cells at or above 3σ and merges the rest
  (nothing when fewer than two would merge).
* ``grouped`` is a sum into merged cells: equal to a brute-force sum, and
  one row added moves exactly one merged cell by exactly 1 (sensitivity 1).
* ``GroupedQuery`` (the model fit's view of a merged measurement) computes
  the same sums as ``grouped``, with the operator norm it states.
* In a release, the merge maps in the report are the ones the *released*
  one-way counts give: no other input reaches them.
* A model fitted to merged measurements is as accurate as the unmerged fit
  of the MST accuracy test.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.synth._tables import dependent, session

import dpkit.synth.mst as mst
from dpkit.errors import PrivacyWarning
from dpkit.synth.compression import (
    SUPPORT_SIGMAS,
    GroupedQuery,
    grouped,
    merged_cells,
)


def test_cells_below_three_sigma_merge_into_one_last_cell() -> None:
    noisy = np.array([50, 29, 30, -4, 31, 2])
    cells = merged_cells(noisy, sigma=10.0)
    assert cells is not None
    assert cells.tolist() == [0, 3, 1, 3, 2, 3]  # kept in code order, merged cell last
    assert SUPPORT_SIGMAS == 3
    # one rare cell alone is not a merge; nothing rare, nothing merged
    assert merged_cells(np.array([50, 29, 40]), sigma=10.0) is None
    assert merged_cells(np.array([50, 60]), sigma=10.0) is None
    # all rare: one cell
    assert merged_cells(np.array([1, 2, 3]), sigma=10.0).tolist() == [0, 0, 0]


def _maps(draw: Any, shape: tuple[int, ...]) -> list[np.ndarray | None]:
    out: list[np.ndarray | None] = []
    for size in shape:
        if draw(st.booleans()):
            out.append(None)
            continue
        noisy = np.array(draw(st.lists(st.integers(-5, 40), min_size=size, max_size=size)))
        out.append(merged_cells(noisy, sigma=10.0 / SUPPORT_SIGMAS))
    return out


@st.composite
def _case(draw: Any) -> tuple[np.ndarray, list[np.ndarray | None]]:
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    size = int(np.prod(shape))
    counts = np.array(draw(st.lists(st.integers(0, 50), min_size=size, max_size=size)))
    return counts.reshape(shape), _maps(draw, shape)


@settings(max_examples=200, deadline=None)
@given(_case(), st.data())
def test_grouped_is_a_sum_into_merged_cells_with_sensitivity_one(case, data) -> None:
    counts, maps = case
    out = grouped(counts, maps)
    # brute force: every cell adds its count to its merged cell
    codes = [np.arange(n) if m is None else m for n, m in zip(counts.shape, maps)]
    want = np.zeros([int(c.max()) + 1 for c in codes], dtype=np.int64)
    for index in np.ndindex(counts.shape):
        want[tuple(c[i] for c, i in zip(codes, index))] += counts[index]
    np.testing.assert_array_equal(out, want)
    assert out.sum() == counts.sum()
    # a neighbour with one more row in any cell: one merged cell moves by exactly 1
    cell = tuple(data.draw(st.integers(0, n - 1)) for n in counts.shape)
    neighbour = counts.copy()
    neighbour[cell] += 1
    diff = grouped(neighbour, maps) - out
    assert np.abs(diff).sum() == 1 and diff.max() == 1


@settings(max_examples=100, deadline=None)
@given(_case())
def test_the_fit_query_computes_the_same_sums(case) -> None:
    pytest.importorskip("jax")
    counts, maps = case
    query = GroupedQuery.of(counts.shape, maps)

    class _Factor:
        def datavector(self) -> np.ndarray:
            return counts.ravel().astype(np.float64)

    np.testing.assert_allclose(np.asarray(query(_Factor())), grouped(counts, maps).ravel())
    sizes = np.bincount(np.asarray(query.matrix.argmax(axis=0)), minlength=query.matrix.shape[0])
    assert query.op_norm_sq() == sizes.max()
    assert np.linalg.norm(query.matrix, 2) ** 2 == pytest.approx(sizes.max())
    # the same arguments, the same object: mbi's compiled fit is reused across AIM's refits
    copies = [None if m is None else m.copy() for m in maps]
    assert GroupedQuery.of(list(counts.shape), copies) is query


def test_the_reported_merges_are_those_of_the_released_one_way_counts(monkeypatch) -> None:
    monkeypatch.setattr(
        mst,
        "fit_and_sample",
        lambda attributes, measurements, rows, seed, iterations=0: {
            a.name: np.zeros(rows, dtype=np.int64) for a in attributes
        },
    )
    s = session(dependent(300))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        report = s.synthesize(rows=10, epsilon=1.0, delta=1e-6, bins=8, rng=7).report
    one_way = {m.columns[0]: m for m in report.marginals if len(m.columns) == 1}
    want = {}
    for name, m in one_way.items():
        cells = merged_cells(m.counts, m.sigma)
        if cells is not None:
            want[name] = tuple(cells.tolist())
    assert want, "this budget should leave some cells below 3 sigma"
    pairs = [m for m in report.marginals if len(m.columns) == 2]
    for m in pairs:
        assert m.merges == {c: want[c] for c in m.columns if c in want}
        shape = tuple(max(want[c]) + 1 if c in want else len(report.cells[c]) for c in m.columns)
        assert m.counts.shape == shape


def test_a_fit_with_merged_cells_is_accurate() -> None:
    """The merged measurements enter the model fit as sums of cells (GroupedQuery), and it works."""
    pytest.importorskip("mbi")
    from dpkit.synth import evaluate

    frame = dependent(3000)
    s = session(frame, epsilon=200.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        result = s.synthesize(rows=3000, rho=0.05, rng=np.random.default_rng(7))
    merged = [m for m in result.report.marginals if m.merges]
    assert merged, "this budget should merge some of size's cells"
    for m in merged:
        assert m.counts.size < np.prod([len(result.report.cells[c]) for c in m.columns])
    scores = evaluate(frame, result.table, ["colour", "size", "ok"], edges=result.report.edges)
    assert scores.mean < 0.05 and scores.max < 0.08, scores
