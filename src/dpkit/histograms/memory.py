"""Memory a publisher will allocate, from public parameters only (checked before the charge).

Shared with the tables' histograms (:mod:`dpkit.tables.kinds.histogram`).
"""

from __future__ import annotations

from dpkit._checks import MEMORY_CEILING
from dpkit.errors import InvalidParameterError
from dpkit.histograms._segmentation import sse_rows_memory

#: Bytes per (n+1)² entry of the reference interval-cost tables (SAE ranks, sums, costs).
_QUADRATIC = 56
#: Bytes per entry of the matrix mechanism's p × n strategy while it is optimised
#: (L-BFGS-B's history, the gradient, the Woodbury products; ~100 measured at n = 65,536).
_STRATEGY = 128


def memory_needed(
    method: str,
    n: int,
    n_bins: int | None = None,
    *,
    statistic: str = "mean",
    selection: str = "paper",
    sampler: str = "paper",
    rows: int | None = None,
) -> int:
    """Upper estimate of the bytes ``method`` allocates for ``n`` unit bins.

    SSE methods run the pruned dynamic programme (:mod:`._segmentation`) in
    O(n) memory per row; the median (SAE) variants and the joint sampler still
    build (n+1)² tables. ``n_bins=None`` means the worst case the method may
    reach (n bins). ``rows``: the matrix mechanism's p (None: its default).
    """
    name = method  # the registry's one spelling (dpkit.histograms.methods)
    linear = 256 * (n + 1)
    k = n if n_bins is None else n_bins
    if name == "noise_first":
        if statistic == "median":
            return _QUADRATIC * (n + 1) ** 2 + 16 * (k + 1) * (n + 1)
        if n_bins is None and selection == "paper":
            return linear
        return linear + sse_rows_memory(n, k, "starts")
    if name == "structure_first":
        if k in (1, n):
            return linear
        if statistic == "median" or sampler == "joint":
            return _QUADRATIC * (n + 1) ** 2 + 16 * (k + 1) * (n + 1)
        return linear + sse_rows_memory(n, k - 1, "values")
    if name == "matrix_mechanism":
        from dpkit.histograms._strategy_l1 import rows_for

        p = rows_for(n) if rows is None else rows
        return linear + _STRATEGY * n * (p + 1)
    return linear


def check_memory(needed: int, what: str, hint: str) -> None:
    """Refuse a release whose arrays would not fit in :data:`MEMORY_CEILING` (public check)."""
    if needed > MEMORY_CEILING:
        raise InvalidParameterError(
            f"{what} would need about {needed / 2**30:.1f} GiB of memory, more than the "
            f"{MEMORY_CEILING // 2**30} GiB a release may use; {hint}"
        )
