"""Cyclic (per-feature) Newton boosting of an additive model, with noisy gradient sums.

The model is F(x) = sum_j f_j(code_j(x)), one shape function per feature on
the feature's public codes (``trees.engine._grid.FeatureGrid``), with ``n_outputs``
scores per code (1 for two classes, K for K classes: softmax). A round visits
every feature once, in a random order (cyclic boosting, as DP-EBM, Nori et al.
2021). One update of feature j:

1. cut j's codes into at most ``max_leaf_nodes`` contiguous segments at
   random positions (data-independent; categorical codes and the missing code
   are segments of their own);
2. release, with noise, the per-segment sums of the loss's negative gradient
   G and Hessian H at the current model (log loss: G = sum (y - p),
   H = sum p (1 - p); the regressor's losses: see ``SquaredLoss``);
3. move the intercept by learning_rate * c, c = sum G / (sum H + lambda), and
   every code of a segment by learning_rate * (G - c H) / (max(H, 0) + lambda):
   a damped Newton step around the common move (lambda, the
   ``l2_regularization``, keeps segments whose noisy Hessian is small from
   taking wild steps). Both are computed from the release alone.

Sensitivity of one release (add/remove one row): the row falls in exactly one
segment. For the log loss its gradient vector has l2 norm^2 <= 1 (two
classes: |p - y| <= 1) or <= 2 (K classes: sum_k (p_k - y_k)^2 =
sum p_k^2 - 2 p_y + 1 <= 2), its Hessian vector l2 norm^2 <= 1/16 (two
classes) or <= 1/4 (sum_k h_k^2 <= max_k h_k * sum_k h_k <= 1/4); l1 norms
<= 1 + 1/4 or 2 + 1 (each loss states its bounds). The current model is a
function of earlier releases only, so each row's (g, h) is a public
transformation of that row at the time of the release, and the releases
compose sequentially (adaptively) over rounds x features.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit, softmax

from dpkit.trees.boosting._noise import NoisePlan, release


@dataclass(frozen=True)
class CyclicSpec:
    """Public settings of one fit (all validated by the estimator)."""

    max_iter: int
    learning_rate: float
    max_leaf_nodes: int
    l2_regularization: float


@dataclass(frozen=True)
class LogLoss:
    """Log loss: sigmoid for one output (two classes), softmax for several.

    Per row: g = y - p (one-hot y), h = p (1 - p). Bounds of one row's
    (g, h) vector: l2^2 <= 1 + 1/16 and l1 <= 1.25 for one output;
    l2^2 <= 2 + 1/4 and l1 <= 3 for several (module docstring).
    """

    n_outputs: int

    @property
    def l2_sensitivity(self) -> float:
        return math.sqrt(1.0 + 1.0 / 16.0) if self.n_outputs == 1 else math.sqrt(2.0 + 1.0 / 4.0)

    @property
    def l1_sensitivity(self) -> float:
        return 1.25 if self.n_outputs == 1 else 3.0

    def gradients(
        self, targets: NDArray[np.float64], scores: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        p = probabilities(scores)
        return targets - p, p * (1.0 - p)


@dataclass(frozen=True)
class SquaredLoss:
    """Squared loss on a target scaled to [0, 1], residuals clipped to [-1, 1].

    Per row: g = clip(y - F, -1, 1), h = 1 (so H sums are counts). Bounds of one
    row's (g, h): l2^2 <= 2, l1 <= 2. Clipping makes it a Huber-type loss
    where the model strays outside [0, 1].
    """

    n_outputs: int = 1
    l2_sensitivity: float = math.sqrt(2.0)
    l1_sensitivity: float = 2.0

    absolute: bool = False

    def gradients(
        self, targets: NDArray[np.float64], scores: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        residual = targets - scores
        g = np.sign(residual) if self.absolute else np.clip(residual, -1.0, 1.0)
        return g, np.ones_like(scores)


Loss = LogLoss | SquaredLoss


def probabilities(scores: NDArray[np.float64]) -> NDArray[np.float64]:
    """p (n, n_outputs): sigmoid of one score column, softmax of several."""
    if scores.shape[1] == 1:
        return np.asarray(expit(scores))
    return np.asarray(softmax(scores, axis=1))


def segments(
    n_codes: int, ordered: int, max_leaf_nodes: int, rng: np.random.Generator
) -> tuple[NDArray[np.int64], int]:
    """A random segment id per code, and the number of segments (public choices only).

    The first ``ordered`` codes are ordered (a numeric feature's bins) and are
    cut into at most ``max_leaf_nodes`` contiguous runs at random positions;
    any further codes (categories, or the missing code) are segments of their own.
    """
    if ordered <= max_leaf_nodes:
        return np.arange(n_codes, dtype=np.int64), n_codes
    cuts = np.sort(rng.choice(np.arange(1, ordered), max_leaf_nodes - 1, replace=False))
    seg = np.searchsorted(cuts, np.arange(ordered), side="right").astype(np.int64)
    extra = np.arange(max_leaf_nodes, max_leaf_nodes + n_codes - ordered, dtype=np.int64)
    return np.concatenate([seg, extra]), max_leaf_nodes + n_codes - ordered


def release_size(
    n_bins: NDArray[np.int64], ordered: NDArray[np.int64], max_leaf_nodes: int, n_outputs: int
) -> int:
    """Values per release: 2 x outputs x the largest number of segments of any feature."""
    most = max(min(int(o), max_leaf_nodes) + int(b - o) for b, o in zip(n_bins, ordered))
    return 2 * n_outputs * most


def fit_cyclic(
    codes: NDArray[np.int16],
    targets: NDArray[np.float64],
    loss: Loss,
    init: NDArray[np.float64],
    n_bins: NDArray[np.int64],
    ordered: NDArray[np.int64],
    spec: CyclicSpec,
    plan: NoisePlan,
    noise: NDArray[np.int64],
    rng: np.random.Generator,
    advance: Callable[[int], None] | None = None,
) -> tuple[NDArray[np.float64], list[NDArray[np.float64]], list[NDArray[np.float64]]]:
    """The intercept (n_outputs,), the shape functions (one (n_bins_j, n_outputs) array per
    feature) and each shape value's noise standard deviation (same shapes).

    ``targets`` (n, n_outputs) are one-hot labels (one column for two
    classes) or the scaled target; ``init`` the public starting intercept;
    ``ordered[j]`` the number of ordered codes of feature j (0 for a
    categorical feature); ``noise`` one row per release, from ``_noise.draw``;
    ``advance`` is called after every round (progress; public: rounds only).
    Every release is padded to the plan's size, so all releases look alike.

    The noise standard deviation is post-processing of the releases: an update
    moves a segment by learning_rate * (G - c H) / (H + lambda) with the
    released (noisy) H; holding that H fixed, the noise of G (std
    ``plan.std``) moves it with std learning_rate * plan.std / (H + lambda).
    Updates get independent noise, so the variances add up over rounds. A
    first-order account: it leaves out the noise of H, of the common move c
    and its feedback through later gradients (``plot_shapes`` says so).
    """
    n, d = codes.shape
    k = targets.shape[1]
    shapes = [np.zeros((int(b), k)) for b in n_bins]
    variances = [np.zeros((int(b), k)) for b in n_bins]
    intercept = np.array(init, dtype=np.float64).reshape(k)
    scores = np.tile(intercept, (n, 1))
    width = plan.size // (2 * k)
    step = 0
    for _ in range(spec.max_iter):  # rounds are sequential by nature
        for j in rng.permutation(d):
            grad, hess = loss.gradients(targets, scores)
            seg, n_seg = segments(int(n_bins[j]), int(ordered[j]), spec.max_leaf_nodes, rng)
            rows = seg[codes[:, j]]
            sums = np.zeros((2, width, k))
            for c in range(k):  # outputs, not rows
                sums[0, :, c] = np.bincount(rows, grad[:, c], minlength=width)[:width]
                sums[1, :, c] = np.bincount(rows, hess[:, c], minlength=width)[:width]
            noisy = release(plan, sums, noise[step])
            step += 1
            g, h = noisy[0, :n_seg], noisy[1, :n_seg]
            h = np.maximum(h, 0.0)
            # The common part of the step (an intercept move) from the totals, then
            # each segment's step around it; both from this release (post-processing).
            common = g.sum(axis=0) / (h.sum(axis=0) + spec.l2_regularization)
            update = (g - common * h) / (h + spec.l2_regularization)
            intercept += spec.learning_rate * common
            shapes[j] += spec.learning_rate * update[seg]
            step_std = spec.learning_rate * plan.std / (h + spec.l2_regularization)
            variances[j] += np.square(step_std)[seg]
            scores += spec.learning_rate * (update[rows] + common)
        if advance is not None:
            advance(1)
    return intercept, shapes, [np.sqrt(v) for v in variances]


def decision_scores(
    intercept: NDArray[np.float64], shapes: list[NDArray[np.float64]], codes: NDArray[np.int16]
) -> NDArray[np.float64]:
    """F(x) (n, n_outputs): the intercept plus the shape functions at the rows' codes."""
    n = codes.shape[0]
    out = np.tile(intercept, (n, 1))
    for j, shape in enumerate(shapes):  # features, not rows
        out += shape[codes[:, j]]
    return out
