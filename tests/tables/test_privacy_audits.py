"""Statistical privacy audits of the table queries: empirical ε between neighbours ≤ the claim.

Each audit runs a query many times on a table and on a neighbour built to be
a worst case for that query (the added person sits at a bound, tips a tie,
moves a median, opens a group), buckets the outputs into events and asks
:func:`dpkit.audit.audit_samples` for a 99%-confidence lower bound on ε. The
claim is refuted when the bound exceeds the query's ε. Each audit is also run
on a deliberately broken variant (the mechanism handed four times the ε it
was charged, i.e. a quarter of the noise; or no contribution bound), which the
same audit must refute: that shows the audit has power.

Samples are cheap: one query with ``M`` public keys, each key a copy of the
table (or of its neighbour), releases ``M`` independent draws of the
per-group mechanism (parallel composition over disjoint groups: a group's
release depends only on its rows and the noise). The ungrouped code paths
are audited query by query in the ``audit``-marked set (``make audit``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.tables._declared import types_of

import dpkit.mechanisms as mechanisms
from dpkit.audit import AuditResult, audit_samples
from dpkit.tables import Query, Session
from dpkit.tables import queries as Q

EPS = 1.0
DELTA = 1e-6
BOUNDS = (0.0, 100.0)
FAST_KEYS = 3000
FULL_KEYS = 20000
FULL_RUNS = 3000
POSITION_KEYS = 1500

Row = dict[str, Any]


# ----------------------------------------------------------------------- broken variants


@contextmanager
def _more_epsilon(monkeypatch: pytest.MonkeyPatch, factor: float = 4.0) -> Iterator[None]:
    """Every mechanism the queries call gets ``factor`` × the ε that was charged."""
    real_geo, real_lap = mechanisms.Geometric, mechanisms.Laplace
    real_pf, real_em = mechanisms.permute_and_flip, mechanisms.exponential

    # The noise is drawn at factor × ε while the event (what the ledger records, and
    # what dpkit checks against the charge) stays the honest one: a mechanism that
    # lies about its noise, which only an audit of the releases can catch.
    class Geometric(real_geo):  # type: ignore[misc, valid-type]
        def __init__(self, *, epsilon: float, **kw: Any) -> None:
            super().__init__(epsilon=epsilon * factor, **kw)
            self._honest = real_geo(epsilon=epsilon, **kw)

        @property
        def event(self) -> Any:
            return self._honest.event

    class Laplace(real_lap):  # type: ignore[misc, valid-type]
        def __init__(self, *, epsilon: float, **kw: Any) -> None:
            super().__init__(epsilon=epsilon * factor, **kw)
            self._honest = real_lap(epsilon=epsilon, **kw)

        @property
        def event(self) -> Any:
            return self._honest.event

    def pf(*a: Any, epsilon: float, **kw: Any) -> Any:
        return real_pf(*a, epsilon=epsilon * factor, **kw)

    def em(*a: Any, epsilon: float, **kw: Any) -> Any:
        return real_em(*a, epsilon=epsilon * factor, **kw)

    with monkeypatch.context() as m:
        m.setattr(mechanisms, "Geometric", Geometric)
        m.setattr(mechanisms, "Laplace", Laplace)
        m.setattr(mechanisms, "permute_and_flip", pf)
        m.setattr(mechanisms, "exponential", em)
        yield


@contextmanager
def _low_threshold(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Partition selection with threshold 1: a lone person's group is usually released."""
    with monkeypatch.context() as m:
        m.setattr(Q, "partition_threshold", lambda *a, **kw: 1)
        yield


# ----------------------------------------------------------------------- tables


def _copies(rows: list[Row], m: int, prefix: str = "k") -> pd.DataFrame:
    """``m`` copies of ``rows``, copy ``i`` under group key ``f"{prefix}{i}"``."""
    keys = [f"{prefix}{i:06d}" for i in range(m)]
    frame = pd.DataFrame(rows * m)
    frame["key"] = np.repeat(keys, len(rows))
    frame["pid"] = np.arange(len(frame))
    return frame


def _rows(xs: list[float], gs: list[str] | None = None) -> list[Row]:
    gs = gs or ["a"] * len(xs)
    return [{"x": float(x), "g": g} for x, g in zip(xs, gs)]


@dataclass(frozen=True)
class Case:
    """A per-group query, a table and its neighbour (both per group), and how to read a sample."""

    id: str
    call: Callable[[Session, list[str] | None], Any]  # (session, keys or None) -> release
    table: list[Row]
    neighbour: list[Row]
    sample: Callable[[Any], float] = float
    delta: float = 0.0
    broken: str = "epsilon"  # or "threshold"


def _by(keys: list[str] | None) -> dict[str, Any]:
    """group_by the copy key with public ``keys``, or no grouping for ``None``."""
    return {} if keys is None else {"group_by": "key", "keys": keys}


def _keys(m: int) -> list[str]:
    return [f"k{i:06d}" for i in range(m)]


CASES = [
    Case(
        "count",
        lambda s, keys: s.count(epsilon=EPS, **_by(keys)),
        _rows([1, 2, 3]),
        _rows([1, 2, 3, 4]),
    ),
    Case(
        "sum",
        lambda s, keys: s.sum("x", epsilon=EPS, bounds=BOUNDS, **_by(keys)),
        _rows([0, 0, 0]),
        _rows([0, 0, 0, 100]),
    ),
    Case(
        "mean",
        lambda s, keys: s.mean("x", epsilon=EPS, bounds=BOUNDS, **_by(keys)),
        _rows([0, 0]),
        _rows([0, 0, 100]),
    ),
    Case(
        "variance",
        lambda s, keys: s.variance("x", epsilon=EPS, bounds=BOUNDS, **_by(keys)),
        _rows([0, 0]),
        _rows([0, 0, 100]),
    ),
    Case(
        "median",
        lambda s, keys: s.median("x", epsilon=EPS, bounds=BOUNDS, grid_size=21, **_by(keys)),
        _rows([0, 0, 100, 100]),
        _rows([0, 0, 100, 100, 100]),
    ),
    Case(
        "max",
        lambda s, keys: s.max("x", epsilon=EPS, bounds=BOUNDS, grid_size=21, **_by(keys)),
        _rows([0, 0]),
        _rows([0, 0, 100]),
    ),
    Case(
        "mode",
        lambda s, keys: s.mode("g", epsilon=EPS, domain=["a", "b"], **_by(keys)),
        _rows([0, 0, 0, 0], ["a", "a", "b", "b"]),
        _rows([0, 0, 0, 0, 0], ["a", "a", "b", "b", "b"]),
        sample=lambda label: float(label == "b"),
    ),
    Case(
        "histogram",
        lambda s, keys: s.histogram("x", epsilon=EPS, bins=4, bounds=BOUNDS, **_by(keys)),
        _rows([10, 60]),
        _rows([10, 60, 90]),
        sample=lambda counts: float(counts[3]),
    ),
    Case(
        "histogram-hierarchical",
        lambda s, keys: s.histogram(
            "x",
            epsilon=EPS,
            bins=4,
            bounds=BOUNDS,
            method="hierarchical",
            **_by(keys),
        ),
        _rows([10, 60]),
        _rows([10, 60, 90]),
        sample=lambda counts: float(counts[3]),
    ),
]

PRIVATE_KEYS = Case(
    # Every group is a lone person who is absent from the table: each group's key
    # is released (with its noisy count) only through the noisy threshold.
    "count-private-keys",
    lambda s, keys: s.count(epsilon=EPS, group_by="key", keys="private", delta=DELTA),
    [],
    _rows([1]),
    delta=DELTA,
    broken="threshold",
)


def _samples(case: Case, rows: list[Row], m: int, seed: int) -> np.ndarray:
    keys = _keys(m)
    if rows:
        frame = _copies(rows, m)
    else:  # the table must not be empty: one row under a key that is never audited
        frame = pd.DataFrame({"x": [0.0], "g": ["a"], "key": ["other"], "pid": [0]})
    s = Session.from_pandas(frame, types=types_of(frame), epsilon=1e6, delta=0.5, rng=seed)
    r = case.call(s, keys)
    missing = -1e9  # a key that was not released (private keys)
    return np.array([case.sample(r.value[k]) if k in r.value else missing for k in keys])


def _audit(case: Case, m: int, seed: int) -> AuditResult:
    a = _samples(case, case.table, m, seed)
    b = _samples(case, case.neighbour, m, seed + 1)
    return audit_samples(a, b, epsilon=EPS, delta=case.delta, confidence=0.99)


def _broken(case: Case, monkeypatch: pytest.MonkeyPatch) -> Any:
    return _low_threshold(monkeypatch) if case.broken == "threshold" else _more_epsilon(monkeypatch)


ALL = [*CASES, PRIVATE_KEYS]


@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
def test_fast_audit(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    honest = _audit(case, FAST_KEYS, seed=11)
    assert honest.passed, f"empirical ε ≥ {honest.epsilon_lower_bound:.3f} > claimed {EPS}"
    with _broken(case, monkeypatch):
        broken = _audit(case, FAST_KEYS, seed=11)
    assert not broken.passed, (
        f"the audit missed a broken {case.id}: lower bound {broken.epsilon_lower_bound:.3f}"
    )


# ----------------------------------------------------------------------- people (class 2)


def _people_copies(people: list[tuple[int, float, str]], m: int) -> pd.DataFrame:
    """``m`` copies of (pid, x, g) rows under keys k000000..; person ids made unique per copy."""
    frame = pd.DataFrame(people * m, columns=["pid", "x", "g"])
    copy = np.repeat(np.arange(m), len(people))
    frame["pid"] = frame["pid"] + 1_000_000 * copy
    frame["key"] = [f"k{i:06d}" for i in copy]
    return frame


def _two_queries(
    frame: pd.DataFrame, m: int, seed: int, combine: Callable[[float, float], float], **opts: Any
) -> np.ndarray:
    """Two grouped sums (ε/2 each; the second filtered to g == 'a'); a sample per key."""
    keys = _keys(m)
    s = Session.from_pandas(frame, types=types_of(frame), epsilon=1e6, rng=seed, **opts)
    a, b = s.run(
        [
            Query("sum", "x", epsilon=EPS / 2, bounds=BOUNDS, **_by(keys)),
            Query(
                "sum",
                "x",
                epsilon=EPS / 2,
                bounds=BOUNDS,
                where={"g": "a"},
                **_by(keys),
            ),
        ]
    )
    return np.array([combine(a.value[k], b.value[k]) for k in keys])


#: A heavy person (8 rows at the top of the bounds) among three light ones.
_LIGHT = [(1, 10.0, "a"), (2, 20.0, "a"), (3, 30.0, "b")]
_HEAVY = [(9, 100.0, "a")] * 8
UNIT = {"privacy_unit": "pid", "max_contributions": 2}


def _contribution_audit(m: int, seed: int, **opts: Any) -> AuditResult:
    base = _people_copies(_LIGHT, m)
    neighbour = _people_copies(_HEAVY[:4] + _LIGHT + _HEAVY[4:], m)
    total = lambda a, b: a + b  # noqa: E731 - post-processing of the pair
    return audit_samples(
        _two_queries(base, m, seed, total, **opts),
        _two_queries(neighbour, m, seed + 1, total, **opts),
        epsilon=EPS,
    )


def test_contribution_bounding_audit_two_queries() -> None:
    """A person with 8 rows, k = 2: two ε/2 queries together stay within ε; unbounded, they do not."""
    honest = _contribution_audit(FAST_KEYS, 5, **UNIT)
    assert honest.passed, f"empirical ε ≥ {honest.epsilon_lower_bound:.3f}"
    broken = _contribution_audit(FAST_KEYS, 5)  # rows taken for people: no contribution bound
    assert not broken.passed


@contextmanager
def _positional_bounding(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The bug of issue 11 class 2: keep rows by row position, with one salt for every query."""
    from dpkit.tables.engines import _sql

    real = _sql.base_query

    def by_position(*args: Any, **kw: Any) -> str:
        sql = real(*args, **kw)
        start = sql.find(f"hash({_sql.ROW}, ")
        if start < 0:
            return sql
        end = sql.index(")", start)
        return sql[:start] + "hash(row_number() OVER (), 12345" + sql[end:]

    with monkeypatch.context() as m:
        m.setattr(_sql, "base_query", by_position)
        yield


def _position_audit(m: int, seed: int, people: int = 200) -> AuditResult:
    # In every group, ``people`` persons have one row at 0 and one at 100 (k = 1 keeps
    # one). The neighbour adds person Q before them, whom the second query filters out.
    # With positional bounding and one salt, the two sums pick the same rows on the
    # table (their difference is noise alone) but different rows on the neighbour.
    rows = [(j, x, "a") for j in range(people) for x in (0.0, 100.0)]
    base = _people_copies(rows, m)
    neighbour = _people_copies([(999_999, 0.0, "b"), *rows], m)
    diff = lambda a, b: a - b  # noqa: E731 - post-processing of the pair
    opts = {"privacy_unit": "pid", "max_contributions": 1}
    return audit_samples(
        _two_queries(base, m, seed, diff, **opts),
        _two_queries(neighbour, m, seed + 1, diff, **opts),
        epsilon=EPS,
    )


def test_which_rows_are_kept_does_not_depend_on_other_people_audit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 11 class 2 as an audit: another person's rows must not change which rows are kept."""
    honest = _position_audit(POSITION_KEYS, 7)
    assert honest.passed, f"empirical ε ≥ {honest.epsilon_lower_bound:.3f}"
    with _positional_bounding(monkeypatch):
        broken = _position_audit(POSITION_KEYS, 7)
    assert not broken.passed


def _ungrouped_position_audit(runs: int, seed: int, people: int = 200) -> AuditResult:
    """:func:`_position_audit` without grouping: the per-person aggregate (``min_by``) path."""
    rows = [(j, x, "a") for j in range(people) for x in (0.0, 100.0)]
    base = pd.DataFrame(rows, columns=["pid", "x", "g"])
    neighbour = pd.DataFrame([(999_999, 0.0, "b"), *rows], columns=["pid", "x", "g"])
    opts = {"privacy_unit": "pid", "max_contributions": 1}

    def samples(frame: pd.DataFrame, rng: int) -> np.ndarray:
        s = Session.from_pandas(frame, types=types_of(frame), epsilon=1e9, rng=rng, **opts)
        out = np.empty(runs)
        for i in range(runs):
            a, b = s.run(
                [
                    Query("sum", "x", epsilon=EPS / 2, bounds=BOUNDS),
                    Query("sum", "x", epsilon=EPS / 2, bounds=BOUNDS, where={"g": "a"}),
                ]
            )
            out[i] = a.value - b.value
        return out

    return audit_samples(samples(base, seed), samples(neighbour, seed + 1), epsilon=EPS)


@pytest.mark.audit
def test_ungrouped_row_choice_does_not_depend_on_other_people_audit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ungrouped plan ranks a person's rows by a hash aggregate: audited as the window is.

    (The default run checks instead that the aggregate keeps the window's rows:
    ``test_bounding_parts.py``; this audit takes minutes, one session query per sample.)
    """
    honest = _ungrouped_position_audit(300, 11)
    assert honest.passed, f"empirical ε ≥ {honest.epsilon_lower_bound:.3f}"
    with _positional_bounding(monkeypatch):
        broken = _ungrouped_position_audit(300, 11)
    assert not broken.passed


# ----------------------------------------------------------------------- full set (make audit)


@pytest.mark.audit
@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
def test_full_audit_grouped(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    honest = _audit(case, FULL_KEYS, seed=101)
    print(f"{case.id}: ε lower bound {honest.epsilon_lower_bound:.3f} (claimed {EPS})")
    assert honest.passed
    with _broken(case, monkeypatch):
        assert not _audit(case, FULL_KEYS, seed=101).passed


def _ungrouped_samples(case: Case, rows: list[Row], runs: int, seed: int) -> np.ndarray:
    """The same query without group_by, once per run on one session (the ungrouped code path)."""
    frame = pd.DataFrame(rows)
    frame["key"] = "k000000"
    s = Session.from_pandas(frame, types=types_of(frame), epsilon=1e9, delta=0.5, rng=seed)
    out = np.empty(runs)
    for i in range(runs):
        out[i] = case.sample(case.call(s, None).value)
    return out


@pytest.mark.audit
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_full_audit_query_by_query(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    a = _ungrouped_samples(case, case.table, FULL_RUNS, 201)
    b = _ungrouped_samples(case, case.neighbour, FULL_RUNS, 202)
    honest = audit_samples(a, b, epsilon=EPS)
    print(f"{case.id}: ε lower bound {honest.epsilon_lower_bound:.3f} (claimed {EPS})")
    assert honest.passed
    with _broken(case, monkeypatch):
        a = _ungrouped_samples(case, case.table, FULL_RUNS, 201)
        b = _ungrouped_samples(case, case.neighbour, FULL_RUNS, 202)
    assert not audit_samples(a, b, epsilon=EPS).passed


@pytest.mark.audit
def test_full_contribution_bounding_audits(monkeypatch: pytest.MonkeyPatch) -> None:
    honest = _contribution_audit(FULL_KEYS, 301, **UNIT)
    print(f"contribution bounding: ε lower bound {honest.epsilon_lower_bound:.3f}")
    assert honest.passed
    assert not _contribution_audit(FULL_KEYS, 301).passed
    position = _position_audit(4 * POSITION_KEYS, 303)
    print(f"row choice vs other people: ε lower bound {position.epsilon_lower_bound:.3f}")
    assert position.passed
    with _positional_bounding(monkeypatch):
        assert not _position_audit(4 * POSITION_KEYS, 303).passed
