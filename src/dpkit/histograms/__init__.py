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
* :func:`auto` — the default: picks DAWA or Hb from public parameters
  (:func:`choose_method`, derived from the DPBench-style benchmark).

Every publisher is epsilon-DP for datasets differing in one row (one unit count
changes by 1); its docstring gives the sensitivity argument. See
``docs/histograms.md`` for the evaluation on real data.
"""

from dpkit.histograms._optimal import interval_costs, optimal_histogram
from dpkit.histograms._published import PublishedHistogram, answer
from dpkit.histograms.ahp import ahp
from dpkit.histograms.dawa import dawa
from dpkit.histograms.hb import hb
from dpkit.histograms.hierarchical import hierarchical
from dpkit.histograms.laplace import laplace
from dpkit.histograms.noise_first import noise_first
from dpkit.histograms.select import auto, choose_method
from dpkit.histograms.structure_first import structure_first

__all__ = [
    "PublishedHistogram",
    "ahp",
    "answer",
    "auto",
    "choose_method",
    "dawa",
    "hb",
    "hierarchical",
    "interval_costs",
    "laplace",
    "noise_first",
    "optimal_histogram",
    "structure_first",
]
