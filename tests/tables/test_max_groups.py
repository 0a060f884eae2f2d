"""``max_groups``: a person's rows in at most G groups, k in each — ℓ2 sensitivity k·√G, not k·G.

* **the rule, on the engine** (hypothesis, small random tables): removing one
  person P changes the per-group counts by exactly P's kept rows — at most
  ``k`` in each of ``min(G, P's groups)`` groups, ``min(k, P's rows there)``
  in each kept one — so every other person's kept rows are the same on both
  tables (the pure-Python reference of the rule is :func:`_allowed`). Group
  keys include spellings that collations would merge and -0.0 next to 0.0:
  the groups the rule counts are the groups the engine groups by.
* **sensitivity**: hence the count vector moves by at most ``k·√G`` in ℓ2.
* **calibration**: a grouped Gaussian count with ``max_groups=4, k=1`` has
  σ = 2/ε (not 4/ε); Laplace scales by ``k·G``; no ``max_groups``: the SQL
  and the releases are today's.
* **refusals** before any charge, and **transcripts** on hostile neighbours.

The Spark version of the rule is in ``test_spark.py``-style tests marked ``spark``.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.tables._neighbours import Pair, neighbours
from tests.tables.test_gaussian_transcripts import (
    GAUSSIAN_CASES,
    GAUSSIAN_UNIT_CASES,
    _compare_sequence,
)
from tests.tables.test_gaussian_transcripts import _pandas as _gaussian_pandas
from tests.tables.test_transcripts import UNIT_CASES, _compare_all, _pandas_session

from dpkit.errors import InvalidParameterError, PrivacyWarning
from dpkit.tables import Session
from dpkit.tables.engines import _sql
from dpkit.tables.engines.base import Condition, Contribution, Rows, Value
from dpkit.tables.engines.duckdb_engine import DuckDBEngine, connect

SETTINGS = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

#: Text keys that case folding, accents or Unicode normalisation would merge; all distinct here.
TEXT_KEYS = ["a", "A", "é", "e\u0301", "ß", "ss", "a "]
#: Numeric keys with -0.0 beside 0.0 (one group in both engines).
NUMBER_KEYS = [0.0, -0.0, 1.0, 2.5, -3.0]

# --------------------------------------------------------------------- the rule


@st.composite
def tables(draw: st.DrawFn) -> tuple[pd.DataFrame, int, int, int]:
    """(rows of pid, a text key, a number key; k; G; salt)."""
    n = draw(st.integers(1, 40))
    pid = draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    text = draw(st.lists(st.sampled_from(TEXT_KEYS), min_size=n, max_size=n))
    number = draw(st.lists(st.sampled_from(NUMBER_KEYS), min_size=n, max_size=n))
    frame = pd.DataFrame({"pid": pid, "g": text, "h": number, "rowid": range(n)})
    return frame, draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(0, 2**62))


def _duckdb(frame: pd.DataFrame) -> DuckDBEngine:
    con = connect()
    con.register("src", frame)
    con.execute(
        "CREATE TABLE t AS SELECT pid::BIGINT AS pid, g::VARCHAR AS g, h::DOUBLE AS h, "
        "rowid::BIGINT AS rowid FROM src"
    )
    return DuckDBEngine(con, "t")


def _key(value: Any) -> Any:
    """A group key as dpkit (and both engines) group it: -0.0 is 0.0."""
    return value + 0.0 if isinstance(value, float) else value


def _counts(engine: Any, rows: Rows, group: str) -> Counter[Any]:
    value = Value(group, numeric=group == "h")
    frame = engine.moments(rows, None, [value])
    return Counter({_key(g): int(n) for g, n in zip(frame["_g0"], frame["n"])})


def _allowed(
    frame: pd.DataFrame, person: int, group: str, k: int, g: int
) -> tuple[int, dict[Any, int]]:
    """The reference: how many groups the person keeps, and the rows kept in each if kept."""
    mine = Counter(_key(v) for v in frame.loc[frame["pid"] == person, group])
    return min(g, len(mine)), {key: min(k, n) for key, n in mine.items()}


def check_rule(engine_of: Any, frame: pd.DataFrame, k: int, g: int, salt: int) -> None:
    """Removing each person changes the counts by exactly their kept rows (the rule's shape)."""
    bound = Contribution("pid", k, salt, max_groups=g)
    engine = engine_of(frame)
    for group in ("g", "h"):
        full = _counts(engine, Rows(contribution=bound), group)
        for person in sorted(set(frame["pid"])):
            # the filter applies before the bound: the table without P's rows
            rest = Rows(where=(Condition("pid", "!=", int(person)),), contribution=bound)
            without = _counts(engine, rest, group)
            diff = {key: full[key] - without[key] for key in set(full) | set(without)}
            changed = {key: d for key, d in diff.items() if d}
            n_groups, per_group = _allowed(frame, person, group, k, g)
            assert len(changed) == n_groups, (group, person, changed, per_group)
            for key, d in changed.items():
                assert d == per_group[key], (group, person, key, d, per_group)
            # the sensitivity this gives Gaussian noise: ℓ2 <= k·√G (and ℓ1 <= k·G)
            assert math.sqrt(sum(d * d for d in changed.values())) <= k * math.sqrt(g) + 1e-12
            assert sum(changed.values()) <= k * g


@SETTINGS
@given(case=tables())
def test_duckdb_keeps_k_rows_in_each_of_g_groups_per_person(
    case: tuple[pd.DataFrame, int, int, int],
) -> None:
    frame, k, g, salt = case
    check_rule(_duckdb, frame, k, g, salt)


def test_the_rule_check_fails_on_a_rule_without_the_group_bound() -> None:
    """The property can fail: today's bound (k rows per person, any groups) breaks it."""
    frame = pd.DataFrame(
        {"pid": [0] * 6 + [1], "g": [*"abcdef", "a"], "h": [float(i) for i in range(7)],
         "rowid": range(7)}
    )  # fmt: skip

    class NoGroupBound:
        def __init__(self, table: pd.DataFrame) -> None:
            self.engine = _duckdb(table)

        def moments(self, rows: Rows, value: Any, group_by: Any) -> pd.DataFrame:
            assert rows.contribution is not None
            old = Rows(rows.where, Contribution("pid", 3, rows.contribution.salt))
            return self.engine.moments(old, value, group_by)

    with pytest.raises(AssertionError):
        check_rule(NoGroupBound, frame, 1, 2, 7)


def test_the_group_rank_hashes_the_key_the_engine_groups_by() -> None:
    """Collation-merged spellings are distinct groups, -0.0 and 0.0 one group, in the bound too."""
    frame = pd.DataFrame(
        {"pid": [0] * 6, "g": ["a", "A", "é", "e\u0301", "a", "A"],
         "h": [0.0, -0.0, 0.0, -0.0, 0.0, -0.0], "rowid": range(6)}
    )  # fmt: skip
    for salt in range(8):
        check_rule(_duckdb, frame, 1, 2, salt)  # "h": one group of 1 row kept; "g": 2 groups
        check_rule(_duckdb, frame, 6, 1, salt)  # "h": all 6 rows in the one group


def test_without_max_groups_the_sql_is_todays() -> None:
    """No ``max_groups`` (or an ungrouped pass): the bound's SQL is exactly the old one."""
    old = "row_number() OVER (PARTITION BY __dpkit_pid ORDER BY __dpkit_pos) <= 2"
    assert _sql.bounded(Contribution("pid", 2, 5), ["_g0"]) == old
    assert _sql.bounded(Contribution("pid", 2, 5, max_groups=3), []) == old
    rows = Rows(contribution=Contribution("pid", 2, 5))
    sql = _sql.base_query(rows, None, [Value("g", numeric=False)], '"t"')
    assert sql.endswith(f"QUALIFY {old}")


# --------------------------------------------------------------------- sessions


KEYS = [f"k{i}" for i in range(8)]


def _people(n: int = 400, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "pid": rng.integers(0, 60, n),
            "g": rng.choice(KEYS, n),
            "x": rng.random(n),
        }
    )


TYPES = {"pid": "BIGINT", "g": "VARCHAR", "x": "DOUBLE"}
SCHEMA = {"columns": {"g": {"domain": KEYS}}}


def _session(frame: pd.DataFrame | None = None, **options: Any) -> Session:
    options.setdefault("epsilon", 100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Session.from_pandas(
            _people() if frame is None else frame, types=TYPES, schema=SCHEMA, rng=3, **options
        )


GAUSSIAN = {"accountant": "rdp", "noise": "gaussian", "delta": 1e-6}


def test_a_grouped_gaussian_count_with_four_groups_has_sigma_two_over_epsilon() -> None:
    s = _session(privacy_unit="pid", max_groups=4, **GAUSSIAN)
    r = s.count(group_by="g", epsilon=1.0)
    assert r.mechanism == "discrete_gaussian"
    assert r.details["sigma"] == 2.0  # k·√G/ε = 1·2/1, not k·G/ε = 4
    r = s.count(group_by="g", epsilon=0.5)
    assert r.details["sigma"] == 4.0
    # an ungrouped query is one group: σ = k/ε
    assert s.count(epsilon=1.0).details["sigma"] == 1.0
    # k = 2, G = 9: ℓ2 = 2·3 = 6
    s = _session(privacy_unit="pid", max_contributions=2, max_groups=9, **GAUSSIAN)
    assert s.count(group_by="g", epsilon=1.0).details["sigma"] == 6.0


def test_a_grouped_gaussian_sum_uses_root_g_too() -> None:
    base = _session(privacy_unit="pid", **GAUSSIAN).sum(
        "x", bounds=(0, 1), group_by="g", epsilon=1.0
    )
    s = _session(privacy_unit="pid", max_groups=4, **GAUSSIAN)
    r = s.sum("x", bounds=(0, 1), group_by="g", epsilon=1.0)
    assert r.details["sigma"] == pytest.approx(2 * base.details["sigma"], rel=1e-12)
    # and the charge is the declared ρ = ε²/2 whatever G: the noise grew, not the cost
    assert r.privacy.rho == base.privacy.rho == 0.5


def test_laplace_scales_by_k_times_g_and_is_unchanged_without_max_groups() -> None:
    r = _session(privacy_unit="pid", max_contributions=2, max_groups=3).count(
        group_by="g", epsilon=1.0
    )
    assert r.mechanism == "geometric" and r.details["scale"] == 6.0
    a = _session(privacy_unit="pid", max_contributions=2).count(group_by="g", epsilon=1.0)
    b = _session(privacy_unit="pid", max_contributions=2, max_groups=None).count(
        group_by="g", epsilon=1.0
    )
    assert a.value == b.value and a.details == b.details and a.details["scale"] == 2.0
    # ungrouped queries ignore max_groups: the same rows, the same noise draws
    c = _session(privacy_unit="pid", max_contributions=2, max_groups=3).sum(
        "x", bounds=(0, 1), epsilon=1.0
    )
    d = _session(privacy_unit="pid", max_contributions=2).sum("x", bounds=(0, 1), epsilon=1.0)
    assert (c.value, c.ci, c.details) == (d.value, d.ci, d.details)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_groups": 2}, "max_groups needs privacy_unit"),
        ({"privacy_unit": "pid", "max_groups": 0}, "max_groups must be None or an integer"),
        ({"privacy_unit": "pid", "max_groups": -1}, "max_groups must be None or an integer"),
        ({"privacy_unit": "pid", "max_groups": 1.5}, "max_groups must be None or an integer"),
        ({"privacy_unit": "pid", "max_groups": True}, "max_groups must be None or an integer"),
        ({"privacy_unit": "pid", "max_groups": "2"}, "max_groups must be None or an integer"),
        ({"privacy_unit": "pid", "max_groups": 2**40}, "max_groups must be None or an integer"),
    ],
)
def test_bad_max_groups_are_refused_when_the_session_opens(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        _session(**options)


def test_a_query_whose_epsilon_per_row_is_too_small_is_refused_before_the_charge() -> None:
    s = _session(privacy_unit="pid", max_groups=2**31)
    with pytest.raises(InvalidParameterError, match="max_contributions \\* max_groups"):
        s.count(group_by="g", epsilon=1e-3)
    assert s.accountant.spent.epsilon == 0


# --------------------------------------------------------------------- transcripts

_TRANSCRIPTS = settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_TRANSCRIPTS
@given(pair=neighbours(max_rows_per_person=4))
def test_laplace_transcripts_with_max_groups(pair: Pair) -> None:
    _compare_all(
        lambda rows: _pandas_session(rows, privacy_unit="pid", max_contributions=2, max_groups=2),
        UNIT_CASES,
        pair,
    )


@settings(_TRANSCRIPTS, max_examples=2)
@given(pair=neighbours(max_rows_per_person=4))
def test_gaussian_transcripts_with_max_groups(pair: Pair) -> None:
    make = _gaussian_pandas(
        "rdp", "gaussian", privacy_unit="pid", max_contributions=1, max_groups=2
    )
    _compare_sequence(make, GAUSSIAN_UNIT_CASES + GAUSSIAN_CASES, pair)
