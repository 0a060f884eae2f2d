"""Two-dimensional histograms: Laplace on every unit cell, and the uniform and adaptive grids.

Qardaji, Yang, Li, "Differentially private grids for geospatial data", ICDE
2013. UGrid lays an ``m × m`` grid over the domain with ``m = sqrt(N·ε/c)``
(the size that balances noise, which grows with the number of cells a
rectangle covers, against the error of assuming points spread evenly inside a
cell, which shrinks with it) and publishes one noisy count per cell. AGrid
spends part of ε on a coarse grid, then splits each coarse cell into a finer
grid sized by its own noisy count (dense places get fine cells, empty ones
stay whole), and reconciles the two levels.

Both grid rules need N, the number of points. The paper reads it off the data,
which is not private. Here N is either declared (``n_records``, public — the
data owner's published size, say) or bought: ``count_share`` of ε releases a
Laplace count of the rows and the rules use that.

The input is always a grid of *unit cells* over public edges (e.g. 256 × 256
over a map's bounding box); every published cell is a block of whole unit
cells, and its total is spread evenly over them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.histograms._common import check_fraction, check_positive, source_for
from dpkit.histograms._grid import (
    Index,
    PublishedGrid,
    check_inputs,
    overlap_fractions,
    split_points,
    unit_cells,
)
from dpkit.histograms.methods import publisher
from dpkit.histograms.structure_first import split_budget

__all__ = [
    "agrid",
    "agrid_first_level",
    "agrid_second_level",
    "auto2d",
    "choose_grid_method",
    "laplace2d",
    "ugrid",
    "ugrid_size",
]

#: The paper's constant c in m = sqrt(N·ε/c) (UGrid and AGrid's first level).
GRID_CONSTANT = 10.0
#: AGrid: the share of ε spent on the first level (the paper's α = 0.5).
DEFAULT_FIRST_LEVEL_SHARE = 0.5
#: Share of ε spent on a noisy number of rows when ``n_records`` is not declared.
DEFAULT_COUNT_SHARE = 0.05


def ugrid_size(n_records: float, epsilon: float, c: float = GRID_CONSTANT) -> int:
    """UGrid's cells per axis, ``ceil(sqrt(N·ε/c))`` and at least 1 (a public rule)."""
    return max(1, math.ceil(math.sqrt(max(n_records, 0.0) * epsilon / c)))


def agrid_first_level(n_records: float, epsilon: float, c: float = GRID_CONSTANT) -> int:
    """AGrid's first-level cells per axis, ``max(10, ceil(sqrt(N·ε/c) / 4))``."""
    return max(10, math.ceil(math.sqrt(max(n_records, 0.0) * epsilon / c) / 4.0))


def agrid_second_level(
    noisy_counts: NDArray[np.float64], epsilon_second: float, c: float = GRID_CONSTANT
) -> NDArray[np.int64]:
    """AGrid's split of each first-level cell, ``ceil(sqrt(N'·ε₂/(c/2)))`` per axis, at least 1.

    ``N'`` is the cell's *noisy* first-level count, so this is post-processing.
    """
    n = np.maximum(np.asarray(noisy_counts, dtype=np.float64), 0.0)
    return np.maximum(1, np.ceil(np.sqrt(n * epsilon_second / (c / 2.0)))).astype(np.int64)


def laplace2d(
    counts: ArrayLike,
    epsilon: float,
    *,
    rng: object = None,
    accountant: Any = None,
    x_edges: ArrayLike | None = None,
    y_edges: ArrayLike | None = None,
) -> PublishedGrid:
    """Publish every unit cell plus independent Lap(1/epsilon) noise (the 2-D baseline).

    Privacy: epsilon-DP. Neighbouring datasets differ by one row (added or
    removed), which lies in exactly one unit cell, so the grid of counts has
    l1 sensitivity 1 and Laplace noise of scale 1/epsilon on every cell is
    epsilon-DP (exact grid sampling, :class:`dpkit.mechanisms.Laplace`).

    Accuracy: every unit estimate is unbiased with noise s.d. sqrt(2)/epsilon;
    a rectangle of A unit cells has noise s.d. sqrt(2·A)/epsilon.

    Args:
        counts: ``(nx, ny)`` true counts of the unit cells (finite, >= 0).
        epsilon: the privacy budget (> 0).
        rng: ``None`` (secure randomness), an int seed or a NumPy Generator
            (reproducible; tests and experiments only).
        accountant: optional accountant, charged before anything is computed.
        x_edges, y_edges: public value-space edges of the unit cells.
    """

    x, eps, ex, ey = check_inputs(counts, epsilon, x_edges, y_edges)
    nx, ny = x.shape
    mechanism = _cell_noise(eps, x.size)
    payer = as_accountant(accountant)

    def release() -> PublishedGrid:
        remaining = None if payer is None else payer.remaining
        noisy = np.asarray(mechanism.randomise(x.ravel(), rng=source_for(rng)), dtype=np.float64)
        node_variance = 2.0 * mechanism.scale**2

        def variance(x0: Index, x1: Index, y0: Index, y1: Index) -> NDArray[np.float64]:
            return ((x1 - x0) * (y1 - y0)).astype(np.float64) * node_variance

        return PublishedGrid(
            estimates=noisy.reshape(nx, ny),
            x_edges=ex,
            y_edges=ey,
            epsilon=eps,
            method="laplace2d",
            cells=unit_cells(nx, ny),
            details={"scale": mechanism.scale, "remaining": remaining},
            rectangle_variance=variance,
        )

    return charge_and_run(payer, Budget(eps), "histogram2d: laplace2d", release)


def ugrid(
    counts: ArrayLike,
    epsilon: float,
    *,
    n_records: float | None = None,
    count_share: float = DEFAULT_COUNT_SHARE,
    grid_constant: float = GRID_CONSTANT,
    rng: object = None,
    accountant: Any = None,
    x_edges: ArrayLike | None = None,
    y_edges: ArrayLike | None = None,
) -> PublishedGrid:
    """Publish a uniform grid (UGrid): ``m × m`` cells, one noisy total each.

    Privacy: epsilon-DP for add/remove one row. If ``n_records`` is declared,
    m = :func:`ugrid_size` (N, epsilon) is public and the cell totals (each row
    in exactly one cell: l1 sensitivity 1) get Lap(1/epsilon). Otherwise
    epsilon_0 = ``count_share``·epsilon releases the number of rows with
    Lap(1/epsilon_0) (sensitivity 1), m is computed from that noisy count
    (post-processing), and the totals get Lap(1/(epsilon - epsilon_0));
    sequential composition gives epsilon (both parts rounded down).

    Accuracy: a rectangle covering share f_c of cell c has noise variance
    sum_c f_c^2 · 2·scale^2 (exact, :meth:`PublishedGrid.answer_error`); the
    error of spreading a cell's total evenly over its unit cells is not
    included. With the public N the grid needs no budget of its own.

    Args:
        counts, epsilon, rng, accountant, x_edges, y_edges: as for :func:`laplace2d`.
        n_records: public number of rows (or a close public estimate); None
            buys a noisy one with ``count_share`` of epsilon.
        count_share: share of epsilon for the noisy row count, in (0, 1).
        grid_constant: the paper's c (default 10).
    """

    x, eps, ex, ey = check_inputs(counts, epsilon, x_edges, y_edges)
    nx, ny = x.shape
    c = check_positive(grid_constant, "grid_constant")
    counter, eps_count, eps_cells = _records_plan(n_records, count_share, eps)
    cell_noise = _cell_noise(eps_cells)
    payer = as_accountant(accountant)

    def release() -> PublishedGrid:
        remaining = None if payer is None else payer.remaining
        source = source_for(rng)
        records = _records(x, n_records, counter, source)
        m = ugrid_size(records, eps_cells, c)
        xs, ys = split_points(nx, min(m, nx)), split_points(ny, min(m, ny))
        totals = _block_totals(x, xs, ys)
        noise = _cell_noise(eps_cells, totals.size)
        noisy = np.asarray(noise.randomise(totals.ravel(), rng=source)).reshape(totals.shape)
        wx, wy = np.diff(xs), np.diff(ys)
        per_unit = noisy / np.outer(wx, wy)
        estimates = np.repeat(np.repeat(per_unit, wx, axis=0), wy, axis=1)
        node_variance = 2.0 * cell_noise.scale**2

        def variance(x0: Index, x1: Index, y0: Index, y1: Index) -> NDArray[np.float64]:
            fx = _axis_fractions(xs, x0, x1)
            fy = _axis_fractions(ys, y0, y1)
            return np.asarray((fx**2).sum(axis=1) * (fy**2).sum(axis=1) * node_variance)

        ix, iy = np.meshgrid(np.arange(wx.size), np.arange(wy.size), indexing="ij")
        cells = np.stack(
            [xs[ix.ravel()], xs[ix.ravel() + 1], ys[iy.ravel()], ys[iy.ravel() + 1]], axis=1
        )
        return PublishedGrid(
            estimates=estimates,
            x_edges=ex,
            y_edges=ey,
            epsilon=eps,
            method="ugrid",
            cells=cells.astype(np.int64),
            details={
                "grid": (int(wx.size), int(wy.size)),
                "n_records": records,
                "n_records_declared": n_records is not None,
                "epsilon_count": eps_count,
                "epsilon_cells": eps_cells,
                "scale": cell_noise.scale,
                "remaining": remaining,
            },
            rectangle_variance=variance,
        )

    return charge_and_run(payer, Budget(eps), "histogram2d: ugrid", release)


def agrid(
    counts: ArrayLike,
    epsilon: float,
    *,
    n_records: float | None = None,
    first_level_share: float = DEFAULT_FIRST_LEVEL_SHARE,
    count_share: float = DEFAULT_COUNT_SHARE,
    grid_constant: float = GRID_CONSTANT,
    rng: object = None,
    accountant: Any = None,
    x_edges: ArrayLike | None = None,
    y_edges: ArrayLike | None = None,
) -> PublishedGrid:
    """Publish an adaptive grid (AGrid): a coarse grid, each cell split by its noisy count.

    Privacy: epsilon-DP for add/remove one row; epsilon = epsilon_0 +
    epsilon_1 + epsilon_2, each rounded down (sequential composition).
    epsilon_0 (``count_share``, only when ``n_records`` is not declared) buys a
    noisy row count, as in :func:`ugrid`. Level 1: an ``m1 × m1`` grid
    (:func:`agrid_first_level`, from public or already-released values), each
    cell's total with Lap(1/epsilon_1) — each row in one cell, sensitivity 1.
    Level 2: cell c is split into ``m2(c) × m2(c)`` sub-cells by
    :func:`agrid_second_level` of its *noisy* level-1 count (post-processing,
    so the split is public given the level-1 release); the sub-cell totals
    get Lap(1/epsilon_2) — each row in one sub-cell, sensitivity 1.

    Then each cell's two measurements are reconciled (post-processing):
    v' = (α²M·v + (1-α)²·S)/(α²M + (1-α)²), the inverse-variance mix of the
    noisy cell total v and the sum S of its M noisy sub-cell totals (α the
    level-1 share), and every sub-cell moves by (v' - S)/M.

    Accuracy: the estimates are linear in the noise; ``answer_error`` is the
    exact noise s.d. of a rectangle given the published cells (per level-1
    cell, with covered sub-cell shares f_j, F = sum f_j, w = α²M/(α²M +
    (1-α)²): σ₂²(Σf_j² - (2w - w²)F²/M) + σ₁²w²F²/M²). The even spread
    inside a sub-cell is not included.

    Args:
        counts, epsilon, rng, accountant, x_edges, y_edges: as for :func:`laplace2d`.
        n_records, count_share, grid_constant: as for :func:`ugrid`.
        first_level_share: α, the share of the grid's epsilon for level 1 (default 0.5).
    """

    x, eps, ex, ey = check_inputs(counts, epsilon, x_edges, y_edges)
    nx, ny = x.shape
    c = check_positive(grid_constant, "grid_constant")
    alpha = check_fraction(first_level_share, "first_level_share")
    counter, eps_count, eps_grid = _records_plan(n_records, count_share, eps)
    eps_first, eps_second = split_budget(eps_grid, alpha)
    first_noise, second_noise = _cell_noise(eps_first), _cell_noise(eps_second)
    payer = as_accountant(accountant)

    def release() -> PublishedGrid:
        remaining = None if payer is None else payer.remaining
        source = source_for(rng)
        records = _records(x, n_records, counter, source)
        m1 = agrid_first_level(records, eps_grid, c)
        xs, ys = split_points(nx, min(m1, nx)), split_points(ny, min(m1, ny))
        totals = _block_totals(x, xs, ys)
        first_draw = _cell_noise(eps_first, totals.size).randomise(totals.ravel(), rng=source)
        first = np.asarray(first_draw, dtype=np.float64)
        splits = agrid_second_level(first, eps_second, c)
        cells, parent = _sub_cells(xs, ys, splits)
        sub_totals = _cell_totals(x, cells)
        second_draw = _cell_noise(eps_second, sub_totals.size).randomise(sub_totals, rng=source)
        second = np.asarray(second_draw, dtype=np.float64)
        sizes = np.bincount(parent, minlength=first.size).astype(np.float64)
        sums = np.bincount(parent, weights=second, minlength=first.size)
        a2 = alpha * alpha
        weight = a2 * sizes / (a2 * sizes + (1.0 - alpha) ** 2)
        mixed = weight * first + (1.0 - weight) * sums
        adjusted = second + ((mixed - sums) / sizes)[parent]
        estimates = _spread(adjusted, cells, (nx, ny))
        var1, var2 = 2.0 * first_noise.scale**2, 2.0 * second_noise.scale**2

        def variance(x0: Index, x1: Index, y0: Index, y1: Index) -> NDArray[np.float64]:
            out = np.empty(x0.size)
            for q in range(x0.size):
                f = overlap_fractions(cells, int(x0[q]), int(x1[q]), int(y0[q]), int(y1[q]))
                big_f = np.bincount(parent, weights=f, minlength=sizes.size)
                sq = np.bincount(parent, weights=f * f, minlength=sizes.size)
                share = weight * big_f / sizes
                out[q] = float(
                    (var2 * (sq - (2.0 * weight - weight**2) * big_f**2 / sizes)).sum()
                    + (var1 * share**2).sum()
                )
            return out

        return PublishedGrid(
            estimates=estimates,
            x_edges=ex,
            y_edges=ey,
            epsilon=eps,
            method="agrid",
            cells=cells,
            details={
                "first_level": (int(xs.size - 1), int(ys.size - 1)),
                "n_cells": int(cells.shape[0]),
                "n_records": records,
                "n_records_declared": n_records is not None,
                "epsilon_count": eps_count,
                "epsilon_first": eps_first,
                "epsilon_second": eps_second,
                "scale_first": first_noise.scale,
                "scale_second": second_noise.scale,
                "remaining": remaining,
            },
            rectangle_variance=variance,
        )

    return charge_and_run(payer, Budget(eps), "histogram2d: agrid", release)


# -- shared steps ---------------------------------------------------------------------


def _cell_noise(epsilon: float, size: int = 1) -> Any:
    """Laplace noise for ``size`` cell totals of which one row changes one by 1.

    ``changed=1`` makes the scale independent of ``size``, which for the
    data-sized grids is only known after the noisy count or level 1.
    """
    from dpkit.mechanisms import Laplace

    return Laplace(epsilon=epsilon, sensitivity=1.0, size=size, changed=1)


def _records_plan(
    n_records: float | None, count_share: float, epsilon: float
) -> tuple[Any, float, float]:
    """(noisy counter or None, epsilon for the count, epsilon left for the grid)."""
    from dpkit.mechanisms import Laplace

    share = check_fraction(count_share, "count_share")
    if n_records is not None:
        check_positive(n_records, "n_records", " Give the public number of rows, or None.")
        return None, 0.0, epsilon
    eps_count, eps_rest = split_budget(epsilon, share)
    return Laplace(epsilon=eps_count, sensitivity=1.0), eps_count, eps_rest


def _records(x: NDArray[np.float64], declared: float | None, counter: Any, source: Any) -> float:
    if declared is not None:
        return float(declared)
    return max(float(counter.randomise(float(x.sum()), rng=source)), 0.0)


def _block_totals(
    x: NDArray[np.float64], xs: NDArray[np.int64], ys: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Totals of the product grid cut at unit-cell boundaries ``xs`` × ``ys``."""
    return np.asarray(np.add.reduceat(np.add.reduceat(x, xs[:-1], axis=0), ys[:-1], axis=1))


def _axis_fractions(points: NDArray[np.int64], lo: Index, hi: Index) -> NDArray[np.float64]:
    """Per query, the share of each 1-D part ``points[k]..points[k+1]`` inside ``[lo, hi)``."""
    start, end = points[:-1][None, :], points[1:][None, :]
    inside = np.clip(np.minimum(end, hi[:, None]) - np.maximum(start, lo[:, None]), 0, None)
    return np.asarray(inside / (end - start), dtype=np.float64)


def _sub_cells(
    xs: NDArray[np.int64], ys: NDArray[np.int64], splits: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The level-2 cells (half-open unit-cell rectangles) and each one's level-1 cell."""
    blocks: list[NDArray[np.int64]] = []
    parents: list[NDArray[np.int64]] = []
    k = 0
    for a in range(xs.size - 1):
        for b in range(ys.size - 1):
            x0, x1, y0, y1 = xs[a], xs[a + 1], ys[b], ys[b + 1]
            m = int(splits[k])
            px = x0 + split_points(int(x1 - x0), min(m, int(x1 - x0)))
            py = y0 + split_points(int(y1 - y0), min(m, int(y1 - y0)))
            gi, gj = np.meshgrid(np.arange(px.size - 1), np.arange(py.size - 1), indexing="ij")
            i, j = gi.ravel(), gj.ravel()
            blocks.append(np.stack([px[i], px[i + 1], py[j], py[j + 1]], axis=1))
            parents.append(np.full(i.size, k, dtype=np.int64))
            k += 1
    return np.concatenate(blocks).astype(np.int64), np.concatenate(parents)


def _cell_totals(x: NDArray[np.float64], cells: NDArray[np.int64]) -> NDArray[np.float64]:
    table = np.zeros((x.shape[0] + 1, x.shape[1] + 1))
    table[1:, 1:] = x.cumsum(axis=0).cumsum(axis=1)
    x0, x1, y0, y1 = cells.T
    return np.asarray(table[x1, y1] - table[x0, y1] - table[x1, y0] + table[x0, y0])


def _spread(
    totals: NDArray[np.float64], cells: NDArray[np.int64], shape: tuple[int, int]
) -> NDArray[np.float64]:
    """Each cell's total spread evenly over its unit cells."""
    x0, x1, y0, y1 = cells.T
    per_unit = totals / ((x1 - x0) * (y1 - y0))
    # Label every unit cell with its cell by a 2-D difference array of integers
    # (exact, unlike spreading the floats themselves): the cells tile the grid.
    label = np.arange(1, cells.shape[0] + 1, dtype=np.int64)
    diff = np.zeros((shape[0] + 1, shape[1] + 1), dtype=np.int64)
    np.add.at(diff, (x0, y0), label)
    np.add.at(diff, (x1, y0), -label)
    np.add.at(diff, (x0, y1), -label)
    np.add.at(diff, (x1, y1), label)
    owner = diff.cumsum(axis=0).cumsum(axis=1)[:-1, :-1] - 1
    return np.asarray(per_unit[owner])


#: auto2d uses 2-D Laplace from this many records per unit cell per unit of ε (N·ε/cells).
LAPLACE_SIGNAL = 50.0
#: The registered publishers :func:`auto2d` may choose (the range of :func:`choose_grid_method`).
AUTO2D_CHOICES = ("agrid", "laplace2d")


def choose_grid_method(n_cells: int, epsilon: float, n_records: float) -> str:
    """``"laplace2d"`` when N·ε/cells >= 50, else ``"agrid"`` (a public rule).

    From ``benchmarks/histograms_2d.py``: AGrid is best or within 1.13× of the
    best in every cell of the California benchmark up to N·ε/cells ≈ 15,
    while from about 70 records per cell per unit of ε its two half-budget
    levels cost more than they save and plain Laplace is better (AGrid up to
    1.7× Laplace's error).
    """
    return "laplace2d" if n_records * epsilon / max(n_cells, 1) >= LAPLACE_SIGNAL else "agrid"


def auto2d(
    counts: ArrayLike,
    epsilon: float,
    *,
    n_records: float | None = None,
    count_share: float = DEFAULT_COUNT_SHARE,
    rng: object = None,
    accountant: Any = None,
    x_edges: ArrayLike | None = None,
    y_edges: ArrayLike | None = None,
) -> PublishedGrid:
    """The default 2-D publisher: AGrid, or 2-D Laplace when the counts are large.

    Privacy: epsilon-DP for add/remove one row (one unit cell's count changes
    by 1). N is declared (``n_records``, public) or released with epsilon_0 =
    ``count_share``·epsilon as in :func:`ugrid` (the row count has
    sensitivity 1); :func:`choose_grid_method` (cells, epsilon', N) — a
    function of public values and that release — picks :func:`agrid` (given
    N, so it spends nothing more on it) or :func:`laplace2d`, which runs with
    the remaining epsilon' = epsilon - epsilon_0. Sequential composition: epsilon.

    Accuracy: that of the chosen publisher (``details["chosen"]``).

    Args:
        counts, epsilon, rng, accountant, x_edges, y_edges: as for :func:`laplace2d`.
        n_records, count_share: as for :func:`ugrid`.
    """
    from dataclasses import replace

    publishers = {name: publisher(name, dims=2) for name in AUTO2D_CHOICES}  # before the charge
    x, eps, ex, ey = check_inputs(counts, epsilon, x_edges, y_edges)
    counter, eps_count, eps_rest = _records_plan(n_records, count_share, eps)
    payer = as_accountant(accountant)

    def release() -> PublishedGrid:
        remaining = None if payer is None else payer.remaining
        source = source_for(rng)
        records = _records(x, n_records, counter, source)
        chosen = choose_grid_method(x.size, eps_rest, records)
        chosen_publisher = publishers[chosen]
        common: dict[str, Any] = {"rng": source, "x_edges": ex, "y_edges": ey}
        if "n_records" in chosen_publisher.options:  # agrid: given N, it spends nothing on it
            common["n_records"] = max(records, 1.0)
        grid = chosen_publisher.publish(x, eps_rest, **common)
        details = {
            **grid.details,
            "chosen": chosen,
            "n_records": records,
            "n_records_declared": n_records is not None,
            "epsilon_count": eps_count,
            "remaining": remaining,
        }
        return replace(grid, epsilon=eps, method="auto2d", details=details)

    return charge_and_run(payer, Budget(eps), "histogram2d: auto2d", release)
