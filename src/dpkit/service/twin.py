"""The synthetic twin of a dataset: a table made from its public metadata alone.

An analyst of the query service develops queries on the twin — column names,
types, filters, group-by keys, bounds — for free, and spends budget only on
the real data once a query runs. The twin is drawn from what the data owner
declared public (each column's type, and the :class:`~dpkit.tables.schema.Schema`:
bounds, domains, histogram edges, null policy); no row of the dataset is read.

Each column is drawn on its own, uniformly over what is public:

* a domain: its values (as values of the column's type);
* numeric bounds (failing those, the span of the public histogram edges):
  uniform in ``[lo, hi]``, integers for integer types, multiples of
  ``10**-scale`` for decimals; a text column with ``coerce=True`` gets such
  numbers as text;
* nothing public: a placeholder that says it is made up — numbers in
  ``[0, 100]``, text ``"value_1"`` … ``"value_20"``, dates and timestamps in
  2000–2020, fair booleans. (A schema's bounds are numbers, so a date column
  has no public range: its values come from a domain or the placeholder.)

The ``privacy_unit`` column gets person ids, 1 to 3 rows each; every other
column has a public 5% of missing entries, so that analysts see how its null
policy treats them. Column types outside the common families (TIME, INTERVAL,
UUID, BLOB, JSON, ENUM, nested types, ...) become text columns.
"""

from __future__ import annotations

import datetime as _dt
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from dpkit._checks import MEMORY_CEILING
from dpkit.errors import InvalidParameterError
from dpkit.tables.engines.base import ColumnKind
from dpkit.tables.engines.duckdb_engine import connect
from dpkit.tables.schema import Column, Schema
from dpkit.tables.values import canonical

__all__ = ["NULL_FRACTION", "PLACEHOLDER_DATES", "PLACEHOLDER_RANGE", "synthetic_twin"]

#: The public share of missing entries in every column but the privacy unit.
NULL_FRACTION = 0.05
#: The range of numbers in a column with no public bounds, domain or edges.
PLACEHOLDER_RANGE = (0.0, 100.0)
#: The first and last day of dates and timestamps in a column with no public domain.
PLACEHOLDER_DATES = (_dt.date(2000, 1, 1), _dt.date(2020, 12, 31))
#: Placeholder text is ``value_1`` … ``value_<PLACEHOLDER_TEXTS>``.
PLACEHOLDER_TEXTS = 20

Family = Literal["integer", "float", "decimal", "boolean", "text", "date", "timestamp"]

_INTEGERS = {
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "HUGEINT": pa.int64(),  # pandas has no 128-bit integers; still a numeric column
    "UTINYINT": pa.uint8(),
    "USMALLINT": pa.uint16(),
    "UINTEGER": pa.uint32(),
    "UBIGINT": pa.uint64(),
    "UHUGEINT": pa.uint64(),
}
_FLOATS = {"FLOAT": pa.float32(), "DOUBLE": pa.float64()}
_TIMESTAMPS = {
    "TIMESTAMP": pa.timestamp("us"),
    "TIMESTAMP_S": pa.timestamp("s"),
    "TIMESTAMP_MS": pa.timestamp("ms"),
    "TIMESTAMP_NS": pa.timestamp("ns"),
    "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"),
}
# pandas dtypes that DuckDB reads back as the arrow type's DuckDB type (no inference).
_PANDAS_DTYPES: dict[pa.DataType, Any] = {
    pa.int8(): pd.Int8Dtype(),
    pa.int16(): pd.Int16Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.uint8(): pd.UInt8Dtype(),
    pa.uint16(): pd.UInt16Dtype(),
    pa.uint32(): pd.UInt32Dtype(),
    pa.uint64(): pd.UInt64Dtype(),
    pa.float32(): pd.Float32Dtype(),
    pa.float64(): pd.Float64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
    pa.string(): pd.StringDtype(),
}
_KINDS: dict[Family, ColumnKind] = {
    "integer": "numeric",
    "float": "numeric",
    "decimal": "numeric",
    "boolean": "boolean",
    "text": "text",
    "date": "temporal",
    "timestamp": "temporal",
}
_SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class _Storage:
    """How the twin stores a column of one declared type."""

    type_name: str  # as DuckDB spells it, e.g. "DECIMAL(10,2)"
    family: Family
    arrow: pa.DataType

    @property
    def kind(self) -> ColumnKind:
        return _KINDS[self.family]


def _storage(type_name: str, con: duckdb.DuckDBPyConnection) -> _Storage:
    """The storage of a declared type; DuckDB itself reads aliases (INT4, NUMERIC, TEXT...)."""
    try:
        parsed = con.sqltype(type_name)
    except duckdb.Error:  # not a DuckDB type: text, as for any other unusual type
        return _Storage(type_name, "text", pa.string())
    name = str(parsed)
    if name in _INTEGERS:
        return _Storage(name, "integer", _INTEGERS[name])
    if name in _FLOATS:
        return _Storage(name, "float", _FLOATS[name])
    if parsed.id == "decimal":
        sizes = dict(parsed.children)
        return _Storage(name, "decimal", pa.decimal128(sizes["precision"], sizes["scale"]))
    if name == "BOOLEAN":
        return _Storage(name, "boolean", pa.bool_())
    if name == "DATE":
        return _Storage(name, "date", pa.date32())
    if name in _TIMESTAMPS:
        return _Storage(name, "timestamp", _TIMESTAMPS[name])
    return _Storage(name, "text", pa.string())


def synthetic_twin(
    types: Mapping[str, str],
    schema: Schema,
    *,
    rows: int = 1000,
    seed: int = 0,
    privacy_unit: str | None = None,
) -> pd.DataFrame:
    """A table shaped like the dataset, drawn from its public metadata only.

    Guarantee: the twin is a function of ``types``, ``schema``, ``rows``,
    ``seed`` and ``privacy_unit`` — public metadata and public choices — and
    of nothing else. No row of the dataset is read, so building it, showing
    it and querying it cost no privacy budget and reveal nothing about the
    rows. (The column types are public only if the data owner declared them:
    types a session inferred from the rows carry the leak it warned about.)
    By the same token the twin's answers say nothing about the real data: it
    exists to develop queries — check columns, types, filters, keys, bounds —
    before paying for them on the real table.

    The twin has the dataset's column types, so that
    ``Session.from_pandas(twin, types=types, schema=schema, ...)`` (or
    ``infer_types=True``, reading the twin's own dtypes) sees the same column
    kinds as a session on the real data (the same DuckDB types for integer,
    floating, DECIMAL, BOOLEAN, VARCHAR, DATE and TIMESTAMP columns): a
    query the real session accepts runs on the twin too. How each
    column is drawn is in the module docstring; columns are independent, and
    a column's values depend only on ``seed``, its name, its metadata and
    ``rows`` (so adding a column changes no other).

    Args:
        types: column name → DuckDB type name as the data owner declared it
            (``"DOUBLE"``, ``"BIGINT"``, ``"DECIMAL(10,2)"``, ``"VARCHAR"``,
            ``"DATE"``, ``"TIMESTAMP"``, ...), in the order of the twin's columns.
        schema: the dataset's public :class:`~dpkit.tables.schema.Schema`;
            every column it describes must be in ``types``.
        rows: the number of rows (at least 1).
        seed: the seed of the twin's (non-private) randomness, ``>= 0``.
        privacy_unit: the column identifying people: it gets person ids
            (numbers or text), each on 1 to 3 rows, and no missing entries.

    Raises:
        InvalidParameterError: a schema column or the privacy unit is not in
            ``types``; or a domain or bounds hold no value of the column's type
            (e.g. a text domain for an INTEGER column, bounds ``(0.2, 0.8)`` for
            one), so the twin cannot meet them. Messages quote metadata only.
    """
    declared = _check_types(types)
    if not isinstance(schema, Schema):
        raise InvalidParameterError("schema must be a dpkit.tables.schema.Schema.")
    missing_columns = [c for c in schema.columns if c not in declared]
    if missing_columns:
        raise InvalidParameterError(
            f"the schema describes columns {missing_columns} that types does not declare; "
            f"give each of them a type (the declared columns are {sorted(declared)})."
        )
    if privacy_unit is not None and privacy_unit not in declared:
        raise InvalidParameterError(
            f"the privacy unit {privacy_unit!r} is not a declared column; the declared "
            f"columns are {sorted(declared)}."
        )
    if not isinstance(rows, int | np.integer) or isinstance(rows, bool) or rows < 1:
        raise InvalidParameterError(f"rows must be an integer >= 1, got {rows!r}.")
    if int(rows) * max(len(declared), 1) * 64 > MEMORY_CEILING:
        raise InvalidParameterError(
            f"a twin of {rows} rows and {len(declared)} columns would need more than "
            f"{MEMORY_CEILING // 2**30} GiB of memory; ask for fewer rows."
        )
    if not isinstance(seed, int | np.integer) or isinstance(seed, bool) or seed < 0:
        raise InvalidParameterError(f"seed must be an integer >= 0, got {seed!r}.")
    n = int(rows)
    con = connect()  # parses type names only; never downloads an extension
    try:
        storages = {name: _storage(t, con) for name, t in declared.items()}
    finally:
        con.close()
    arrays: dict[str, pa.Array] = {}
    for name, storage in storages.items():
        # One stream per column, keyed by its name: a column never depends on another.
        rng = np.random.default_rng([int(seed), zlib.crc32(name.encode("utf-8"))])
        if name == privacy_unit:
            arrays[name] = _person_ids(storage, name, n, rng)
        else:
            arrays[name] = _column(storage, schema.get(name), n, rng)
    if not arrays:
        return pd.DataFrame(index=pd.RangeIndex(n))
    return pa.table(arrays).to_pandas(types_mapper=_pandas_dtype)


def _check_types(types: object) -> dict[str, str]:
    if not isinstance(types, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in types.items()
    ):
        raise InvalidParameterError("types must map column names to DuckDB type names.")
    return dict(types)


def _pandas_dtype(arrow: pa.DataType) -> Any:
    """Nullable pandas dtypes; DATE and DECIMAL stay Arrow-backed (pandas has neither)."""
    if arrow in _PANDAS_DTYPES:
        return _PANDAS_DTYPES[arrow]
    if pa.types.is_date32(arrow) or pa.types.is_decimal(arrow):
        return pd.ArrowDtype(arrow)
    return None  # timestamps: datetime64 of the same unit (and time zone)


# ----------------------------------------------------------------------------- columns


def _column(storage: _Storage, column: Column, rows: int, rng: np.random.Generator) -> pa.Array:
    """One column: values from what is public, then the public share of missing entries."""
    domain = _domain_array(storage, column)
    if domain is not None:
        picks = rng.integers(0, len(domain), rows)
        return domain.take(pa.array(picks, mask=_missing(rows, rng)))
    if storage.family == "text" and not column.coerce:
        labels = pa.array([f"value_{i}" for i in range(1, PLACEHOLDER_TEXTS + 1)])
        picks = rng.integers(0, PLACEHOLDER_TEXTS, rows)
        return labels.take(pa.array(picks, mask=_missing(rows, rng)))
    values: Any
    if storage.family == "boolean":
        values = rng.random(rows) < 0.5
    elif storage.family in ("date", "timestamp"):
        values = _placeholder_times(storage, rows, rng)
    else:
        lo, hi = _public_range(column)
        if storage.family == "decimal":
            low, high = _decimal_range(storage, column.name, lo, hi)
            units = rng.integers(low, high, size=rows, endpoint=True, dtype=np.int64)
            return _decimals(units, storage.arrow, _missing(rows, rng))
        if storage.family == "integer":
            low, high = _integer_range(storage, column.name, lo, hi)
            dtype = _numpy_integer(storage)
            values = rng.integers(low, high, size=rows, endpoint=True, dtype=dtype)
        elif storage.family == "float":
            values = _uniform_floats(storage, column.name, lo, hi, rows, rng)
        else:  # text with coerce=True: the column holds numbers written as text
            values = np.clip(np.round(_uniform(lo, hi, rows, rng), 2), lo, hi).astype(str)
    return pa.array(values, type=storage.arrow, mask=_missing(rows, rng))


def _missing(rows: int, rng: np.random.Generator) -> np.ndarray:
    """A mask of exactly ``round(NULL_FRACTION * rows)`` missing entries at random rows."""
    mask = np.zeros(rows, dtype=bool)
    mask[rng.choice(rows, size=int(NULL_FRACTION * rows + 0.5), replace=False)] = True
    return mask


def _public_range(column: Column) -> tuple[float, float]:
    if column.bounds is not None:
        return column.bounds
    if column.edges is not None:
        return column.edges[0], column.edges[-1]
    return PLACEHOLDER_RANGE


def _uniform(lo: float, hi: float, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform in [lo, hi]; this form never overflows, even for bounds near the float limits."""
    u = rng.random(rows)
    return np.clip(lo * (1.0 - u) + hi * u, lo, hi)


def _uniform_floats(
    storage: _Storage, name: str, lo: float, hi: float, rows: int, rng: np.random.Generator
) -> np.ndarray:
    values = _uniform(lo, hi, rows, rng)
    if storage.arrow != pa.float32():
        return values
    # The float32 values nearest to the bounds may lie outside them: step inwards.
    low, high = np.float32(lo), np.float32(hi)
    if float(low) < lo:
        low = np.nextafter(low, np.float32(np.inf))
    if float(high) > hi:
        high = np.nextafter(high, np.float32(-np.inf))
    if not (np.isfinite(low) and np.isfinite(high) and low <= high):
        raise _no_value(name, storage, f"bounds ({lo!r}, {hi!r})")
    with np.errstate(over="ignore"):  # out-of-range draws become ±inf, then clipped
        return np.clip(values.astype(np.float32), low, high)


def _numpy_integer(storage: _Storage) -> Any:
    return np.dtype(storage.arrow.to_pandas_dtype())


def _integer_range(storage: _Storage, name: str, lo: float, hi: float) -> tuple[int, int]:
    limits = np.iinfo(_numpy_integer(storage))
    low, high = max(math.ceil(lo), int(limits.min)), min(math.floor(hi), int(limits.max))
    if low > high:
        raise _no_value(name, storage, f"bounds ({lo!r}, {hi!r})")
    return low, high


def _decimal_range(storage: _Storage, name: str, lo: float, hi: float) -> tuple[int, int]:
    """The public range in units of ``10**-scale`` (exact), within the type and int64."""
    scale = 10**storage.arrow.scale
    largest = min(10**storage.arrow.precision - 1, 2**63 - 1)
    low = max(math.ceil(Fraction(lo) * scale), -largest)
    high = min(math.floor(Fraction(hi) * scale), largest)
    if low > high:
        raise _no_value(name, storage, f"bounds ({lo!r}, {hi!r})")
    return low, high


def _decimals(units: np.ndarray, arrow: pa.DataType, mask: np.ndarray | None) -> pa.Array:
    """Decimals ``units * 10**-scale``: same storage as DECIMAL(38, 0), read at the scale."""
    return pa.array(units, type=pa.int64(), mask=mask).cast(pa.decimal128(38, 0)).view(arrow)


def _placeholder_times(storage: _Storage, rows: int, rng: np.random.Generator) -> np.ndarray:
    first, last = (np.datetime64(d, "D") for d in PLACEHOLDER_DATES)
    days = int((last - first) // np.timedelta64(1, "D"))
    if storage.family == "date":
        return first + rng.integers(0, days, size=rows, endpoint=True)
    seconds = rng.integers(0, (days + 1) * _SECONDS_PER_DAY, size=rows)
    unit = storage.arrow.unit
    return (first.astype("datetime64[s]") + seconds).astype(f"datetime64[{unit}]")


def _domain_array(storage: _Storage, column: Column) -> pa.Array | None:
    """The declared domain as values of the column's type; an error if it holds none."""
    if column.domain is None:
        return None
    what = f"domain {list(column.domain)!r}"
    # The real session reads the domain the same way (and refuses it with the same error).
    values = [
        canonical(v, column.name, storage.kind, storage.type_name, "domain value")
        for v in column.domain
    ]
    if storage.family == "decimal":
        units = [_decimal_units(v, storage.arrow.scale) for v in values]
        limit = min(10**storage.arrow.precision, 2**63)
        if any(u is None or abs(u) >= limit for u in units):
            raise _no_value(column.name, storage, what)
        return _decimals(np.array(units, dtype=np.int64), storage.arrow, None)
    if storage.family == "integer":
        values = [int(v) if float(v).is_integer() else v for v in values]
    elif storage.family == "float":
        values = [float(v) for v in values]
    elif storage.family == "date":
        if any(v.time() != _dt.time() for v in values):
            raise _no_value(column.name, storage, what)
        values = [v.date() for v in values]
    try:
        array = pa.array(values, type=storage.arrow)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        raise _no_value(column.name, storage, what) from None
    # Conversions that lose a part silently (a timestamp's microseconds) are caught here;
    # floats may round to the type's precision, as the real column's values do.
    if storage.family != "float" and array.to_pylist() != values:
        raise _no_value(column.name, storage, what)
    return array


def _decimal_units(value: int | float, scale: int) -> int | None:
    """``value`` in units of ``10**-scale``, or None if it has more decimals than the scale."""
    exact = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    units = exact.scaleb(scale)
    return int(units) if units == units.to_integral_value() else None


def _no_value(name: str, storage: _Storage, what: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"the {what} of column {name!r} holds no value of its type {storage.type_name}; "
        "correct the schema or the declared type."
    )


def _person_ids(storage: _Storage, name: str, rows: int, rng: np.random.Generator) -> pa.Array:
    """Ids 1, 2, ... of made-up people with 1 to 3 rows each (never missing)."""
    sizes = rng.integers(1, 4, size=rows)
    people = int(np.searchsorted(np.cumsum(sizes), rows)) + 1
    ids = np.repeat(np.arange(1, people + 1, dtype=np.int64), sizes[:people])[:rows]
    if storage.family == "text":
        return pa.array(np.char.add("person_", ids.astype(str)))
    if storage.family == "float":
        return pa.array(ids.astype(np.float64), type=storage.arrow)
    if storage.family == "integer":
        # A small id type has fewer ids than the twin has people: they share ids, as
        # they would in a real table of that type.
        top = min(int(np.iinfo(_numpy_integer(storage)).max), 2**62)
        return pa.array((ids - 1) % top + 1, type=storage.arrow)
    if storage.family == "decimal":
        scale = 10**storage.arrow.scale
        top = min((10**storage.arrow.precision - 1) // scale, 2**62 // scale)
        if top >= 1:
            return _decimals(((ids - 1) % top + 1) * scale, storage.arrow, None)
    raise InvalidParameterError(
        f"the privacy unit {name!r} has type {storage.type_name}; the twin makes person ids "
        "for number and text columns only."
    )
