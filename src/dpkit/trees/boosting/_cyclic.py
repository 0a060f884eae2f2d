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
   G and of w times its Hessian H at the current model (log loss:
   G = sum clip(y - p, -c, c), H = sum p (1 - p); the regressor's losses: see
   ``SquaredLoss``; w = the loss's public ``hessian_weight``: a Hessian
   weighted less costs less budget and takes more noise, which pooling
   averages away);
3. move the intercept by learning_rate * c, c = sum G / (sum H + lambda), and
   every code of a segment by learning_rate * (G - c H) / (H + lambda): a
   damped Newton step around the common move (lambda, the
   ``l2_regularization``, keeps segments with a small Hessian from taking
   wild steps). G is this release's; H is the *pooled* Hessian
   (``PooledHessian``): a least-squares estimate of each code's Hessian sum
   from every release of feature j so far, this one included, added up over
   the segment and clipped at 0. A code's Hessian sum moves slowly with the
   model, while one release's noise is often larger than the sum itself at
   small epsilon; pooling the releases steadies the step's denominator
   (measured: docs/trees-boosting.md, "Pooled Hessian, clipped gradients").
   All of it is computed from releases (post-processing).

Sensitivity of one release (add/remove one row): the row falls in exactly one
segment and moves its sums by the row's (g, w h). For the log loss its
gradient vector has l2 norm^2 <= c^2 (two classes: g = y - p clipped to +-c,
c <= 1 public: ``LogLoss.gradient_limit``) or <= 2 (K classes:
sum_k (p_k - y_k)^2 = sum p_k^2 - 2 p_y + 1 <= 2), its Hessian vector l2
norm^2 <= 1/16 (two classes) or <= 1/4 (sum_k h_k^2 <= max_k h_k *
sum_k h_k <= 1/4), times w^2; l1 norms <= c + w/4 or 2 + w (each loss
states its bounds). The clip is applied to each row's g before the sum, so
it bounds every row, whatever the data. The current model is a
function of earlier releases only, so each row's (g, h) is a public
transformation of that row at the time of the release, and the releases
compose sequentially (adaptively) over rounds x features.

Exact arithmetic (so that the sums are the same, bit for bit, in NumPy and in
a SQL engine, in any summation order, and the proven bounds hold for the
values actually computed): the model is kept in integer units of
2^-``MODEL_BITS`` (every shape value and the intercept rounded to that grid
and clipped to +-``MODEL_LIMIT``: post-processing of the releases), so a
row's score F is an exact integer sum in any order. Binary log loss: p is
read from a public table at the score rounded to 2^-``SCORE_BITS`` and
clipped to +-``SCORE_LIMIT`` (``logistic_table``; no exp is evaluated per
row, so no engine's exp can differ), and each row's g = clip(y - p, -c, c)
and h = p (1 - p) are integers in units of 2^-``GRADIENT_BITS``: 0 <= p <= 1
and h <= 1/4 still hold after rounding (1/4, 1 and c lie on the grid and
rounding is monotone), so the bounds above are unchanged. Regression: the
residual is clipped to [-1, 1] and rounded to the same grid (the end points lie on
it): the bounds are unchanged. The segment sums are then sums of integers
(exact as doubles below 2^53 units, i.e. for fewer than 2^33 rows), so the
sensitivity argument holds for the computed sums, not only in real
arithmetic. (Several classes, softmax: array fits only, with float g and h
as before.)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit, softmax

from dpkit.tables.engines.base import GRADIENT_BITS, MODEL_BITS, SCORE_BITS, SCORE_LIMIT
from dpkit.trees.boosting._noise import NoisePlan, release

#: Model values (shape values, intercept) are clipped to +-MODEL_LIMIT (post-processing).
MODEL_LIMIT = 2**16
MODEL_UNIT = 2.0**-MODEL_BITS
GRADIENT_UNIT = 2.0**-GRADIENT_BITS
#: The most features a fit takes: |F| <= (MAX_FEATURES + 1) * MODEL_LIMIT stays below 2^52 units.
MAX_FEATURES = 4096
_LIMIT_UNITS = MODEL_LIMIT << MODEL_BITS
_SCORE_SHIFT = MODEL_BITS - SCORE_BITS
_SCORE_INDEX_LIMIT = SCORE_LIMIT << SCORE_BITS


@functools.cache
def logistic_table() -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(P, Hn): round(p * 2^GRADIENT_BITS) and round(p (1 - p) * 2^GRADIENT_BITS) for
    p = sigmoid(u / 2^SCORE_BITS), u = -SCORE_LIMIT 2^SCORE_BITS .. +SCORE_LIMIT 2^SCORE_BITS.

    A public table (no data): both the array fit and the engine fit look p up in it.
    """
    u = np.arange(-_SCORE_INDEX_LIMIT, _SCORE_INDEX_LIMIT + 1, dtype=np.float64)
    p = expit(u / 2.0**SCORE_BITS)
    scale = 2.0**GRADIENT_BITS
    return np.rint(p * scale).astype(np.int64), np.rint(p * (1.0 - p) * scale).astype(np.int64)


def score_index(units: NDArray[np.int64]) -> NDArray[np.int64]:
    """The table row of each score: floor(F 2^SCORE_BITS + 1/2) clipped, F = units 2^-MODEL_BITS.

    Integer arithmetic (an arithmetic shift is a floor), the same in SQL.
    """
    half = 1 << (_SCORE_SHIFT - 1)
    return np.clip((units + half) >> _SCORE_SHIFT, -_SCORE_INDEX_LIMIT, _SCORE_INDEX_LIMIT)


def to_units(values: NDArray[np.float64]) -> NDArray[np.int64]:
    """Model values as integers in units of 2^-MODEL_BITS, clipped to +-MODEL_LIMIT."""
    scaled = np.clip(np.asarray(values, dtype=np.float64) / MODEL_UNIT, -_LIMIT_UNITS, _LIMIT_UNITS)
    return np.rint(scaled).astype(np.int64)


def on_gradient_grid(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """floor(v 2^GRADIENT_BITS + 1/2) 2^-GRADIENT_BITS: the rounding the engines apply too."""
    return np.floor(values / GRADIENT_UNIT + 0.5) * GRADIENT_UNIT


@dataclass(frozen=True)
class CyclicSpec:
    """Public settings of one fit (all validated by the estimator)."""

    max_iter: int
    learning_rate: float
    max_leaf_nodes: int
    l2_regularization: float
    #: "cyclic": each update sees the model its predecessors in the round moved;
    #: "round": every update of a round sees the round's starting model (one pass).
    update: str = "cyclic"


#: The whole range of a two-class gradient y - p, in units of 2^-GRADIENT_BITS (no clipping).
FULL_GRADIENT = 1 << GRADIENT_BITS


@dataclass(frozen=True)
class LogLoss:
    """Log loss: sigmoid for one output (two classes), softmax for several.

    Per row: g = y - p (one-hot y), h = p (1 - p); a release carries
    (g, w h), w = ``hessian_weight`` (public). Two classes: g is clipped to
    +-c, c = ``gradient_limit`` 2^-GRADIENT_BITS <= 1 (public), so one row's
    (g, w h) has l2^2 <= c^2 + w^2/16 and l1 <= c + w/4: a smaller c buys less
    noise for the same budget, at the price of a bias (where |y - p| often
    exceeds c the fitted scores are a distorted, for a single bin monotone,
    version of the log-odds; docs/trees-boosting.md). Several outputs (softmax,
    no clipping): l2^2 <= 2 + w^2/4 and l1 <= 2 + w (module docstring).
    """

    n_outputs: int
    gradient_limit: int = FULL_GRADIENT
    hessian_weight: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.gradient_limit <= FULL_GRADIENT:
            raise ValueError("gradient_limit must be in (0, 2^GRADIENT_BITS]")
        if self.n_outputs > 1 and self.gradient_limit != FULL_GRADIENT:
            raise ValueError("gradients are clipped for two classes only")

    @property
    def clip(self) -> float:
        """c: the bound of |g| for two classes (exact: an integer number of grid units)."""
        return self.gradient_limit * GRADIENT_UNIT

    @property
    def l2_sensitivity(self) -> float:
        w2 = self.hessian_weight**2
        if self.n_outputs == 1:
            return math.sqrt(self.clip * self.clip + w2 / 16.0)
        return math.sqrt(2.0 + w2 / 4.0)

    @property
    def l1_sensitivity(self) -> float:
        w = self.hessian_weight
        return self.clip + w / 4.0 if self.n_outputs == 1 else 2.0 + w

    def gradients(
        self, targets: NDArray[np.float64], units: NDArray[np.int64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(g, h) per row at the scores ``units`` (2^-MODEL_BITS); one output: the table rule."""
        if self.n_outputs > 1:
            p = probabilities(units.astype(np.float64) * MODEL_UNIT)
            return targets - p, p * (1.0 - p)
        table_p, table_h = logistic_table()
        row = score_index(units) + _SCORE_INDEX_LIMIT
        p_row = table_p[row].astype(np.float64) * GRADIENT_UNIT
        # both on the grid, and c too: the clipped g is on it (as the engines compute it)
        g = np.clip(targets - p_row, -self.clip, self.clip)
        return g, table_h[row].astype(np.float64) * GRADIENT_UNIT


@dataclass(frozen=True)
class SquaredLoss:
    """Squared loss on a target scaled to [0, 1], residuals clipped to [-1, 1].

    Per row: g = clip(y - F, -1, 1), h = 1 (so H sums are counts). Bounds of one
    row's (g, w h), w = ``hessian_weight``: l2^2 <= 1 + w^2, l1 <= 1 + w.
    Clipping makes it a Huber-type loss where the model strays outside [0, 1].
    """

    n_outputs: int = 1
    absolute: bool = False
    hessian_weight: float = 1.0

    @property
    def l2_sensitivity(self) -> float:
        return math.sqrt(1.0 + self.hessian_weight**2)

    @property
    def l1_sensitivity(self) -> float:
        return 1.0 + self.hessian_weight

    def gradients(
        self, targets: NDArray[np.float64], units: NDArray[np.int64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(g, h) per row at the scores ``units``, g on the 2^-GRADIENT_BITS grid (as in SQL)."""
        residual = targets - units.astype(np.float64) * MODEL_UNIT
        g = np.sign(residual) if self.absolute else on_gradient_grid(np.clip(residual, -1.0, 1.0))
        return g, np.ones(units.shape, dtype=np.float64)


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


class GradientSource(Protocol):
    """Where the rows live: per-code sums of (g, h) at a model, and the number of rows.

    ``code_sums(features, intercept, shapes)``: for each feature j of ``features``,
    (G, H), each (n_bins_j, n_outputs): the sums over the rows with code c of
    feature j of the loss's g and h at the model (``intercept`` and ``shapes`` in
    units of 2^-MODEL_BITS); one pass over the rows for all of ``features``.
    ``moved(j, intercept, shape)``: the model moved by these deltas (an array
    source keeps its rows' scores). Every source computes the same numbers (the
    module docstring's exact arithmetic). Never released as they are: the fit
    adds them up per segment (exact: integers in units of 2^-GRADIENT_BITS) and
    releases the segment sums with noise.
    """

    def rows(self) -> int: ...

    def code_sums(
        self,
        features: list[int],
        intercept: NDArray[np.int64],
        shapes: list[NDArray[np.int64]],
    ) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]: ...

    def moved(
        self, feature: int, intercept: NDArray[np.int64], shape: NDArray[np.int64]
    ) -> None: ...


class ArraySource:
    """Rows in memory: codes (n, d), targets (n, n_outputs); keeps every row's score in units."""

    def __init__(
        self,
        codes: NDArray[np.int16],
        targets: NDArray[np.float64],
        loss: Loss,
        init: NDArray[np.int64],
        n_bins: NDArray[np.int64],
    ) -> None:
        self.codes, self.targets, self.loss = codes, targets, loss
        self.n_bins = n_bins
        self.scores = np.tile(np.asarray(init, dtype=np.int64), (codes.shape[0], 1))

    def rows(self) -> int:
        return int(self.codes.shape[0])

    def code_sums(
        self,
        features: list[int],
        intercept: NDArray[np.int64],
        shapes: list[NDArray[np.int64]],
    ) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
        grad, hess = self.loss.gradients(self.targets, self.scores)
        k = self.targets.shape[1]
        out = []
        for j in features:  # features, not rows
            rows, n = self.codes[:, j], int(self.n_bins[j])
            g, h = np.zeros((n, k)), np.zeros((n, k))
            for c in range(k):  # outputs, not rows
                g[:, c] = np.bincount(rows, grad[:, c], minlength=n)[:n]
                h[:, c] = np.bincount(rows, hess[:, c], minlength=n)[:n]
            out.append((g, h))
        return out

    def moved(self, feature: int, intercept: NDArray[np.int64], shape: NDArray[np.int64]) -> None:
        self.scores += intercept + shape[self.codes[:, feature]]


class PooledHessian:
    """Per code, a least-squares estimate of its Hessian sum from every release of its feature.

    A release gives each segment's noisy Hessian sum, the sum over the segment's
    codes. Over the releases of feature j so far, the per-code values x solve
    min sum_releases ||A x - released||^2 + RIDGE ||x - x0||^2, A a release's
    0/1 segment-by-code matrix and x0 each code's average equal share of its
    segments' sums (where the random cuts have not yet told codes apart, x
    stays near x0). Codes that are segments of their own (categories, the
    missing code) are simply averaged. A segment's pooled Hessian is the sum
    of its codes' x, clipped at 0: unbiased for a Hessian that does not move,
    once the cuts have separated the codes, with the noise of many releases
    averaged. Only released values go in: post-processing.

    Work and memory are bounded by public sizes: a feature with more than
    ``MAX_SOLVED`` ordered codes keeps x = x0 (equal shares, no system), so a
    release costs at most one MAX_SOLVED x MAX_SOLVED solve and a feature at
    most MAX_SOLVED^2 stored values.
    """

    #: Weight of the equal-share estimate x0, in releases: small, so that a release's own
    #: new cuts are nearly met where earlier releases have not told the codes apart.
    RIDGE = 0.01
    #: The most ordered codes solved for (the default grids have 64 and 32 bins).
    MAX_SOLVED = 64

    def __init__(self, n_bins: NDArray[np.int64], ordered: NDArray[np.int64], n_outputs: int):
        self.ordered = [int(o) if o <= self.MAX_SOLVED else 0 for o in ordered]
        self.total = [np.zeros((int(b), n_outputs)) for b in n_bins]
        self.credits = [np.zeros(int(b)) for b in n_bins]
        self.gram = [np.zeros((o, o)) for o in self.ordered]
        self.rhs = [np.zeros((o, n_outputs)) for o in self.ordered]

    def pooled(
        self, feature: int, seg: NDArray[np.int64], n_seg: int, released: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """Add ``released`` (n_seg, outputs) to feature's estimate; the pooled segment sums."""
        width = np.bincount(seg, minlength=n_seg).astype(np.float64)
        self.total[feature] += (released / width[:, None])[seg]
        self.credits[feature] += 1.0
        per_code = self.total[feature] / self.credits[feature][:, None]
        o = self.ordered[feature]
        if o > 0:
            run = seg[:o]  # the ordered codes' segments (contiguous runs)
            self.gram[feature] += run[:, None] == run[None, :]
            self.rhs[feature] += released[run]
            system = self.gram[feature] + self.RIDGE * np.eye(o)
            per_code[:o] = np.linalg.solve(system, self.rhs[feature] + self.RIDGE * per_code[:o])
        return np.maximum(segment_sums(per_code, seg, n_seg), 0.0)


def segment_sums(
    values: NDArray[np.float64], seg: NDArray[np.int64], n_seg: int
) -> NDArray[np.float64]:
    """Per-code sums (codes, outputs) added up per segment: exact for values on the
    2^-GRADIENT_BITS grid (integers in those units, far below 2^53 of them)."""
    out = np.zeros((n_seg, values.shape[1]))
    np.add.at(out, seg, values)
    return out


def fit_cyclic(
    source: GradientSource,
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

    ``source`` holds the rows (:class:`ArraySource`, or an engine's); ``init`` the
    public starting intercept; ``ordered[j]`` the number of ordered codes of feature j
    (0 for a categorical feature); ``noise`` one row per release, from ``_noise.draw``;
    ``advance`` is called after every round (progress; public: rounds only). Every
    release is padded to the plan's size, so all releases look alike.

    The noise standard deviation is post-processing of the releases: an update
    moves a segment by learning_rate * (G - c H) / (H + lambda) with the
    pooled H (released values only); holding that H fixed, the noise of G (std
    ``plan.std``) moves it with std learning_rate * plan.std / (H + lambda).
    Updates get independent noise, so the variances add up over rounds. A
    first-order account: it leaves out the noise of H, of the common move c
    and its feedback through later gradients (``plot_shapes`` says so).
    """
    d = int(n_bins.size)
    k = loss.n_outputs
    shapes = [np.zeros((int(b), k), dtype=np.int64) for b in n_bins]
    variances = [np.zeros((int(b), k)) for b in n_bins]
    intercept = to_units(np.asarray(init, dtype=np.float64).reshape(k))
    width = plan.size // (2 * k)
    step = 0
    one_pass = spec.update == "round"
    hessian = PooledHessian(n_bins, ordered, k)
    for _ in range(spec.max_iter):  # rounds are sequential by nature
        order = [int(j) for j in rng.permutation(d)]
        cuts = [segments(int(n_bins[j]), int(ordered[j]), spec.max_leaf_nodes, rng) for j in order]
        pending = dict(zip(order, source.code_sums(order, intercept, shapes))) if one_pass else {}
        # "round": every feature's release is at the round's starting model, so the d
        # intercept moves share one step: each feature's common move, over d.
        share = 1.0 / d if one_pass else 1.0
        for j, (seg, n_seg) in zip(order, cuts):
            code_g, code_h = pending[j] if one_pass else source.code_sums([j], intercept, shapes)[0]
            sums = np.zeros((2, width, k))
            sums[0, :n_seg] = segment_sums(code_g, seg, n_seg)
            sums[1, :n_seg] = segment_sums(code_h, seg, n_seg) * loss.hessian_weight
            noisy = release(plan, sums, noise[step])
            step += 1
            g = noisy[0, :n_seg]
            h = hessian.pooled(j, seg, n_seg, noisy[1, :n_seg] / loss.hessian_weight)
            # The common part of the step (an intercept move) from the totals, then
            # each segment's step around it; both from this release (post-processing),
            # rounded to the model's grid and clipped (exact sums of scores, any order).
            common = g.sum(axis=0) / (h.sum(axis=0) + spec.l2_regularization)
            update = (g - common * h) / (h + spec.l2_regularization)
            moved_intercept = np.clip(
                intercept + to_units(spec.learning_rate * share * common),
                -_LIMIT_UNITS,
                _LIMIT_UNITS,
            )
            moved_shape = np.clip(
                shapes[j] + to_units(spec.learning_rate * update)[seg], -_LIMIT_UNITS, _LIMIT_UNITS
            )
            delta_intercept, delta_shape = moved_intercept - intercept, moved_shape - shapes[j]
            intercept, shapes[j] = moved_intercept, moved_shape
            source.moved(j, delta_intercept, delta_shape)
            step_std = spec.learning_rate * plan.std / (h + spec.l2_regularization)
            variances[j] += np.square(step_std)[seg]
        if advance is not None:
            advance(1)
    return (
        intercept.astype(np.float64) * MODEL_UNIT,
        [s.astype(np.float64) * MODEL_UNIT for s in shapes],
        [np.sqrt(v) for v in variances],
    )


def decision_scores(
    intercept: NDArray[np.float64], shapes: list[NDArray[np.float64]], codes: NDArray[np.int16]
) -> NDArray[np.float64]:
    """F(x) (n, n_outputs): the intercept plus the shape functions at the rows' codes."""
    n = codes.shape[0]
    out = np.tile(intercept, (n, 1))
    for j, shape in enumerate(shapes):  # features, not rows
        out += shape[codes[:, j]]
    return out
