"""The Session API: constructors, costs, charging before reading, errors, batches."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from tests.tables._declared import types_of

import dpkit
from dpkit.accounting import Budget
from dpkit.errors import BudgetExceededError, DataError, DPKitError, InvalidParameterError
from dpkit.release import Release
from dpkit.tables import Column, GroupedRelease, Parallel, Query, Schema, Session
from dpkit.tables.engines import DuckDBEngine, Rows
from dpkit.tables.engines.duckdb_engine import connect

from .conftest import SECRET

# ------------------------------------------------------------------ constructors


def test_every_constructor_gives_the_same_exact_count(people: pd.DataFrame, tmp_path: Path) -> None:
    csv = tmp_path / "p.csv"
    parquet = tmp_path / "p.parquet"
    people.to_csv(csv, index=False)
    people.to_parquet(parquet)
    con = connect()
    con.register("people_view", people)
    db = tmp_path / "p.sqlite"
    with sqlite3.connect(db) as lite:
        people.to_sql("people", lite, index=False)
    import polars as pl

    types = types_of(people)
    sessions = [
        Session.from_csv(csv, types=types, epsilon=1.0),
        Session.from_csv(csv, types=types, epsilon=1.0, materialize=True),
        Session.from_parquet(parquet, types=types, epsilon=1.0),
        Session.from_pandas(people, types=types, epsilon=1.0),
        Session.from_polars(pl.from_pandas(people), types=types, epsilon=1.0),
        Session.from_arrow(pa.Table.from_pandas(people), types=types, epsilon=1.0),
        Session.from_duckdb("people_view", connection=con, types=types, epsilon=1.0),
        Session.from_duckdb(con.table("people_view"), types=types, epsilon=1.0),
        Session.from_sql(db, "people", types=types, epsilon=1.0),
    ]
    for s in sessions:
        assert s.columns == types  # the declared types, whatever the source stored
        exact = s.engine.moments(Rows(), None, ())
        assert int(exact["n"].iloc[0]) == len(people)


def test_constructor_errors(people: pd.DataFrame, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="does not exist"):
        Session.from_csv(tmp_path / "missing.csv", epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="pandas DataFrame"):
        Session.from_pandas([1, 2], epsilon=1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="epsilon"):
        Session.from_pandas(people, types=types_of(people), epsilon=0.0)
    with pytest.raises(InvalidParameterError, match="unknown column 'nope' in privacy_unit"):
        Session.from_pandas(people, types=types_of(people), epsilon=1.0, privacy_unit="nope")
    with pytest.raises(InvalidParameterError, match="needs privacy_unit"):
        Session.from_pandas(people, types=types_of(people), epsilon=1.0, max_contributions=3)
    with pytest.raises(InvalidParameterError, match="unknown column 'height' in the schema"):
        Session.from_pandas(
            people,
            types=types_of(people),
            epsilon=1.0,
            schema={"columns": {"height": {"bounds": [0, 2]}}},
        )
    with pytest.raises(
        (InvalidParameterError, DataError), match=r"extension is not installed|could not open"
    ):
        Session.from_sql("dbname=none", "t", kind="postgres", epsilon=1.0)
    with pytest.raises(DataError, match="could not read table"):
        db = tmp_path / "empty.sqlite"
        sqlite3.connect(db).close()
        Session.from_sql(db, "missing_table", epsilon=1.0)


def test_an_empty_table_is_refused_at_construction(people: pd.DataFrame) -> None:
    with pytest.raises(DataError, match="has no rows"):
        Session.from_pandas(people.iloc[:0], types=types_of(people.iloc[:0]), epsilon=1.0)


def test_an_empty_filter_is_private_and_answered_with_noise(session: Session) -> None:
    r = session.count(epsilon=1.0, where={"district": "Z"})
    assert isinstance(r.value, int) and r.ci[0] == 0.0
    m = session.mean("age", epsilon=1.0, bounds=(0, 120), where={"district": "Z"})
    assert 0.0 <= m.value <= 120.0


# ------------------------------------------------------------------ answers and costs


def test_scalar_answers_are_releases_with_cost_ci_and_remaining(session: Session) -> None:
    before = session.remaining
    r = session.mean("age", epsilon=0.5, bounds=(0, 120))
    assert isinstance(r, Release)
    assert r.epsilon == 0.5 and r.delta == 0.0 and r.level == 0.95
    assert r.ci[0] <= r.value <= r.ci[1]
    assert r.remaining == session.remaining
    assert before.epsilon_exact - session.remaining.epsilon_exact == Budget(0.5).epsilon_exact
    # all of ε on the two-sided sums (issue 33: no split between a sum and a count)
    assert r.details["epsilon_split"] == {"sums": 0.5}
    assert r.details["estimator"] == "two-sided sums"


def test_group_by_public_keys_costs_the_max_and_answers_absent_keys(session: Session) -> None:
    spent = session.spent.epsilon
    r = session.mean(
        "age", epsilon=0.7, bounds=(0, 120), group_by="district", keys=["A", "B", "C", "D", "Z"]
    )
    assert isinstance(r, GroupedRelease)
    assert session.spent.epsilon == pytest.approx(spent + 0.7)  # not 5 × 0.7
    assert r.keys == ("A", "B", "C", "D", "Z")
    assert r.ci["Z"] == (0.0, 120.0)  # an absent key gets an (uninformative) answer too
    assert r["A"].epsilon == 0.7 and r["A"].ci == r.ci["A"]
    frame = r.to_frame()
    assert list(frame.columns) == ["district", "value", "ci_low", "ci_high"] and len(frame) == 5


def test_group_by_keys_from_the_schema_and_two_columns(people: pd.DataFrame) -> None:
    schema = Schema.of(
        [Column("district", domain=["A", "B", "C", "D"]), Column("smoker", domain=[True, False])]
    )
    s = Session.from_pandas(people, types=types_of(people), epsilon=10.0, schema=schema, rng=3)
    r = s.count(epsilon=1.0, group_by=["district", "smoker"])
    assert len(r) == 8 and ("A", True) in r
    truth = people.groupby(["district", "smoker"]).size()
    for key in r.keys:
        assert abs(r.value[key] - truth[key]) <= 3 * r.details["half_width"]


def test_private_keys_need_delta_and_never_list_unseen_keys(session: Session) -> None:
    with pytest.raises(InvalidParameterError, match="delta"):
        session.count(epsilon=1.0, group_by="district", keys="private")
    r = session.count(epsilon=1.0, group_by="district", keys="private", delta=1e-6)
    assert r.delta == 1e-6 and set(r.keys) <= {"A", "B", "C", "D"}
    assert r.details["threshold"] > 1


def test_every_query_runs_with_group_by_and_where(session: Session) -> None:
    common: dict[str, Any] = dict(
        epsilon=1.0, where={"smoker": False}, group_by="district", keys=["A", "B"]
    )
    for r in [
        session.count("age", **common),
        session.sum("age", bounds=(0, 120), **common),
        session.mean("age", bounds=(0, 120), **common),
        session.variance("age", bounds=(0, 120), **common),
        session.std("age", bounds=(0, 120), **common),
        session.quantile("age", 0.25, bounds=(0, 120), **common),
        session.median("age", bounds=(0, 120), **common),
        session.min("age", bounds=(0, 120), **common),
        session.max("age", bounds=(0, 120), **common),
        session.mode("district", domain=["A", "B", "C", "D"], **common),
        session.histogram("age", bins=4, bounds=(0, 120), **common),
        session.histogram("district", domain=["A", "B", "C", "D"], **common),
    ]:
        assert isinstance(r, GroupedRelease) and r.keys == ("A", "B")
        assert r.epsilon == 1.0 and r.remaining is not None


def test_mode_group_by_same_column_picks_the_group(session: Session) -> None:
    r = session.mode(
        "district", epsilon=5.0, domain=["A", "B", "C", "D"], group_by="district", keys=["A", "C"]
    )
    assert r.value == {"A": "A", "C": "C"}


def test_histogram_numeric_and_categorical(session: Session, people: pd.DataFrame) -> None:
    h = session.histogram("age", epsilon=2.0, edges=[0, 30, 60, 120])
    truth = np.histogram(people["age"].dropna(), bins=[0, 30, 60, 120])[0]
    assert h.value.shape == (3,) and np.all(np.abs(h.value - truth) <= 3 * h.details["half_width"])
    assert np.all(h.ci[0] <= h.value) and np.all(h.value <= h.ci[1])
    c = session.histogram("district", epsilon=2.0, domain=["A", "B", "C", "D", "E"])
    assert c.details["labels"] == ["A", "B", "C", "D", "E"] and c.value.shape == (5,)


def test_histogram_method_delegates_to_dpkit_histograms(session: Session) -> None:
    pytest.importorskip("dpkit.histograms")
    r = session.histogram("age", epsilon=1.0, bins=12, bounds=(0, 120), method="laplace")
    assert r.mechanism == "laplace" and len(r.value) == 12
    assert r.details["published"].epsilon == pytest.approx(1.0)
    with pytest.raises(InvalidParameterError, match="method must be one of"):
        session.histogram("age", epsilon=1.0, bins=12, bounds=(0, 120), method="magic")


def test_private_bounds_spend_a_stated_part_and_are_reported(
    session: Session, people: pd.DataFrame
) -> None:
    r = session.mean("income", epsilon=2.0, bounds="private")
    lo, hi = r.details["bounds"]
    assert r.details["bounds_epsilon"] == pytest.approx(0.25 * 2.0)
    assert lo <= people["income"].quantile(0.05) and hi >= people["income"].quantile(0.95)
    assert hi < 1e7  # not the top of the coarse grid
    with pytest.raises(InvalidParameterError, match="bounds must be \\(lo, hi\\)"):
        session.median("income", epsilon=1.0, bounds="private")  # type: ignore[arg-type]


# ------------------------------------------------------------------ charging before reading


class SpyEngine:
    """Wraps an engine and records every aggregation call."""

    def __init__(self, inner: DuckDBEngine) -> None:
        self.inner = inner
        self.name = "spy"
        self.calls: list[str] = []

    def column_kinds(self) -> Any:
        return self.inner.column_kinds()

    def column_types(self) -> Any:
        return self.inner.column_types()

    def has_rows(self) -> bool:
        return self.inner.has_rows()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return method(*args, **kwargs)

        return record


@pytest.fixture
def spied(people: pd.DataFrame) -> tuple[Session, SpyEngine]:
    con = connect()
    con.register("t", people)
    spy = SpyEngine(DuckDBEngine(con, "t"))
    return Session(spy, epsilon=1.0, rng=0), spy  # type: ignore[arg-type]


def test_a_refused_query_never_reaches_the_engine(spied: tuple[Session, SpyEngine]) -> None:
    s, spy = spied
    s.mean("age", epsilon=0.9, bounds=(0, 120))
    assert spy.calls == ["moments"]
    with pytest.raises(BudgetExceededError) as info:
        s.mean("age", epsilon=0.2, bounds=(0, 120))
    assert spy.calls == ["moments"]
    assert "mean(age)" in str(info.value)
    for bad in [
        lambda: s.mean("age", epsilon=0.01),  # no bounds
        lambda: s.mean("nope", epsilon=0.01, bounds=(0, 1)),
        lambda: s.mean("age", epsilon=0.01, bounds=(5, 1)),
        lambda: s.mean("district", epsilon=0.01, bounds=(0, 1)),
        lambda: s.mode("district", epsilon=0.01),
        lambda: s.count(epsilon=0.01, group_by="district"),
    ]:
        with pytest.raises(DPKitError):
            bad()
    assert spy.calls == ["moments"]
    assert s.spent.epsilon == pytest.approx(0.9)


def test_private_bounds_read_twice_after_one_charge(spied: tuple[Session, SpyEngine]) -> None:
    s, spy = spied
    s.sum("income", epsilon=0.5, bounds="private")
    assert spy.calls == ["bin_counts", "moments"]
    assert s.spent.epsilon == pytest.approx(0.5)


def test_ledger_persists_spending_across_sessions(people: pd.DataFrame, tmp_path: Path) -> None:
    ledger = tmp_path / "budget.ledger"
    a = Session.from_pandas(people, types=types_of(people), epsilon=1.0, ledger=ledger)
    a.count(epsilon=0.6)
    b = Session.from_pandas(people, types=types_of(people), epsilon=1.0, ledger=ledger)
    assert b.spent.epsilon == pytest.approx(0.6) and b.remaining.epsilon == pytest.approx(0.4)
    with pytest.raises(BudgetExceededError):
        b.count(epsilon=0.5)
    with pytest.raises(dpkit.LedgerError):
        Session.from_pandas(
            people, types=types_of(people), epsilon=5.0, ledger=ledger
        )  # cannot raise the budget


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda s: s.mean("age", epsilon=1.0),
            InvalidParameterError,
            "no public bounds.*bounds=\\(lo, hi\\)",
        ),
        (lambda s: s.mean("age", epsilon=1.0, bounds=(120, 0)), InvalidParameterError, "reverse"),
        (
            lambda s: s.sum("age", epsilon=1.0, bounds=(0, float("nan"))),
            InvalidParameterError,
            "finite",
        ),
        (
            lambda s: s.mean("agee", epsilon=1.0, bounds=(0, 1)),
            InvalidParameterError,
            "unknown column 'agee'.*'age'",
        ),
        (lambda s: s.mean("district", epsilon=1.0, bounds=(0, 1)), DataError, "stored as text"),
        (lambda s: s.mean("age", epsilon=-1.0, bounds=(0, 1)), InvalidParameterError, "epsilon"),
        (lambda s: s.count(epsilon=1.0, delta=1e-6), InvalidParameterError, "spends no delta"),
        (lambda s: s.count(epsilon=1.0, keys=["A"]), InvalidParameterError, "keys= needs group_by"),
        (lambda s: s.count(epsilon=1.0, group_by="district"), InvalidParameterError, "public keys"),
        (
            lambda s: s.count(epsilon=1.0, group_by="district", keys="all"),
            InvalidParameterError,
            "keys must be",
        ),
        (
            lambda s: s.count(epsilon=1.0, group_by=["district", "smoker"], keys=["A"]),
            InvalidParameterError,
            "2 part",
        ),
        (
            lambda s: s.quantile("age", 1.5, epsilon=1.0, bounds=(0, 1)),
            InvalidParameterError,
            "q must be",
        ),
        (
            lambda s: s.quantile("age", 0.5, epsilon=1.0, bounds=(0, 1), grid_size=1),
            InvalidParameterError,
            "grid_size",
        ),
        (lambda s: s.mode("district", epsilon=1.0), InvalidParameterError, "domain=\\[...\\]"),
        (lambda s: s.histogram("age", epsilon=1.0), InvalidParameterError, "needs public bins"),
        (
            lambda s: s.histogram("age", epsilon=1.0, bins=0, bounds=(0, 1)),
            InvalidParameterError,
            "bins",
        ),
        (
            lambda s: s.histogram("age", epsilon=1.0, edges=[3, 1]),
            InvalidParameterError,
            "increasing",
        ),
        (
            lambda s: s.mean("age", epsilon=1.0, bounds=(0, 1), where="age > 3"),
            InvalidParameterError,
            "SQL",
        ),
        (lambda s: s.plan([]), InvalidParameterError, "at least one"),
        (
            lambda s: s.variance("age", epsilon=1.0, bounds=(-1e300, 1e300)),
            InvalidParameterError,
            "out of range for a variance",
        ),
        (
            lambda s: s.mean("age", epsilon=1.0, bounds=(0.0, 1e-305)),
            InvalidParameterError,
            "other units",
        ),
    ],
)
def test_bad_input_gets_a_clear_error(
    session: Session, call: Any, error: type, message: str
) -> None:
    spent = session.spent
    with pytest.raises(error, match=message):
        call(session)
    assert session.spent == spent


def test_text_in_a_numeric_column_is_an_error_or_missing_by_choice() -> None:
    df = pd.DataFrame({"x": ["1", "2", SECRET, "4"]})
    s = Session.from_pandas(df, types=types_of(df), epsilon=100.0, rng=1)
    with pytest.raises(DataError) as info:
        s.mean("x", epsilon=1.0, bounds=(0, 10))
    assert SECRET not in str(info.value) and "coerce" in str(info.value)
    coerced = Session.from_pandas(
        df, types=types_of(df), epsilon=100.0, rng=1, schema=Schema.of([Column("x", coerce=True)])
    )
    r = coerced.count("x", epsilon=50.0)
    assert abs(r.value - 3) <= 2  # the text entry counts as missing (dropped)


def test_no_error_message_contains_a_data_value(people: pd.DataFrame) -> None:
    df = people.assign(note=np.where(np.arange(len(people)) == 3, SECRET, "ok"))
    s = Session.from_pandas(df, types=types_of(df), epsilon=1.0, rng=1)
    messages = []
    for call in [
        lambda: s.mean("note", epsilon=0.1, bounds=(0, 1)),
        lambda: s.mode("note", epsilon=0.1),
        lambda: s.count(epsilon=0.1, group_by="note"),
        lambda: s.histogram("note", epsilon=0.1),
        lambda: s.count(epsilon=5.0),
        lambda: s.mean("nope", epsilon=0.1, bounds=(0, 1)),
    ]:
        with pytest.raises(DPKitError) as info:
            call()
        messages.append(str(info.value))
    assert all(SECRET not in m for m in messages)


def test_nulls_replace_policy_counts_every_row(people: pd.DataFrame) -> None:
    schema = Schema.of([Column("age", bounds=(0, 120), nulls="replace", replacement=40)])
    s = Session.from_pandas(people, types=types_of(people), epsilon=1000.0, schema=schema, rng=2)
    assert abs(s.count("age", epsilon=100.0).value - len(people)) <= 1
    plain = Session.from_pandas(people, types=types_of(people), epsilon=1000.0, rng=2)
    assert abs(plain.count("age", epsilon=100.0).value - people["age"].count()) <= 1


# ------------------------------------------------------------------ batches


def test_plan_costs_without_reading_and_run_charges_once(spied: tuple[Session, SpyEngine]) -> None:
    s, spy = spied
    plan = s.plan(
        [
            Query("count", epsilon=0.1),
            Parallel(
                Query("mean", "age", epsilon=0.2, bounds=(0, 120), where={"district": "A"}),
                Query("mean", "age", epsilon=0.3, bounds=(0, 120), where={"district": ["B", "C"]}),
            ),
            Query(
                "median", "age", epsilon=0.1, bounds=(0, 120), group_by="district", keys=["A", "B"]
            ),
        ]
    )
    assert spy.calls == []
    assert plan.epsilon == pytest.approx(0.1 + 0.3 + 0.1)
    assert len(plan.to_frame()) == 4 and "parallel" in str(plan)
    results = s.run(plan)
    assert len(results) == 4 and all(r.remaining == s.remaining for r in results)
    assert s.spent.epsilon == pytest.approx(0.5)
    assert spy.calls == ["moments", "moments", "moments", "grid_counts"]
    too_big = s.plan([Query("count", epsilon=0.4), Query("count", epsilon=0.2)])
    with pytest.raises(BudgetExceededError):
        s.run(too_big)
    assert len(spy.calls) == 4  # nothing of the refused plan ran


def test_parallel_not_provably_disjoint_is_charged_in_sequence(
    session: Session, people: pd.DataFrame
) -> None:
    overlapping = Parallel(
        Query("count", epsilon=0.1, where={"district": ["A", "B"]}),
        Query("count", epsilon=0.1, where={"district": "B"}),
    )
    plan = session.plan([overlapping])
    assert plan.parallel == (False,) and plan.epsilon == pytest.approx(0.2)
    assert "not provably disjoint" in str(plan)
    other_columns = Parallel(
        Query("count", epsilon=0.1, where={"district": "A"}),
        Query("count", epsilon=0.1, where={"smoker": True}),
    )
    assert session.plan([other_columns]).epsilon == pytest.approx(0.2)
    disjoint = Parallel(
        Query("count", epsilon=0.1, where={"district": "A"}),
        Query("count", epsilon=0.2, where={"district": ["B", "C"]}),
    )
    assert session.plan([disjoint]).parallel == (True,)
    assert session.plan([disjoint]).epsilon == pytest.approx(0.2)
    per_person = Session.from_pandas(
        people, types=types_of(people), epsilon=1.0, privacy_unit="pid"
    )
    person_plan = per_person.plan(
        [
            Parallel(
                Query("count", epsilon=0.1, where={"district": "A"}),
                Query("count", epsilon=0.1, where={"district": "B"}),
            )
        ]
    )
    assert person_plan.epsilon == pytest.approx(0.2)  # one person's rows can match both
    with pytest.raises(InvalidParameterError, match="unknown query"):
        session.plan([Query("average", "age", epsilon=0.1)])
    with pytest.raises(InvalidParameterError, match="unexpected argument"):
        session.plan([Query("count", epsilon=0.1, bounds=(0, 1))])


def test_parallel_disjointness_is_decided_on_canonical_dates() -> None:
    import datetime as dt

    frame = pd.DataFrame({"day": pd.to_datetime(["2020-01-01", "2020-01-02"] * 10), "x": range(20)})
    s = Session.from_pandas(frame, types=types_of(frame), epsilon=10.0, rng=1)
    same_day = Parallel(
        Query("count", epsilon=0.5, where={"day": "2020-01-01"}),
        Query("count", epsilon=0.5, where={"day": dt.date(2020, 1, 1)}),
        Query("count", epsilon=0.5, where={"day": dt.datetime(2020, 1, 1)}),
    )
    plan = s.plan([same_day])
    assert plan.parallel == (False,) and plan.epsilon == pytest.approx(1.5)
    days = Parallel(
        Query("count", epsilon=0.5, where={"day": "2020-01-01"}),
        Query("count", epsilon=0.5, where={"day": dt.date(2020, 1, 2)}),
    )
    assert s.plan([days]).parallel == (True,)


def test_a_plan_runs_only_on_the_session_that_prepared_it(people: pd.DataFrame) -> None:
    a = Session.from_pandas(people, types=types_of(people), epsilon=1.0, rng=1)
    b = Session.from_pandas(people.iloc[:10], types=types_of(people.iloc[:10]), epsilon=1.0, rng=2)
    plan = a.plan([Query("count", epsilon=0.5)])
    with pytest.raises(InvalidParameterError, match="another session"):
        b.run(plan)
    assert b.spent.epsilon == 0 and a.spent.epsilon == 0


def test_sessions_can_share_one_accountant(people: pd.DataFrame) -> None:
    from dpkit.accounting import Accountant

    shared = Accountant(Budget(1.0))
    a = Session.from_pandas(people, types=types_of(people), accountant=shared, rng=1)
    b = Session.from_pandas(
        people.iloc[:100], types=types_of(people.iloc[:100]), accountant=shared, rng=2
    )
    a.count(epsilon=0.6)
    assert b.remaining.epsilon == pytest.approx(0.4)
    with pytest.raises(BudgetExceededError):
        b.count(epsilon=0.5)
    with pytest.raises(InvalidParameterError, match="not both"):
        Session.from_pandas(people, types=types_of(people), accountant=shared, epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="needs epsilon"):
        Session.from_pandas(people, types=types_of(people))
