"""Public settings of one regression tree and the statistics every regression fit shares.

Below both the provably private fit (``_criteria``) and the paper's algorithms
(``_paper``), so neither imports the other's module to reach them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from dpkit.trees.engine._growth import Tree


def regression_channels(y: NDArray[np.float64]) -> NDArray[np.float64]:
    """Per-row channels (1, y, y^2) summed by the core's histograms."""
    return np.stack([np.ones_like(y), y, y * y], axis=1)


def _sse(stats: NDArray[np.float64]) -> NDArray[np.float64]:
    n, s, q = stats[..., 0], stats[..., 1], stats[..., 2]
    sse = q - s * s / np.maximum(n, 1.0)
    return np.where(n > 0, np.maximum(sse, 0.0), 0.0)


@dataclass
class RegressionTreeSpec:
    """Public settings of one regression tree (all data-independent).

    ``algorithm``:
      * "paper": Table 1 of the regression-tree paper (Hoang & Thuc, 2020), literally (not provably DP, see docs);
      * "greedy": exponential-mechanism splits with the size-free SSE utility,
        a fixed depth and private leaves (provably epsilon-DP);
      * "random": random structure (no budget), all budget to the leaves.
    ``leaf``: "mean" or "median". ``leaf_share``: fraction of epsilon spent on
    leaves (greedy; random spends all of it there). ``prior``/``shrinkage``:
    mean leaves are pulled toward ``prior`` with ``shrinkage`` pseudo-rows.
    """

    algorithm: str
    leaf: str
    max_depth: int
    min_samples_split: int = 20
    min_samples_leaf: int = 10
    leaf_share: Fraction = Fraction(1, 2)
    prior: float = 0.5
    shrinkage: float = 0.0
    selector: str = "permute_and_flip"


def _leaf_ids(tree: Tree) -> NDArray[np.int64]:
    return np.flatnonzero(tree.feature < 0)
