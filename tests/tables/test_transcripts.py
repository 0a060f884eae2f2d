"""Transcript tests: the same query on a table and its neighbour shows the same everything but noise.

For every query kind × option × engine, hypothesis draws a table and the same
table with one (hostile) person added; both sessions get the same seed. The
exception type and message (or none), warnings, result type, the public
``details`` (see ``_neighbours.public_details`` for which entries are noisy),
the CI half-width of additive mechanisms, ε/δ, ``remaining`` and the ledger
(labels and costs) must be equal. A case that leaks is listed by id in the
failure message (all cases of one engine share a pair of sessions per example,
so the ledger they compare grows along the way).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from tests.tables._neighbours import (
    CSV_TYPES,
    GROUPS,
    SCHEMA,
    Options,
    Pair,
    assert_same,
    frame,
    neighbours,
    record,
    write_csv,
)

from dpkit.tables import Parallel, Query, Session

SEED = 20261124
BUDGET = {"epsilon": 1000.0, "delta": 1e-2}
B = (0.0, 100.0)
KEYS = list(GROUPS)
D = 1e-6  # delta of private-key queries
ADD = Options(additive=True)
PLAIN = Options()


@dataclass(frozen=True)
class Case:
    id: str
    call: Callable[[Session], Any]
    opts: Options = field(default_factory=Options)


def _pk(opts: Options) -> Options:
    return Options(additive=opts.additive, private_keys=True)


def _pb(opts: Options) -> Options:
    return Options(additive=opts.additive, private_bounds=True)


GRID = 257  # small quantile grids keep the module fast; the leak classes do not depend on size

CASES: list[Case] = [
    # -- no grouping
    Case("count", lambda s: s.count(epsilon=1.0), ADD),
    Case("count-column", lambda s: s.count("x", epsilon=1.0), ADD),
    Case("sum-float", lambda s: s.sum("x", epsilon=1.0, bounds=B), ADD),
    Case("sum-int", lambda s: s.sum("cnt", epsilon=1.0, bounds=B), ADD),
    Case("sum-text-coerced", lambda s: s.sum("t", epsilon=1.0, bounds=B), ADD),
    Case("sum-bool", lambda s: s.sum("flag", epsilon=1.0, bounds=(0, 1)), ADD),
    Case("mean", lambda s: s.mean("x", epsilon=1.0, bounds=B)),
    Case("mean-text-coerced", lambda s: s.mean("t", epsilon=1.0, bounds=B)),
    Case("variance", lambda s: s.variance("x", epsilon=1.0, bounds=B)),
    Case("std-int", lambda s: s.std("cnt", epsilon=1.0, bounds=B)),
    Case("quantile", lambda s: s.quantile("x", 0.3, epsilon=1.0, bounds=B, grid_size=GRID)),
    Case("median", lambda s: s.median("cnt", epsilon=1.0, bounds=B, grid_size=GRID)),
    # the default grid of an integer column: integers and half-integers, clipped to whole bounds
    Case("median-int-aligned", lambda s: s.median("cnt", epsilon=1.0, bounds=(-0.5, 99.5))),
    Case("quantile-bool-aligned", lambda s: s.quantile("flag", 0.3, epsilon=1.0, bounds=(0, 1))),
    Case("min", lambda s: s.min("x", epsilon=1.0, bounds=B, grid_size=GRID)),
    Case("max", lambda s: s.max("t", epsilon=1.0, bounds=B, grid_size=GRID)),
    Case("mode", lambda s: s.mode("g", epsilon=1.0, domain=KEYS)),
    Case("mode-bool", lambda s: s.mode("flag", epsilon=1.0, domain=[True, False])),
    Case("histogram-bins", lambda s: s.histogram("x", epsilon=1.0, bins=5, bounds=B), ADD),
    Case("histogram-domain", lambda s: s.histogram("g", epsilon=1.0, domain=KEYS), ADD),
    Case(
        "histogram-laplace",
        lambda s: s.histogram("x", epsilon=1.0, bins=8, bounds=B, method="laplace"),
    ),
    Case(
        "histogram-hierarchical",
        lambda s: s.histogram("x", epsilon=1.0, bins=8, bounds=B, method="hierarchical"),
    ),
    Case(
        "histogram-noise_first",
        lambda s: s.histogram("x", epsilon=1.0, bins=8, bounds=B, method="noise_first"),
    ),
    Case(
        "histogram-structure_first",
        lambda s: s.histogram("x", epsilon=1.0, bins=8, bounds=B, method="structure_first"),
    ),
    Case("histogram-hb", lambda s: s.histogram("x", epsilon=1.0, bins=8, bounds=B, method="hb")),
    Case("histogram-ahp", lambda s: s.histogram("x", epsilon=1.0, bins=8, bounds=B, method="ahp")),
    Case(
        "histogram-dawa", lambda s: s.histogram("x", epsilon=1.0, bins=8, bounds=B, method="dawa")
    ),
    Case(
        "histogram-auto",
        lambda s: s.histogram("x", epsilon=1.0, bins=8, bounds=B, method="auto", max_count=10_000),
    ),
    *[
        Case(
            f"histogram2d-{m}",
            lambda s, m=m: s.histogram2d(
                "x", "t", epsilon=1.0, bins=(6, 5), bounds=(B, B), method=m
            ),
        )
        for m in ("auto2d", "agrid", "ugrid", "dawa2d", "laplace2d")
    ],
    Case(
        "histogram2d-declared-rows-edges",
        lambda s: s.histogram2d(
            "cnt",
            "x",
            epsilon=1.0,
            edges=([0, 1, 5, 100], [0, 50, 100]),
            n_records=50,
            where={"flag": True},
        ),
    ),
    # -- bounds="private"
    Case("sum-private-bounds", lambda s: s.sum("x", epsilon=1.0, bounds="private"), _pb(ADD)),
    Case("mean-private-bounds", lambda s: s.mean("x", epsilon=1.0, bounds="private"), _pb(PLAIN)),
    Case(
        "variance-private-bounds",
        lambda s: s.variance("cnt", epsilon=1.0, bounds="private"),
        _pb(PLAIN),
    ),
    Case("std-private-bounds", lambda s: s.std("t", epsilon=1.0, bounds="private"), _pb(PLAIN)),
    # -- public keys
    Case("count-by-public", lambda s: s.count(epsilon=1.0, group_by="g", keys=KEYS), ADD),
    Case("count-by-schema-domain", lambda s: s.count(epsilon=1.0, group_by="g"), ADD),
    Case(
        "sum-by-public", lambda s: s.sum("x", epsilon=1.0, bounds=B, group_by="g", keys=KEYS), ADD
    ),
    Case("mean-by-public", lambda s: s.mean("x", epsilon=1.0, bounds=B, group_by="g", keys=KEYS)),
    Case(
        "variance-by-public",
        lambda s: s.variance("x", epsilon=1.0, bounds=B, group_by="g", keys=KEYS),
    ),
    Case(
        "median-by-public",
        lambda s: s.median("x", epsilon=1.0, bounds=B, grid_size=GRID, group_by="g", keys=KEYS),
    ),
    Case(
        "mode-by-public",
        lambda s: s.mode("flag", epsilon=1.0, domain=[True, False], group_by="g", keys=KEYS),
    ),
    Case(
        "histogram-by-public",
        lambda s: s.histogram("x", epsilon=1.0, bins=4, bounds=B, group_by="g", keys=KEYS),
        ADD,
    ),
    Case(
        "count-by-two-public",
        lambda s: s.count(epsilon=1.0, group_by=["g", "flag"], keys=[("a", True), ("b", False)]),
        ADD,
    ),
    # -- private keys
    Case(
        "count-by-private",
        lambda s: s.count(epsilon=1.0, group_by="g", keys="private", delta=D),
        _pk(ADD),
    ),
    Case(
        "sum-by-private",
        lambda s: s.sum("x", epsilon=1.0, bounds=B, group_by="g", keys="private", delta=D),
        _pk(ADD),
    ),
    Case(
        "mean-by-private",
        lambda s: s.mean("x", epsilon=1.0, bounds=B, group_by="g", keys="private", delta=D),
        _pk(PLAIN),
    ),
    Case(
        "variance-by-private",
        lambda s: s.variance("cnt", epsilon=1.0, bounds=B, group_by="g", keys="private", delta=D),
        _pk(PLAIN),
    ),
    Case(
        "quantile-by-private",
        lambda s: s.quantile(
            "x", 0.5, epsilon=1.0, bounds=B, grid_size=GRID, group_by="g", keys="private", delta=D
        ),
        _pk(PLAIN),
    ),
    Case(
        "median-int-by-private",
        lambda s: s.median("cnt", epsilon=1.0, bounds=B, group_by="g", keys="private", delta=D),
        _pk(PLAIN),
    ),
    Case(
        "mode-by-private",
        lambda s: s.mode(
            "flag", epsilon=1.0, domain=[True, False], group_by="g", keys="private", delta=D
        ),
        _pk(PLAIN),
    ),
    Case(
        "histogram-by-private",
        lambda s: s.histogram(
            "x", epsilon=1.0, bins=4, bounds=B, group_by="g", keys="private", delta=D
        ),
        _pk(ADD),
    ),
    Case(
        "count-by-private-day",
        lambda s: s.count(epsilon=1.0, group_by="day", keys="private", delta=D),
        _pk(ADD),
    ),
    # -- filters on every column type
    Case("count-where-numeric", lambda s: s.count(epsilon=1.0, where={"x": (">=", 50)}), ADD),
    Case("count-where-int-in", lambda s: s.count(epsilon=1.0, where={"cnt": [1, 2, 3]}), ADD),
    Case("sum-where-text", lambda s: s.sum("x", epsilon=1.0, bounds=B, where={"g": "a"}), ADD),
    Case("count-where-text-null", lambda s: s.count(epsilon=1.0, where={"t": None}), ADD),
    Case("mean-where-bool", lambda s: s.mean("x", epsilon=1.0, bounds=B, where={"flag": True})),
    Case(
        "count-where-date",
        lambda s: s.count(epsilon=1.0, where={"day": (">=", dt.date(2000, 1, 1))}),
        ADD,
    ),
    Case(
        "count-where-date-text",
        lambda s: s.count(epsilon=1.0, where={"day": ("between", "2000-01-01", "2020-12-31")}),
        ADD,
    ),
    Case(
        "count-where-timestamp",
        lambda s: s.count(epsilon=1.0, where={"ts": ("<", dt.datetime(2010, 6, 1, 12))}),
        ADD,
    ),
    Case(
        "median-where-timestamp-not-null",
        lambda s: s.median("x", epsilon=1.0, bounds=B, grid_size=GRID, where={"ts": ("not null",)}),
    ),
    # -- plans
    Case(
        "plan-sequential",
        lambda s: s.run([Query("count", epsilon=0.5), Query("mean", "x", epsilon=0.5, bounds=B)]),
    ),
    Case(
        "plan-parallel",
        lambda s: s.run(
            [
                Parallel(
                    Query("count", epsilon=0.5, where={"g": "a"}),
                    Query("count", epsilon=0.5, where={"g": ["b", "c"]}),
                ),
                Query("sum", "x", epsilon=0.5, bounds=B),
            ]
        ),
        ADD,
    ),
]

#: Person-level sessions: ``privacy_unit="pid"``, ``max_contributions=2``, people with many rows.
UNIT_CASES: list[Case] = [
    Case("unit-count", lambda s: s.count(epsilon=1.0), ADD),
    Case("unit-sum", lambda s: s.sum("x", epsilon=1.0, bounds=B), ADD),
    Case("unit-mean", lambda s: s.mean("x", epsilon=1.0, bounds=B)),
    Case("unit-variance", lambda s: s.variance("t", epsilon=1.0, bounds=B)),
    Case("unit-quantile", lambda s: s.quantile("x", 0.7, epsilon=1.0, bounds=B, grid_size=GRID)),
    Case("unit-mode", lambda s: s.mode("g", epsilon=1.0, domain=KEYS)),
    Case("unit-histogram", lambda s: s.histogram("x", epsilon=1.0, bins=5, bounds=B), ADD),
    Case(
        "unit-histogram-hierarchical",
        lambda s: s.histogram("x", epsilon=1.0, bins=8, bounds=B, method="hierarchical"),
    ),
    Case(
        "unit-histogram2d",
        lambda s: s.histogram2d("x", "cnt", epsilon=1.0, bins=4, bounds=(B, B)),
    ),
    Case("unit-count-by-public", lambda s: s.count(epsilon=1.0, group_by="g", keys=KEYS), ADD),
    Case(
        "unit-count-by-private",
        lambda s: s.count(epsilon=1.0, group_by="g", keys="private", delta=D),
        _pk(ADD),
    ),
    Case(
        "unit-sum-by-private",
        lambda s: s.sum("x", epsilon=1.0, bounds=B, group_by="g", keys="private", delta=D),
        _pk(ADD),
    ),
    Case(
        "unit-mean-private-bounds", lambda s: s.mean("x", epsilon=1.0, bounds="private"), _pb(PLAIN)
    ),
    Case(
        "unit-count-where-date",
        lambda s: s.count(epsilon=1.0, where={"day": ("<", dt.date(2015, 1, 1))}),
        ADD,
    ),
]


_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _pandas_session(rows: list[dict[str, Any]], **unit: Any) -> Session:
    return Session.from_pandas(
        frame(rows), types=CSV_TYPES, schema=SCHEMA, rng=SEED, **BUDGET, **unit
    )


def _csv_session(rows: list[dict[str, Any]], directory: str, name: str, **unit: Any) -> Session:
    path = os.path.join(directory, name)
    write_csv(rows, path)
    return Session.from_csv(
        path,
        schema=SCHEMA,
        rng=SEED,
        types=CSV_TYPES,
        **BUDGET,
        **unit,
    )


def _compare(make: Callable[[list[dict[str, Any]]], Session], case: Case, pair: Pair) -> None:
    a = record(make(pair.smaller), case.call, case.opts)
    b = record(make(pair.bigger), case.call, case.opts)
    assert_same(a, b)


def _compare_all(
    make: Callable[[list[dict[str, Any]]], Session], cases: list[Case], pair: Pair
) -> None:
    """Every case in turn on one session per table (the ledger grows and is compared each time)."""
    a, b = make(pair.smaller), make(pair.bigger)
    failures = []
    for case in cases:
        ta, tb = record(a, case.call, case.opts), record(b, case.call, case.opts)
        try:
            assert_same(ta, tb)
        except AssertionError as e:
            failures.append(f"{case.id}: {str(e).splitlines()[0]}")
    assert not failures, "transcripts differ between neighbours:\n" + "\n".join(failures)


def _unit_pandas(rows: list[dict[str, Any]]) -> Session:
    return _pandas_session(rows, privacy_unit="pid", max_contributions=2)


# ------------------------------------------------------------------------ DuckDB (pandas)


@_SETTINGS
@given(pair=neighbours())
def test_pandas_rows(pair: Pair) -> None:
    _compare_all(_pandas_session, CASES, pair)


@_SETTINGS
@given(pair=neighbours(max_rows_per_person=4))
def test_pandas_people(pair: Pair) -> None:
    _compare_all(_unit_pandas, UNIT_CASES, pair)


# ------------------------------------------------------------------------ DuckDB (CSV)


@pytest.fixture(scope="module")
def csv_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="dpkit-transcripts-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@settings(_SETTINGS, max_examples=10)
@given(pair=neighbours())
def test_csv_rows(pair: Pair, csv_dir: str) -> None:
    _compare_all(lambda rows: _csv_session(rows, csv_dir, f"rows-{len(rows)}.csv"), CASES, pair)


@settings(_SETTINGS, max_examples=10)
@given(pair=neighbours(max_rows_per_person=4))
def test_csv_people(pair: Pair, csv_dir: str) -> None:
    _compare_all(
        lambda rows: _csv_session(
            rows, csv_dir, f"people-{len(rows)}.csv", privacy_unit="pid", max_contributions=2
        ),
        UNIT_CASES,
        pair,
    )


# ------------------------------------------------------------------------ Spark

#: Spark runs the same kinds through another engine; a few cheap cases, few examples.
SPARK_IDS = {
    "count",
    "sum-float",
    "mean-text-coerced",
    "quantile",
    "median-int-aligned",
    "histogram-bins",
    "count-by-private",
    "sum-by-private",
    "count-where-date",
    "count-where-timestamp",
}
SPARK_UNIT_IDS = {"unit-sum", "unit-count-by-private"}


def _spark_session(spark: Any, rows: list[dict[str, Any]], **unit: Any) -> Session:
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("pid", T.LongType()),
            T.StructField("x", T.DoubleType()),
            T.StructField("cnt", T.LongType()),
            T.StructField("t", T.StringType()),
            T.StructField("flag", T.BooleanType()),
            T.StructField("day", T.DateType()),
            T.StructField("ts", T.TimestampNTZType()),
            T.StructField("g", T.StringType()),
        ]
    )
    data = [
        tuple(float("nan") if c == "x" and r[c] is None else r[c] for c in schema.fieldNames())
        for r in rows
    ]
    frame = spark.createDataFrame(data, schema=schema)
    return Session.from_spark(frame, types=CSV_TYPES, schema=SCHEMA, rng=SEED, **BUDGET, **unit)


@pytest.mark.spark
@settings(_SETTINGS, max_examples=3)
@given(pair=neighbours())
def test_spark_rows(pair: Pair, spark: Any) -> None:
    _compare_all(
        lambda rows: _spark_session(spark, rows), [c for c in CASES if c.id in SPARK_IDS], pair
    )


@pytest.mark.spark
@settings(_SETTINGS, max_examples=3)
@given(pair=neighbours(max_rows_per_person=4))
def test_spark_people(pair: Pair, spark: Any) -> None:
    _compare_all(
        lambda rows: _spark_session(spark, rows, privacy_unit="pid", max_contributions=2),
        [c for c in UNIT_CASES if c.id in SPARK_UNIT_IDS],
        pair,
    )
