"""What a query kind is: one object holding everything dpkit knows about it.

A :class:`QueryKind` has a ``name`` (the method name, ``QuerySpec.kind``),
a one-line ``summary`` and the user-facing ``doc`` (the Session method's
docstring: the guarantee in the analyst's terms), its :class:`Parameter` list
(name, one-line doc, JSON type hint, default, check), its own frozen validated
query (a subclass of :class:`~dpkit.tables.validation.ValidatedQuery` holding
only what the kind needs), and four steps:

* ``validate(spec, ctx, common)`` — the kind's own checks, on public input only;
* ``label(query)`` — the ledger label, made of public parameters only;
* ``cost(query)`` — what the query is charged (a :class:`~dpkit.accounting.Budget`);
* ``event(query)`` — the privacy event of its release (its mechanisms and noise,
  :mod:`dpkit.accounting.events`), from public parameters only; its
  ``budget()`` equals ``cost(query)`` exactly, and the ledger records it;
* ``release(query, engine, rng)`` — the only step that reads data; the proof
  (guarantee, neighbouring relation, sensitivity argument) is ``proof``, the
  docstring of the module that defines the release;
* ``expected_error(query, level)`` — the error bar the release will have
  (:class:`ExpectedError`), said before anything is spent: a pure function of
  public parameters (ε, δ, bounds, bins, level, ``k``), reading no data.

:class:`Kind` is the one implementation the built-in kinds use; the registry
(:data:`dpkit.tables.kinds.REGISTRY`) accepts any object with these attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

from dpkit._checks import check_level, exact
from dpkit.accounting import Budget
from dpkit.accounting.events import (
    ComposedEvent,
    EpsilonDeltaEvent,
    GeometricEvent,
    LaplaceEvent,
    PrivacyEvent,
    as_event,
)
from dpkit.tables.engines.base import Engine
from dpkit.tables.validation import TableContext, ValidatedQuery

__all__ = [
    "COMMON",
    "ExpectedError",
    "Kind",
    "Parameter",
    "QueryKind",
    "label_with",
    "parameter",
    "pure",
    "selection",
    "settle",
]

_REQUIRED = object()


@dataclass(frozen=True)
class ExpectedError:
    """The error bar a query's release will have, known before spending (public parameters only).

    With probability at least ``level`` (per released value):

    * ``half_width``: the answer is within ``± half_width`` of the exact
      (clipped) answer, in the answer's units (``unit="value"``), or its rank
      is within that many rows of the target's (``unit="rows"``, quantiles),
      or the chosen value's count is within that many of the largest
      (``unit="count"``, mode);
    * ``per_row``: the error is about ``per_row / n`` for ``n`` rows counted
      (means), or ``sqrt(per_row / n)`` (standard deviations); ``n`` is
      private, so the bar is stated as a function of it;
    * neither: no public bar (a data-adaptive histogram method); ``text`` says so.

    ``text`` is the sentence the web page and the CLI show.
    """

    level: float
    text: str
    half_width: float | None = None
    per_row: float | None = None
    unit: str = "value"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (what the dry run returns as ``expected_error``)."""
        return {
            "level": self.level,
            "half_width": self.half_width,
            "per_row": self.per_row,
            "unit": self.unit,
            "text": self.text,
        }


def percent(level: float) -> str:
    """``0.95`` -> ``"95%"`` (``"99.5%"`` when it needs a decimal)."""
    return f"{level * 100:.4g}%"


def amount(x: float) -> str:
    """A half-width for a sentence: 3 significant digits, no exponent below a trillion."""
    rounded = float(f"{x:.3g}")
    if 1000 <= abs(rounded) < 1e12:
        return f"{rounded:,.0f}"
    return f"{rounded:.3g}"


@dataclass(frozen=True)
class Parameter:
    """One parameter of a query kind: how the methods show it and how JSON carries it.

    ``annotation`` is the Python type shown by ``help()``/IDEs; ``type`` the
    JSON hint served by ``GET /api/v1/query-kinds`` (``number``, ``integer``,
    ``string``, ``[lo, hi]``, ``list``, ``filter``, ...). ``positional``
    parameters come after the column in the method's signature (``q`` of
    ``quantile``, ``y`` of ``histogram2d``); ``spec_name`` is the
    :class:`~dpkit.tables.specs.QuerySpec` field when it differs from the
    method's argument name. ``check`` names the function that checks it (run
    by the kind's ``validate``, before any charge).
    """

    name: str
    doc: str
    type: str
    annotation: str = "Any"
    default: Any = None
    positional: bool = False
    spec_name: str | None = None
    check: Callable[..., Any] | None = None

    @property
    def field(self) -> str:
        """The spec's field this parameter fills."""
        return self.spec_name or self.name

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (public code facts)."""
        default = None if self.required else self.default
        return {
            "name": self.field,
            "doc": self.doc,
            "type": self.type,
            "required": self.required,
            "default": default,
        }


def parameter(name: str, doc: str, type: str, annotation: str = "Any", **more: Any) -> Parameter:
    """A parameter; ``required=True`` marks one without default (``epsilon``, ``q``)."""
    if more.pop("required", False):
        more["default"] = _REQUIRED
    return Parameter(name, doc, type, annotation, **more)


#: The parameters every grouped kind shares, in their spec order.
COMMON: tuple[Parameter, ...] = (
    parameter(
        "epsilon", "the privacy budget this query spends (ε > 0)", "number", "float", required=True
    ),
    parameter(
        "where",
        "a row filter: {column: value}, {column: [values]}, {column: [op, value]}",
        "filter",
        "Where",
    ),
    parameter(
        "group_by",
        "a column (or list of columns) to group by",
        "columns",
        "str | Sequence[str] | None",
    ),
    parameter(
        "keys",
        "the public group keys, 'private' (DP partition selection), or omitted (the "
        "schema's domains)",
        "list | 'private'",
    ),
    parameter(
        "delta",
        "δ spent by keys='private' (partition selection) only",
        "number",
        "float",
        default=0.0,
    ),
    parameter(
        "level",
        "the confidence level of the interval (default: the session's)",
        "number",
        "float | None",
    ),
)


@runtime_checkable
class QueryKind(Protocol):
    """The contract of one query kind (see the module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def summary(self) -> str: ...

    @property
    def doc(self) -> str:
        """The method's docstring: the guarantee in the analyst's terms."""

    @property
    def column(self) -> str:
        """The name of the method's first argument (``column``, or ``x``)."""

    @property
    def column_required(self) -> bool: ...

    @property
    def parameters(self) -> tuple[Parameter, ...]:
        """Besides the column, in spec order (``QuerySpec.params``, ``str(spec)``)."""

    @property
    def query_type(self) -> type[ValidatedQuery]: ...

    @property
    def proof(self) -> str: ...

    def validate(self, spec: Any, ctx: TableContext, common: dict[str, Any]) -> ValidatedQuery: ...

    def label(self, query: ValidatedQuery) -> str: ...

    def cost(self, query: ValidatedQuery) -> Budget: ...

    def event(self, query: ValidatedQuery) -> PrivacyEvent:
        """The release's privacy event (public parameters only); ``budget() == cost(query)``."""

    def release(self, query: Any, engine: Engine, rng: Any) -> Any: ...

    def expected_error(self, query: Any, level: float | None = None) -> ExpectedError:
        """The release's error bar from public parameters only (no data read)."""


def label_with(head: str, query: ValidatedQuery) -> str:
    """``head`` followed by the public filter and grouping (every kind's ledger label)."""
    text = head
    where = query.rows.where
    if where:
        text += " where " + " and ".join(
            f"{c.column} {c.op}" + ("" if c.value is None else f" {c.value!r}") for c in where
        )
    grouping = query.grouping
    if grouping is not None:
        text += f" by {', '.join(grouping.columns)}"
        text += (
            " (private keys)"
            if grouping.private
            else f" ({len(grouping.keys or ())} groups, parallel)"
        )
    return text


@dataclass(frozen=True)
class Kind:
    """A query kind built from functions (what the built-in kinds are).

    ``validate_query(spec, ctx, common)``, ``release_query(query, engine,
    rng)`` and ``error(query, level)`` (its :class:`ExpectedError`) are the
    kind's module functions; ``head(query)`` the start of its
    ledger label (default ``kind(column)``); ``module_doc`` the docstring of
    the module holding the release (the proof); ``parts(query)`` the privacy
    events of the release's steps, in the order they run (default: the one
    event its (ε, δ) stands for), which :meth:`event` settles against the cost.
    """

    name: str
    summary: str
    doc: str
    parameters: tuple[Parameter, ...]
    query_type: type[ValidatedQuery]
    validate_query: Callable[[Any, TableContext, dict[str, Any]], ValidatedQuery]
    release_query: Callable[[Any, Engine, Any], Any]
    module_doc: str
    column: str = "column"
    column_required: bool = True
    head: Callable[[Any], str] | None = None
    error: Callable[[Any, float], ExpectedError] | None = None
    parts: Callable[[Any], Sequence[PrivacyEvent]] | None = None

    @property
    def proof(self) -> str:
        """The privacy argument of the release (guarantee, neighbours, sensitivity)."""
        return self.module_doc

    def validate(self, spec: Any, ctx: TableContext, common: dict[str, Any]) -> ValidatedQuery:
        return self.validate_query(spec, ctx, common)

    def label(self, query: ValidatedQuery) -> str:
        if self.head is not None:
            return label_with(self.head(query), query)
        return label_with(f"{query.spec.kind}({query.spec.column or '*'})", query)

    def _gaussian_parts(self, query: ValidatedQuery) -> list[PrivacyEvent] | None:
        """The steps' events when some step adds Gaussian noise (``query.noise``), else None."""
        if self.parts is None or query.noise.laplace_only:
            return None
        events = list(self.parts(query))
        if all(e.budget().rho_declared is None for e in events):
            return None
        return events

    def cost(self, query: ValidatedQuery) -> Budget:
        """(ε, δ) as declared (δ only for private keys); with Gaussian steps, their charges' sum.

        A Gaussian step spending εᵢ is charged ``Budget(εᵢ', δ_n, rho=εᵢ²/2)``
        (:mod:`dpkit.tables.noise`): the query's cost is the sum of its steps'
        charges, exactly what its event states.
        """
        events = self._gaussian_parts(query)
        if events is not None:
            return _composed(events).budget()
        return Budget(query.epsilon, query.delta)

    def event(self, query: ValidatedQuery) -> PrivacyEvent:
        """The release's privacy event: its steps' events (``parts``) settled against the cost."""
        events = self._gaussian_parts(query)
        if events is not None:
            return _composed(events)
        cost = self.cost(query)
        if self.parts is None:
            return as_event(cost)
        return settle(self.parts(query), cost)

    def release(self, query: Any, engine: Engine, rng: Any) -> Any:
        return self.release_query(query, engine, rng)

    def expected_error(self, query: Any, level: float | None = None) -> ExpectedError:
        """The release's error bar at ``level`` (default: the query's), from public parameters."""
        level = query.level if level is None else check_level(level)
        if self.error is None:
            return ExpectedError(level, "no error bar is known for this kind before it runs.")
        return self.error(query, level)


def settle(parts: Sequence[PrivacyEvent], cost: Budget) -> PrivacyEvent:
    """The events of a release's steps, made to be charged as ``cost`` exactly.

    Budget splits round every part down (:func:`~dpkit.tables.queries.split_epsilon`),
    so the parts' budgets add up to at most the charge. The ε left over is
    added to the charge of the last Laplace-shaped part (a charge may exceed
    what its noise proves), else recorded as its own pure-ε event, so that
    ``settle(parts, cost).budget() == cost`` and the ledger's labels and totals
    stay what they were. One part is returned as itself, several as a
    :class:`~dpkit.accounting.events.ComposedEvent` (they run in sequence).
    """
    events = list(parts)
    spent = sum((e.budget() for e in events), Budget.zero())
    eps = cost.epsilon_exact - spent.epsilon_exact
    delta = cost.delta_exact - spent.delta_exact
    if eps < 0 or delta < 0 or cost.rho_declared is not None:
        raise AssertionError("a query's steps spend more than it is charged (a dpkit bug)")
    if eps > 0:
        for i in reversed(range(len(events))):
            e = events[i]
            if isinstance(e, LaplaceEvent | GeometricEvent):
                events[i] = replace(e, epsilon=e.budget().epsilon_exact + eps)
                eps = Fraction(0)
                break
    if eps > 0 or delta > 0:
        events.append(EpsilonDeltaEvent(eps, delta))
    return _composed(events)


def _composed(events: Sequence[PrivacyEvent]) -> PrivacyEvent:
    """One event as itself, several as a :class:`ComposedEvent` (they run in sequence)."""
    return events[0] if len(events) == 1 else ComposedEvent(tuple(events))


def selection(query: ValidatedQuery, epsilon: float) -> list[PrivacyEvent]:
    """The event of private partition selection at ``epsilon`` (with the query's δ), if any.

    Noisy counts above a threshold are (ε, δ)-DP as a whole
    (:func:`~dpkit.tables.queries.partition_threshold`): known by its (ε, δ) only.
    """
    grouping = query.grouping
    if grouping is None or not grouping.private:
        return []
    return [EpsilonDeltaEvent(exact(epsilon), exact(query.delta))]


def pure(epsilon: float) -> PrivacyEvent:
    """A step known only as ε-DP (exponential mechanism, a data-adaptive publisher)."""
    return EpsilonDeltaEvent(exact(epsilon))
