"""Public literals read as values of the declared column type — in Python, before any charge.

Filter literals, group keys and domains are chosen by the analyst, so they are
public; but the *engine* must never be left to cast them, because a cast that
fails only when some row reaches it is a membership oracle. So every literal
is parsed here against the column's declared kind and storage type, and the
engine receives typed literals it can compare without converting data:

* numeric columns take ints (|v| < 2**63) and finite floats, never strings or
  booleans;
* text columns take strings; boolean columns take booleans;
* DATE and TIMESTAMP columns take dates, naive datetimes or ISO-8601 strings,
  all read as a :class:`datetime.datetime` (a date is its midnight), so that
  ``'2020-01-01'``, ``date(2020, 1, 1)`` and ``datetime(2020, 1, 1)`` are
  one and the same value — also for deciding disjointness in
  :class:`~dpkit.tables.Parallel`;
* other column types (TIME, INTERVAL, lists, ...) take no literal at all
  (``is null`` / ``not null`` filters still work).

``None`` and NaN are never values: missing entries are handled by the column's
null policy (declare ``nulls="replace"`` to group them under a replacement).
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

from dpkit.errors import InvalidParameterError
from dpkit.tables.engines.base import ColumnKind

__all__ = ["canonical", "from_engine", "temporal_type"]

_INT_LIMIT = 2**63


def temporal_type(type_name: str) -> bool:
    """True for DATE and TIMESTAMP storage types (the temporal types literals can target)."""
    t = type_name.upper()
    return t == "DATE" or (t.startswith("TIMESTAMP") and "TIME ZONE" not in t and "TZ" not in t)


def canonical(value: object, column: str, kind: ColumnKind, type_name: str, what: str) -> Any:
    """``value`` as a value of ``column``'s declared type, or an error naming the column.

    ``what`` names the role of the value in messages ("filter value", "key",
    "domain value"); messages name the expected type, never the value.
    """
    if hasattr(value, "item") and not hasattr(value, "__len__"):  # numpy scalars
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise InvalidParameterError(
            f"a {what} for column {column!r} is missing (None/NaN). Missing entries are not "
            "values: they follow the column's null policy (declare nulls='replace' with a "
            "replacement to count them under it), or filter them with ('is null',)."
        )
    if kind == "numeric":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _type_error(column, what, kind, "a number", value)
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidParameterError(f"a {what} for column {column!r} must be finite.")
        if isinstance(value, int) and not -_INT_LIMIT <= value < _INT_LIMIT:
            raise InvalidParameterError(
                f"a {what} for column {column!r} is an integer beyond 64 bits, which no stored "
                "number can equal; use a smaller value."
            )
        return value
    if kind == "text":
        if not isinstance(value, str):
            raise _type_error(column, what, kind, "a string", value)
        if "\x00" in value:
            raise InvalidParameterError(f"a {what} for column {column!r} contains a NUL character.")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise _type_error(column, what, kind, "True or False", value)
        return value
    if kind == "temporal" and temporal_type(type_name):
        return _datetime(value, column, what)
    raise InvalidParameterError(
        f"column {column!r} has type {type_name}, which takes no {what}s; filter it with "
        "('is null',) or ('not null',) only, or declare it with another type."
    )


def _datetime(value: object, column: str, what: str) -> _dt.datetime:
    if isinstance(value, str):
        try:
            parsed: _dt.date = _dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidParameterError(
                f"a {what} for date/time column {column!r} is a string that is not an ISO-8601 "
                "date or datetime (e.g. '2020-01-31' or '2020-01-31 08:00:00')."
            ) from None
        value = parsed
    if hasattr(value, "to_pydatetime"):  # pandas Timestamp
        if getattr(value, "nanosecond", 0):
            raise InvalidParameterError(
                f"a {what} for column {column!r} has nanoseconds, which dpkit does not compare; "
                "round it to microseconds."
            )
        value = value.to_pydatetime()
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            raise InvalidParameterError(
                f"a {what} for column {column!r} carries a time zone; give a naive datetime in "
                "the column's own time."
            )
        return value
    if isinstance(value, _dt.date):
        return _dt.datetime(value.year, value.month, value.day)
    raise _type_error(column, what, "date/time", "a date, datetime or ISO string", value)


def _type_error(
    column: str, what: str, kind: str, expected: str, value: object
) -> InvalidParameterError:
    return InvalidParameterError(
        f"a {what} for {kind} column {column!r} is a {type(value).__name__}; use {expected}."
    )


def from_engine(text: object) -> object:
    """A date/time value the engine returned as ISO text, as a ``datetime`` (never raises).

    Dates outside what Python represents (before year 1, after 9999, BC) stay
    text: they cannot equal any public key, and nothing after the charge may
    fail because of them.
    """
    if isinstance(text, str):
        try:
            return _dt.datetime.fromisoformat(text)
        except ValueError:
            return text
    return text
