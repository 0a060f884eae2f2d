"""Transcripts of Gaussian sessions: neighbours see the same everything but the noisy values.

Sessions opened with ``accountant="zcdp"`` or ``"rdp"`` and ``noise="gaussian"``
or ``"auto"`` run every query kind that sums (counts, sums, means, variances,
histograms, public-key groups, plans) and their neighbours' kinds in one
sequence on a table and on the same table plus one hostile person
(``tests/tables/_neighbours.py``), seeded alike. Besides what
``_neighbours.record`` compares (errors, warnings, public details, interval
half-widths, charges, remaining), each step compares the privacy *event* the
ledger recorded (its JSON: mechanism, σ, sensitivity, ε, δ, ρ) and
``session.afford`` of a few queries; at the end the ledger file's rows
(label, ε, δ, ρ and event column) must be equal. The budget is small enough
that the accountant's filter refuses part-way: where it stops must not depend
on the data either.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from tests.tables._neighbours import (
    CSV_TYPES,
    SCHEMA,
    Pair,
    assert_same,
    frame,
    neighbours,
    record,
    write_csv,
)
from tests.tables.test_transcripts import CASES, UNIT_CASES, Case

from dpkit.errors import PrivacyWarning
from dpkit.tables import Query, Session

SEED = 20261126
#: Small: ρ_B ≈ 3.4 under zcdp, so most cases below are refused after the first few.
BUDGET: dict[str, Any] = {"epsilon": 10.0, "delta": 1e-2}
B = (0.0, 100.0)

#: The kinds Gaussian noise changes (additive steps), and plans of them.
SUMMING = (
    "count",
    "sum",
    "mean",
    "variance",
    "std",
    "histogram-bins",
    "histogram-domain",
    "histogram-by-public",
    "plan-",
    "unit-count",
    "unit-sum",
    "unit-mean",
    "unit-variance",
    "unit-histogram",
)
GAUSSIAN_CASES = [c for c in CASES if c.id.startswith(SUMMING)]
GAUSSIAN_UNIT_CASES = [c for c in UNIT_CASES if c.id.startswith(SUMMING)]
#: A step that is not additive in the middle (a quantile): its transcript must not change either.
OTHERS = [c for c in CASES if c.id in {"median", "mode"}]

#: Queries whose affordable count is compared after every step.
AFFORD = [
    Query("count", epsilon=0.5),
    Query("mean", "x", epsilon=0.5, bounds=B),
    Query("histogram", "x", epsilon=0.5, bins=4, bounds=B),
]

SETTINGS = [
    ("zcdp", "gaussian"),
    ("rdp", "gaussian"),
    ("zcdp", "auto"),
    ("rdp", "auto"),
]

# Few examples in the default run (each runs ~30 queries on two sessions); the
# ``audit``-marked variants below run many more.
_SETTINGS = settings(
    max_examples=1,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _quiet(make: Callable[[], Session]) -> Session:
    with warnings.catch_warnings():  # a seeded session warns; the same on both sides
        warnings.simplefilter("ignore", PrivacyWarning)
        return make()


def _events(session: Session) -> list[Any]:
    return [
        (c.label, c.cost, c.scopes, None if c.event is None else c.event.to_json())
        for c in session.accountant.history
    ]


def _afford(session: Session) -> list[Any]:
    out: list[Any] = []
    for q in AFFORD:
        try:
            out.append(session.afford(q, limit=1000))
        except Exception as e:  # compared, whatever it is
            out.append((type(e).__name__, str(e)))
    return out


def _ledger_rows(path: str) -> list[Any]:
    """The ledger file's rows without their times and (random) parallel scope ids."""
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT label, epsilon, delta, rho, event FROM charges ORDER BY id"
        ).fetchall()


def _compare_sequence(
    make: Callable[[list[dict[str, Any]], str], Session], cases: list[Case], pair: Pair
) -> None:
    with tempfile.TemporaryDirectory(prefix="dpkit-gauss-") as d:
        paths = os.path.join(d, "small.sqlite"), os.path.join(d, "big.sqlite")
        a, b = make(pair.smaller, paths[0]), make(pair.bigger, paths[1])
        failures: list[str] = []
        refused = 0
        for i, case in enumerate(cases):
            ta, tb = record(a, case.call, case.opts), record(b, case.call, case.opts)
            refused += ta.error is not None and ta.error[0] == "BudgetExceededError"
            try:
                assert_same(ta, tb)
                assert _events(a) == _events(b), "recorded events differ between neighbours"
                if i % 3 == 0 or i == len(cases) - 1:  # afford() costs a query's costing
                    assert _afford(a) == _afford(b), "afford() differs between neighbours"
            except AssertionError as e:
                failures.append(f"{case.id}: {str(e).splitlines()[0]}")
        assert not failures, "transcripts differ between neighbours:\n" + "\n".join(failures)
        events = [e for *_, e in _events(a)]
        a.accountant.close()
        b.accountant.close()
        assert _ledger_rows(paths[0]) == _ledger_rows(paths[1])
    # the sequence exercised what it is meant to: Gaussian events, and the filter's refusal
    assert any("gaussian" in str(e) for e in events), events
    assert refused > 0, "the budget was never exhausted: the stopping point went unchecked"


def _pandas(rule: str, noise: str, **unit: Any) -> Callable[[list[dict[str, Any]], str], Session]:
    def make(rows: list[dict[str, Any]], ledger: str) -> Session:
        return _quiet(
            lambda: Session.from_pandas(
                frame(rows),
                types=CSV_TYPES,
                schema=SCHEMA,
                rng=SEED,
                ledger=ledger,
                accountant=rule,
                noise=noise,
                **BUDGET,
                **unit,
            )
        )

    return make


def _csv(rule: str, noise: str) -> Callable[[list[dict[str, Any]], str], Session]:
    def make(rows: list[dict[str, Any]], ledger: str) -> Session:
        path = ledger + ".csv"
        write_csv(rows, path)
        return _quiet(
            lambda: Session.from_csv(
                path,
                types=CSV_TYPES,
                schema=SCHEMA,
                rng=SEED,
                ledger=ledger,
                accountant=rule,
                noise=noise,
                **BUDGET,
            )
        )

    return make


def _interleaved(cases: list[Case]) -> list[Case]:
    """The cases with a non-additive query after every fourth one."""
    out: list[Case] = []
    for i, c in enumerate(cases):
        out.append(c)
        if i % 4 == 3:
            out.append(OTHERS[(i // 4) % len(OTHERS)])
    return out


def test_the_cases_cover_every_summing_kind() -> None:
    ids = {c.id for c in GAUSSIAN_CASES}
    for kind in ("count", "sum-float", "sum-int", "mean", "variance", "std-int"):
        assert kind in ids
    assert {"count-by-public", "sum-by-public", "mean-by-public", "histogram-by-public"} <= ids
    assert {"histogram-bins", "histogram-domain", "plan-sequential", "plan-parallel"} <= ids
    assert {"unit-count", "unit-sum", "unit-mean", "unit-histogram"} <= {
        c.id for c in GAUSSIAN_UNIT_CASES
    }


@pytest.mark.parametrize(("rule", "noise"), SETTINGS)
@settings(_SETTINGS, max_examples=2)  # the simplest pair, then one drawn
@given(pair=neighbours())
def test_gaussian_session_transcripts_rows(rule: str, noise: str, pair: Pair) -> None:
    _compare_sequence(_pandas(rule, noise), _interleaved(GAUSSIAN_CASES), pair)


@pytest.mark.parametrize(("rule", "noise"), [("rdp", "gaussian"), ("zcdp", "auto")])
@_SETTINGS
@given(pair=neighbours(max_rows_per_person=4))
def test_gaussian_session_transcripts_people(rule: str, noise: str, pair: Pair) -> None:
    make = _pandas(rule, noise, privacy_unit="pid", max_contributions=2)
    _compare_sequence(make, GAUSSIAN_UNIT_CASES + GAUSSIAN_UNIT_CASES, pair)


@_SETTINGS
@given(pair=neighbours())
def test_gaussian_session_transcripts_csv(pair: Pair) -> None:
    _compare_sequence(_csv("rdp", "auto"), GAUSSIAN_CASES, pair)


@pytest.mark.audit
@pytest.mark.parametrize(("rule", "noise"), SETTINGS)
@settings(_SETTINGS, max_examples=15)
@given(pair=neighbours())
def test_gaussian_session_transcripts_rows_many(rule: str, noise: str, pair: Pair) -> None:
    _compare_sequence(_pandas(rule, noise), _interleaved(GAUSSIAN_CASES), pair)


@pytest.mark.audit
@pytest.mark.parametrize(("rule", "noise"), SETTINGS)
@settings(_SETTINGS, max_examples=10)
@given(pair=neighbours(max_rows_per_person=4))
def test_gaussian_session_transcripts_people_many(rule: str, noise: str, pair: Pair) -> None:
    make = _pandas(rule, noise, privacy_unit="pid", max_contributions=2)
    _compare_sequence(make, GAUSSIAN_UNIT_CASES + GAUSSIAN_UNIT_CASES, pair)


@pytest.mark.audit
@pytest.mark.parametrize(("rule", "noise"), SETTINGS)
@settings(_SETTINGS, max_examples=5)
@given(pair=neighbours())
def test_gaussian_session_transcripts_csv_many(rule: str, noise: str, pair: Pair) -> None:
    _compare_sequence(_csv(rule, noise), GAUSSIAN_CASES, pair)
