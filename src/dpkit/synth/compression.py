"""Cells merged by the released one-way marginals: fewer, larger cells for the later measurements.

After the one-way marginals are released, each column's cells whose noisy
count is below :data:`SUPPORT_SIGMAS` times its noise σ are merged into one
cell for every later measurement (MST's pair marginals and selection; AIM's
rounds with :data:`dpkit.synth.aim.MERGE_RARE_CELLS`), as in the reference code of MST (McKenna et al. 2021,
``compress_domain``). The merge is a function of released values only, so it
is post-processing: it changes no guarantee. Merged counts are exact sums of
the engine's counts, and one row still moves exactly one merged cell by 1
(ℓ1 and ℓ2 sensitivity 1), so every mechanism keeps its calibration.

Why: a marginal with c cells carries c independent noises. At low signal
most cells of a wide column (16 bins, a sparse tail) are empty or nearly so;
measuring them one by one adds noise that the model must then spread over
the table. Merged, they cost one noise. What the merged cells hold is still
told apart by the one-way marginals (measured on every cell): the graphical
model stays over the full declared cells (labels, sampling and the report do
not change), and a merged measurement enters its fit through the linear query
:class:`GroupedQuery` (the sum of the cells it merges).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

__all__ = ["SUPPORT_SIGMAS", "GroupedQuery", "cell_maps", "grouped", "merged_cells", "merges_of"]

_Cell = TypeVar("_Cell", bound=np.generic)

#: A cell is kept on its own when its noisy one-way count is at least this many σ (the reference
#: code's threshold); the others of its column are merged into one cell.
SUPPORT_SIGMAS = 3


def merged_cells(noisy: NDArray[np.int64], sigma: float) -> NDArray[np.int64] | None:
    """A column's map from code to merged cell, or ``None`` when no two cells merge.

    Kept cells (noisy count ``>= SUPPORT_SIGMAS·σ``) are numbered first in code
    order, the merged cell last. A function of a released marginal only.
    """
    keep = noisy.ravel() >= SUPPORT_SIGMAS * sigma
    if int((~keep).sum()) < 2:
        return None
    out = np.empty(keep.size, dtype=np.int64)
    out[keep] = np.arange(int(keep.sum()))
    out[~keep] = int(keep.sum())
    return out


def merges_of(one_way: Sequence[Any]) -> dict[str, NDArray[np.int64]]:
    """Every column's merge map from its released one-way measurement (columns with merges only)."""
    out = {}
    for m in one_way:
        cells = merged_cells(m.noisy, m.sigma)
        if cells is not None:
            out[m.columns[0]] = cells
    return out


def grouped(counts: NDArray[_Cell], maps: Sequence[NDArray[np.int64] | None]) -> NDArray[_Cell]:
    """``counts`` summed into merged cells along each axis (``None``: the axis as it is)."""
    out = counts
    for axis, m in enumerate(maps):
        if m is None:
            continue
        shape = list(out.shape)
        shape[axis] = int(m.max()) + 1
        summed = np.zeros(shape, dtype=out.dtype)
        index: list[Any] = [slice(None)] * out.ndim
        index[axis] = m
        np.add.at(summed, tuple(index), out)
        out = summed
    return out


def cell_maps(
    columns: Sequence[str], merges: Mapping[str, NDArray[np.int64]]
) -> tuple[NDArray[np.int64] | None, ...]:
    """Each of ``columns``' merge map (``None`` for a column with no merged cells)."""
    return tuple(merges.get(c) for c in columns)


@dataclasses.dataclass(frozen=True, eq=False)
class GroupedQuery:
    """An ``mbi`` linear query: a clique's cells summed into merged cells (``matrix @ x``).

    ``matrix`` is 0/1 with one 1 per column (each cell in one merged cell), so
    ``matrix·matrixᵀ`` is diagonal with the merged cells' sizes: the squared
    operator norm is the largest of them.
    """

    matrix: NDArray[np.float64]

    @classmethod
    def of(cls, sizes: Sequence[int], maps: Sequence[NDArray[np.int64] | None]) -> GroupedQuery:
        """The query for a clique of these cell numbers and merge maps (in the clique's order).

        The same arguments give the same object: mbi compiles a fit once per set
        of queries (compared by identity), and AIM refits after every round.
        """
        key = tuple(
            (int(size), None if m is None else tuple(int(x) for x in m))
            for size, m in zip(sizes, maps)
        )
        return _grouped_query(key)

    def __call__(self, f: Any) -> Any:
        import jax.numpy as jnp

        return jnp.asarray(self.matrix) @ f.datavector()

    def op_norm_sq(self) -> float:
        return float(self.matrix.sum(axis=1).max())

    # Identity-based hash and equality (an array is not hashable), as mbi's own WeightedQuery.
    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


@functools.lru_cache(maxsize=1024)
def _grouped_query(key: tuple[tuple[int, tuple[int, ...] | None], ...]) -> GroupedQuery:
    parts = []
    for size, cells in key:
        codes = np.arange(size) if cells is None else np.asarray(cells, dtype=np.int64)
        one_hot = np.zeros((int(codes.max()) + 1, size))
        one_hot[codes, np.arange(size)] = 1.0
        parts.append(one_hot)
    matrix: NDArray[np.float64] = parts[0]
    for p in parts[1:]:
        matrix = np.asarray(np.kron(matrix, p), dtype=np.float64)
    return GroupedQuery(matrix)
