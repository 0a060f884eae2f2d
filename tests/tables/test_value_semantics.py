"""One value semantics, dpkit's, through a session: collations, numeric literals, plan costs.

* Text is compared and grouped by exact code points whatever collation the
  DuckDB source declares (``COLLATE NOCASE`` on the column, a connection's
  ``default_collation``): transcript tests on a NOCASE source where the
  neighbour adds one row ``'a'`` next to the public key ``'A'``.
* ``Parallel`` disjointness is decided on literals as the column's declared
  type represents them (2**60 + 1 is not 2**60 in a BIGINT column and is
  refused for a DOUBLE one; 3 and 3.0 are one value; a REAL reads 0.1 as float32).
* A plan's charge comes from its specs at run time; an edited plan is refused
  before the charge.

Engine-level properties (every type × collation) are in ``test_engine_agreement.py``.
"""

from __future__ import annotations

import dataclasses
import gc
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from tests.tables._neighbours import Options, assert_same, record

from dpkit.accounting import Budget
from dpkit.errors import InvalidParameterError
from dpkit.tables import Parallel, Query, Session
from dpkit.tables.engines import _sql
from dpkit.tables.engines.duckdb_engine import connect

#: (column clause, connection default_collation) of the hostile sources
NOCASE_SOURCES = [("COLLATE NOCASE", None), ("", "nocase"), ("COLLATE NOCASE.NOACCENT", None)]
TYPES = {"g": "VARCHAR", "x": "DOUBLE"}


def _session(
    groups: list[str], clause: str = "COLLATE NOCASE", default: str | None = None, **kw: Any
) -> Session:
    """A seeded session over a DuckDB table whose text column has a hostile collation."""
    con = connect()
    if default is not None:
        con.execute(f"SET default_collation = '{default}'")
    con.execute(f"CREATE TABLE t (g VARCHAR {clause}, x DOUBLE)")
    con.executemany(
        "INSERT INTO t VALUES (?, ?)", [[g, float(i % 7)] for i, g in enumerate(groups)]
    )
    options = {"epsilon": 100.0, "delta": 1e-3, "rng": 7, **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Session.from_duckdb("t", connection=con, types=TYPES, **options)


# --------------------------------------------------------------------- A1: collations

BASE = ["A"] * 20 + ["b"] * 10


def _both(clause: str, default: str | None, call: Callable[[Session], Any]) -> tuple[Any, Any]:
    smaller = _session(BASE, clause, default)
    bigger = _session([*BASE[:5], "a", *BASE[5:]], clause, default)  # one row 'a' next to 'A'
    # Earlier sessions' connections are collected now, not inside one of the two transcripts
    # (where the collector's ResourceWarning would look like a difference between them).
    gc.collect()
    first = call(smaller)
    gc.collect()
    return first, call(bigger)


def _count_by_key(s: Session) -> Any:
    return s.count(epsilon=1.0, group_by=["g"], keys=["A", "b"])


@pytest.mark.parametrize(("clause", "default"), NOCASE_SOURCES)
def test_a_row_a_beside_public_key_A_changes_nothing_on_a_nocase_source(
    clause: str, default: str | None
) -> None:
    calls: list[tuple[Callable[[Session], Any], Options]] = [
        (_count_by_key, Options(additive=True)),
        (lambda s: s.count(epsilon=1.0, where={"g": "A"}), Options(additive=True)),
        (lambda s: s.count(epsilon=1.0, where={"g": ["A", "b"]}), Options(additive=True)),
        (
            lambda s: s.mean("x", epsilon=1.0, bounds=(0, 10), group_by=["g"], keys=["A", "b"]),
            Options(),
        ),
        (lambda s: s.histogram("g", epsilon=1.0, domain=["A", "b"]), Options(additive=True)),
        (lambda s: s.mode("g", epsilon=1.0, domain=["A", "b"]), Options()),
    ]
    for call, opts in calls:
        a, b = _both(clause, default, lambda s, c=call, o=opts: record(s, c, o))  # type: ignore[misc]
        assert_same(a, b)
    # with the noise fixed, the 'a' row moves no released value at all: it is not 'A'
    small, big = _both(clause, default, _count_by_key)
    assert small.value == big.value
    small, big = _both(clause, default, lambda s: s.count(epsilon=1.0, where={"g": "A"}))
    assert small.value == big.value


def test_the_transcript_check_detects_a_collation_left_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sql, "binary_text", lambda expr: expr)  # the broken variant
    small, big = _both("COLLATE NOCASE", None, _count_by_key)
    assert small.value != big.value  # the 'a' row is counted under 'A'


@pytest.mark.parametrize(("clause", "default"), NOCASE_SOURCES)
def test_private_keys_are_the_datas_exact_spellings(clause: str, default: str | None) -> None:
    s = _session(["A"] * 60 + ["a"] * 60 + ["é"] * 60, clause, default, epsilon=1000.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = s.count(epsilon=200.0, delta=1e-6, group_by=["g"], keys="private")
    assert sorted(r.keys) == ["A", "a", "é"]
    assert all(abs(r.value[k] - 60) <= 2 for k in r.keys)


def test_private_keys_detect_a_collation_left_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sql, "binary_text", lambda expr: expr)  # the broken variant
    s = _session(["A"] * 60 + ["a"] * 60, epsilon=1000.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = s.count(epsilon=200.0, delta=1e-6, group_by=["g"], keys="private")
    assert len(r.keys) == 1  # one arbitrary spelling, counting both


def test_case_variants_are_disjoint_and_charged_in_parallel_on_a_nocase_source() -> None:
    s = _session(["A"] * 20 + ["a"] * 10, epsilon=1000.0)
    plan = s.plan(
        [
            Parallel(
                Query("count", epsilon=100.0, where={"g": "A"}),
                Query("count", epsilon=100.0, where={"g": "a"}),
            )
        ]
    )
    assert plan.parallel == (True,) and plan.epsilon == 100.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upper, lower = s.run(plan)
    assert abs(upper.value - 20) <= 1 and abs(lower.value - 10) <= 1  # no row in both


def test_a_lone_surrogate_is_refused_before_the_charge() -> None:
    s = _session(BASE)
    with pytest.raises(InvalidParameterError, match="not valid Unicode"):
        s.count(epsilon=1.0, where={"g": "a\ud800"})
    assert s.spent.epsilon == 0


# --------------------------------------------------------------------- A2: numeric literals


def _numeric_session(type_name: str) -> Session:
    con = connect()
    con.execute(f"CREATE TABLE t (v {type_name})")
    con.execute("INSERT INTO t VALUES (1), (2), (3)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Session.from_duckdb("t", connection=con, types={"v": type_name}, epsilon=10.0)


def _parallel(s: Session, *values: Any) -> bool:
    plan = s.plan(
        [Parallel(*(Query("count", epsilon=1.0, where={"v": value}) for value in values))]
    )
    return plan.parallel[0]


def test_parallel_decides_on_the_value_the_declared_type_holds() -> None:
    bigint = _numeric_session("BIGINT")
    assert _parallel(bigint, 2**60, 2**60 + 1, 2**60 + 2)  # exact integers: disjoint
    assert not _parallel(bigint, 3, 3.0)  # one value, two spellings
    assert not _parallel(bigint, [2**60, 5], float(2**60))
    real = _numeric_session("REAL")
    assert not _parallel(real, 0.1, 0.10000000149011612)  # one float32
    assert _parallel(real, 0.1, 0.2)
    double = _numeric_session("DOUBLE")
    assert _parallel(double, 2.0**60, 2.0**60 + 256)
    decimal = _numeric_session("DECIMAL(10,2)")
    assert not _parallel(decimal, 3, 3.0)
    assert _parallel(decimal, 0.1, 0.13)


@pytest.mark.parametrize(
    ("type_name", "value"),
    [
        ("DOUBLE", 2**60 + 1),  # DuckDB would compare it as 2**60
        ("REAL", 2**24 + 1),
        ("REAL", 1e39),
        ("INTEGER", 2**31),
        ("UTINYINT", -1),
        ("DECIMAL(10,2)", 0.125),  # DuckDB would round it to 0.13
        ("DECIMAL(4,2)", 100),
    ],
)
def test_a_literal_the_type_cannot_hold_is_refused_before_the_charge(
    type_name: str, value: Any
) -> None:
    s = _numeric_session(type_name)
    with pytest.raises(InvalidParameterError, match=r"column .v. .*(type|float|double|DECIMAL)"):
        s.plan(
            [
                Parallel(
                    Query("count", epsilon=1.0, where={"v": value}),
                    Query("count", epsilon=1.0, where={"v": 1}),
                )
            ]
        )
    with pytest.raises(InvalidParameterError):
        s.count(epsilon=1.0, where={"v": value})
    assert s.spent.epsilon == 0


# --------------------------------------------------------------------- B5: plan cost tamper


def _plan(s: Session) -> Any:
    return s.plan(
        [
            Query("count", epsilon=0.5),
            Parallel(
                Query("count", epsilon=1.0, where={"g": "A"}),
                Query("count", epsilon=1.0, where={"g": "b"}),
            ),
        ]
    )


def _edit_query_epsilon(plan: Any) -> Any:
    first = plan.items[0][0]
    query = dataclasses.replace(first.query, epsilon=0.001)
    return dataclasses.replace(
        plan, items=((dataclasses.replace(first, query=query, epsilon=0.001),), *plan.items[1:])
    )


def _set_attr(plan: Any, name: str, value: Any) -> Any:
    object.__setattr__(plan, name, value)
    return plan


def _edit_spec(plan: Any) -> Any:
    object.__setattr__(plan.items[0][0].query.spec, "epsilon", 5.0)
    return plan


TAMPERS: dict[str, Callable[[Any], Any]] = {
    "setattr cost": lambda p: _set_attr(p, "cost", Budget(0.001)),
    "replace cost": lambda p: dataclasses.replace(p, cost=Budget(0.001), epsilon=0.001),
    "replace epsilon only": lambda p: dataclasses.replace(p, epsilon=0.001),
    "planned query epsilon": lambda p: dataclasses.replace(
        p,
        items=((dataclasses.replace(p.items[0][0], epsilon=0.001),), *p.items[1:]),
    ),
    "validated query epsilon": _edit_query_epsilon,
    "spec epsilon": _edit_spec,
    "parallel flag": lambda p: dataclasses.replace(p, parallel=(True, True)),
    "cost not a budget": lambda p: _set_attr(p, "cost", 0.001),
    "items not queries": lambda p: dataclasses.replace(p, items=((object(),),)),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_an_edited_plan_is_refused_before_the_charge(tamper: str) -> None:
    s = _session(BASE)
    plan = TAMPERS[tamper](_plan(s))
    with pytest.raises(InvalidParameterError, match="plan"):
        s.run(plan)
    assert s.spent.epsilon == 0 and not s.accountant.history


def test_a_plan_is_charged_what_its_specs_cost_now() -> None:
    s = _session(BASE)
    plan = _plan(s)
    assert plan.epsilon == 1.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s.run(plan)
    assert s.spent.epsilon == pytest.approx(1.5)
    assert [h.cost.epsilon for h in s.accountant.history] == [pytest.approx(1.5)]


def test_without_the_tamper_check_the_charge_still_comes_from_the_specs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Broken variant 1 (no tamper check): the edited plan runs instead of being refused,
    # which test_an_edited_plan_is_refused_before_the_charge reports. Even then run()
    # charges the specs' cost, never the stored one (defence in depth).
    from dpkit.tables import session as session_module

    monkeypatch.setattr(session_module, "same_costs", lambda recorded, fresh: True)
    s = _session(BASE)
    plan = _plan(s)
    fresh_cost = plan.cost
    tampered = _set_attr(plan, "cost", Budget(0.001))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s.run(tampered)  # no refusal: the refusal test can fail
    assert s.spent.epsilon == pytest.approx(fresh_cost.epsilon)
