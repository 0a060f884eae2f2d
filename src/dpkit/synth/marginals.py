"""Marginals through the engine: GROUP BY counts of coded columns, as a dense array.

One engine pass per marginal (:meth:`coded_counts`): the engine computes each
row's codes and counts the cells; only the counts (at most the product of the
columns' cell numbers) come back to Python, never rows. The array covers the
full cross-product of the declared cells, in the fixed public order of the
codes, with 0 where no row falls — so its shape, and the order of its cells,
do not depend on the data. Adding or removing one row changes exactly one
cell by 1 (ℓ1 and ℓ2 sensitivity 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpkit.synth.domain import Attribute

__all__ = ["marginal"]


def marginal(engine: Any, attributes: Sequence[Attribute]) -> NDArray[np.int64]:
    """The exact counts of every cell of ``attributes`` (an array of their sizes)."""
    shape = tuple(a.size for a in attributes)
    frame = engine.coded_counts([a.coding for a in attributes])
    out = np.zeros(shape, dtype=np.int64)
    if len(frame):
        # Codes are in [0, size) by construction (SQL CASE); the clip only guards the indexing.
        index = tuple(
            np.clip(frame[f"c{i}"].to_numpy(dtype=np.int64), 0, size - 1)
            for i, size in enumerate(shape)
        )
        np.add.at(out, index, frame["n"].to_numpy(dtype=np.int64))
    return out
