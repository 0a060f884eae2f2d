"""The workload-aware default: pick the algorithm from public parameters only.

The rule is a function of the number of unit bins n, epsilon, a public bound
on the number of records (the scale) and the workload; it never looks at the
counts, so choosing costs nothing. It was derived from
``benchmarks/histograms_dpbench.py`` (DPBench's protocol on the shared data's
shapes); the table behind it is in ``docs/histograms.md``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from numpy.typing import ArrayLike

from dpkit.errors import InvalidParameterError
from dpkit.histograms._common import check_counts, check_positive, epsilon_of
from dpkit.histograms._published import PublishedHistogram
from dpkit.histograms._workload import WORKLOADS

#: Records per unit bin times epsilon below which the data-aware DAWA is chosen.
#: On the benchmark's grid the signal s·epsilon/n takes the values 0.01 .. 9,766
#: in factors of 10; any threshold between 10 and 97 gives the same choices, and
#: this one the best (141 of 150 cells within 1.2x of the best algorithm).
DAWA_BELOW = 50.0


def choose_method(n: int, epsilon: float, max_records: float | None, workload: str) -> str:
    """The algorithm :func:`auto` runs: ``"dawa"`` or ``"hb"`` (a public rule).

    With s records spread over n bins, s·epsilon/n is the typical count of a
    bin in units of the noise scale. Below :data:`DAWA_BELOW` the noise is
    large next to the counts and DAWA's data-aware buckets pay off; above it
    the counts are resolved well enough that a consistent tree (Hb, flat for
    single-bin workloads) is best — except on very sparse, skewed data, where
    DAWA stays ahead (up to 1.56x on the benchmark's ``fare`` shape), which a
    rule blind to the data cannot see. Without ``max_records`` DAWA is used: it is
    never far from the best when the counts are large, while Hb can be far
    from it when they are small.
    """
    if workload not in WORKLOADS:
        raise InvalidParameterError(f"workload must be one of {', '.join(WORKLOADS)}.")
    if max_records is None:
        return "dawa"
    signal = max_records * epsilon / n
    return "dawa" if signal < DAWA_BELOW else "hb"


def auto(
    counts: ArrayLike,
    epsilon: float,
    *,
    max_records: float | None = None,
    workload: str = "ranges",
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
) -> PublishedHistogram:
    """Publish with the algorithm :func:`choose_method` picks for these public parameters.

    Privacy: epsilon-DP for add/remove one row: the choice depends on n,
    epsilon, ``max_records`` and ``workload`` only (all public), and the chosen
    publisher is epsilon-DP (see :func:`dpkit.histograms.dawa` and
    :func:`dpkit.histograms.hb`).

    Args:
        counts, epsilon, rng, accountant, edges: as for :func:`dpkit.histograms.laplace`.
        max_records: a public upper bound on the number of records (e.g. the
            size of the population the table is drawn from); never from the data.
        workload: the queries you will ask: ``"ranges"`` (default),
            ``"prefixes"`` (cumulative counts) or ``"units"`` (single bins).
    """
    from dpkit.histograms.dawa import dawa
    from dpkit.histograms.hb import hb

    x = check_counts(counts)
    eps = epsilon_of(epsilon)
    bound = None if max_records is None else check_positive(max_records, "max_records")
    method = choose_method(x.size, eps, bound, workload)
    publisher = dawa if method == "dawa" else hb
    published = publisher(x, eps, workload=workload, rng=rng, accountant=accountant, edges=edges)
    details = dict(published.details, auto_choice=method, max_records=bound)
    return dataclasses.replace(published, details=details)
