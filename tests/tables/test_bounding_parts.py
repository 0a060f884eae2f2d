"""Per-person bounding in parts (issue 34): the same kept rows, hence the same releases, for any
``DuckDBEngine(rows_per_part=)``; the setting is honoured; the memory limit is left as it was."""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpkit.errors import DataError, PrivacyWarning
from dpkit.tables import Session
from dpkit.tables.engines import Contribution, DuckDBEngine, Rows, Value, _sql
from dpkit.tables.engines.duckdb_engine import connect

G = 2.0**-20

# Hostile ids: signed zeros (one person to DuckDB's PARTITION BY and hash), NaN, None,
# huge values; text ids differing only by case or normalisation are different persons.
NUM_IDS = st.sampled_from([0.0, -0.0, 1.0, 2.0, 3.0, 1e300, -1e300, math.nan, None, 7.0, 8.0])
TEXT_IDS = st.sampled_from(["a", "A", "é", "e\u0301", "", " a", "b", "c", None, "d"])
KEYS = st.sampled_from(["x", "X", "y", None, "z", "é"])
XS = st.one_of(
    st.floats(-50, 150, allow_nan=False, width=32), st.sampled_from([math.nan, math.inf, None])
)


def _frame(draw: st.DrawFn, ids: st.SearchStrategy[Any]) -> pd.DataFrame:
    n = draw(st.integers(0, 40))
    return pd.DataFrame(
        {
            "pid": pd.Series([draw(ids) for _ in range(n)], dtype=object),
            "g": pd.Series([draw(KEYS) for _ in range(n)], dtype=object),
            "x": pd.Series([draw(XS) for _ in range(n)], dtype="float64"),
        }
    )


@st.composite
def tables(draw: st.DrawFn) -> pd.DataFrame:
    frame = _frame(draw, draw(st.sampled_from([NUM_IDS, TEXT_IDS])))
    if len(frame) and all(isinstance(v, float) or v is None for v in frame["pid"]):
        frame["pid"] = frame["pid"].astype("float64")
    return frame


def _sorted(frame: pd.DataFrame) -> list[str]:
    return sorted(repr(tuple(row)) for row in frame.itertuples(index=False))


def _calls(rows: Rows) -> dict[str, Any]:
    x = Value("x", numeric=True, bounds=(0.0, 100.0))
    g = [Value("g", numeric=False, nulls="replace", replacement="none")]
    edges = list(np.linspace(0.0, 100.0, 11))
    return {
        "moments": lambda e: e.moments(rows, x, g, 50.0, [G, 2.0**-8]),
        "moments, no group": lambda e: e.moments(rows, None, ()),
        "grid": lambda e: e.grid_counts(rows, x, g, 0.0, 1.0, 101),
        "bins": lambda e: e.bin_counts(rows, x, g, edges),
        "cells": lambda e: e.bin_counts_2d(rows, x, x, edges, edges),
        "values": lambda e: e.value_counts(rows, g[0], ()),
        "values, domain": lambda e: e.value_counts(rows, g[0], (), domain=["x", "y", "q"]),
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    frame=tables(),
    per_part=st.integers(1, 7),
    k=st.integers(1, 3),
    max_groups=st.sampled_from([None, 1, 2]),
    salt=st.integers(0, 2**62),
)
def test_parts_keep_the_same_rows_as_one_window(
    frame: pd.DataFrame, per_part: int, k: int, max_groups: int | None, salt: int
) -> None:
    con = connect()
    con.register("t", frame)
    whole, parts = DuckDBEngine(con, "t", rows_per_part=1 << 40), DuckDBEngine(con, "t", per_part)
    rows = Rows(contribution=Contribution("pid", k, salt, max_groups))
    for name, call in _calls(rows).items():
        a, b = call(whole), call(parts)
        assert list(a.columns) == list(b.columns), name
        assert a.dtypes.to_dict() == b.dtypes.to_dict() or len(a) == 0, name
        assert _sorted(a) == _sorted(b), name


def _window_plan(rows: str, contribution: Contribution, valued: bool) -> str:
    """The one-window plan of 7905ff0 for an ungrouped query: what ``first_rows`` replaces."""
    k = int(contribution.max_rows)
    if valued:
        return f"SELECT * FROM ({rows}) QUALIFY {_sql.bounded(contribution, [])}"
    # A count keeps min(rows, k) of a person's rows, whichever they are.
    return f"SELECT * FROM ({rows}) QUALIFY row_number() OVER (PARTITION BY {_sql.PID}) <= {k}"


def _ungrouped_calls(rows: Rows) -> dict[str, Any]:
    x = Value("x", numeric=True, bounds=(0.0, 100.0))
    filled = Value("x", numeric=True, bounds=(0.0, 100.0), nulls="replace", replacement=3.0)
    g = Value("g", numeric=False, nulls="replace", replacement="none")
    edges = list(np.linspace(0.0, 100.0, 11))
    return {
        "count": lambda e: e.moments(rows, None, ()),
        "moments": lambda e: e.moments(rows, x, (), 50.0, [G, 2.0**-8]),
        "moments, filled": lambda e: e.moments(rows, filled, (), 50.0, [G, 2.0**-8]),
        "grid": lambda e: e.grid_counts(rows, x, (), 0.0, 1.0, 101),
        "bins": lambda e: e.bin_counts(rows, x, (), edges),
        "values": lambda e: e.value_counts(rows, g, ()),
        "dropped text": lambda e: e.value_counts(rows, Value("g", numeric=False), ()),
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame=tables(), k=st.integers(1, 3), salt=st.integers(0, 2**62), parts=st.booleans())
def test_the_per_person_aggregate_keeps_the_rows_of_the_window(
    frame: pd.DataFrame, k: int, salt: int, parts: bool
) -> None:
    """Ungrouped queries rank a person's rows by a hash aggregate (``min_by``), not a window:
    the same kept rows, hence the same answers, for hostile ids and values (NaN, None, ±inf)."""
    con = connect()
    con.register("t", frame)
    engine = DuckDBEngine(con, "t", rows_per_part=5 if parts else None)
    rows = Rows(contribution=Contribution("pid", k, salt))
    calls = _ungrouped_calls(rows)
    ours = {name: call(engine) for name, call in calls.items()}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_sql, "first_rows", _window_plan)
        windowed = {name: call(engine) for name, call in calls.items()}
    for name in calls:
        assert _sorted(ours[name]) == _sorted(windowed[name]), name


def test_a_person_is_in_exactly_one_part_as_duckdb_partitions_it() -> None:
    """The split hashes what PARTITION BY compares: -0.0 with 0.0, binary text apart."""
    con = connect()
    ids = pd.DataFrame({"pid": [0.0, -0.0, 0.0, -0.0] * 10, "x": np.arange(40.0)})
    con.register("t", ids)
    rows = Rows(contribution=Contribution("pid", 3, salt=5))
    for per_part in (1, 2, 5, 40):
        out = DuckDBEngine(con, "t", per_part).moments(rows, None, ())
        assert int(out["n"].iloc[0]) == 3  # one person, three rows, in every split


def _session(con: Any, per_part: int | None, **options: Any) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Session(
            DuckDBEngine(con, "t", rows_per_part=per_part),
            epsilon=50.0,
            privacy_unit="pid",
            rng=7,
            **options,
        )


def test_releases_are_identical_with_and_without_parts_noise_fixed() -> None:
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 21, 300)
    frame = pd.DataFrame(
        {
            "pid": np.repeat(np.arange(300), sizes),
            "region": rng.integers(0, 10, sizes.sum()),
            "x": rng.uniform(0, 100, sizes.sum()),
        }
    )
    con = connect()
    con.register("t", frame)

    def answers(per_part: int | None, **options: Any) -> list[str]:
        s = _session(con, per_part, **options)
        bounds = (0.0, 100.0)
        return [
            repr(s.count(epsilon=1.0).value),
            repr(s.sum("x", epsilon=1.0, bounds=bounds).value),
            repr(s.mean("x", epsilon=1.0, bounds=bounds, group_by="region", keys=range(10)).value),
            repr(s.median("x", epsilon=1.0, bounds=bounds).value),
            repr(s.histogram("x", epsilon=1.0, bounds=bounds, bins=5).value),
        ]

    for options in ({"max_contributions": 5}, {"max_contributions": 2, "max_groups": 3}):
        one = answers(1 << 40, **options)
        assert answers(None, **options) == one
        assert answers(100, **options) == one  # 30 parts
        assert answers(1000, **options) == one  # 4 parts


def test_the_setting_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []
    real = _sql.person_part

    def spy(person: str, j: int, parts: int) -> str:
        seen.append((j, parts))
        return real(person, j, parts)

    monkeypatch.setattr(_sql, "person_part", spy)
    con = connect()
    con.register("t", pd.DataFrame({"pid": np.arange(100) % 13, "x": np.arange(100.0)}))
    rows = Rows(contribution=Contribution("pid", 2, salt=1))
    DuckDBEngine(con, "t", rows_per_part=30).moments(rows, None, ())
    assert seen == [(j, 4) for j in range(4)]  # ceil(100 / 30) parts, one after another
    seen.clear()
    DuckDBEngine(con, "t").moments(rows, None, ())  # 100 rows: one part, the one-window plan
    DuckDBEngine(con, "t", rows_per_part=30).moments(Rows(), None, ())  # no bound: no parts
    assert seen == []
    for bad in (0, -1, 2.5, True, "10"):
        with pytest.raises(ValueError, match="rows_per_part"):
            DuckDBEngine(con, "t", rows_per_part=bad)  # type: ignore[arg-type]


def test_the_memory_limit_is_left_as_it_was() -> None:
    con = connect()
    con.execute("SET memory_limit = '3GB'")
    before = con.execute("SELECT current_setting('memory_limit')").fetchall()
    con.register("t", pd.DataFrame({"pid": np.arange(1000) % 97, "x": np.arange(1000.0)}))
    rows = Rows(contribution=Contribution("pid", 2, salt=1))
    for per_part in (None, 100):
        DuckDBEngine(con, "t", rows_per_part=per_part).moments(rows, None, ())
        assert con.execute("SELECT current_setting('memory_limit')").fetchall() == before


def test_a_failing_part_is_the_one_generic_error() -> None:
    con = connect()
    text = pd.DataFrame({"pid": np.arange(50) % 7, "s": ["1.5"] * 49 + ["secret-7"]})
    con.register("t", text)
    rows = Rows(contribution=Contribution("pid", 2, salt=1))
    messages = set()
    for per_part in (None, 1, 10):
        with pytest.raises(DataError) as err:
            DuckDBEngine(con, "t", rows_per_part=per_part).moments(
                rows, Value("s", numeric=True), (), 0.0, [G]
            )
        assert "secret" not in str(err.value) and err.value.__cause__ is None
        messages.add(str(err.value))
    assert len(messages) == 1


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
def test_memory_is_given_back_after_a_bounded_query() -> None:
    con = connect()
    con.execute(
        "CREATE TABLE t AS SELECT range % 150000 AS pid, CAST(range % 1000 AS DOUBLE) AS x "
        "FROM range(1500000)"
    )
    engine = DuckDBEngine(con, "t")
    rows = Rows(contribution=Contribution("pid", 5, salt=3))
    before = _rss_mb()
    engine.moments(rows, Value("x", numeric=True, bounds=(0.0, 999.0)), (), 0.0, [G])
    assert _rss_mb() - before < 40  # e3bef4d kept the window's memory: about 150 MB here
