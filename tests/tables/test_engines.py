"""The DuckDB engine computes exact aggregates, as SQL, with the declared semantics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit.errors import DataError
from dpkit.tables import queries as Q
from dpkit.tables.engines import Condition, Contribution, DuckDBEngine, Rows, Value
from dpkit.tables.engines.duckdb_engine import connect

from .conftest import SECRET

G = 2.0**-20  # the integer-sum grid used in these tests


def engine_for(df: pd.DataFrame) -> DuckDBEngine:
    con = connect()
    con.register("t", df)
    return DuckDBEngine(con, "t")


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "x": [1.0, 5.0, np.nan, 12.0, -3.0, np.inf, 7.0, 2.0],
            "g": ["a", "b", "a", "b", None, "a", "b", "a"],
            "s": ["1.5", "2", "oops", None, "4", "5", SECRET, "x"],
        }
    )


def test_moments_clip_center_and_drop_missing(frame: pd.DataFrame) -> None:
    eng = engine_for(frame)
    v = Value("x", numeric=True, bounds=(0.0, 10.0))
    out = eng.moments(Rows(), v, (), center=5.0, grids=[G, G])
    x = np.clip(frame["x"].to_numpy()[np.isfinite(frame["x"])], 0, 10) - 5.0
    assert int(out["n"].iloc[0]) == 6  # NaN and inf dropped
    assert float(out["s1"].iloc[0]) == np.sum(np.round(x / G))  # exact integer sums
    assert float(out["s2"].iloc[0]) == np.sum(np.round(x * x / G))
    assert float(out["s1"].iloc[0]) * G == pytest.approx(x.sum())


def test_moments_replace_policy_and_groups(frame: pd.DataFrame) -> None:
    eng = engine_for(frame)
    v = Value("x", numeric=True, nulls="replace", replacement=4.0, bounds=(0.0, 10.0))
    g = (Value("g", numeric=False, nulls="replace", replacement="none"),)
    out = eng.moments(Rows(), v, g, center=0.0, grids=[G]).set_index("_g0")
    x = np.where(np.isfinite(frame["x"]), frame["x"], 4.0).clip(0, 10)
    groups = frame["g"].fillna("none")
    for key in ["a", "b", "none"]:
        assert out.loc[key, "n"] == (groups == key).sum()
        assert out.loc[key, "s1"] * G == pytest.approx(x[groups == key].sum())


def test_count_rows_without_a_value(frame: pd.DataFrame) -> None:
    eng = engine_for(frame)
    out = eng.moments(Rows(where=(Condition("g", "==", "a"),)), None, ())
    assert int(out["n"].iloc[0]) == 4
    empty = eng.moments(
        Rows(where=(Condition("g", "==", "zzz"),)), Value("x", numeric=True), (), 0.0, [G]
    )
    assert int(empty["n"].iloc[0]) == 0 and float(empty["s1"].iloc[0]) == 0.0


def test_grid_codes_mark_points_and_gaps() -> None:
    df = pd.DataFrame({"x": [0.0, 0.5, 1.0, 1.25, 2.0, 3.0, -1.0]})
    eng = engine_for(df)
    out = eng.grid_counts(Rows(), Value("x", numeric=True, bounds=(0.0, 2.0)), (), 0.0, 0.5, 5)
    codes = dict(zip(out["code"], out["n"]))
    # grid 0, .5, 1, 1.5, 2: -1 and 0 on point 0; 0.5 on point 1; 1.0 on point 2;
    # 1.25 between 2 and 3; 2.0 and 3.0 (clipped) on point 4
    assert codes == {0: 2, 2: 1, 4: 1, 5: 1, 8: 2}


HOSTILE_X = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([None, 0.0, 2.0, -0.0, 1e308, -1e308, 0.5, 1.9999999999999998]),
    st.floats(-1.0, 3.0),
)


@settings(max_examples=60, deadline=None)
@given(
    xs=st.lists(HOSTILE_X, max_size=40),
    nulls=st.sampled_from(["drop", "replace"]),
    size=st.sampled_from([2, 5, 9]),
    short=st.booleans(),
)
def test_streamed_grid_codes_equal_the_group_by_codes(
    xs: list[float | None], nulls: str, size: int, short: bool
) -> None:
    """Ungrouped grid counts (codes counted in NumPy) equal DuckDB's GROUP BY, row for row.

    The same rows grouped by one constant public key take the ``GROUP BY``
    path: hostile values (NaN, ±inf, None, ±1e308, the grid's ends) must land
    on the same codes with the same counts.
    """
    df = pd.DataFrame({"x": pd.Series(xs, dtype="float64"), "g": ["a"] * len(xs)})
    eng = engine_for(df)
    value = Value("x", numeric=True, bounds=(0.0, 2.0), nulls=nulls, replacement=1.0)
    # a step an ulp short puts the upper bound past the last point (a code above the top)
    step = 2.0 / (size - 1) * (1.0 - 2.0**-52 if short else 1.0)
    streamed = eng.grid_counts(Rows(), value, (), 0.0, step, size)
    grouped = eng.grid_counts(
        Rows(where=(Condition("g", "in", ("a",)),)),
        value,
        (Value("g", numeric=False),),
        0.0,
        step,
        size,
    )
    assert list(streamed.columns) == ["code", "n"]
    assert dict(zip(streamed["code"], streamed["n"])) == dict(zip(grouped["code"], grouped["n"]))


def test_bin_counts_compare_exactly_with_the_edges() -> None:
    edges = list(np.linspace(0.0, 1.0, 11))
    df = pd.DataFrame({"x": [0.3, 0.7, 1.0, -5.0, 0.0999999, 0.1, 2.0]})
    eng = engine_for(df)
    out = eng.bin_counts(Rows(), Value("x", numeric=True, bounds=(0.0, 1.0)), (), edges)
    got = dict(zip(out["bin"], out["n"]))
    expected = np.bincount(
        np.clip(np.searchsorted(edges, np.clip(df["x"], 0, 1), side="right") - 1, 0, 9),
        minlength=10,
    )
    assert got == {i: c for i, c in enumerate(expected) if c}
    # 0.3 is in [0.3, 0.4) even though 0.3 / 0.1 < 3 in floating point
    assert got[np.searchsorted(edges, 0.3, side="right") - 1] >= 1


def test_value_counts_with_and_without_domain(frame: pd.DataFrame) -> None:
    eng = engine_for(frame)
    v = Value("g", numeric=False)
    out = eng.value_counts(Rows(), v, ())
    assert dict(zip(out["value"], out["n"])) == {"a": 4, "b": 3}
    out = eng.value_counts(Rows(), v, (), domain=["b", "c"])
    assert dict(zip(out["value"], out["n"])) == {"b": 3}


def test_contribution_bound_keeps_k_rows_per_person_chosen_without_values() -> None:
    persons = np.repeat(np.arange(300), 10)
    values = np.tile(np.arange(10.0), 300)  # each person's rows in increasing order
    eng = engine_for(pd.DataFrame({"pid": persons, "x": values}))
    rows = Rows(contribution=Contribution("pid", 2, salt=99))
    out = eng.moments(rows, Value("x", numeric=True, bounds=(0.0, 9.0)), (), 0.0, [G])
    assert int(out["n"].iloc[0]) == 600
    mean = float(out["s1"].iloc[0]) * G / 600
    # first-k-by-position would give 0.5, largest-k 8.5; a value-blind choice ~4.5
    assert mean == pytest.approx(4.5, abs=0.6)
    per_person = eng.value_counts(
        Rows(contribution=Contribution("pid", 2, salt=99)), Value("pid", numeric=False), ()
    )
    assert per_person["n"].max() == 2
    # a different salt keeps different rows, same number
    other = eng.moments(
        Rows(contribution=Contribution("pid", 2, salt=7)), Value("x", numeric=True), (), 0.0, [G]
    )
    assert int(other["n"].iloc[0]) == 600 and float(other["s1"].iloc[0]) != float(out["s1"].iloc[0])


def test_contribution_bound_drops_rows_without_an_id_and_counts_min_rows_k() -> None:
    rng = np.random.default_rng(1)
    pid = rng.integers(0, 50, 500).astype(float)
    pid[:5] = np.nan
    eng = engine_for(pd.DataFrame({"pid": pid}))
    out = eng.moments(Rows(contribution=Contribution("pid", 3, salt=1)), None, ())
    sizes = pd.Series(pid[5:]).value_counts()
    assert int(out["n"].iloc[0]) == int(np.minimum(sizes, 3).sum())


def test_coerce_reads_text_as_numbers_and_unparsable_as_missing(frame: pd.DataFrame) -> None:
    eng = engine_for(frame)
    v = Value("s", numeric=True, coerce=True, bounds=(0.0, 10.0))
    out = eng.moments(Rows(), v, (), 0.0, [G])
    assert int(out["n"].iloc[0]) == 4 and float(out["s1"].iloc[0]) * G == 1.5 + 2 + 4 + 5


def test_engine_errors_never_quote_data(frame: pd.DataFrame) -> None:
    eng = engine_for(frame)
    with pytest.raises(DataError) as info:
        eng.moments(Rows(), Value("s", numeric=True, bounds=(0.0, 1.0)), (), 0.0, [G])  # CAST fails
    assert SECRET not in str(info.value) and "oops" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert SECRET not in repr(info.value.args)


def test_identifiers_and_literals_are_quoted() -> None:
    df = pd.DataFrame({'we"ird col': [1.0, 2.0, 3.0], "name": ["O'Brien", "x", "y; DROP TABLE t"]})
    eng = engine_for(df)
    v = Value('we"ird col', numeric=True, bounds=(0.0, 5.0))
    rows = Rows(where=(Condition("name", "in", ("O'Brien", "y; DROP TABLE t")),))
    out = eng.moments(rows, v, (), 0.0, [G])
    assert int(out["n"].iloc[0]) == 2 and float(out["s1"].iloc[0]) * G == 4.0
    assert eng.column_kinds() == {'we"ird col': "numeric", "name": "text"}


def test_codes_past_the_last_grid_point_are_clamped() -> None:
    from dpkit.tables.engines.duckdb_engine import _clamp_codes

    frame = pd.DataFrame({"_g0": ["a", "a", "b"], "code": [8, 9, 9], "n": [1, 2, 3]})
    out = _clamp_codes(frame, 5).sort_values("_g0")
    assert out["code"].tolist() == [8, 8] and out["n"].tolist() == [3, 3]
    assert _clamp_codes(frame.iloc[:1], 5).equals(frame.iloc[:1])


def _round_half_away(v: float) -> int:
    return int(np.copysign(np.floor(abs(v) + 0.5), v))


_finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    xs=st.lists(
        st.one_of(_finite, st.sampled_from([0.0, -0.5, 0.5, 1e9, -1e9, 2.0**-30])),
        min_size=1,
        max_size=40,
    ),
    lo=st.floats(min_value=-1e4, max_value=1e4, allow_nan=False),
    width=st.floats(min_value=1e-3, max_value=1e4, allow_nan=False),
    centred=st.booleans(),
    bits=st.integers(min_value=-30, max_value=10),
)
def test_arithmetic_clipped_sum_equals_the_sum_of_clipped_values(
    xs: list[float], lo: float, width: float, centred: bool, bits: int
) -> None:
    """The CASE-free clipped sum is bit-for-bit Σ round((clip(x) - c) / g), halves away from 0."""
    hi = lo + width
    center = (lo + hi) / 2 if centred else 0.0
    grid = 2.0**bits
    xs = [*xs, lo, hi, np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf)]
    eng = engine_for(pd.DataFrame({"x": xs}))
    out = eng.moments(Rows(), Value("x", numeric=True, bounds=(lo, hi)), (), center, [grid])
    w_lo, w_hi = Q.valid_range((lo, hi))
    kept = [x for x in xs if w_lo <= x <= w_hi]
    expected = sum(_round_half_away((min(max(x, lo), hi) - center) / grid) for x in kept)
    assert int(out["n"].iloc[0]) == len(kept)
    assert float(out["s1"].iloc[0]) == float(expected)


def test_values_beyond_the_valid_range_count_as_missing() -> None:
    lo, hi = 0.0, 10.0
    w_lo, w_hi = Q.valid_range((lo, hi))
    assert w_lo < -1e9 and w_hi > 1e9  # 2**29 bound-widths: only data errors lie beyond
    xs = [3.0, 1e9, -1e9, w_hi * 2, -w_hi * 2, np.inf, np.nan]
    eng = engine_for(pd.DataFrame({"x": xs}))
    drop = eng.moments(Rows(), Value("x", numeric=True, bounds=(lo, hi)), (), 0.0, [G])
    assert int(drop["n"].iloc[0]) == 3  # 3, and ±1e9 clipped to 10 and 0
    assert float(drop["s1"].iloc[0]) * G == 13.0
    fill = Value("x", numeric=True, nulls="replace", replacement=99.0, bounds=(lo, hi))
    replaced = eng.moments(Rows(), fill, (), 0.0, [G])
    assert int(replaced["n"].iloc[0]) == 7
    assert float(replaced["s1"].iloc[0]) * G == 13.0 + 4 * 10.0  # the fill is clipped too


def test_equal_width_bins_are_arithmetic_with_exact_end_bins() -> None:
    """Equal-width edges: floor((v - lo) / w) inside, exact comparisons for the end bins."""
    from dpkit.tables.engines._sql import equal_width

    rng = np.random.default_rng(5)
    edges = tuple(np.linspace(-3.7, 91.3, 1001).tolist())
    assert equal_width(edges) is not None and equal_width((0.0, 1.0, 3.0)) is None
    values = np.concatenate(
        [rng.uniform(-10, 100, 20_000), np.asarray(edges), np.nextafter(edges, -np.inf)]
    )
    con = connect()
    engine = DuckDBEngine(con, con.from_df(pd.DataFrame({"x": values})))
    frame = engine.bin_counts(
        Rows(), Value("x", numeric=True, bounds=(edges[0], edges[-1])), (), edges
    )
    got = np.bincount(frame["bin"], weights=frame["n"], minlength=1000)
    lo, w = edges[0], (edges[-1] - edges[0]) / 1000
    clipped = np.clip(values, edges[0], edges[-1])
    rule = np.where(
        clipped < edges[1], 0, np.where(clipped >= edges[-2], 999, np.floor((clipped - lo) / w))
    ).astype(np.int64)
    assert np.array_equal(got, np.bincount(rule, minlength=1000))
    exact = np.clip(np.searchsorted(edges, clipped, side="right") - 1, 0, 999)
    # Values drawn at random almost never sit within rounding of an inner edge.
    assert np.mean(rule[:20_000] != exact[:20_000]) < 1e-3
    # Integer data on integer edges (ages by 5 years) lands exactly.
    ages = np.arange(0, 121, dtype=float)
    e5 = tuple(np.linspace(0, 120, 25).tolist())
    engine = DuckDBEngine(con, con.from_df(pd.DataFrame({"x": ages})))
    frame = engine.bin_counts(Rows(), Value("x", numeric=True, bounds=(0.0, 120.0)), (), e5)
    got = np.bincount(frame["bin"], weights=frame["n"], minlength=24)
    assert np.array_equal(got, np.bincount(np.minimum(ages // 5, 23).astype(int), minlength=24))


def test_grid_cells_follow_each_axis_rule_and_drop_rows_missing_either_value(
    frame: pd.DataFrame,
) -> None:
    eng = engine_for(frame)
    x = Value("x", numeric=True, bounds=(0.0, 10.0))
    y = Value("s", numeric=True, coerce=True, bounds=(0.0, 4.0))
    out = eng.bin_counts_2d(Rows(), x, y, (0.0, 5.0, 10.0), (0.0, 2.0, 4.0))
    cells = {(int(a), int(b)): int(n) for a, b, n in zip(out["bin_x"], out["bin_y"], out["n"])}
    # Rows with both present: x 1 (s 1.5), 5 (s 2), -3 (s 4, clipped to x 0). NaN, inf,
    # None, text and SECRET drop the row; 12 pairs with None.
    assert cells == {(0, 0): 1, (1, 1): 1, (0, 1): 1}
    replaced = Value(
        "s", numeric=True, coerce=True, nulls="replace", replacement=3.0, bounds=(0.0, 4.0)
    )
    out = eng.bin_counts_2d(Rows(), x, replaced, (0.0, 5.0, 10.0), (0.0, 2.0, 4.0))
    assert int(out["n"].sum()) == 6  # x present in 6 rows; every missing s becomes 3
