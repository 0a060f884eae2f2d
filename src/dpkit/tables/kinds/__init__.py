"""The query kinds: one object per kind, and the one registry every layer reads.

Each module here defines one kind (or a family: ``moments`` holds sum, mean,
variance and std; ``quantile`` holds quantile, median, min and max) as a
:class:`~dpkit.tables.kinds.base.Kind`: its parameters, its validated query,
its ledger label, its cost and its ``release(query, engine, rng)``, which makes
one engine pass (two for ``bounds="private"``), adds noise through
:mod:`dpkit.mechanisms` with parameters that are functions of public input
only, and assembles the release. The module's docstring carries the privacy
argument (the kind's ``proof``).

:data:`REGISTRY` (name -> kind, in display order) is what
:class:`~dpkit.tables.specs.QuerySpec` (``QUERY_KINDS``, ``PARAMETERS``),
:func:`validate`, :mod:`~dpkit.tables.costing`, :mod:`~dpkit.tables.execution`,
the query methods of :class:`dpkit.Session` and :class:`dpkit.client.RemoteDataset`
(:mod:`dpkit.tables.kinds.methods`), the service and the web page's form
(:func:`describe`, served as ``GET /api/v1/query-kinds``) all read.

How to add a kind: write a module with a frozen ``ValidatedQuery`` subclass,
``validate(spec, ctx, common)``, ``release(query, engine, rng)`` (its module
docstring states the guarantee, the neighbouring relation and the sensitivity
argument) and ``MINE = Kind(...)``; then add ``MINE`` to ``_BUILT_IN`` below
(or call :func:`register`). ``tests/tables/test_kinds.py`` runs a worked example.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from dpkit.errors import InvalidParameterError
from dpkit.tables.kinds.base import COMMON, ExpectedError, Kind, Parameter, QueryKind, parameter
from dpkit.tables.kinds.count import COUNT
from dpkit.tables.kinds.histogram import HISTOGRAM
from dpkit.tables.kinds.histogram2d import HISTOGRAM2D
from dpkit.tables.kinds.mode import MODE
from dpkit.tables.kinds.moments import MEAN, STD, SUM, VARIANCE
from dpkit.tables.kinds.quantile import MAX, MEDIAN, MIN, QUANTILE
from dpkit.tables.validation import TableContext, ValidatedQuery, check_common

__all__ = [
    "COMMON",
    "REGISTRY",
    "ExpectedError",
    "Kind",
    "Parameter",
    "QueryKind",
    "describe",
    "expected_error",
    "kind",
    "parameter",
    "register",
    "unregister",
    "validate",
]

_BUILT_IN: tuple[QueryKind, ...] = (
    COUNT,
    SUM,
    MEAN,
    VARIANCE,
    STD,
    QUANTILE,
    MEDIAN,
    MIN,
    MAX,
    MODE,
    HISTOGRAM,
    HISTOGRAM2D,
)

_KINDS: dict[str, QueryKind] = {k.name: k for k in _BUILT_IN}
#: Every query kind by name, in display order (a read-only view; see :func:`register`).
REGISTRY: Mapping[str, QueryKind] = MappingProxyType(_KINDS)


def register(new: QueryKind) -> QueryKind:
    """Add a kind to the registry (after the built-in ones); returns it.

    Its name must be new and a valid method name; Session and the remote
    client then answer ``session.<name>(...)`` and ``Query("<name>", ...)``.
    """
    if not isinstance(new, QueryKind):
        raise InvalidParameterError("register() takes a query kind (see dpkit.tables.kinds.base).")
    if not new.name.isidentifier() or new.name.startswith("_") or new.name in _KINDS:
        raise InvalidParameterError(f"a query kind needs a new, public name; {new.name!r} is not.")
    _KINDS[new.name] = new
    return new


def unregister(name: str) -> None:
    """Remove a kind added by :func:`register` (the built-in ones stay)."""
    if any(k.name == name for k in _BUILT_IN):
        raise InvalidParameterError(f"{name!r} is a built-in query kind.")
    _KINDS.pop(name, None)


def kind(name: str) -> QueryKind:
    """The registered kind called ``name``."""
    return _KINDS[name]


def validate(spec: Any, ctx: TableContext) -> ValidatedQuery:
    """Check a :class:`~dpkit.tables.specs.QuerySpec` against the public facts in ``ctx``.

    The checks every kind shares (:func:`~dpkit.tables.validation.check_common`)
    come first, then the kind's own; anything wrong raises before any charge.
    """
    query_kind = _KINDS.get(spec.kind)  # QuerySpec admits registered kinds only
    if query_kind is None:  # unregistered since the spec was made
        raise InvalidParameterError(f"unknown query {spec.kind!r}; use one of {', '.join(_KINDS)}.")
    common = check_common(spec, ctx, needs_column=query_kind.column_required)
    return query_kind.validate(spec, ctx, common)


def expected_error(query: ValidatedQuery, level: float | None = None) -> ExpectedError:
    """The error bar a validated query's release will have, before anything is spent.

    Its kind's ``expected_error``: a pure function of public parameters (ε, δ,
    bounds, bins, ``level``, ``k``); no data is read, so it is the same on any
    two neighbouring tables and may be shown before the charge (dry runs).
    """
    return _KINDS[query.spec.kind].expected_error(query, level)


def describe() -> list[dict[str, Any]]:
    """The registry as JSON (public code facts): what ``GET /api/v1/query-kinds`` serves.

    One entry per kind, in display order: ``name``, ``summary``, ``column``
    (the first argument's name, and whether it is required) and
    ``parameters`` (each with ``name`` as a :class:`~dpkit.tables.specs.QuerySpec`
    field, ``doc``, ``type``, ``required`` and ``default``).
    """
    return [
        {
            "name": k.name,
            "summary": k.summary,
            "column": {"name": k.column, "required": k.column_required},
            "parameters": [p.describe() for p in k.parameters],
        }
        for k in _KINDS.values()
    ]
