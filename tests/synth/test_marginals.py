"""Marginals through the engine equal pandas' crosstab of the codes, computed independently.

Property (hypothesis): for any column of numbers (with NULL, NaN, ±inf and
values beyond the bounds) and any column of text (with NULL and values outside
the declared domain), :func:`dpkit.synth.marginals.marginal` — the codes
computed by DuckDB in SQL, counted by GROUP BY, filled into the full grid —
equals a crosstab of codes computed here in Python by the documented rule:
numbers clamped into the end bins, missing (NULL, NaN, ±inf) and undeclared
categories in the column's last cell (null policy "drop"), or in the
replacement's cell (null policy "replace").
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpkit.errors import InvalidParameterError, PrivacyWarning
from dpkit.synth.domain import discretise
from dpkit.synth.marginals import marginal
from dpkit.tables import Session
from dpkit.tables.engines._sql import equal_width

DOMAIN = ["a", "b", "c"]
NUMBERS = st.one_of(
    st.none(),
    st.sampled_from([math.nan, math.inf, -math.inf, -5.0, 0.0, 2.5, 5.0, 7.5, 10.0, 1e300]),
    st.floats(-20, 30),
)
TEXTS = st.one_of(st.none(), st.sampled_from(["a", "b", "c", "zz", "A", "a "]))


def _numeric_code(x: object, edges: np.ndarray) -> int:
    n = len(edges) - 1
    if x is None or not math.isfinite(float(x)):  # type: ignore[arg-type]
        return n
    v = float(x)  # type: ignore[arg-type]
    width = equal_width(edges)
    if width is None:  # exact comparisons, clamped into the end bins
        return int(min(max(np.searchsorted(edges, v, side="right") - 1, 0), n - 1))
    if v < edges[1]:
        return 0
    if v >= edges[-2]:
        return n - 1
    return math.floor((v - edges[0]) / width)


def _text_code(x: object, replacement: int | None) -> int:
    if isinstance(x, str) and x in DOMAIN:
        return DOMAIN.index(x)
    return len(DOMAIN) if replacement is None else replacement


def _session(frame: pd.DataFrame, schema: dict) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Session.from_pandas(
            frame, types={"x": "DOUBLE", "k": "VARCHAR"}, schema=schema, epsilon=1.0
        )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(NUMBERS, TEXTS), min_size=1, max_size=40),
    bins=st.integers(2, 7),
    uneven=st.booleans(),
    replace=st.booleans(),
)
def test_engine_marginal_equals_crosstab_of_codes(rows, bins, uneven, replace) -> None:
    frame = pd.DataFrame(rows, columns=["x", "k"]).astype({"x": "float64", "k": "object"})
    x_column: dict = {"bounds": [0, 10]}
    if uneven:
        x_column["edges"] = [0.0, 1.0, 2.5, 9.0, 10.0]
    k_column: dict = {"domain": DOMAIN}
    if replace:
        k_column.update(nulls="replace", replacement="b")
    s = _session(frame, {"columns": {"x": x_column, "k": k_column}})
    x_attr, k_attr = discretise(s.schema, s.column_kinds, ["x", "k"], bins)
    edges = np.asarray(x_attr.coding.edges)
    assert len(edges) - 1 == (4 if uneven else bins)
    assert k_attr.size == (3 if replace else 4) and x_attr.size == len(edges)

    got = marginal(s.engine, [x_attr, k_attr])

    codes_x = [_numeric_code(x, edges) for x, _ in rows]
    codes_k = [_text_code(k, 1 if replace else None) for _, k in rows]
    table = pd.crosstab(pd.Series(codes_x), pd.Series(codes_k))
    expected = table.reindex(
        index=range(x_attr.size), columns=range(k_attr.size), fill_value=0
    ).to_numpy()
    np.testing.assert_array_equal(got, expected)
    assert got.sum() == len(rows)  # every row in exactly one cell
    np.testing.assert_array_equal(marginal(s.engine, [k_attr]), expected.sum(axis=0))


def test_labels_are_public_midpoints_and_categories() -> None:
    s = _session(
        pd.DataFrame({"x": [1.0], "k": ["a"]}),
        {"columns": {"x": {"bounds": [0, 10]}, "k": {"domain": DOMAIN}}},
    )
    x_attr, k_attr = discretise(s.schema, s.column_kinds, ["x", "k"], 4)
    assert x_attr.labels == (1.25, 3.75, 6.25, 8.75, None)
    assert x_attr.intervals[0] == (0.0, 2.5) and x_attr.intervals[-1] is None
    assert k_attr.labels == ("a", "b", "c", None)


def test_a_column_without_a_declared_domain_or_bounds_is_refused() -> None:
    s = _session(pd.DataFrame({"x": [1.0], "k": ["a"]}), {"columns": {"x": {"bounds": [0, 10]}}})
    with pytest.raises(InvalidParameterError, match="no declared domain or bounds") as err:
        discretise(s.schema, s.column_kinds, ["x", "k"], 4)
    assert "'a'" not in str(err.value)


def test_categories_are_coded_by_the_comparison_after_grouping() -> None:
    """Numbers and text as categories: the engine groups values before coding them, and the
    codes must still be the comparison's (−0.0 equals 0.0; NaN, NULL and values not
    declared are missing; text is binary-collated even where the table says NOCASE)."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE t (v DOUBLE, k VARCHAR COLLATE NOCASE)")
    con.execute(
        "INSERT INTO t VALUES (0.0, 'a'), (-0.0, 'A'), ('nan', 'a'), (NULL, NULL), "
        "(1.5, 'b'), (2.0, 'a'), (1.5, 'B')"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        s = Session.from_duckdb(
            "t",
            connection=con,
            infer_types=True,  # the table's own types, NOCASE included
            schema={"columns": {"v": {"domain": [0.0, 1.5]}, "k": {"domain": ["a", "b"]}}},
            epsilon=1.0,
        )
    v_attr, k_attr = discretise(s.schema, s.column_kinds, ["v", "k"], 4)
    got = marginal(s.engine, [v_attr, k_attr])
    expected = np.zeros((3, 3), dtype=np.int64)
    for v, k in [(0, 0), (0, 2), (2, 0), (2, 2), (1, 1), (2, 0), (1, 2)]:
        expected[v, k] += 1
    np.testing.assert_array_equal(got, expected)


def test_a_category_of_another_kind_matches_nothing_whatever_the_rows() -> None:
    """A number declared for a text column equals no value of it. DuckDB once compared it by
    converting every row to a number, so the count failed (after the charge) exactly when
    some row held text that is no number: a failure that told such a row existed."""
    schema = {"columns": {"x": {"bounds": [0, 10]}, "k": {"domain": [1, "1"]}}}
    for texts in (["1", "2"], ["1", "abc"]):
        s = _session(pd.DataFrame({"x": [1.0, 2.0], "k": texts}), schema)
        (k_attr,) = discretise(s.schema, s.column_kinds, ["k"], 4)
        np.testing.assert_array_equal(marginal(s.engine, [k_attr]), [0, 1, 1])
