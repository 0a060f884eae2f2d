"""Regions: a finite set of places (grid cells or given centroids) and their distances.

Everything here is public: the regions are declared by whoever runs the
collection, before any location is seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.spatial import cKDTree

from dpkit.errors import InvalidParameterError
from dpkit.local.location.planar_laplace import check_area, check_points

__all__ = ["Regions", "grid_regions"]

#: Regions above this make the n x n matrices and the n^3 checks too large for one machine.
MAX_REGIONS = 2_000


@dataclass(frozen=True)
class Regions:
    """Declared regions by their centres (an (n, 2) array), optional names.

    Distances between regions are the Euclidean distances between centres,
    in the units of the coordinates.
    """

    centers: NDArray[np.float64]
    names: tuple[Any, ...] = ()
    _tree: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            c = check_points(self.centers, "region centres")
        except Exception as err:  # a public declaration: report it as a parameter error
            raise InvalidParameterError(str(err)) from None
        if c.shape[0] < 2:
            raise InvalidParameterError("declare at least two regions.")
        if c.shape[0] > MAX_REGIONS:
            raise InvalidParameterError(
                f"at most {MAX_REGIONS} regions are supported; use a coarser grid."
            )
        if np.unique(c, axis=0).shape[0] != c.shape[0]:
            raise InvalidParameterError(
                "two regions have the same centre: every region must be a distinct place."
            )
        names = tuple(self.names) if len(self.names) else tuple(range(c.shape[0]))
        if len(names) != c.shape[0] or len(set(names)) != len(names):
            raise InvalidParameterError("region names must be distinct, one per region.")
        c.setflags(write=False)
        object.__setattr__(self, "centers", c)
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "_tree", cKDTree(c))

    @property
    def n(self) -> int:
        """The number of regions."""
        return int(self.centers.shape[0])

    @property
    def distances(self) -> NDArray[np.float64]:
        """The (n, n) Euclidean distances between centres."""
        diff = self.centers[:, None, :] - self.centers[None, :, :]
        return np.sqrt((diff**2).sum(axis=2))

    def nearest(self, points: ArrayLike) -> NDArray[np.int64]:
        """Index of the region whose centre is nearest to each point."""
        _, idx = self._tree.query(check_points(points))
        return np.asarray(idx, dtype=np.int64)

    def subset(self, keep: ArrayLike) -> Regions:
        """The regions at the given indices (e.g. those with history)."""
        idx = np.asarray(keep, dtype=np.int64)
        return Regions(self.centers[idx], tuple(self.names[i] for i in idx))


def grid_regions(area: ArrayLike, shape: tuple[int, int]) -> Regions:
    """The cells of a rows x columns grid over area (x_min, y_min, x_max, y_max), by centre.

    Names are (row, column) pairs, row 0 at the bottom (smallest y).
    """
    x0, y0, x1, y1 = check_area(area)
    try:
        rows, cols = (int(s) for s in shape)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            "shape must be two positive integers (rows, columns)."
        ) from None
    if rows < 1 or cols < 1 or rows * cols < 2:
        raise InvalidParameterError("shape must be two positive integers with at least two cells.")
    xs = x0 + (np.arange(cols) + 0.5) * (x1 - x0) / cols
    ys = y0 + (np.arange(rows) + 0.5) * (y1 - y0) / rows
    gx, gy = np.meshgrid(xs, ys)
    names = tuple((r, c) for r in range(rows) for c in range(cols))
    return Regions(np.column_stack([gx.ravel(), gy.ravel()]), names)
