"""``Session.afford``: how many more answers of one query the budget pays for, before spending.

Checked here: the count is what answering gives (that many answers, then the
refusal), with the session's own rule and noise; it reads no data (the engine
is wrapped and never called) and charges nothing (the ledger is unchanged);
bad specs fail exactly as :meth:`Session.prepare` fails; and the count is the
same on a table and its neighbour with a hostile row (it depends on public
input only).
"""

from __future__ import annotations

import warnings
from fractions import Fraction
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings

from dpkit.accounting import Accountant, Budget
from dpkit.errors import BudgetExceededError, DPKitError
from dpkit.tables import Query, Session
from dpkit.tables.engines import DuckDBEngine
from dpkit.tables.engines.duckdb_engine import connect

from ._neighbours import CSV_TYPES, SCHEMA, Pair, frame, neighbours

MEAN = Query("mean", "age", epsilon=0.1, bounds=(0, 120))


class CountingEngine:
    """An engine wrapper that records every call that could read rows."""

    def __init__(self, inner: DuckDBEngine) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[str] = []

    def column_kinds(self) -> Any:
        return self.inner.column_kinds()

    def column_types(self) -> Any:
        return self.inner.column_types()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return method(*args, **kwargs)

        return record


def _session(**options: Any) -> tuple[Session, CountingEngine]:
    table = pd.DataFrame({"age": [30.0, 41.0, 57.0, 62.0] * 25, "g": list("abcd") * 25})
    con = connect()
    con.register("t", table)
    engine = CountingEngine(DuckDBEngine(con, "t"))
    session = Session(engine, rng=0, **options)  # type: ignore[arg-type]
    engine.calls.clear()  # the constructor's check that the table is not empty
    return session, engine


def _answers_until_refused(session: Session, spec: Query, cap: int = 200) -> int:
    for n in range(cap):
        try:
            session.answer(spec)
        except BudgetExceededError:
            return n
    raise AssertionError(f"still answering after {cap} queries")


def test_afford_reads_nothing_charges_nothing_and_is_what_answering_gives() -> None:
    session, engine = _session(epsilon=1.0)
    assert session.afford(MEAN) == 10  # ten answers at epsilon 0.1 each, basic composition
    assert engine.calls == [] and session.accountant.history == ()
    assert session.remaining == Budget(1)
    session.answer(MEAN)
    assert engine.calls  # the wrapper does see the engine being read
    assert session.afford(MEAN) == 9
    assert session.afford(Query("count", epsilon=0.25)) == 3
    assert session.afford(MEAN, limit=4) == 4
    assert _answers_until_refused(session, MEAN) == 9
    assert session.afford(MEAN) == 0


@pytest.mark.parametrize("rule", ["zcdp", "rdp"])
@pytest.mark.parametrize("noise", ["laplace", "gaussian", "auto"])
def test_afford_follows_the_sessions_rule_and_noise(rule: str, noise: str) -> None:
    budget = Budget(1, Fraction(1, 10**6))
    with warnings.catch_warnings():
        # adaptive-valid rules: no warning that the guarantee needs a script
        warnings.filterwarnings("error", message=".*valid only for a sequence")
        session, engine = _session(accountant=Accountant(budget, composition=rule), noise=noise)  # type: ignore[arg-type]
    spec = Query("sum", "age", epsilon=0.05, bounds=(0, 120), group_by="g", keys=list("abcd"))
    n = session.afford(spec)
    assert engine.calls == [] and session.accountant.history == ()
    assert n >= 19  # zCDP at (1, 1e-6): 19 steps of rho = 0.05**2 / 2 (ε'-charged Gaussians too)
    assert _answers_until_refused(session, spec, cap=n + 5) == n


def test_bad_specs_fail_as_prepare_fails_before_anything_else() -> None:
    session, engine = _session(epsilon=1.0)
    bad = [
        Query("mean", "age", epsilon=0.1),  # no bounds
        Query("mean", "nope", epsilon=0.1, bounds=(0, 1)),
        Query("mean", "age", epsilon=0.1, bounds=(5, 1)),
        Query("mean", "age", epsilon=-1.0, bounds=(0, 1)),
        Query("count", epsilon=0.1, group_by="g"),  # no public keys
        "mean age",
    ]
    for spec in bad:
        with pytest.raises(DPKitError) as prepared:
            session.prepare(spec)  # type: ignore[arg-type]
        with pytest.raises(DPKitError) as afforded:
            session.afford(spec)  # type: ignore[arg-type]
        assert type(afforded.value) is type(prepared.value)
        assert str(afforded.value) == str(prepared.value)
    assert engine.calls == [] and session.accountant.history == ()


@settings(max_examples=10, deadline=None)
@given(pair=neighbours())
def test_the_count_is_the_same_on_neighbouring_tables(pair: Pair) -> None:
    counts = []
    for rows in (pair.smaller, pair.bigger):
        session = Session.from_pandas(
            frame(rows), epsilon=1.0, types=CSV_TYPES, schema=SCHEMA, rng=0
        )
        session.answer(Query("count", epsilon=0.3))
        counts.append(
            (session.afford(Query("mean", "x", epsilon=0.2, bounds=(0, 100))), session.remaining)
        )
    assert counts[0] == counts[1]
