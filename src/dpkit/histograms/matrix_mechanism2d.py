"""The matrix mechanism on a grid: Kronecker products of optimised 1-D strategies (epsilon-DP).

McKenna, Miklau, Hay, Machanavajjhala, "Optimizing error of high-dimensional
statistical queries under differential privacy", VLDB 2018 (HDMM's Kronecker
parametrisation). A rectangle workload over an ``nx × ny`` grid is the
Kronecker product of two 1-D range workloads (all rectangles = all x-ranges ×
all y-ranges; prefix rectangles = x-prefixes × y-prefixes), so the strategy
``A = Ax ⊗ Ay`` of the two 1-D p-Identity strategies
(:mod:`dpkit.histograms._strategy_l1`) measures it, and every error factors:
a rectangle's variance is the product of its two ranges' variances, the
workload's unit error the product of the 1-D unit errors, and the SVD bound
the product of the 1-D bounds. Nothing n² × n² is ever formed.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.errors import DataError, InvalidParameterError
from dpkit.histograms._common import source_for
from dpkit.histograms._grid import Index, PublishedGrid, check_inputs, unit_cells

__all__ = ["matrix_mechanism2d"]

#: Each factor's entries are multiples of 2⁻¹⁰, so entries of Ax ⊗ Ay are multiples of 2⁻²⁰.
FACTOR_BITS = 10
#: The largest grid (unit cells): the measurements are (nx + px)·(ny + py) doubles.
MAX_CELLS = 1 << 22
#: A x is exact for whole-number counts totalling below this (see the publisher).
EXACT_TOTAL = 2.0**33
WORKLOADS = {"rectangles": "ranges", "prefixes": "prefixes"}


@functools.lru_cache(maxsize=16)
def axis_strategy(n: int, workload: str) -> Any:
    """The 1-D p-Identity strategy for one axis, its entries re-quantised to 2⁻¹⁰ (public, cached).

    The optimised Θ is kept; the weights are rounded down onto multiples of
    2⁻¹⁰ (an identity weight at least 2⁻¹⁰, so AᵀA stays invertible), and the
    exact sensitivity and error factors are those of the stored entries.
    """
    from dpkit.histograms._range_grams import gram_for
    from dpkit.histograms._strategy_l1 import assemble, p_identity

    gram = gram_for(n, WORKLOADS[workload])
    fine = p_identity(gram)
    scale = float(1 << FACTOR_BITS)
    d = 1.0 / (1.0 + fine.theta.sum(axis=0))
    a = np.maximum(np.floor(d * scale), 1.0) / scale
    b = np.floor(fine.theta * d[None, :] * scale) / scale
    return assemble(a, b, fine.theta, gram.key)


def check_cells(nx: int, ny: int) -> None:
    """Refuse a grid of more than :data:`MAX_CELLS` unit cells, or an axis the 1-D strategy
    cannot take (:func:`dpkit.histograms.matrix_mechanism.check_bins`: its optimisation is
    bounded work from n): public, before any charge."""
    from dpkit.histograms.matrix_mechanism import check_bins

    if nx * ny > MAX_CELLS:
        raise InvalidParameterError(
            f"matrix_mechanism2d takes at most {MAX_CELLS:,} unit cells (got {nx * ny:,}); "
            "use a coarser grid, or ugrid/agrid."
        )
    for n in (nx, ny):
        check_bins(n)


def _check_workload(workload: object) -> str:
    if not isinstance(workload, str) or workload not in WORKLOADS:
        raise InvalidParameterError(
            'workload must be "rectangles" (all rectangles, the default) or "prefixes" '
            "(the rectangles with a corner at the grid's origin)."
        )
    return workload


def matrix_mechanism2d(
    counts: ArrayLike,
    epsilon: float,
    *,
    workload: str = "rectangles",
    rng: object = None,
    accountant: Any = None,
    x_edges: ArrayLike | None = None,
    y_edges: ArrayLike | None = None,
) -> PublishedGrid:
    """Publish a grid of counts through ``Ax ⊗ Ay`` (optimised per axis) and least squares.

    Privacy: epsilon-DP for add/remove one row. A row lies in one unit cell
    (i, j), so the measurement Ax X Ayᵀ moves by the outer product of column i
    of Ax and column j of Ay, whose l1 norm is ‖Ax e_i‖₁·‖Ay e_j‖₁ <= Δx·Δy =: Δ
    (Δx, Δy: the exact maximum column l1 norms of the stored factors, each
    about 1). That outer product has at most (px + 1)(py + 1) non-zero
    entries, so the (nx + px)(ny + py) measurements get noise from
    :class:`dpkit.mechanisms.Laplace` with sensitivity Δ and
    ``changed = (px + 1)(py + 1)``: it rounds each value to its grid, counts
    that rounding in its integer sensitivity, and adds exact discrete Laplace
    noise. The values fed in are Ax X Ayᵀ exactly: every factor entry is a
    multiple of 2⁻¹⁰ in [0, 1], so Ax X has entries that are multiples of
    2⁻¹⁰ and (Ax X) Ayᵀ multiples of 2⁻²⁰, and every partial sum is at most
    the total count in absolute value, below 2³³, hence below 2⁵³ units:
    no floating-point rounding, in any order of summation. Fractional counts
    and totals of 2³³ or more are refused before the charge. The factors are a
    deterministic function of nx, ny and the workload (public), and the
    estimate (AᵀA)⁻¹ Aᵀ y = Gx⁻¹ Axᵀ Y Ay Gy⁻¹ is post-processing.

    Accuracy: unbiased; a rectangle's noise variance is 2 b² vx(range x)
    vy(range y) (b the Laplace scale, v the 1-D strategies' range variances),
    exact, from :meth:`PublishedGrid.answer_error`. ``details`` gives the
    expected per-query RMSE over the workload, the SVD lower bound for any
    strategy (the product of the 1-D bounds) and 2-D Laplace's RMSE on the
    same workload. Against 2-D Laplace (Identity) it gains on rectangle
    workloads, most on large grids; a single cell is estimated less
    precisely than by Laplace.

    Args:
        counts: ``(nx, ny)`` true counts of the unit cells (whole numbers, >= 0).
        epsilon: the privacy budget (> 0).
        workload: ``"rectangles"`` (all rectangles) or ``"prefixes"`` (rectangles
            from the origin); each axis's strategy is optimised for it.
        rng: ``None`` (secure randomness), an int seed or a NumPy Generator
            (reproducible; tests and experiments only).
        accountant: optional accountant, charged before the counts are read.
        x_edges, y_edges: public value-space edges of the unit cells.
    """
    from dpkit.histograms._range_grams import gram_for, svd_bound
    from dpkit.mechanisms import Laplace

    name = _check_workload(workload)
    x, eps, ex, ey = check_inputs(counts, epsilon, x_edges, y_edges)
    nx, ny = x.shape
    check_cells(nx, ny)
    if not np.array_equal(x, np.floor(x)) or float(x.sum()) >= EXACT_TOTAL:
        raise DataError(
            "matrix_mechanism2d takes whole-number counts (one row moves one cell by 1) "
            "totalling fewer than 2**33 rows; round weighted counts, or use laplace2d."
        )
    sx, sy = axis_strategy(nx, name), axis_strategy(ny, name)
    sensitivity = sx.sensitivity * sy.sensitivity  # dyadic with few bits: exact
    changed = (sx.p + 1) * (sy.p + 1)
    size = (nx + sx.p) * (ny + sy.p)
    mechanism = Laplace(epsilon=eps, sensitivity=sensitivity, size=size, changed=changed)
    noise_variance = 2.0 * mechanism.scale**2
    kind = WORKLOADS[name]
    gx, gy = gram_for(nx, kind), gram_for(ny, kind)
    unit_error = sx.unit_error(gx) * sy.unit_error(gy)  # Δ² tr(M G⁻¹)/m, factorised
    bound = svd_bound(gx) * svd_bound(gy)
    identity = (float(np.sum(gx.diag())) / gx.m) * (float(np.sum(gy.diag())) / gy.m)
    details: dict[str, Any] = {
        "strategy": "kronecker_p_identity",
        "p": (sx.p, sy.p),
        "workload": name,
        "scale": mechanism.scale,
        "sensitivity": sensitivity,
        "unit_error": unit_error,
        "expected_rmse": math.sqrt(noise_variance * unit_error) / sensitivity,
        "svd_bound_rmse": math.sqrt(2.0 * bound) / eps,
        "ratio_to_bound": math.sqrt(unit_error / bound),
        "laplace2d_expected_rmse": math.sqrt(2.0 * identity) / eps,
    }
    payer = as_accountant(accountant)

    def variance(x0: Index, x1: Index, y0: Index, y1: Index) -> NDArray[np.float64]:
        out = sx.range_variances(x0, x1 - 1) * sy.range_variances(y0, y1 - 1)
        return np.asarray(noise_variance * out, dtype=np.float64)

    def release() -> PublishedGrid:
        remaining = None if payer is None else payer.remaining
        measured = _measure(sx, sy, x)
        noisy = np.asarray(
            mechanism.randomise(measured.ravel(), rng=source_for(rng)), dtype=np.float64
        ).reshape(measured.shape)
        return PublishedGrid(
            estimates=_reconstruct(sx, sy, noisy),
            x_edges=ex,
            y_edges=ey,
            epsilon=eps,
            method="matrix_mechanism2d",
            cells=unit_cells(nx, ny),
            details={**details, "remaining": remaining},
            rectangle_variance=variance,
        )

    return charge_and_run(payer, Budget(eps), "histogram2d: matrix_mechanism2d", release)


def _measure(sx: Any, sy: Any, x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Ax X Ayᵀ ((nx + px) × (ny + py)), exact for whole counts below 2³³ (see the publisher)."""
    left = np.vstack((sx.a[:, None] * x, sx.b @ x))  # Ax X
    return np.hstack((left * sy.a[None, :], left @ sy.b.T))  # (Ax X) Ayᵀ


def _reconstruct(sx: Any, sy: Any, y: NDArray[np.float64]) -> NDArray[np.float64]:
    """Gx⁻¹ Axᵀ Y Ay Gy⁻¹: least squares for a Kronecker strategy, one axis at a time."""
    along_x = sx.reconstruct(y)  # (nx, ny + py)
    out: NDArray[np.float64] = sy.reconstruct(along_x.T).T
    return out
