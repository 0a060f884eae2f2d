"""The default quantile grid of an integer column holds every integer (issue 33).

A uniform grid of 2**k + 1 points over [0, 100] holds only a handful of integers
(0, 25, 50, 75 and 100 for the old default of 131,073), so a median of integer ages was never an integer. For columns whose
declared type holds only integers the default grid is aligned
(:func:`dpkit.tables.queries.aligned_grid`): its choice reads the schema, not
the data, so the privacy argument is the quantile's own (permute-and-flip over
a public candidate set); the transcript tests cover it as ``median-int-*``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.tables import Session
from dpkit.tables import queries as Q
from dpkit.tables.engines import DuckDBEngine, Rows, Value
from dpkit.tables.engines.duckdb_engine import connect


@settings(max_examples=300, deadline=None)
@given(
    lo=st.integers(-(2**40), 2**40),
    width=st.integers(1, 2**41),
    frac=st.sampled_from([0.0, 0.25, 0.5, 0.75]),
    max_size=st.integers(3, 2**17 + 1),
)
def test_the_aligned_grid_covers_the_bounds_with_exact_points(
    lo: int, width: int, frac: float, max_size: int
) -> None:
    bounds = (lo - frac, lo + width + frac)
    got = Q.aligned_grid(bounds, max_size)
    first, last = math.ceil(bounds[0]), math.floor(bounds[1])
    if first >= last:
        assert got is None
        return
    assert got is not None
    clip, step, size = got
    assert clip == (first, last)
    assert 2 <= size <= max_size
    assert step >= 0.5 and math.frexp(step)[0] == 0.5  # a power of two
    grid = clip[0] + np.arange(size, dtype=np.float64) * step
    assert grid[0] == first and grid[-1] >= last and grid[-2] < last  # covers, no more
    assert np.all((grid - first) / step == np.arange(size))  # the engine's codes are exact
    if step == 0.5:  # every integer and half-integer of the bounds is a candidate
        assert size == 2 * (last - first) + 1
    else:  # the finest power of two that fits
        assert math.ceil((last - first) / (step / 2)) + 1 > max_size


def test_duckdb_codes_every_integer_as_a_grid_point() -> None:
    values = np.array(
        [-7, 0, 1, 2, 40, 99, 100, 10**9, -(10**9)], dtype=np.int64
    )  # in the valid span
    con = connect()
    con.register("t", pd.DataFrame({"v": values}))
    engine = DuckDBEngine(con, "t")
    (lo, hi), step, size = Q.aligned_grid((-0.5, 100.5), Q.QUANTILE_GRID)
    frame = engine.grid_counts(
        Rows(), Value("v", numeric=True, bounds=(lo, hi)), (), lo, step, size
    )
    clipped = np.clip(values, lo, hi)
    expected = pd.Series(2 * ((clipped - lo) / step).astype(np.int64)).value_counts()
    got = frame.set_index("code")["n"]
    assert got.sort_index().to_dict() == expected.sort_index().to_dict()


def _ages(n_at_median: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    low = rng.integers(0, 40, 1000)
    high = rng.integers(41, 101, 1000)
    return pd.DataFrame({"age": np.concatenate([low, np.full(n_at_median, 40), high])})


@pytest.mark.parametrize("seed", range(3))
def test_an_integer_median_is_released_exactly(seed: int) -> None:
    """40 is the median with 41 rows on it: every other candidate's utility is at least 20
    rows worse, so permute-and-flip at ε = 1 (Δ = 1/2) takes 40 unless one of the 201
    candidates wins with probability ≤ e^(-20): 30 releases all give 40.
    Before the aligned grid, 40 was not a candidate and none of them did."""
    frame = _ages(41, seed)
    assert np.median(frame["age"]) == 40
    s = Session.from_pandas(
        frame,
        types={"age": "BIGINT"},
        schema={"columns": {"age": {"bounds": [0, 100]}}},
        epsilon=30.0,
        rng=seed,
    )
    releases = [s.median("age", epsilon=1.0) for _ in range(30)]
    assert {r.value for r in releases} == {40.0}
    assert releases[0].details["resolution"] == 0.5
    assert releases[0].details["bounds"] == (0.0, 100.0)


def test_a_double_column_and_an_explicit_grid_keep_the_uniform_grid() -> None:
    frame = pd.DataFrame({"a": np.arange(101, dtype=np.int64), "x": np.linspace(0, 100, 101)})
    s = Session.from_pandas(
        frame,
        types={"a": "BIGINT", "x": "DOUBLE"},
        schema={"columns": {"a": {"bounds": [0, 100]}, "x": {"bounds": [0, 100]}}},
        epsilon=10.0,
        rng=1,
    )
    assert s.median("x", epsilon=1.0).details["resolution"] == 100 / (Q.QUANTILE_GRID - 1)
    assert s.median("a", epsilon=1.0, grid_size=11).details["resolution"] == 10.0
    grouped = s.median("a", epsilon=1.0, group_by="a", keys=[1, 2])
    assert grouped.details["resolution"] == 0.5
