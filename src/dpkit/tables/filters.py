"""Structured row filters (``where=``): no SQL strings, by design.

A filter is a mapping from column name to a condition, all ANDed::

    where={"district": "A"}                    # equality
    where={"district": ["A", "B"]}             # membership (a list or set)
    where={"age": (">=", 18)}                  # comparison: (op, value)
    where={"age": ("between", 18, 65)}         # lo <= age <= hi
    where={"income": None}                     # is missing (NULL)
    where={"income": ("not null",)}

or a list of :class:`~dpkit.tables.engines.Condition`. Raw SQL is not accepted:
a SQL string could read other tables, call functions whose errors or timing
depend on values, or hide a second query; a closed vocabulary of per-row
predicates has none of these problems, lets the engines render values as
escaped literals, and lets ``Parallel`` check that filters are disjoint.

Every filter is a per-row predicate fixed before the data is read, so the
filtered table of two neighbouring tables are still neighbours (stability 1):
filtering never increases a query's sensitivity.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

from dpkit.errors import InvalidParameterError
from dpkit.tables.engines.base import COMPARISONS, ColumnKind, Condition, check_literal

__all__ = ["Where", "parse_where", "parse_where_text"]

Where = Mapping[str, Any] | Sequence[Condition] | None

_HOW = (
    "Write filters as a mapping, e.g. where={'district': 'A', 'age': ('>=', 18), "
    "'region': ['N', 'S']}."
)


def _check_type(value: Any, column: str, kind: ColumnKind) -> Any:
    v = check_literal(value, column)
    ok = {
        "numeric": isinstance(v, int | float) and not isinstance(v, bool),
        "text": isinstance(v, str),
        "boolean": isinstance(v, bool),
        "temporal": isinstance(v, _dt.date | str),
        "other": True,
    }[kind]
    if not ok:
        raise InvalidParameterError(
            f"the filter on {column!r} compares a {kind} column with a {type(v).__name__}; "
            f"use a {'number' if kind == 'numeric' else kind} value."
        )
    return v


def _one(column: str, spec: Any, kind: ColumnKind) -> list[Condition]:
    if spec is None:
        return [Condition(column, "is null")]
    if isinstance(spec, list | set | frozenset):
        values = tuple(_check_type(v, column, kind) for v in spec)
        return [Condition(column, "in", values)]
    if isinstance(spec, tuple):
        if not spec or not isinstance(spec[0], str) or spec[0] not in (*COMPARISONS, "between"):
            raise InvalidParameterError(
                f"the filter on {column!r} is a tuple but does not start with an operator "
                f"({', '.join(repr(c) for c in (*COMPARISONS, 'between'))}); "
                "use a list for membership, e.g. ['A', 'B']."
            )
        op, args = spec[0], spec[1:]
        if op in ("is null", "not null"):
            if args:
                raise InvalidParameterError(f"{op!r} on {column!r} takes no value.")
            return [Condition(column, op)]
        if op == "between":
            if len(args) != 2:
                raise InvalidParameterError(
                    f"'between' on {column!r} needs two values: ('between', lo, hi)."
                )
            lo, hi = (_check_type(a, column, kind) for a in args)
            return [Condition(column, ">=", lo), Condition(column, "<=", hi)]
        if len(args) != 1:
            raise InvalidParameterError(
                f"the filter ({op!r}, value) on {column!r} needs exactly one value."
            )
        if op in ("in", "not in"):
            if isinstance(args[0], str) or not isinstance(args[0], Sequence | set | frozenset):
                raise InvalidParameterError(f"{op!r} on {column!r} needs a list of values.")
            return [Condition(column, op, tuple(_check_type(v, column, kind) for v in args[0]))]
        return [Condition(column, op, _check_type(args[0], column, kind))]
    return [Condition(column, "==", _check_type(spec, column, kind))]


def parse_where(where: Where, kinds: Mapping[str, ColumnKind]) -> tuple[Condition, ...]:
    """Validate a filter against the table's columns and return its conditions.

    Column names and literal types are checked against public metadata
    (``kinds``); unknown columns get an error listing the available ones.
    """
    if where is None:
        return ()
    conditions: list[Condition] = []
    if isinstance(where, Mapping):
        for column, spec in where.items():
            _known(column, kinds)
            conditions.extend(_one(column, spec, kinds[column]))
    elif isinstance(where, str):
        raise InvalidParameterError("where= does not take SQL text. " + _HOW)
    elif isinstance(where, Sequence):
        for cond in where:
            if not isinstance(cond, Condition):
                raise InvalidParameterError(
                    "where= must be a mapping or a list of Condition. " + _HOW
                )
            _known(cond.column, kinds)
            if cond.op not in COMPARISONS:
                raise InvalidParameterError(
                    f"unknown filter operator {cond.op!r}; use one of {COMPARISONS}."
                )
            kind = kinds[cond.column]
            if cond.op in ("in", "not in"):
                if isinstance(cond.value, str) or not isinstance(
                    cond.value, Sequence | set | frozenset
                ):
                    raise InvalidParameterError(
                        f"{cond.op!r} on {cond.column!r} needs a list of values."
                    )
                conditions.append(
                    Condition(
                        cond.column,
                        cond.op,
                        tuple(_check_type(v, cond.column, kind) for v in cond.value),
                    )
                )
            elif cond.op in ("is null", "not null"):
                conditions.append(Condition(cond.column, cond.op))
            else:
                conditions.append(
                    Condition(cond.column, cond.op, _check_type(cond.value, cond.column, kind))
                )
    else:
        raise InvalidParameterError("where= must be a mapping or a list of Condition. " + _HOW)
    return tuple(conditions)


def _known(column: object, kinds: Mapping[str, ColumnKind]) -> None:
    if not isinstance(column, str) or column not in kinds:
        raise InvalidParameterError(
            f"unknown column {column!r} in where=; the table's columns are {sorted(kinds)}."
        )


_TEXT_OPS = ("!=", "<=", ">=", "==", "=", "<", ">")


def parse_where_text(items: Sequence[str], kinds: Mapping[str, ColumnKind]) -> dict[str, Any]:
    """Parse command-line filters like ``district=A``, ``age>=18``, ``region=N,S``.

    Values are read as numbers for numeric columns, ``true``/``false`` for
    boolean ones and text otherwise; a comma-separated value means membership.
    Several conditions on one column are not supported here (use the API).
    """
    out: dict[str, Any] = {}
    for item in items:
        for op in _TEXT_OPS:
            if op in item:
                column, _, raw = item.partition(op)
                break
        else:
            raise InvalidParameterError(
                f"cannot read the filter {item!r}; write COLUMN=VALUE, COLUMN>=VALUE, "
                "COLUMN!=VALUE or COLUMN=V1,V2 for membership."
            )
        column, raw = column.strip(), raw.strip()
        _known(column, kinds)
        if column in out:
            raise InvalidParameterError(
                f"the column {column!r} is filtered twice; use the Python API."
            )
        kind = kinds[column]
        parts = [_convert(p.strip(), column, kind) for p in raw.split(",")] if "," in raw else None
        if parts is not None:
            if op not in ("=", "=="):
                raise InvalidParameterError(f"a list of values needs '=' (membership), not {op!r}.")
            out[column] = parts
            continue
        value = _convert(raw, column, kind)
        out[column] = value if op in ("=", "==") else (op, value)
    return out


def _convert(raw: str, column: str, kind: ColumnKind) -> Any:
    if kind == "numeric":
        try:
            number = float(raw)
        except ValueError:
            raise InvalidParameterError(
                f"the filter on numeric column {column!r} needs a number."
            ) from None
        return (
            int(number)
            if number.is_integer() and "." not in raw and "e" not in raw.lower()
            else number
        )
    if kind == "boolean":
        if raw.lower() not in ("true", "false"):
            raise InvalidParameterError(
                f"the filter on boolean column {column!r} needs true or false."
            )
        return raw.lower() == "true"
    return raw
