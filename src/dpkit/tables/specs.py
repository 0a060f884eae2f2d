"""Queries as data: frozen, printable, comparable specs that serialise to JSON.

A :class:`QuerySpec` says *what* to release (kind, column, budget, bounds,
filter, grouping, kind-specific parameters) and nothing about *how*: the
session validates it against the declared schema
(:mod:`dpkit.tables.validation`), costs it (:mod:`dpkit.tables.costing`),
charges the cost and only then executes it (:mod:`dpkit.tables.execution`).
Specs hold only public values chosen by the analyst; they travel as JSON (the
query service sends them over HTTP) through :meth:`QuerySpec.to_dict` /
:meth:`QuerySpec.from_dict`.

    >>> spec = QuerySpec("mean", "age", epsilon=0.1, bounds=(0, 120), where={"district": "A"})
    >>> QuerySpec.from_dict(spec.to_dict()) == spec
    True
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from dpkit.errors import InvalidParameterError
from dpkit.tables.engines.base import Condition
from dpkit.tables.filters import Where, parse_where
from dpkit.tables.kinds import REGISTRY

__all__ = ["PARAMETERS", "QUERY_KINDS", "Parallel", "Query", "QuerySpec"]


class _KindNames(Sequence[str]):
    """The registered kinds' names, in display order (a live view of the registry)."""

    def __getitem__(self, index: Any) -> Any:
        return tuple(REGISTRY)[index]

    def __len__(self) -> int:
        return len(REGISTRY)

    def __contains__(self, name: object) -> bool:
        return name in REGISTRY

    def __eq__(self, other: object) -> bool:
        return tuple(self) == other if isinstance(other, tuple) else NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


class _KindParameters(Mapping[str, tuple[str, ...]]):
    """Each kind's keyword arguments (besides ``column``), as spec fields: a view of the registry."""

    def __getitem__(self, name: str) -> tuple[str, ...]:
        return tuple(p.field for p in REGISTRY[name].parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(REGISTRY)

    def __len__(self) -> int:
        return len(REGISTRY)


#: The query kinds, in display order (``dpkit.tables.kinds.REGISTRY``'s names).
QUERY_KINDS: Sequence[str] = _KindNames()
#: The keyword arguments each kind takes (besides ``column``).
PARAMETERS: Mapping[str, tuple[str, ...]] = _KindParameters()


def _frozen(value: Any) -> Any:
    """Lists become tuples (recursively) so that specs hash and compare by value."""
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, set | frozenset):
        raise InvalidParameterError(
            "give keys/domains as a list (an ordered sequence), not a set: the order of the "
            "answers follows it."
        )
    if hasattr(value, "item") and not hasattr(value, "__len__"):  # numpy scalars
        return value.item()
    return value


@dataclass(frozen=True)
class QuerySpec:
    """One private query, as data. ``QuerySpec(kind, column=None, *, epsilon, ...)``.

    Fields mirror the :class:`~dpkit.Session` method of the same kind:
    ``epsilon``, ``delta`` (only with ``keys="private"``), ``level``,
    ``bounds`` (``(lo, hi)`` or ``"private"``), ``where`` (parsed into
    :class:`~dpkit.tables.engines.Condition` tuples, types checked later
    against the schema), ``group_by``, ``keys`` (a tuple of key tuples,
    ``"private"``, or ``None`` for the schema's domains), and the
    kind-specific ``q``, ``grid_size``, ``domain``, ``edges``, ``bins``,
    ``method``, ``max_count``; ``histogram2d`` takes ``y_column`` (the second
    axis; ``column`` is the first) and ``n_records``, with ``edges``,
    ``bins`` and ``bounds`` given per axis. Nothing here is checked against
    the table yet.
    """

    kind: str
    column: str | None = None
    epsilon: Any = None
    delta: Any = 0.0
    level: Any = None
    bounds: Any = None
    where: tuple[Condition, ...] = ()
    group_by: tuple[str, ...] | None = None
    keys: Any = None
    q: Any = None
    grid_size: Any = None
    domain: Any = None
    edges: Any = None
    bins: Any = None
    method: Any = None
    max_count: Any = None
    y_column: Any = None
    n_records: Any = None
    #: parameters of registered kinds that have no field above, as sorted (name, value) pairs
    extra: tuple[tuple[str, Any], ...] = field(default=(), repr=False)
    _given: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def __init__(self, kind: str, column: str | None = None, **params: Any) -> None:
        if kind not in QUERY_KINDS:
            raise InvalidParameterError(
                f"unknown query {kind!r}; use one of {', '.join(QUERY_KINDS)}."
            )
        allowed = PARAMETERS[kind]
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            hint = " median() takes no q; use quantile(column, q)." if "q" in unknown else ""
            raise InvalidParameterError(
                f"{kind}() got unexpected argument(s) {unknown}; it takes {sorted(allowed)}.{hint}"
            )
        if params.get("epsilon") is None:
            raise InvalidParameterError(
                f"{kind}() needs epsilon=, the privacy budget this query spends."
            )
        if column is not None and not isinstance(column, str):
            raise InvalidParameterError("the column must be given by its name (a string).")
        set_ = object.__setattr__
        set_(self, "kind", kind)
        set_(self, "column", column)
        own = {f.name for f in fields(self)}
        for f in fields(self):
            if f.name in ("kind", "column", "_given"):
                continue
            default = 0.0 if f.name == "delta" else () if f.name in ("where", "extra") else None
            set_(self, f.name, default)
        extra = {}
        for name, value in params.items():
            if name == "where":
                value = _where_structure(value)
            elif name == "group_by":
                value = _group_by(value)
            elif name == "keys":
                value = value if isinstance(value, str) or value is None else _keys(value)
            elif name == "delta":
                value = 0.0 if value is None else _frozen(value)
            else:
                value = _frozen(value)
            if name in own:
                set_(self, name, value)
            else:
                extra[name] = value
        set_(self, "extra", tuple(sorted(extra.items())))
        set_(self, "_given", frozenset(params))

    def __getattr__(self, name: str) -> Any:
        """A registered kind's own parameter that has no field (``None`` when not given)."""
        kind = self.__dict__.get("kind")
        if (
            name.startswith("_")
            or not isinstance(kind, str)
            or name not in PARAMETERS.get(kind, ())
        ):
            raise AttributeError(name)
        return dict(self.__dict__.get("extra", ())).get(name)

    @property
    def params(self) -> dict[str, Any]:
        """The keyword arguments as given (for display and for :meth:`to_dict`)."""
        return {name: getattr(self, name) for name in PARAMETERS[self.kind] if name in self._given}

    # -- JSON ----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping; dates and datetimes are tagged so they round-trip."""
        out: dict[str, Any] = {"kind": self.kind, "column": self.column}
        for name, value in self.params.items():
            if name == "where":
                value = [[c.column, c.op, _to_json(c.value)] for c in value]
            out[name] = _to_json(value)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QuerySpec:
        """Rebuild a spec from :meth:`to_dict`'s output (e.g. parsed from an HTTP body)."""
        if not isinstance(data, Mapping) or "kind" not in data:
            raise InvalidParameterError("a query needs a 'kind' (e.g. 'mean').")
        params = {k: _from_json(v) for k, v in data.items() if k not in ("kind", "column")}
        if "where" in params and params["where"] is not None:
            raw = params["where"]
            if not isinstance(raw, list | tuple):
                raise InvalidParameterError("'where' must be a list of [column, op, value].")
            conds = []
            for item in raw:
                if not isinstance(item, list | tuple) or len(item) != 3:
                    raise InvalidParameterError("each 'where' item is [column, op, value].")
                conds.append(Condition(str(item[0]), str(item[1]), _frozen(item[2])))
            params["where"] = conds
        return cls(str(data["kind"]), data.get("column"), **params)

    @classmethod
    def from_json(cls, text: str) -> QuerySpec:
        try:
            data = json.loads(text)
        except ValueError:
            raise InvalidParameterError("the query is not valid JSON.") from None
        return cls.from_dict(data)

    def __str__(self) -> str:
        args = [repr(self.column)] if self.column is not None else []
        args += [f"{k}={v!r}" for k, v in self.params.items() if k != "where"]
        if self.where:
            args.append(
                "where=["
                + ", ".join(f"{c.column} {c.op} {c.value!r}".rstrip() for c in self.where)
                + "]"
            )
        return f"{self.kind}({', '.join(args)})"


def Query(kind: str, column: str | None = None, **params: Any) -> QuerySpec:
    """A query to cost and run later: ``Query("mean", "age", epsilon=0.1, bounds=(0, 120))``.

    The same as :class:`QuerySpec` (kept as the batch API's short name).
    """
    return QuerySpec(kind, column, **params)


@dataclass(frozen=True)
class Parallel:
    """Queries on disjoint rows, charged as one (the max of their costs).

    Disjointness is decided on canonical values of the declared column type:
    every member must restrict the same column by equality or membership to
    value sets that are pairwise disjoint *as values of that type* (so
    ``'2020-01-01'`` and ``date(2020, 1, 1)`` are the same date). Members that
    cannot be proved disjoint are charged sequentially (the plan says so).
    Only for row-level sessions: with a privacy unit, one person's rows can
    fall on both sides (use ``group_by``, which bounds a person's rows across
    all groups at once).
    """

    queries: tuple[QuerySpec, ...]

    def __init__(self, *queries: QuerySpec) -> None:
        if len(queries) == 1 and isinstance(queries[0], list | tuple):
            queries = tuple(queries[0])
        for q in queries:
            if not isinstance(q, QuerySpec):
                raise InvalidParameterError("Parallel takes queries (dpkit.tables.Query).")
        object.__setattr__(self, "queries", tuple(queries))


# ----------------------------------------------------------------------------- helpers


def _where_structure(where: Where) -> tuple[Condition, ...]:
    """Parse a filter's structure; literal types are checked against the schema later."""
    if where is None:
        return ()
    if isinstance(where, Mapping):
        columns = list(where)
    elif isinstance(where, Sequence) and not isinstance(where, str | bytes):
        columns = [c.column for c in where if isinstance(c, Condition)]
    else:
        columns = []
    return tuple(
        Condition(c.column, c.op, _frozen(c.value))
        for c in parse_where(where, {str(c): "other" for c in columns})
    )


def _group_by(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    cols = (value,) if isinstance(value, str) else tuple(value) if _is_seq(value) else None
    if cols is None or not cols or not all(isinstance(c, str) for c in cols):
        raise InvalidParameterError("group_by must name one column or a list of columns.")
    if len(set(cols)) != len(cols):
        raise InvalidParameterError("group_by lists a column twice.")
    return cols


def _keys(value: Any) -> tuple[tuple[Any, ...], ...]:
    if not _is_seq(value):
        raise InvalidParameterError(
            "keys must be a list of group keys, 'private' (partition selection), or omitted "
            "(the schema's domains)."
        )
    out = []
    for k in value:
        key = tuple(_frozen(v) for v in k) if isinstance(k, tuple | list) else (_frozen(k),)
        out.append(key)
    return tuple(out)


def _is_seq(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _to_json(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    if isinstance(value, _dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, _dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidParameterError("a query parameter is not finite, so it has no JSON form.")
    return value


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        try:
            if set(value) == {"$datetime"}:
                return _dt.datetime.fromisoformat(value["$datetime"])
            if set(value) == {"$date"}:
                return _dt.date.fromisoformat(value["$date"])
        except (TypeError, ValueError):
            raise InvalidParameterError("a date in the query is not in ISO format.") from None
        raise InvalidParameterError("query parameters are numbers, strings, lists or dates.")
    return value
