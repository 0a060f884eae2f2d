"""The object every two-dimensional publisher returns, and rectangle queries on it.

A 2-D histogram is an ``nx × ny`` grid of *unit cells* over two public axes
(``x_edges``, ``y_edges``); ``estimates[i, j]`` is the estimate of unit cell
``(i, j)``: x bin ``i``, y bin ``j`` (the layout of :func:`numpy.histogram2d`).
Everything here is post-processing of a released grid: it reads the estimates
and public parameters only, so it costs no budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.errors import DataError, InvalidParameterError
from dpkit.histograms._common import check_edges, epsilon_of, finite_non_negative
from dpkit.privacy import PrivacyReport

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Index = NDArray[np.int64]
#: (x0, x1, y0, y1) half-open unit-cell rectangles -> variance of the noise in their sums.
RectangleVariance = Callable[[Index, Index, Index, Index], NDArray[np.float64]]


@dataclass(frozen=True)
class PublishedGrid:
    """A differentially private 2-D histogram: one estimate per unit cell.

    Attributes:
        estimates: ``(nx, ny)`` estimates; ``estimates[i, j]`` is x bin i, y bin j.
        x_edges, y_edges: public value-space edges of the unit cells (nx + 1, ny + 1).
        epsilon: the privacy cost of the whole release (epsilon-DP, delta = 0).
        method: the publisher's name.
        cells: the published partition as ``(m, 4)`` half-open unit-cell
            rectangles ``x0, x1, y0, y1``; the unit cells of one published cell
            share its noisy total evenly (unit-cell methods publish every unit
            cell; DAWA-2D publishes Hilbert-curve buckets, see its docstring).
        details: public parameters of the run (grid sizes, scales, ...).
            ``details["remaining"]`` (the budget left when an accountant paid)
            is deprecated: read ``privacy.remaining``; it goes in the next release.

    ``privacy`` is the :class:`dpkit.PrivacyReport` (ε, neighbouring relation,
    mechanism, remaining budget).
    """

    estimates: NDArray[np.float64]
    x_edges: NDArray[np.float64]
    y_edges: NDArray[np.float64]
    epsilon: float
    method: str
    cells: NDArray[np.int64]
    details: dict[str, Any] = field(default_factory=dict)
    rectangle_variance: RectangleVariance | None = field(default=None, repr=False, compare=False)

    @property
    def privacy(self) -> PrivacyReport:
        """What this release cost, as the :class:`dpkit.PrivacyReport` every release carries.

        ε-DP (δ = 0) under add/remove one row (one row moves one unit cell by 1);
        ``remaining`` is the budget the accountant had left when one paid, else None.
        """
        return PrivacyReport(
            epsilon=self.epsilon,
            mechanisms=(self.method,),
            remaining=self.details.get("remaining"),
        )

    @property
    def shape(self) -> tuple[int, int]:
        """``(nx, ny)``: unit cells along x and along y."""
        nx, ny = self.estimates.shape
        return int(nx), int(ny)

    @property
    def n_cells(self) -> int:
        """Number of published cells."""
        return int(self.cells.shape[0])

    def answer(self, x_lo: ArrayLike, x_hi: ArrayLike, y_lo: ArrayLike, y_hi: ArrayLike) -> Any:
        """Estimate the count in the rectangle of unit cells ``x_lo..x_hi`` × ``y_lo..y_hi``.

        Indices are 0-based and inclusive, as in
        :meth:`PublishedHistogram.answer`; integers give a float, equal-shape
        integer arrays one answer per rectangle. The sum of the unit
        estimates inside (post-processing, no budget).
        """
        x0, x1, y0, y1, scalar = self._rectangles(x_lo, x_hi, y_lo, y_hi)
        table = np.zeros((self.shape[0] + 1, self.shape[1] + 1))
        table[1:, 1:] = self.estimates.cumsum(axis=0).cumsum(axis=1)
        out = table[x1, y1] - table[x0, y1] - table[x1, y0] + table[x0, y0]
        return float(out[0]) if scalar else out

    def answer_error(
        self, x_lo: ArrayLike, x_hi: ArrayLike, y_lo: ArrayLike, y_hi: ArrayLike
    ) -> Any:
        """Standard deviation of the noise in :meth:`answer` for the same rectangles.

        Exact given the published cells for the grid methods; an upper bound
        for DAWA-2D (see :func:`dpkit.histograms.dawa2d`). Like the 1-D
        ``answer_error`` it leaves out the error of spreading a cell's total
        evenly over its unit cells, which cannot be known without budget.
        """
        x0, x1, y0, y1, scalar = self._rectangles(x_lo, x_hi, y_lo, y_hi)
        if self.rectangle_variance is None:
            raise InvalidParameterError(
                "this grid was built without an error model (publishers always attach one)."
            )
        variance = self.rectangle_variance(x0, x1, y0, y1)
        out = np.sqrt(np.maximum(variance, 0.0))
        return float(out[0]) if scalar else out

    def _rectangles(
        self, x_lo: ArrayLike, x_hi: ArrayLike, y_lo: ArrayLike, y_hi: ArrayLike
    ) -> tuple[Index, Index, Index, Index, bool]:
        raw = [np.asarray(v) for v in (x_lo, x_hi, y_lo, y_hi)]
        scalar = all(v.ndim == 0 for v in raw)
        arrays = [np.atleast_1d(v) for v in raw]
        if any(v.dtype.kind not in "iu" for v in arrays):
            raise InvalidParameterError(
                "rectangle ends must be integer unit-cell indices (0-based, inclusive)."
            )
        if len({v.shape for v in arrays}) != 1:
            raise InvalidParameterError("x_lo, x_hi, y_lo and y_hi must have the same shape.")
        a, b, c, d = (v.astype(np.int64).ravel() for v in arrays)
        nx, ny = self.shape
        if (
            np.any(a < 0)
            or np.any(b >= nx)
            or np.any(a > b)
            or np.any(c < 0)
            or np.any(d >= ny)
            or np.any(c > d)
        ):
            raise InvalidParameterError(
                f"a rectangle needs 0 <= x_lo <= x_hi <= {nx - 1} and 0 <= y_lo <= y_hi <= "
                f"{ny - 1} (this grid has {nx} × {ny} unit cells; indices are 0-based and "
                "inclusive)."
            )
        return a, b + 1, c, d + 1, scalar

    def cell_index(self, x: ArrayLike, y: ArrayLike) -> tuple[Any, Any]:
        """The unit cell ``(i, j)`` holding the point(s) ``(x, y)``, clipped into the grid.

        Public arithmetic on the edges, for turning a value-space box into the
        indices :meth:`answer` takes.
        """
        i = np.clip(np.searchsorted(self.x_edges, x, side="right") - 1, 0, self.shape[0] - 1)
        j = np.clip(np.searchsorted(self.y_edges, y, side="right") - 1, 0, self.shape[1] - 1)
        if np.ndim(i) == 0:
            return int(i), int(j)
        return i, j

    def plot(self, ax: Any = None, **kwargs: Any) -> Figure:
        """Draw this grid as a heat map; see :func:`dpkit.histograms.plot.plot_grid`."""
        from dpkit.histograms.plot import plot_grid

        return plot_grid(self, ax=ax, **kwargs)


def check_grid(counts: ArrayLike) -> NDArray[np.float64]:
    """Unit-cell counts as a float array: 2-D, non-empty, finite and non-negative."""
    try:
        arr = np.asarray(counts, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(
            "counts must be a 2-D array of numbers (one count per unit cell)."
        ) from None
    if arr.ndim != 2 or arr.size == 0:
        raise DataError(
            "counts must be a non-empty 2-D array (x bins × y bins), e.g. from "
            "numpy.histogram2d over public edges."
        )
    return finite_non_negative(arr)


def check_inputs(
    counts: ArrayLike, epsilon: object, x_edges: ArrayLike | None, y_edges: ArrayLike | None
) -> tuple[NDArray[np.float64], float, NDArray[np.float64], NDArray[np.float64]]:
    """What every 2-D publisher checks first: counts, epsilon and the edges of both axes."""
    x = check_grid(counts)
    eps = epsilon_of(epsilon)
    nx, ny = x.shape
    return (
        x,
        eps,
        check_edges(x_edges, nx, "x_edges"),
        check_edges(y_edges, ny, "y_edges"),
    )


def unit_cells(nx: int, ny: int) -> NDArray[np.int64]:
    """Every unit cell as a published cell (the partition of unit-cell methods)."""
    gi, gj = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
    i, j = gi.ravel(), gj.ravel()
    return np.stack([i, i + 1, j, j + 1], axis=1).astype(np.int64)


def split_points(n: int, m: int) -> NDArray[np.int64]:
    """``m + 1`` unit-cell boundaries cutting ``0..n`` into ``m`` near-equal parts."""
    return np.round(np.linspace(0, n, m + 1)).astype(np.int64)


def overlap_fractions(
    cells: NDArray[np.int64], x0: int, x1: int, y0: int, y1: int
) -> NDArray[np.float64]:
    """Share of each cell's unit cells inside the half-open rectangle ``[x0, x1) × [y0, y1)``."""
    wx = np.clip(np.minimum(cells[:, 1], x1) - np.maximum(cells[:, 0], x0), 0, None)
    wy = np.clip(np.minimum(cells[:, 3], y1) - np.maximum(cells[:, 2], y0), 0, None)
    area = (cells[:, 1] - cells[:, 0]) * (cells[:, 3] - cells[:, 2])
    return np.asarray((wx * wy) / area, dtype=np.float64)
