"""The optimal obfuscation matrix over mixtures of Lipschitz shapes: a small LP, solved fast.

Why it is private. A column K[:, j] satisfies every geo-indistinguishability
constraint K[a, j] <= e^(ε·d(a, b))·K[b, j] when it is a non-negative sum of
*shapes* v(i) = exp(ε·g(i)) with g 1-Lipschitz for d: each shape meets the
constraint term by term, and sums of non-negative terms keep it. Every g used
here is 1-Lipschitz in any metric:

- balls: g(i) = -max(0, d(i, c) - r), for each region c and radius r
  (|d(a, c) - d(b, c)| <= d(a, b));
- half-planes: g(i) = -max(0, <x_i, u> - t) for 16 unit directions u and 12
  offsets t (|<x_a - x_b, u>| <= d(a, b), d being Euclidean);
- for a custom loss, sets: g(i) = -d(i, S) = -min over s in S of d(i, s), S
  the regions whose loss against an output is below a quantile;
- the constant g = 0 (the uniform column, which makes the LP feasible).

The LP chooses non-negative weights w_s and an output o(s) for each shape so
that rows sum to one, K[i, j] = Σ_{s: o(s)=j} w_s v_s(i), minimising the
expected loss Σ_i π_i Σ_j K[i, j] L[i, j]. The output of a shape enters the
objective only, so each shape takes its cheapest output, and the LP has one
row per region and one column per shape. It is solved by column generation
with HiGHS (only the shapes with negative reduced cost enter, warm-started),
which is why a few hundred regions take seconds: the constraint LP of
Bordenabe et al. has n^2 variables and n·E constraints.

What it gives up. The optimum is over this family, not over all
ε-geo-indistinguishable matrices; measured against the exact n^3-constraint
LP on small grids it is within about 1.5% at low ε and equal at high ε, and it
is not weakened by a spanner's dilation (``benchmarks/location_lp.py``).
Shapes are built at ε·(1 - 10^-3) so row renormalisation and quantisation in
the certification cannot push the realised ε above the declared one.
"""

from __future__ import annotations

import functools
import os
import sys

import highspy
import numpy as np
from numpy.typing import NDArray

from dpkit.errors import InvalidParameterError

_MARGIN = 1e-3
_RADII = 12
_DIRECTIONS = 16
_OFFSETS = 12
_LOSS_LEVELS = (0.1, 0.25, 0.5)
_MAX_ROUNDS = 500


@functools.cache
def _swallow_banner() -> None:
    """HiGHS prints a banner on the process's stdout (fd 1, below Python) when the first
    solver is built; build that one with fd 1 on /dev/null so CLI output stays clean."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _solver() -> highspy.Highs:
    _swallow_banner()
    solver = highspy.Highs()
    solver.setOptionValue("output_flag", False)
    return solver


def _distance_to_sets(d: NDArray[np.float64], masks: NDArray[np.bool_]) -> NDArray[np.float64]:
    """(n, k): the distance from each region to each set (masks is (k, n), no set empty)."""
    out = np.empty((d.shape[0], masks.shape[0]))
    for k, mask in enumerate(masks):
        out[:, k] = d[:, mask].min(axis=1)
    return out


def shape_logs(
    centers: NDArray[np.float64], d: NDArray[np.float64], loss: NDArray[np.float64] | None
) -> NDArray[np.float64]:
    """(n, S): the 1-Lipschitz functions g of the module docstring, one per column."""
    n = d.shape[0]
    off = d[d > 0]
    spacing, diameter = float(off.min()), float(off.max())
    radii = np.concatenate([[0.0], np.geomspace(spacing / 4, diameter, _RADII - 1)])
    logs = [-np.maximum(0.0, d[:, :, None] - radii).reshape(n, -1)]
    angles = np.arange(_DIRECTIONS) * (2 * np.pi / _DIRECTIONS)
    proj = centers @ np.stack([np.cos(angles), np.sin(angles)])  # (n, directions)
    low, high = proj.min(axis=0), proj.max(axis=0)
    offsets = low + (high - low) * np.linspace(0.0, 1.0, _OFFSETS)[:, None]  # (offsets, directions)
    logs.append(-np.maximum(0.0, proj[:, None, :] - offsets[None, :, :]).reshape(n, -1))
    if loss is not None:
        masks = [
            loss[:, j] <= level
            for j in range(loss.shape[1])
            for level in np.quantile(loss[:, j], _LOSS_LEVELS)
        ]
        logs.append(-_distance_to_sets(d, np.unique(np.array(masks), axis=0)))
    logs.append(np.zeros((n, 1)))
    return np.concatenate(logs, axis=1)


def mixture_lp(
    centers: NDArray[np.float64],
    d: NDArray[np.float64],
    epsilon: float,
    prior: NDArray[np.float64],
    loss: NDArray[np.float64],
    custom_loss: bool,
) -> tuple[NDArray[np.float64], float]:
    """The (n, n) matrix of least expected loss in the family, and that loss (before certification)."""
    n = d.shape[0]
    shapes = np.exp(
        epsilon * (1.0 - _MARGIN) * shape_logs(centers, d, loss if custom_loss else None)
    )
    shapes /= shapes.sum(axis=0, keepdims=True)  # scale only: each column is still a shape
    costs = loss.T @ (prior[:, None] * shapes)  # (outputs, shapes)
    output = costs.argmin(axis=0)
    cost = costs[output, np.arange(shapes.shape[1])]
    solver = _solver()
    solver.addRows(
        n, np.ones(n), np.ones(n), 0, np.array([], np.int32), np.array([], np.int32), np.array([])
    )
    rows = np.arange(n, dtype=np.int32)

    def add(columns: NDArray[np.int64]) -> None:
        block = shapes[:, columns]
        solver.addCols(
            columns.size,
            cost[columns],
            np.zeros(columns.size),
            np.full(columns.size, highspy.kHighsInf),
            block.size,
            (np.arange(columns.size) * n).astype(np.int32),
            np.tile(rows, columns.size),
            block.T.ravel(),
        )

    # Start with the point shapes (radius 0) and the uniform column: always feasible.
    chosen = np.concatenate([np.arange(0, n * _RADII, _RADII), [shapes.shape[1] - 1]])
    present = np.zeros(shapes.shape[1], dtype=bool)
    add(chosen)
    present[chosen] = True
    tolerance = 1e-10 * max(float(cost.max()), 1e-300)
    for _ in range(_MAX_ROUNDS):
        solver.run()
        duals = np.asarray(solver.getSolution().row_dual)
        reduced = cost - duals @ shapes
        reduced[present] = np.inf
        entering = np.flatnonzero(reduced < -tolerance)
        if entering.size == 0:
            break
        entering = entering[np.argsort(reduced[entering], kind="stable")[: max(n // 4, 1)]]
        add(entering)
        present[entering] = True
        chosen = np.concatenate([chosen, entering])
    if solver.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise InvalidParameterError(
            'the mixture LP did not solve; use fewer regions or method="constraints".'
        )
    weights = np.clip(np.asarray(solver.getSolution().col_value), 0.0, None)
    matrix = np.zeros((n, n))
    np.add.at(matrix.T, output[chosen], (shapes[:, chosen] * weights).T)
    return matrix, float(prior @ (matrix * loss).sum(axis=1))
