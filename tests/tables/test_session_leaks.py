"""The session layer's leak classes, one reproduction each (each failed before its fix).

Each test runs the same call on neighbouring tables (one person added or
removed) or with hostile public input, and checks that what the analyst sees
beyond the noisy values — errors, details, scales, CI widths, charges — does
not depend on the data.
"""

from __future__ import annotations

import datetime as dt
import threading
from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.tables._declared import types_of

from dpkit._checks import exact
from dpkit.errors import (
    BudgetExceededError,
    InvalidParameterError,
    PrivacyWarning,
    ReleaseFailedError,
)
from dpkit.tables import Query, QuerySpec, Session
from dpkit.tables.engines import Contribution, DuckDBEngine, Rows, Value
from dpkit.tables.engines.duckdb_engine import connect
from dpkit.tables.kinds.histogram import unit_epsilon


def _table(n: int = 300, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "uid": np.arange(n),
            "group": rng.choice(["a", "b", "c"], n),
            "x": rng.uniform(0, 10, n),
            "day": pd.to_datetime("2020-01-01") + pd.to_timedelta(rng.integers(0, 30, n), "D"),
        }
    )


def _public(release: object) -> dict:
    """Everything but the noisy values (and what is computed from them)."""
    details = dict(release.details)  # type: ignore[attr-defined]
    for noisy in ("noisy_count", "groups", "published"):
        details.pop(noisy, None)
    return {
        "type": type(release).__name__,
        "epsilon": release.epsilon,  # type: ignore[attr-defined]
        "delta": release.delta,  # type: ignore[attr-defined]
        "details": details,
    }


# -- class 1: private keys must not reveal the observed groups --------------------------


@pytest.mark.parametrize("kind", ["count", "sum", "mean", "variance", "median", "histogram"])
def test_private_keys_details_do_not_depend_on_the_observed_groups(kind: str) -> None:
    base = _table()
    neighbour = pd.concat(  # one more person, alone in a brand-new group
        [
            base,
            pd.DataFrame({"uid": [999], "group": ["zzz-new"], "x": [5.0], "day": [base.day[0]]}),
        ],
        ignore_index=True,
    )
    params: dict = {"epsilon": 1.0, "group_by": "uid", "keys": "private", "delta": 1e-6}
    if kind != "count":
        params["bounds"] = (0, 10)
    if kind == "histogram":
        params.pop("bounds")
        params["edges"] = [0, 5, 10]
    seen = []
    for frame in (base, neighbour):
        s = Session.from_pandas(frame, types=types_of(frame), epsilon=10.0, delta=1e-3, rng=7)
        release = getattr(s, kind)(*(["x"] if kind != "count" else []), **params)
        seen.append(_public(release))
    assert seen[0] == seen[1]


def test_a_filtered_group_by_a_unique_column_does_not_reveal_how_many_rows_match() -> None:
    frame = _table()
    outs = []
    for cutoff in (2.0, 8.0):  # very different numbers of matching rows
        s = Session.from_pandas(frame, types=types_of(frame), epsilon=10.0, delta=1e-3, rng=1)
        r = s.sum(
            "x",
            bounds=(0, 10),
            epsilon=1.0,
            delta=1e-6,
            group_by="uid",
            keys="private",
            where={"x": ("<", cutoff)},
        )
        outs.append((r.details["scale"], r.details["half_width"], r.details["threshold"]))
    assert outs[0] == outs[1]


# -- class 2: which rows of a person are kept -----------------------------------------


def _kept_sum(frame: pd.DataFrame, salt: int) -> dict:
    con = connect()
    engine = DuckDBEngine(con, con.from_df(frame))
    rows = Rows(contribution=Contribution("pid", 2, salt))
    out = engine.moments(
        rows, Value("x", numeric=True, bounds=(0, 1000)), [Value("pid", False)], 0.0, [1.0]
    )
    return dict(zip(out["_g0"].tolist(), out["s1"].tolist()))


@pytest.mark.parametrize("salt", [1, 2, 3, 4])
def test_another_persons_rows_do_not_change_which_rows_of_a_person_are_kept(salt: int) -> None:
    # Person 1 has 6 rows, person 2 has rows interleaved with them (positions shift).
    rows = []
    for i in range(6):
        rows.append({"pid": 1, "x": float(i + 1)})
        rows.append({"pid": 2, "x": 100.0 + i})
    with_other = pd.DataFrame(rows)
    without_other = with_other[with_other.pid == 1].reset_index(drop=True)
    assert _kept_sum(with_other, salt)[1] == _kept_sum(without_other, salt)[1]


# -- class 3: everything public is checked before the charge ---------------------------


def _fresh() -> Session:
    return Session.from_pandas(_table(), types=types_of(_table()), epsilon=5.0, delta=1e-3, rng=0)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.count(epsilon=0.1, where={"day": "not-a-date"}), "ISO-8601"),
        (lambda s: s.count(epsilon=0.1, where={"day": ("<", 20200101)}), "date"),
        (lambda s: s.count(epsilon=0.1, where={"x": "7"}), "number"),
        (lambda s: s.mode("group", epsilon=0.1, domain=[1, 2]), "string"),
        (lambda s: s.count(epsilon=0.1, group_by="group", keys=["a", None]), "missing"),
        (lambda s: s.count(epsilon=0.1, group_by="x", keys=[2**80]), "64 bits"),
        (lambda s: s.count(epsilon=0.1, group_by="x", keys=[float("nan")]), "missing"),
        (lambda s: s.median("x", epsilon=0.1, bounds=(1.0, 1.0 + 1e-15)), "narrow"),
        (lambda s: s.mean("x", epsilon=0.1, bounds=(-1e305, 1e305)), "overflow"),
        (lambda s: s.median("x", epsilon=0.1, bounds=(0, 1), grid_size=10**9), "grid_size"),
        (
            lambda s: s.histogram("x", epsilon=0.1, bounds=(0, 1), bins=10**9),
            "memory|more than the",
        ),
        (
            lambda s: s.histogram(
                "x", epsilon=0.1, bins=4, bounds=(0, 10), method="structure_first"
            ),
            "max_count",
        ),
        (lambda s: s.count(epsilon=0.1, group_by="group", keys=["a", "a"]), "twice"),
    ],
)
def test_hostile_public_input_is_refused_before_the_charge(call, match: str) -> None:
    s = _fresh()
    with pytest.raises(InvalidParameterError, match=match) as info:
        call(s)
    assert s.spent.epsilon == 0
    assert "SECRET" not in str(info.value)


def test_an_invalid_date_filter_is_no_membership_oracle() -> None:
    """Before: a cast error only when some row reached it (ε = 1e-9 membership test)."""
    for frame in (_table(), _table().iloc[:1]):  # a matching row, or none that matches
        s = Session.from_pandas(frame, types=types_of(frame), epsilon=1.0, rng=0)
        with pytest.raises(InvalidParameterError):
            s.count(epsilon=1e-9, where={"day": "2020-13-45"})
        assert s.spent.epsilon == 0


def test_equivalent_date_spellings_filter_the_same_rows() -> None:
    frame = _table()
    answers = set()
    for literal in ("2020-01-05", dt.date(2020, 1, 5), dt.datetime(2020, 1, 5)):
        s = Session.from_pandas(frame, types=types_of(frame), epsilon=10.0, rng=4)
        answers.add(s.count(epsilon=1.0, where={"day": literal}).value)
    assert len(answers) == 1


def test_a_failure_after_the_charge_is_one_generic_error_and_the_charge_stands(monkeypatch) -> None:
    messages = set()
    for secret in ("SECRET-1", "another"):
        s = _fresh()

        def broken(*args, _secret=secret, **kwargs):
            raise duckdb.ConversionException(f"could not convert {_secret}")

        monkeypatch.setattr(s.engine, "moments", broken)
        with pytest.raises(ReleaseFailedError) as info:
            s.count(epsilon=0.5)
        assert s.spent.epsilon == pytest.approx(0.5)
        messages.add(str(info.value))
        assert info.value.__context__ is None and "SECRET" not in str(info.value)
    assert len(messages) == 1


# -- class 6: types inferred from a CSV's rows ------------------------------------------


def test_csv_types_are_declared_or_inferred_only_on_request_with_a_warning(tmp_path) -> None:
    path = tmp_path / "t.csv"
    _table(20).to_csv(path, index=False)
    with pytest.raises(InvalidParameterError, match="no declared type"):
        Session.from_csv(path, epsilon=1.0)
    with pytest.warns(PrivacyWarning, match="sniffer"):
        Session.from_csv(path, epsilon=1.0, infer_types=True)
    types = {"uid": "BIGINT", "group": "VARCHAR", "x": "DOUBLE", "day": "DATE"}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        declared = Session.from_csv(path, epsilon=1.0, types=types)
        text = Session.from_csv(path, epsilon=1.0, types=dict.fromkeys(types, "VARCHAR"))
    assert declared.column_kinds["day"] == "temporal"
    assert set(text.column_kinds.values()) == {"text"}
    with pytest.raises(InvalidParameterError, match="does not have"):
        Session.from_csv(path, epsilon=1.0, types={**types, "nope": "DOUBLE"})


# -- class 7: splits, structure_first, file names ---------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.floats(min_value=1e-6, max_value=100, allow_nan=False, allow_infinity=False),
    st.integers(min_value=1, max_value=1000),
)
def test_the_per_row_epsilon_of_a_histogram_method_never_overspends(eps: float, k: int) -> None:
    part = unit_epsilon(eps, k)
    assert part > 0 and exact(part) * k <= exact(eps)


def test_structure_first_through_a_session_works_with_max_count() -> None:
    s = _fresh()
    r = s.histogram(
        "x", epsilon=1.0, bins=8, bounds=(0, 10), method="structure_first", max_count=300
    )
    assert len(r.value) == 8 and s.spent.epsilon == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["data.db?mode=memory", "data.db#x", "file:data.db"])
def test_a_sqlite_name_that_would_open_another_file_is_refused(tmp_path, name: str) -> None:
    import sqlite3

    with sqlite3.connect(tmp_path / "data.db") as db:
        db.execute("CREATE TABLE t (x REAL)")
        db.execute("INSERT INTO t VALUES (1.0)")
    with pytest.raises(InvalidParameterError, match="URI"):
        Session.from_sql(
            tmp_path / name if not name.startswith("file:") else name, "t", epsilon=1.0
        )


# -- class 8: one session shared by threads ---------------------------------------------


def test_a_session_shared_by_threads_never_charges_without_answering() -> None:
    s = Session.from_pandas(_table(2000), types=types_of(_table(2000)), epsilon=15.0, rng=None)
    answered: list[object] = []
    refused: list[object] = []
    failed: list[BaseException] = []

    def ask(i: int) -> None:
        try:
            kind = ("count", "mean", "median")[i % 3]
            if kind == "count":
                answered.append(s.count(epsilon=0.1))
            else:
                answered.append(getattr(s, kind)("x", bounds=(0, 10), epsilon=0.1))
        except BudgetExceededError as err:
            refused.append(err)
        except BaseException as err:  # any other outcome is the bug
            failed.append(err)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(300)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed
    assert len(answered) == 150 and len(refused) == 150
    assert s.spent.epsilon_exact == Fraction(15)
    assert len(s.accountant.history) == 150


def test_specs_are_data_that_round_trip_through_json() -> None:
    spec = Query(
        "mean",
        "x",
        epsilon=0.1,
        bounds=(0, 10),
        where={"day": ("between", dt.date(2020, 1, 1), "2020-01-09"), "group": ["a", "b"]},
        group_by="group",
        keys=["a", "b"],
    )
    assert QuerySpec.from_json(spec.to_json()) == spec
    assert "mean('x'" in str(spec)
    s = _fresh()
    assert s.answer(QuerySpec.from_json(spec.to_json())).keys == ("a", "b")


@pytest.mark.parametrize("odd", ["0001-01-01", "9999-12-31", "1677-09-21", "2262-04-12"])
def test_odd_dates_in_a_group_column_never_fail_after_the_charge(odd: str) -> None:
    """Dates pandas cannot hold (year 1, 9999) come back as text, never as an error."""
    con = connect()
    con.execute(
        "CREATE TABLE t AS SELECT * FROM (VALUES (DATE '2020-01-01', 1.0), (DATE '2020-01-01', 2.0),"
        f" (DATE '{odd}', 3.0)) v(day, x)"
    )
    s = Session.from_duckdb(
        "t", connection=con, types={"day": "DATE", "x": "DOUBLE"}, epsilon=100.0, delta=1e-3, rng=2
    )
    r = s.count(epsilon=1.0, group_by="day", keys="private", delta=1e-6)
    assert set(r.keys) <= {dt.datetime(2020, 1, 1), dt.datetime.fromisoformat(odd), odd}
    public = s.count(epsilon=1.0, group_by="day", keys=[odd, "2020-01-01"])
    assert public.keys == (odd, "2020-01-01")
    assert s.mode("day", epsilon=1.0, domain=[odd, "2020-01-01"]).value in (odd, "2020-01-01")


def test_columns_of_other_types_cannot_be_grouped() -> None:
    con = connect()
    con.execute("CREATE TABLE t AS SELECT [1, 2] AS l, 1.0 AS x")
    s = Session.from_duckdb(
        "t", connection=con, types={"l": "INTEGER[]", "x": "DOUBLE"}, epsilon=1.0, rng=0
    )
    with pytest.raises(InvalidParameterError, match="cannot be grouped"):
        s.count(epsilon=0.5, group_by="l", keys="private", delta=1e-6)
    assert s.spent.epsilon == 0


def test_a_text_entry_in_a_coerced_csv_column_never_fails_after_the_charge(tmp_path) -> None:
    """DuckDB 2.0 pushed TRY_CAST into the CSV reader as a strict cast (quoting the entry)."""
    outcomes = []
    for extra in ("", "9,not-a-number\n"):
        path = tmp_path / f"t{len(extra)}.csv"
        path.write_text("uid,x\n1,3.5\n2,4.5\n" + extra, encoding="utf-8")
        s = Session.from_csv(
            path,
            epsilon=10.0,
            rng=0,
            types={"uid": "VARCHAR", "x": "VARCHAR"},
            schema={"columns": {"x": {"coerce": True}}},
        )
        r = s.mean("x", bounds=(0, 10), epsilon=1.0)
        outcomes.append((type(r).__name__, r.details["epsilon_split"], s.spent))
    assert outcomes[0] == outcomes[1]
