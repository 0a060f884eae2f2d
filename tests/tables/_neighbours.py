"""Neighbouring tables and transcripts: what an analyst sees, minus the noisy values.

A *transcript* of a call on a :class:`~dpkit.tables.Session` is everything the
adversary of ``docs/threat-model.md`` reads: the exception (type and message)
or the result's type, its public fields (ε, δ, level, mechanism, remaining, privacy,
the ``details`` that must not depend on data), the CI's half-width for
additive mechanisms, the warnings, and the ledger (labels and costs). On two
neighbouring tables with the noise seeded alike, transcripts must be equal.

Which ``details`` are noisy is decided here, once, and documented in
:data:`NOISY_DETAILS` and :func:`public_details`.

The tables have one column per column type the engines distinguish (numeric
float and integer, numeric-looking text, boolean, date, timestamp, a group
column) and are generated with hypothesis; the *person* that makes the
neighbour is drawn with hostile values (NaN, None, ±inf, 1e308, 2**80,
strings in the numeric-looking column, years 1 and 9999, NaT, a brand-new
group, many rows) inserted at any position.
"""

from __future__ import annotations

import datetime as dt
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import strategies as st

from dpkit.release import Release
from dpkit.tables import Session
from dpkit.tables.results import GroupedRelease

COLUMNS = ("pid", "x", "cnt", "t", "flag", "day", "ts", "g")
GROUPS = ("a", "b", "c")
NEW_GROUP = "zz-new"
#: The public schema every transcript session declares (text column ``t`` is read as numbers).
SCHEMA: dict[str, Any] = {
    "columns": {
        "t": {"coerce": True},
        "g": {"domain": list(GROUPS)},
    }
}
#: DuckDB types the data owner declares for the CSV engine (nothing sniffed).
CSV_TYPES = {
    "pid": "BIGINT",
    "x": "DOUBLE",
    "cnt": "BIGINT",
    "t": "VARCHAR",
    "flag": "BOOLEAN",
    "day": "DATE",
    "ts": "TIMESTAMP",
    "g": "VARCHAR",
}

Row = dict[str, Any]

# ---------------------------------------------------------------- generation

_ordinary_x = st.floats(0, 100, allow_nan=False).map(lambda v: round(v, 2))
_hostile_x = st.sampled_from(
    [math.nan, None, math.inf, -math.inf, 1e308, -1e308, float(2**80), -0.0, 5e-324]
)
_ordinary_t = st.floats(0, 100, allow_nan=False).map(lambda v: f"{v:.1f}")
_hostile_t = st.sampled_from(
    ["abc", "", None, "1e308", str(2**80), "nan", "inf", "-inf", " 12 ", "1,5", "NULL"]
)
_ordinary_day = st.dates(dt.date(1990, 1, 1), dt.date(2030, 12, 31))
_hostile_day = st.sampled_from([dt.date(1, 1, 1), dt.date(9999, 12, 31), None])
_ordinary_ts = st.datetimes(dt.datetime(1990, 1, 1), dt.datetime(2030, 12, 31))
_hostile_ts = st.sampled_from([dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59), None])


def _row(hostile: bool) -> st.SearchStrategy[Row]:
    def pick(ordinary: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> Any:
        return st.one_of(bad, ordinary) if hostile else ordinary

    return st.fixed_dictionaries(
        {
            "x": pick(_ordinary_x, _hostile_x),
            "cnt": pick(
                st.integers(0, 50), st.sampled_from([2**62, -(2**62), 2**63 - 1, -(2**63)])
            ),
            "t": pick(_ordinary_t, _hostile_t),
            "flag": pick(st.booleans(), st.none()),
            "day": pick(_ordinary_day, _hostile_day),
            "ts": pick(_ordinary_ts, _hostile_ts),
            "g": pick(st.sampled_from(GROUPS), st.sampled_from([NEW_GROUP, None, "A", "a "])),
        }
    )


def _person(pid: int, rows: list[Row]) -> list[Row]:
    return [{"pid": pid, **r} for r in rows]


@dataclass(frozen=True)
class Pair:
    """A table and its neighbour: ``bigger`` is ``smaller`` plus one person's rows."""

    smaller: list[Row]
    bigger: list[Row]
    person_rows: int


@st.composite
def neighbours(draw: st.DrawFn, *, max_rows_per_person: int = 1, min_people: int = 3) -> Pair:
    """A table of ordinary-ish people and the same table with one hostile person added.

    ``max_rows_per_person`` > 1 gives people several rows (for ``privacy_unit``
    sessions); the added person may then have many rows. The added rows go
    in at a random position, one block or scattered.
    """
    n_people = draw(st.integers(min_people, 12))
    rows: list[Row] = []
    for pid in range(n_people):
        k = draw(st.integers(1, max_rows_per_person))
        rows += _person(pid, draw(st.lists(_row(hostile=False), min_size=k, max_size=k)))
    k_new = draw(st.integers(1, max(1, 3 * max_rows_per_person)))
    k_new = 1 if max_rows_per_person == 1 else k_new
    new_pid = draw(st.sampled_from([n_people, 10**6, -1]))
    newcomer = _person(new_pid, draw(st.lists(_row(hostile=True), min_size=k_new, max_size=k_new)))
    bigger = list(rows)
    for r in newcomer:
        bigger.insert(draw(st.integers(0, len(bigger))), r)
    return Pair(smaller=rows, bigger=bigger, person_rows=k_new)


def frame(rows: list[Row]) -> pd.DataFrame:
    """The rows as a DataFrame whose dtypes are fixed by the schema, never by the values."""
    col = {c: [r[c] for r in rows] for c in COLUMNS}
    return pd.DataFrame(
        {
            "pid": pd.array(col["pid"], dtype="int64"),
            "x": pd.array([math.nan if v is None else v for v in col["x"]], dtype="float64"),
            "cnt": pd.array(col["cnt"], dtype="int64"),
            "t": pd.array(col["t"], dtype=pd.ArrowDtype(pa.string())),
            "flag": pd.array(col["flag"], dtype="boolean"),
            "day": pd.array(col["day"], dtype=pd.ArrowDtype(pa.date32())),
            "ts": pd.array(col["ts"], dtype=pd.ArrowDtype(pa.timestamp("us"))),
            "g": pd.array(col["g"], dtype=pd.ArrowDtype(pa.string())),
        }
    )


def write_csv(rows: list[Row], path: Any) -> None:
    """Write rows as CSV: missing values as empty fields, floats in full precision."""

    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dt.datetime):
            return v.strftime("%Y-%m-%d %H:%M:%S").rjust(19, "0")
        if isinstance(v, dt.date):
            return f"{v.year:04d}-{v.month:02d}-{v.day:02d}"
        s = str(v)
        return '"' + s.replace('"', '""') + '"' if ("," in s or '"' in s or s == "") else s

    lines = [",".join(COLUMNS)] + [",".join(cell(r[c]) for c in COLUMNS) for r in rows]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


# ---------------------------------------------------------------- transcripts

#: ``details`` entries that are noisy by design (they are releases themselves).
NOISY_DETAILS = frozenset({"noisy_count", "published"})
#: With ``bounds="private"`` the bounds are a release, and so is everything scaled by them.
PRIVATE_BOUNDS_NOISY = frozenset({"bounds", "bounds_found", "scale", "half_width"})
#: The fallback warning of ``bounds="private"`` follows the noisy histogram (post-processing).
PRIVATE_BOUNDS_WARNING = "bounds='private' found no coarse bin"
#: With private keys, how many groups passed the threshold is a release.
PRIVATE_KEYS_NOISY = frozenset({"groups"})


@dataclass(frozen=True)
class Options:
    """What of a query's output is noisy, besides the values themselves."""

    private_bounds: bool = False
    private_keys: bool = False
    additive: bool = False  # ci = value ± (public half-width), so hi - value is public


def public_details(details: dict[str, Any], opts: Options) -> dict[str, Any]:
    """``details`` with the noisy entries removed (and arrays made comparable)."""
    drop = set(NOISY_DETAILS)
    if opts.private_bounds:
        drop |= PRIVATE_BOUNDS_NOISY
    if opts.private_keys:
        drop |= PRIVATE_KEYS_NOISY
    out: dict[str, Any] = {}
    for key, v in details.items():
        if key in drop:
            out[key] = "<noisy>"
        else:
            out[key] = _comparable(v)
    return out


def _comparable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tolist())
    if isinstance(v, dict):
        return {k: _comparable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return type(v).__name__, [_comparable(x) for x in v]
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return v


def _value_shape(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape)
    return type(v).__name__


def additive_interval(value: Any, ci: Any, half_width: Any) -> Any:
    """What is public about an additive interval: that it follows from the value and ``h``.

    An additive release of a noisy ``x`` is ``value = x`` with ``ci = x ± h``,
    or, for counts (never negative, issue 28), ``value = max(x, 0)`` with
    ``ci = (max(x - h, 0), max(x + h, 0))``. Both are functions of the noisy
    value and the public ``h`` (``details["half_width"]``, compared on its
    own). If every element follows that rule the view is the rule and ``h``;
    otherwise it is the raw ``hi - value`` (which then differs between
    neighbours whenever the interval carries information about the data).
    """
    if ci is None:
        return None
    v = np.asarray(value, dtype=np.float64)
    lo = np.asarray(ci[0], dtype=np.float64)
    hi = np.asarray(ci[1], dtype=np.float64)
    if isinstance(half_width, int | float) and math.isfinite(half_width):
        h = float(half_width)

        def close(a: Any, b: Any) -> Any:
            return np.isclose(a, b, rtol=1e-12, atol=1e-9)

        plain = close(hi - v, h) & (close(lo, v - h) | close(lo, np.maximum(v - h, 0.0)))
        at_zero = (v == 0) & (lo == 0) & (hi >= 0) & (hi < h)
        if bool(np.all(plain | at_zero)):
            return ("value ± half_width, within the statistic's range", round(h, 9))
    return np.round(hi - v, 9).tolist()


def _release_view(r: Any, opts: Options) -> dict[str, Any]:
    view: dict[str, Any] = {
        "type": type(r).__name__,
        "epsilon": r.epsilon,
        "delta": r.delta,
        "level": r.level,
        "mechanism": r.mechanism,
        "remaining": r.remaining,
        "privacy": r.privacy,  # the whole report: a function of public input only
        "details": public_details(r.details, opts),
    }
    h = r.details.get("half_width")
    if isinstance(r, GroupedRelease):
        view["group_by"] = r.group_by
        view["keys"] = "<noisy>" if opts.private_keys else r.keys
        if not opts.private_keys:
            view["values"] = {k: _value_shape(r.value[k]) for k in r.keys}
            view["ci_none"] = {k: r.ci[k] is None for k in r.keys}
            if opts.additive and not opts.private_bounds:
                view["ci_half_width"] = {
                    k: additive_interval(r.value[k], r.ci[k], h) for k in r.keys
                }
        else:
            # Released keys differ only through noise; what is public about each must not
            # depend on the key or the data (checked when both sides released some key).
            per_key = set()
            for k in r.keys:
                width = None
                if opts.additive and not opts.private_bounds:
                    width = additive_interval(r.value[k], r.ci[k], h)
                per_key.add(repr((width, _value_shape(r.value[k]), r.ci[k] is None)))
            view["per_key_public"] = sorted(per_key)
    elif isinstance(r, Release):
        view["value"] = _value_shape(r.value)
        view["ci_none"] = r.ci is None
        if opts.additive and not opts.private_bounds:
            view["ci_half_width"] = additive_interval(r.value, r.ci, h)
    return view


@dataclass
class Transcript:
    error: tuple[str, str] | None
    warnings: list[tuple[str, str]]
    result: Any
    ledger: list[tuple[str, Any, Any]]
    remaining: Any


def record(session: Session, call: Callable[[Session], Any], opts: Options) -> Transcript:
    """Run ``call(session)`` and keep what the analyst sees, minus the noisy values."""
    error = None
    result: Any = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = call(session)
        except Exception as e:  # the transcript compares exceptions, whatever they are
            error = (type(e).__name__, str(e))
        else:
            if isinstance(out, list):
                result = [_release_view(r, opts) for r in out]
            else:
                result = _release_view(out, opts)
    seen = [(w.category.__name__, str(w.message)) for w in caught]
    if opts.private_bounds:
        seen = [w for w in seen if not w[1].startswith(PRIVATE_BOUNDS_WARNING)]
    return Transcript(
        error=error,
        warnings=seen,
        result=result,
        ledger=[(c.label, c.cost, c.scopes) for c in session.accountant.history],
        remaining=session.remaining,
    )


def assert_same(a: Transcript, b: Transcript) -> None:
    """Field by field, so a failure says which field leaked."""
    assert a.error == b.error, "exception differs between neighbours"
    assert a.warnings == b.warnings, "warnings differ between neighbours"
    assert a.ledger == b.ledger, "ledger differs between neighbours"
    assert a.remaining == b.remaining, "remaining budget differs between neighbours"
    if isinstance(a.result, dict) and isinstance(b.result, dict):
        _same_view(a.result, b.result)
    elif isinstance(a.result, list) and isinstance(b.result, list):
        assert len(a.result) == len(b.result), "number of results differs"
        for x, y in zip(a.result, b.result):
            _same_view(x, y)
    else:
        assert a.result == b.result, "result differs between neighbours"


def _same_view(a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if key == "per_key_public":
            assert len(x) <= 1 and len(y) <= 1, "per-key public fields vary between keys"
            if x and y:
                assert x == y, "per-key public fields differ between neighbours"
            continue
        assert x == y, f"result field {key!r} differs: {x!r} != {y!r}"
