"""The query methods (``count`` ... ``histogram2d``), made once from the registry of kinds.

:class:`QueryMethods` is the one mixin that gives :class:`dpkit.Session` and
:class:`dpkit.client.RemoteDataset` a method per registered kind
(:data:`dpkit.tables.kinds.REGISTRY`). Each method has a real signature
(``inspect.signature``: the column, the kind's positional parameters such as
``quantile``'s ``q``, then its keyword-only parameters with their defaults)
and the kind's docstring, so ``help(Session.mean)`` and notebooks show them;
it builds a :class:`~dpkit.tables.specs.QuerySpec` and calls the class's
``answer(spec)``.

Trade-off: the methods are made at import time, so a static checker (mypy) on
users' code sees each of them through the overloads declared below (checked
against the registry by ``tests/tables/test_kinds.py`` and
``tests/tables/test_query_typing.py``): without ``group_by`` a query is a
:class:`~dpkit.release.Release`, with it a
:class:`~dpkit.tables.results.GroupedRelease`; ``epsilon`` is required, the
other parameters are not checked statically. Editors and ``help()`` read the
runtime signature.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from dpkit.tables.kinds import REGISTRY, QueryKind
from dpkit.tables.kinds.base import COMMON
from dpkit.tables.specs import QuerySpec

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol, overload

    from dpkit.release import Release
    from dpkit.tables.results import GroupedRelease

    class _Query(Protocol):
        """A query method: one release, or one per group with ``group_by``."""

        @overload
        def __call__(
            self, *args: Any, epsilon: float, group_by: None = None, **options: Any
        ) -> Release: ...

        @overload
        def __call__(
            self, *args: Any, epsilon: float, group_by: str | Sequence[str], **options: Any
        ) -> GroupedRelease: ...

        @overload
        def __call__(
            self, *args: Any, epsilon: float, group_by: str | Sequence[str] | None, **options: Any
        ) -> Release | GroupedRelease: ...

    class _UngroupedQuery(Protocol):
        """A query method without ``group_by`` (histogram2d): always one release."""

        def __call__(self, *args: Any, epsilon: float, **options: Any) -> Release: ...


__all__ = ["QueryMethods", "query_method"]

_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
_KEYWORD = inspect.Parameter.KEYWORD_ONLY
_EMPTY = inspect.Parameter.empty


def _signature(kind: QueryKind) -> inspect.Signature:
    params = [inspect.Parameter("self", _POSITIONAL)]
    params.append(
        inspect.Parameter(
            kind.column,
            _POSITIONAL,
            default=_EMPTY if kind.column_required else None,
            annotation="str" if kind.column_required else "str | None",
        )
    )
    # epsilon first, then the kind's own parameters, then the shared ones (filter, groups, ...)
    shared = {p.name for p in COMMON} - {"epsilon"}
    for p in sorted(kind.parameters, key=lambda p: (p.name != "epsilon", p.name in shared)):
        params.append(
            inspect.Parameter(
                p.name,
                _POSITIONAL if p.positional else _KEYWORD,
                default=_EMPTY if p.required else p.default,
                annotation=p.annotation,
            )
        )
    # positional-or-keyword parameters come before keyword-only ones
    params.sort(key=lambda p: p.kind)
    return inspect.Signature(params, return_annotation="Release | GroupedRelease")


def query_method(kind: QueryKind) -> Callable[..., Any]:
    """The method answering ``kind``: binds the arguments, builds the spec, calls ``answer``."""
    signature = _signature(kind)
    fields = {p.name: p.field for p in kind.parameters}
    names = [p.name for p in signature.parameters.values() if p.kind is _POSITIONAL][1:]
    required = [
        p.name
        for p in signature.parameters.values()
        if p.kind is _POSITIONAL and p.default is _EMPTY and p.name != "self"
    ]

    def method(self: QueryMethods, *args: Any, **kwargs: Any) -> Any:
        if self._strict_arguments:
            try:
                bound = signature.bind(self, *args, **kwargs)
            except TypeError as err:
                raise TypeError(f"{kind.name}() {err}") from None
            bound.apply_defaults()
            values = dict(bound.arguments)
            del values["self"]
        else:  # the positional arguments bound by name; the spec checks the rest
            if len(args) > len(names):
                raise TypeError(f"{kind.name}() takes {len(names)} positional argument(s).")
            values = dict(zip(names, args))
            twice = sorted(set(values) & set(kwargs))
            if twice:
                raise TypeError(f"{kind.name}() got multiple values for {twice}.")
            values.update(kwargs)
            missing = [n for n in required if n not in values]
            if missing:
                raise TypeError(f"{kind.name}() missing required argument(s) {missing}.")
        column = values.pop(kind.column, None)
        given = {fields.get(n, n): v for n, v in values.items() if v is not None}
        return self.answer(QuerySpec(kind.name, column, **given))

    method.__name__ = kind.name
    method.__qualname__ = f"QueryMethods.{kind.name}"
    method.__doc__ = kind.doc
    method.__signature__ = signature  # type: ignore[attr-defined]
    return method


class QueryMethods:
    """One method per registered query kind; the class provides ``answer(spec)``.

    ``_strict_arguments``: bind like a Python function (unknown or missing
    arguments are a ``TypeError``) and fill the defaults into the spec (the
    Session); otherwise pass what was given to the spec, which refuses
    unknown or missing ones with :class:`~dpkit.errors.InvalidParameterError`
    (the remote client: the service fills the defaults).
    """

    _strict_arguments: ClassVar[bool] = True

    # The registry's kinds, for static checkers (tests/tables/test_kinds.py and
    # test_query_typing.py keep this in step): Release without group_by, else GroupedRelease.
    count: _Query
    sum: _Query
    mean: _Query
    variance: _Query
    std: _Query
    quantile: _Query
    median: _Query
    min: _Query
    max: _Query
    mode: _Query
    histogram: _Query
    histogram2d: _UngroupedQuery

    def answer(self, spec: QuerySpec) -> Any:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        # kinds registered after this module was imported (dpkit.tables.kinds.register)
        if not name.startswith("_") and name in REGISTRY:
            return query_method(REGISTRY[name]).__get__(self)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


for _kind in REGISTRY.values():
    setattr(QueryMethods, _kind.name, query_method(_kind))
