"""Differentially private histograms over a sequence of unit-bin counts.

The publishers share one contract: ``f(counts, epsilon, *, rng=None, ...)`` returns
a :class:`PublishedHistogram` with ``.estimates`` (one value per unit bin),
``.bins`` (the published boundaries), ``.epsilon``, ``.errors`` and
``.answer(left, right)`` for range counts.

* :func:`laplace` — Lap(1/epsilon) on every unit bin (the baseline).
* :func:`hierarchical` — a b-ary tree of noisy counts made consistent
  (Hay et al. 2010): the strong baseline for long ranges.
* :func:`noise_first` — noisy counts, then the optimal merge (Xu et al. 2013).
* :func:`structure_first` — a private optimal structure, then noisy bins
  (Xu et al. 2013).
* :func:`hb` — the tree with its branching chosen for the workload (Qardaji et al. 2013).
* :func:`ahp` — noisy counts clustered by value, one total per cluster (Zhang et al. 2014).
* :func:`dawa` — a private data-aware partition, then its buckets measured for
  the workload (Li et al. 2014).
* :func:`matrix_mechanism` — a strategy optimised for the workload (HDMM's
  p-Identity), measured with Laplace noise, least squares; exact errors.
* :func:`auto` — the default: picks DAWA or Hb from public parameters
  (:func:`choose_method`) and, at high signal, a private concentration probe
  with 1% of epsilon (both derived from the DPBench-style benchmark).

Two-dimensional histograms (an ``nx × ny`` grid of unit cells over two public
axes) return a :class:`PublishedGrid` with rectangle queries
``.answer(x_lo, x_hi, y_lo, y_hi)`` and a heat map ``.plot()``:

* :func:`laplace2d` — Lap(1/epsilon) on every unit cell (the baseline).
* :func:`ugrid` — a uniform grid sized for N and epsilon (Qardaji et al. 2013).
* :func:`agrid` — a coarse grid, each cell split by its noisy count (ibid.).
* :func:`dawa2d` — DAWA over the cells in Hilbert-curve order (Li et al. 2014).
* :func:`matrix_mechanism2d` — Kronecker products of the optimised 1-D
  strategies for rectangle workloads (HDMM); exact errors.
* :func:`auto2d` — the default: AGrid, or 2-D Laplace when counts are large
  (:func:`choose_grid_method`, from the California benchmark).

:mod:`dpkit.histograms.methods` lists every publisher once, by its one name
(``PUBLISHERS_1D``, ``PUBLISHERS_2D``); :func:`publisher` looks one up.

Every publisher is epsilon-DP for datasets differing in one row (one unit count
changes by 1); its docstring gives the sensitivity argument. See
``docs/histograms.md`` for the evaluation on real data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._lazy import lazy_exports

if TYPE_CHECKING:
    from dpkit.histograms import methods
    from dpkit.histograms._grid import PublishedGrid
    from dpkit.histograms._optimal import interval_costs, optimal_histogram
    from dpkit.histograms._published import PublishedHistogram, answer
    from dpkit.histograms.ahp import ahp
    from dpkit.histograms.dawa import dawa
    from dpkit.histograms.dawa2d import dawa2d
    from dpkit.histograms.grids import agrid, auto2d, choose_grid_method, laplace2d, ugrid
    from dpkit.histograms.hb import hb
    from dpkit.histograms.hierarchical import hierarchical
    from dpkit.histograms.laplace import laplace
    from dpkit.histograms.matrix_mechanism import matrix_mechanism
    from dpkit.histograms.matrix_mechanism2d import matrix_mechanism2d
    from dpkit.histograms.methods import publisher
    from dpkit.histograms.noise_first import noise_first
    from dpkit.histograms.select import auto, choose_method
    from dpkit.histograms.structure_first import structure_first

__all__ = [
    "PublishedGrid",
    "PublishedHistogram",
    "agrid",
    "ahp",
    "answer",
    "auto",
    "auto2d",
    "choose_grid_method",
    "choose_method",
    "dawa",
    "dawa2d",
    "hb",
    "hierarchical",
    "interval_costs",
    "laplace",
    "laplace2d",
    "matrix_mechanism",
    "matrix_mechanism2d",
    "methods",
    "noise_first",
    "optimal_histogram",
    "publisher",
    "structure_first",
    "ugrid",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "PublishedGrid": "dpkit.histograms._grid",
        "PublishedHistogram": "dpkit.histograms._published",
        "agrid": "dpkit.histograms.grids",
        "ahp": "dpkit.histograms.ahp",
        "answer": "dpkit.histograms._published",
        "auto": "dpkit.histograms.select",
        "auto2d": "dpkit.histograms.grids",
        "choose_grid_method": "dpkit.histograms.grids",
        "choose_method": "dpkit.histograms.select",
        "dawa": "dpkit.histograms.dawa",
        "dawa2d": "dpkit.histograms.dawa2d",
        "hb": "dpkit.histograms.hb",
        "hierarchical": "dpkit.histograms.hierarchical",
        "interval_costs": "dpkit.histograms._optimal",
        "laplace": "dpkit.histograms.laplace",
        "laplace2d": "dpkit.histograms.grids",
        "matrix_mechanism": "dpkit.histograms.matrix_mechanism",
        "matrix_mechanism2d": "dpkit.histograms.matrix_mechanism2d",
        "methods": "dpkit.histograms.methods",
        "noise_first": "dpkit.histograms.noise_first",
        "optimal_histogram": "dpkit.histograms._optimal",
        "publisher": "dpkit.histograms.methods",
        "structure_first": "dpkit.histograms.structure_first",
        "ugrid": "dpkit.histograms.grids",
    },
)
