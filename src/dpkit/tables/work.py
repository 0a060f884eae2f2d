"""How much work a query is and how large its answer, from its public parameters; and cancelling it.

Availability is part of the guarantee a shared service gives: one cheap,
valid query must not keep a dataset busy for minutes. So every query is
sized **before it is charged**, from what :func:`~dpkit.tables.kinds.validate`
already checked — the statistic, the number of bins, 2-D cells, domain
values, public keys and quantile grid points, the histogram method, and the
number of rows the data owner *declared* (never the table's real row count)
— and refused beyond a limit (:class:`WorkLimits`) with a message that names
the parameter to reduce. Nothing here reads data, so the refusal is the same
for every dataset and costs nothing.

The estimate is in *work units*, about one microsecond of one core each. Its
constants were measured on this project's 2-core machine (ε = 0.001, Poisson
counts): DAWA took 0.29 s at 2**14 bins, 1.4 s at 2**15 and 3.4 s at 2**16
(about quadratic: 2**20 bins would take a quarter of an hour), ``dawa2d`` the
same on its cells; StructureFirst 0.9 s at 2**14 and 7.9 s at 2**16 (it grows
with ``n · k``); Laplace, hierarchical, Hb and AHP 1–1.8 µs per bin; the 2-D
grids under 1 µs per cell; assembling and JSON-encoding a release about 12 µs
per bin. They are rounded up, and the methods that are superlinear in the bins
are modelled by their worst case over every branch a data-dependent choice
could take (``auto`` may run DAWA):

=====================================  ==============================================
method                                 units for ``n`` bins (per group)
=====================================  ==============================================
none (geometric noise)                 ``3 n``
laplace, hierarchical, hb, ahp         ``6 n + 200 000``
noise_first                            ``25 n + 200 000``
structure_first (``k`` its bins)       ``20 n + 1.5 n k + 200 000``
dawa, auto (1-D); dawa2d (cells)       ``20 n + 0.001 n^2 + 200 000``
laplace2d, ugrid, agrid, auto2d        ``2 n + 200 000`` (``n`` cells)
=====================================  ==============================================

plus about 12 units per released bin or cell (assembling the release and
encoding it), 20 per group, and 0.05 per declared row (one engine pass). The
answer size is about 64 bytes per released bin or cell and 256 per group.

Private keys (``keys="private"``) release data-dependent groups: their count
is bounded by the declared rows (each group holds at least one row); a
dataset without declared rows is estimated as one group, so declare ``rows``
for datasets that take private-key queries with many bins.

:class:`Cancellation` stops a query whose time is up: engine calls not yet
started are refused, a running one is interrupted (DuckDB ``interrupt()``,
Spark ``cancelJobGroup``); the session holds its dataset's lock only while an
engine call runs, so the post-processing of an abandoned query never holds the
dataset for the next one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dpkit.errors import InvalidParameterError
from dpkit.tables.kinds.histogram import HistogramQuery
from dpkit.tables.kinds.histogram2d import Histogram2DQuery
from dpkit.tables.kinds.mode import ModeQuery
from dpkit.tables.kinds.quantile import QuantileQuery
from dpkit.tables.validation import ValidatedQuery

__all__ = [
    "LIBRARY_LIMITS",
    "Cancellation",
    "QueryCancelledError",
    "QueryTooLargeError",
    "WorkEstimate",
    "WorkLimits",
    "estimate",
    "estimate_all",
    "presize",
]

_BASE = 2_000.0  # validation, costing, the charge and one engine round trip
_METHOD_BASE = 200_000.0  # a histogram method's fixed set-up
_PER_CELL = 12.0  # assembling and encoding one released bin or cell
_PER_GROUP = 20.0
_PER_ROW = 0.05  # one engine pass over a declared row
_BYTES_PER_CELL = 64
_BYTES_PER_GROUP = 256
_BYTES_BASE = 2_048


class QueryTooLargeError(InvalidParameterError):
    """A query whose estimated work or answer size is beyond the limit (refused before the charge)."""


class QueryCancelledError(InvalidParameterError):
    """An engine call refused or interrupted because the query's time was up."""


@dataclass(frozen=True)
class WorkEstimate:
    """A query's estimated work (units of about 1 µs of one core) and answer size (bytes).

    ``driver`` names the public parameter that dominates the work, ``cells`` the
    released bins/cells/values; both go into refusal messages.
    """

    units: float
    answer_bytes: int
    driver: str
    cells: int = 1

    def __add__(self, other: WorkEstimate) -> WorkEstimate:
        first = self if self.units >= other.units else other
        return WorkEstimate(
            self.units + other.units,
            self.answer_bytes + other.answer_bytes,
            first.driver,
            self.cells + other.cells,
        )


@dataclass(frozen=True)
class WorkLimits:
    """The most work (units of about 1 µs) and answer bytes one query (or plan) may take.

    ``rows`` is the number of rows the data owner declares the table has at
    most (public metadata; never counted from the data): it sizes the engine's
    pass and bounds private-key groups. ``None`` leaves either limit off.
    """

    max_work: float | None = None
    max_answer_bytes: int | None = None
    rows: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_work", "max_answer_bytes", "rows"):
            value = getattr(self, name)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise InvalidParameterError(f"{name} must be a finite number > 0, or None.")

    def check(self, est: WorkEstimate, what: str = "this query") -> None:
        """Refuse ``est`` beyond the limits, naming what to reduce (public; before the charge)."""
        if self.max_work is not None and est.units > self.max_work:
            raise QueryTooLargeError(
                f"{what} is estimated at {est.units / 1e6:,.1f} s of work, more than the "
                f"{self.max_work / 1e6:,.1f} s one query may take here; reduce {est.driver} "
                "(or split the query)."
            )
        if self.max_answer_bytes is not None and est.answer_bytes > self.max_answer_bytes:
            raise QueryTooLargeError(
                f"{what}'s answer would be about {_size(est.answer_bytes)} ({est.cells:,} "
                f"released values), more than the {_size(int(self.max_answer_bytes))} one "
                "answer may take here; ask for fewer bins, cells or keys (or split the query)."
            )


#: The library's default: generous (about three hours of work, 1 GiB answers), but finite.
LIBRARY_LIMITS = WorkLimits(max_work=1e10, max_answer_bytes=2**30)


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 2**10:,.0f} KiB"


def method_units(
    method: str | None, n: int, *, epsilon: float = 1.0, max_count: float | None = None
) -> float:
    """Work units of one histogram method over ``n`` bins (or cells), the worst branch.

    StructureFirst's work grows with ``n · k``, ``k`` its public default number of
    bins (a function of ``n``, ``epsilon`` and ``max_count``).
    """
    if method in ("dawa", "auto", "dawa2d"):
        return 20.0 * n + 0.001 * float(n) ** 2 + _METHOD_BASE
    if method == "structure_first":
        from dpkit.histograms.structure_first import default_n_bins

        k = default_n_bins(n, epsilon, max_count)
        return 20.0 * n + 1.5 * float(n) * k + _METHOD_BASE
    if method == "noise_first":
        return 25.0 * n + _METHOD_BASE
    if method in ("laplace2d", "ugrid", "agrid", "auto2d"):
        return 2.0 * n + _METHOD_BASE
    if method is None:
        return 3.0 * n
    return 6.0 * n + _METHOD_BASE


def estimate(query: ValidatedQuery, *, rows: int | None = None) -> WorkEstimate:
    """The work and answer size of a validated query, from its public parameters only.

    ``rows`` is the row count the data owner declared (None: not declared).
    """
    grouping = query.grouping
    if grouping is None:
        groups, group_driver = 1, ""
    elif grouping.private:
        groups = max(1, int(rows)) if rows is not None else 1
        group_driver = "the declared rows (private keys: one group per row at most)"
    else:
        groups = len(grouping.keys or ())
        group_driver = "the number of keys"
    units = _BASE + _PER_GROUP * groups + (0.0 if rows is None else _PER_ROW * rows)
    per_group_cells = 1
    driver = group_driver or "the query"
    if isinstance(query, HistogramQuery):
        width = len(query.domain) if query.domain is not None else len(query.edges or ()) - 1
        per_group_cells = width
        eps = query.epsilon / max(1, query.max_contributions)
        per_group = method_units(query.method, width, epsilon=eps, max_count=query.max_count)
        units += groups * (per_group + _PER_CELL * width)
        what = "the number of domain values" if query.domain is not None else "bins"
        method = "" if query.method is None else f" (method={query.method!r})"
        driver = f"{what}{method}" + (f" or {group_driver}" if group_driver else "")
    elif isinstance(query, Histogram2DQuery):
        cells = (len(query.edges) - 1) * (len(query.edges2) - 1)
        per_group_cells = cells
        units += method_units(query.method, cells) + _PER_CELL * cells
        driver = f"the bins per axis (method={query.method!r})"
    elif isinstance(query, QuantileQuery):
        grid = 2 * int(query.grid_size or 2) - 1
        units += groups * 4.0 * grid
        driver = "grid_size" + (f" or {group_driver}" if group_driver else "")
    elif isinstance(query, ModeQuery):
        domain = len(query.domain or ())
        units += groups * 5.0 * domain
        driver = "the domain" + (f" or {group_driver}" if group_driver else "")
    elif rows is not None and groups == 1:
        driver = "the declared rows (filters cannot shrink a pass)"
    cells = groups * per_group_cells
    answer = _BYTES_BASE + groups * _BYTES_PER_GROUP + cells * _BYTES_PER_CELL
    if isinstance(query, ModeQuery):
        answer += len(query.domain or ()) * _BYTES_PER_CELL // 2  # the domain's labels
    return WorkEstimate(float(units), int(answer), driver, int(cells))


def presize(spec: Any, *, rows: int | None = None) -> WorkEstimate:
    """A lower bound of :func:`estimate` read from a spec's raw sizes, before validation.

    Validation itself builds the bins' edges, the keys and the grid, so a spec
    asking for 2**24 bins would cost seconds before :func:`estimate` could refuse
    it. This reads only the sizes the spec states (``bins``, ``grid_size``, the
    lengths of ``keys`` and ``domain``) and the method; anything malformed counts
    as small and is left to validation to refuse.
    """

    def size(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

    keys = getattr(spec, "keys", None)
    groups = len(keys) if isinstance(keys, tuple | list) else 1
    units = _BASE + _PER_GROUP * groups
    kind, method = getattr(spec, "kind", None), getattr(spec, "method", None)
    method = method if isinstance(method, str) else None
    bins, cells, driver = getattr(spec, "bins", None), 1, "the query"
    raw_domain = getattr(spec, "domain", None)
    domain: tuple[Any, ...] = tuple(raw_domain) if isinstance(raw_domain, tuple | list) else ()
    if kind == "histogram":
        width = size(bins) if bins is not None else max(1, len(domain))
        cells = groups * width
        # StructureFirst's k at its smallest (k = 1): a lower bound whatever ε and max_count
        least = method_units(method, width, epsilon=1e-300, max_count=1)
        units += groups * (least + _PER_CELL * width)
        driver = "bins" + ("" if method is None else f" (method={method!r})")
    elif kind == "histogram2d":
        per_axis = bins if isinstance(bins, tuple | list) and len(bins) == 2 else (bins, bins)
        cells = size(per_axis[0]) * size(per_axis[1]) if bins is not None else 1
        units += method_units(method or "auto2d", cells) + _PER_CELL * cells
        driver = "the bins per axis"
    elif kind in ("quantile", "median", "min", "max"):
        units += groups * 4.0 * (2 * size(getattr(spec, "grid_size", None)) - 1)
        driver = "grid_size"
    elif kind == "mode" and domain:
        units += groups * 5.0 * len(domain)
        driver = "the domain"
    if groups > 1:
        driver += " or the number of keys"
    answer = _BYTES_BASE + groups * _BYTES_PER_GROUP + cells * _BYTES_PER_CELL
    return WorkEstimate(float(units), int(answer), driver, int(cells))


def _is_seq(value: Any) -> bool:
    return isinstance(value, tuple | list)


def estimate_all(queries: Iterable[ValidatedQuery], *, rows: int | None = None) -> WorkEstimate:
    """The sum of the estimates of several queries (a plan runs them one after another)."""
    total = WorkEstimate(0.0, 0, "the number of queries", 0)
    for q in queries:
        total = total + estimate(q, rows=rows)
    return total


# ------------------------------------------------------------------------------- cancelling


class Cancellation:
    """A query's stop switch: set it (from any thread) when the query's time is up.

    After :meth:`cancel`, every engine call the query has not started yet is
    refused, and the one it is running (if any) is interrupted through the
    engine's ``interrupt()``. The query then fails after its charge with the one
    generic error every post-charge failure gives, whatever the data.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._state = threading.Lock()
        self._running: Any = None

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()
        with self._state:
            if self._running is not None:
                interrupt = getattr(self._running, "interrupt", None)
                if callable(interrupt):
                    try:
                        interrupt()
                    except Exception:  # best effort: the flag stops the rest
                        pass

    def _enter(self, engine: Any) -> None:
        with self._state:
            if self._event.is_set():
                raise QueryCancelledError("the query's time is up.")
            self._running = engine

    def _leave(self) -> None:
        with self._state:
            self._running = None


class GuardedEngine:
    """An engine whose calls hold ``lock`` (one engine pass at a time) and obey a cancellation.

    Only the engine call holds the lock: the post-processing around it (noise,
    histogram methods) runs without it, so a query abandoned after a time-out
    never keeps the dataset from the next one.
    """

    def __init__(self, engine: Any, lock: Any, cancellation: Cancellation | None) -> None:
        self._engine, self._lock, self._cancellation = engine, lock, cancellation

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._engine, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        return self._guarded(attr)

    def _guarded(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                c = self._cancellation
                if c is None:
                    return method(*args, **kwargs)
                c._enter(self._engine)
                try:
                    return method(*args, **kwargs)
                finally:
                    c._leave()

        return call
