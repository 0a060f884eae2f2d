"""Public literals read as values of the declared column type — in Python, before any charge.

Filter literals, group keys and domains are chosen by the analyst, so they are
public; but the *engine* must never be left to cast them, because a cast that
fails only when some row reaches it is a membership oracle. So every literal
is parsed here against the column's declared kind and storage type, and the
engine receives typed literals it can compare without converting data:

* numeric columns take ints and finite floats (never strings or booleans),
  read *as the declared storage type represents them* (:func:`numeric_type`),
  because that is how the engine compares them: an integer column takes ints
  in its range (an integral float is that int; a fractional one matches no
  integer and only bounds comparisons); a DOUBLE column takes ints only when
  they are exact doubles (2**60 + 1 is refused: DuckDB would compare it as
  2**60); a REAL/FLOAT column reads a value as its nearest float32; a
  DECIMAL(p, s) column takes values with at most ``s`` decimals and ``p - s``
  integer digits. So two literals are one value here exactly when they are one
  value to the engine, which renders each as ``CAST(literal AS <declared
  type>)`` (:func:`dpkit.tables.engines._sql.literal`) — the ground
  :class:`~dpkit.tables.Parallel` disjointness stands on;
* text columns take strings (valid Unicode: no lone surrogates, no NUL), and
  are compared by exact code points in every engine whatever collation the
  source declares ('é' and 'e\u0301', 'A' and 'a' are different values);
  boolean columns take booleans;
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
import decimal
import math
import re
import struct
from dataclasses import dataclass
from typing import Any, Literal

from dpkit.errors import InvalidParameterError
from dpkit.tables.engines.base import ColumnKind

__all__ = [
    "NumericType",
    "canonical",
    "category_value",
    "from_engine",
    "numeric_type",
    "temporal_type",
]

_INT_LIMIT = 2**63

#: Integer storage types (DuckDB's and Spark's names, upper-cased) and their bit widths;
#: signed unless the name starts with U.
_INT_BITS = {
    "TINYINT": 8, "INT1": 8, "BYTE": 8, "SMALLINT": 16, "INT2": 16, "SHORT": 16,
    "INTEGER": 32, "INT": 32, "INT4": 32, "SIGNED": 32, "BIGINT": 64, "INT8": 64, "LONG": 64,
    "HUGEINT": 128, "INT128": 128, "UTINYINT": 8, "USMALLINT": 16, "UINTEGER": 32,
    "UBIGINT": 64, "UHUGEINT": 128,
}  # fmt: skip
_FLOAT32 = ("FLOAT", "REAL", "FLOAT4")
_DECIMAL = re.compile(r"^(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


@dataclass(frozen=True)
class NumericType:
    """How a numeric storage type represents a literal: its family and range."""

    family: Literal["integer", "float64", "float32", "decimal"]
    low: int = 0
    high: int = 0
    precision: int = 0
    scale: int = 0


def numeric_type(type_name: str) -> NumericType:
    """The representation of a numeric storage type (unknown names: DOUBLE, the widest float)."""
    t = type_name.strip().upper()
    if t in _INT_BITS:
        bits = _INT_BITS[t]
        if t.startswith("U"):
            return NumericType("integer", 0, 2**bits - 1)
        return NumericType("integer", -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if t in _FLOAT32:
        return NumericType("float32")
    match = _DECIMAL.match(t)
    if match:
        return NumericType("decimal", precision=int(match[1]), scale=int(match[2]))
    if t in ("DECIMAL", "NUMERIC"):  # DuckDB's default DECIMAL is (18, 3)
        return NumericType("decimal", precision=18, scale=3)
    return NumericType("float64")


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
        return _number(value, column, type_name, what)
    if kind == "text":
        if not isinstance(value, str):
            raise _type_error(column, what, kind, "a string", value)
        if "\x00" in value:
            raise InvalidParameterError(f"a {what} for column {column!r} contains a NUL character.")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidParameterError(
                f"a {what} for column {column!r} is not valid Unicode (it holds a lone "
                "surrogate code point, which no stored text can contain); fix the string."
            ) from None
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


def category_value(value: object, column: str, kind: ColumnKind, type_name: str) -> Any:
    """A category of a :class:`~dpkit.tables.engines.base.Coding` as :func:`canonical` reads it,
    or ``None`` when no value of the column can equal it.

    The engines compare categories after the charge, so a category
    :func:`canonical` refuses (of another kind, beyond the type's range, not
    exact in it, a string that is no date) matches nothing rather than reach
    the engine: left to convert it, each engine would fail or convert in its
    own way, some by converting every value of the column (text to a number
    fails on the first row that is no number, so a failure would tell that
    such a row exists).
    """
    try:
        return canonical(value, column, kind, type_name, "category")
    except InvalidParameterError:
        return None


def _number(value: int | float, column: str, type_name: str, what: str) -> int | float:
    """A finite int or float as ``type_name`` represents it (see the module doc), or an error."""
    rep = numeric_type(type_name)
    where = f"a {what} for column {column!r} ({type_name})"
    if rep.family == "integer":
        if isinstance(value, float):
            if not value.is_integer():
                return value  # equals no integer; only bounds a comparison (as a double)
            value = int(value)
        if not rep.low <= value <= rep.high:
            raise InvalidParameterError(
                f"{where} is outside the type's range [{rep.low}, {rep.high}], so no stored "
                "value can equal or be compared with it exactly; use a value in that range."
            )
        return value
    if rep.family == "decimal":
        return _decimal(value, rep, where)
    if isinstance(value, int) and not -_INT_LIMIT <= value < _INT_LIMIT:
        raise InvalidParameterError(
            f"{where} is an integer beyond 64 bits, which no stored number can equal; use a "
            "smaller value."
        )
    if rep.family == "float32":
        try:
            single = struct.unpack("f", struct.pack("f", float(value)))[0]
        except OverflowError:
            single = math.inf
        if not math.isfinite(single):
            raise InvalidParameterError(f"{where} is beyond the range of a 4-byte float.")
        if isinstance(value, int) and single != value:
            raise InvalidParameterError(
                f"{where} is an integer that a 4-byte float cannot hold exactly (the engine would "
                "compare it as a neighbouring value); use a DOUBLE column or a value below 2**24."
            )
        return value if isinstance(value, int) else single
    if isinstance(value, int) and float(value) != value:
        raise InvalidParameterError(
            f"{where} is an integer that a double cannot hold exactly (the engine would compare "
            "it as a neighbouring value, e.g. 2**60 + 1 as 2**60); declare the column as "
            "BIGINT, or use a value below 2**53."
        )
    return value


def _decimal(value: int | float, rep: NumericType, where: str) -> int | float:
    """DECIMAL(p, s): integral values as ints, others as floats whose shortest spelling fits."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # its exact value, not its shortened repr
    exact = decimal.Decimal(value if isinstance(value, int) else repr(value))
    digits = exact.as_tuple()
    fraction = -digits.exponent if isinstance(digits.exponent, int) else 0
    too_wide = abs(exact) >= decimal.Decimal(10) ** (rep.precision - rep.scale)
    if too_wide or (isinstance(value, float) and fraction > rep.scale):
        raise InvalidParameterError(
            f"{where} does not fit DECIMAL({rep.precision}, {rep.scale}) exactly (at most "
            f"{rep.scale} decimals and {rep.precision - rep.scale} integer digits); the "
            "engine would round it. Use a value the type holds."
        )
    return value


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
