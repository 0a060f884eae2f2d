"""The one list of histogram publishers: their names, shapes and options.

Every place that selects a publisher by name — ``Session.histogram(method=...)``,
``Session.histogram2d(method=...)``, ``dpkit histogram --method``, the HTTP
service, :func:`dpkit.histograms.auto` and :func:`dpkit.histograms.auto2d` —
looks it up here, so a name is spelled one way (snake_case, the function's own
name) and listed once.

Importing this module is cheap: the publishers' modules (numba, scipy) are
imported when :attr:`Publisher.publish` is first read, not when a name is
checked.

How to add a publisher: write ``def mine(counts, epsilon, *, rng=None,
accountant=None, edges=None) -> PublishedHistogram`` in
``dpkit/histograms/mine.py`` (its docstring states the guarantee, the
neighbouring relation and the sensitivity argument), then add one line to
the ``_PUBLISHERS_1D`` table below (or call :func:`register` from outside the
package, e.g. in an experiment)::

    Publisher("mine", 1, "dpkit.histograms.mine", frozenset({"edges"}), "what it does"),

``tests/histograms/test_methods.py`` checks every entry's contract.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from dpkit.errors import InvalidParameterError

__all__ = ["PUBLISHERS_1D", "PUBLISHERS_2D", "Publisher", "publisher", "register", "unregister"]


@dataclasses.dataclass(frozen=True)
class Publisher:
    """One histogram publisher: ``publish(counts, epsilon, *, rng=None, accountant=None, **options)``.

    Attributes:
        name: its one spelling (snake_case), also the name of its function.
        dims: 1 (a vector of unit-bin counts -> :class:`PublishedHistogram`)
            or 2 (a grid of unit-cell counts -> :class:`PublishedGrid`).
        module: the module defining the function called ``name`` (imported
            when :attr:`publish` is first read).
        options: the optional keyword arguments it accepts beyond ``counts``,
            ``epsilon``, ``rng`` and ``accountant`` (e.g. ``"edges"``,
            ``"max_count"``, ``"max_records"``, ``"n_records"``).
        summary: one line for listings (``--help``, docs).
    """

    name: str
    dims: int
    module: str
    options: frozenset[str]
    summary: str
    #: the function itself, for a publisher registered from outside a module (else imported)
    function: Callable[..., Any] | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def publish(self) -> Callable[..., Any]:
        """The publishing function (its docstring holds the privacy argument)."""
        if self.function is not None:
            return self.function
        function: Callable[..., Any] = getattr(importlib.import_module(self.module), self.name)
        return function


def _table(entries: Iterable[Publisher]) -> dict[str, Publisher]:
    return {entry.name: entry for entry in entries}


_H = "dpkit.histograms."
_EDGES = frozenset({"edges"})
_XY = frozenset({"x_edges", "y_edges"})

_PUBLISHERS_1D = _table(
    [
        Publisher(
            "laplace", 1, _H + "laplace", _EDGES, "Laplace noise on every unit bin (the baseline)"
        ),
        Publisher(
            "hierarchical",
            1,
            _H + "hierarchical",
            _EDGES | {"branching"},
            "a b-ary tree of noisy counts made consistent (Hay et al. 2010)",
        ),
        Publisher(
            "noise_first",
            1,
            _H + "noise_first",
            _EDGES | {"n_bins", "statistic", "selection"},
            "noisy counts, then the optimal merge (Xu et al. 2013)",
        ),
        Publisher(
            "structure_first",
            1,
            _H + "structure_first",
            _EDGES | {"n_bins", "max_count", "structure_share", "statistic", "sampler"},
            "a private optimal structure, then noisy bins (Xu et al. 2013); needs max_count",
        ),
        Publisher(
            "hb",
            1,
            _H + "hb",
            _EDGES | {"workload"},
            "a tree with its branching chosen for the workload (Qardaji et al. 2013)",
        ),
        Publisher(
            "ahp",
            1,
            _H + "ahp",
            _EDGES | {"cluster_share", "eta"},
            "noisy counts clustered by value, one total per cluster (Zhang et al. 2014)",
        ),
        Publisher(
            "dawa",
            1,
            _H + "dawa",
            _EDGES | {"partition_share", "workload"},
            "a private data-aware partition, its buckets measured for the workload (Li et al. 2014)",
        ),
        Publisher(
            "matrix_mechanism",
            1,
            _H + "matrix_mechanism",
            _EDGES | {"workload", "rows", "noise", "delta", "rho"},
            "a strategy optimised for the workload, least squares (HDMM, McKenna et al. 2018)",
        ),
        Publisher(
            "auto",
            1,
            _H + "select",
            _EDGES | {"max_records", "workload"},
            "the default: DAWA or Hb by a public rule and, at high signal, a private probe",
        ),
    ]
)

_PUBLISHERS_2D = _table(
    [
        Publisher(
            "auto2d",
            2,
            _H + "grids",
            _XY | {"n_records", "count_share"},
            "the default: AGrid, or 2-D Laplace when counts are large",
        ),
        Publisher(
            "agrid",
            2,
            _H + "grids",
            _XY | {"n_records", "first_level_share", "count_share", "grid_constant"},
            "a coarse grid, each cell split by its noisy count (Qardaji et al. 2013)",
        ),
        Publisher(
            "ugrid",
            2,
            _H + "grids",
            _XY | {"n_records", "count_share", "grid_constant"},
            "a uniform grid sized for N and epsilon (Qardaji et al. 2013)",
        ),
        Publisher(
            "dawa2d",
            2,
            _H + "dawa2d",
            _XY | {"partition_share"},
            "DAWA over the cells in Hilbert-curve order (Li et al. 2014)",
        ),
        Publisher(
            "matrix_mechanism2d",
            2,
            _H + "matrix_mechanism2d",
            _XY | {"workload"},
            "optimised 1-D strategies per axis (Kronecker, HDMM), least squares, exact errors",
        ),
        Publisher(
            "laplace2d", 2, _H + "grids", _XY, "Laplace noise on every unit cell (the baseline)"
        ),
    ]
)

_BUILT_IN = frozenset(_PUBLISHERS_1D) | frozenset(_PUBLISHERS_2D)

#: 1-D publishers, in display order (``method=`` of ``Session.histogram``).
PUBLISHERS_1D: Mapping[str, Publisher] = MappingProxyType(_PUBLISHERS_1D)
#: 2-D publishers, in display order (``method=`` of ``Session.histogram2d``; ``auto2d`` first).
PUBLISHERS_2D: Mapping[str, Publisher] = MappingProxyType(_PUBLISHERS_2D)


def register(new: Publisher) -> Publisher:
    """Add a publisher (after the built-in ones); returns it.

    Its name must be new in both tables (one spelling everywhere); the Session,
    the service and the CLI accept it from then on.
    """
    if not isinstance(new, Publisher) or new.dims not in (1, 2):
        raise InvalidParameterError("register() takes a Publisher with dims 1 or 2.")
    if not new.name.isidentifier() or new.name in _PUBLISHERS_1D or new.name in _PUBLISHERS_2D:
        raise InvalidParameterError(
            f"a publisher needs a new snake_case name; {new.name!r} is not."
        )
    (_PUBLISHERS_1D if new.dims == 1 else _PUBLISHERS_2D)[new.name] = new
    return new


def unregister(name: str) -> None:
    """Remove a publisher added by :func:`register` (the built-in ones stay)."""
    if name in _BUILT_IN:
        raise InvalidParameterError(f"{name!r} is a built-in publisher.")
    _PUBLISHERS_1D.pop(name, None)
    _PUBLISHERS_2D.pop(name, None)


def publisher(name: str, *, dims: int = 1) -> Publisher:
    """The registered ``dims``-D publisher called ``name``.

    Raises:
        InvalidParameterError: unknown name (the message lists the names, and
            gives the right spelling for ``"noise-first"`` or a method of the
            other dimension).
    """
    if dims not in (1, 2):
        raise InvalidParameterError("dims must be 1 or 2.")
    table, other = (PUBLISHERS_1D, PUBLISHERS_2D) if dims == 1 else (PUBLISHERS_2D, PUBLISHERS_1D)
    if isinstance(name, str) and name in table:
        return table[name]
    names = ", ".join(repr(n) for n in table)
    hint = ""
    if isinstance(name, str):
        spelled = name.strip().lower().replace("-", "_")
        if spelled in table:
            hint = f" (write {spelled!r})"
        elif spelled in other:
            hint = f" ({spelled!r} is a {3 - dims}-D method)"
    kind = "histogram" if dims == 1 else "2-D histogram"
    raise InvalidParameterError(f"unknown {kind} method{hint}; choose one of {names}.")
