"""A hierarchical strategy with optimised level weights, for range workloads under l1 sensitivity (pure).

The strategy measures, at each level l = 0..L of a b-ary tree over N = b^L
unit bins (level 0 the units, level L the total), every block sum of
s_l = b^l consecutive bins, scaled by a weight w_l >= 0. A unit bin lies in
one block per level, so every column of A has l1 norm Σ w_l: that is the
sensitivity. Uniform weights give Hb's tree (Qardaji, Yang & Li, VLDB 2013);
here the weights are chosen for the workload, as Cormode et al. ("Differentially
private spatial decompositions", ICDE 2012) choose per-level budgets, but by the
workload's exact least-squares error rather than a closed-form guess.

Why the error is exact and cheap: AᵀA = Σ_l w_l² G_l, where G_l sums the
outer products of the level's block indicators. The G_l share their
eigenvectors (Haar-like: constant on blocks of size s_j and summing to zero
within blocks of size s_{j+1}), with eigenvalue s_l on level j >= l and 0 above,
so AᵀA = Σ_j λ_j Π_j with λ_j = Σ_{l<=j} w_l² s_l and Π_j = C_j - C_{j+1}
(C_j averages over blocks of size s_j; C_{L+1} = 0). Hence (AᵀA)⁻¹ = Σ_j Π_j/λ_j:
the least-squares estimate takes O(N·L) operations, a range's variance O(L)
(block overlaps at its two ends), and the workload error
tr(M (AᵀA)⁻¹) = Σ_j (t_j - t_{j+1})/λ_j with t_j = tr(M C_j), computed in
O(n) per level from M's closed form. Memory is linear in n.

Everything here is a function of public parameters (n, the workload, b); no
data and no privacy. The weights are rounded down onto multiples of 2⁻²⁰
(their sum at most 1), so A x is exact for integer counts below 2³³ and the
sensitivity is their exact sum.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.histograms._range_grams import Gram, Keyed

#: The weights are multiples of 2**-QUANTUM_BITS (rounded down).
QUANTUM_BITS = 20
#: Branchings tried (each costs O(n·L) to evaluate); the padded domain b^L is at most b·n.
BRANCHINGS = range(2, 17)


def levels_for(n: int, branching: int) -> int:
    """The number L of levels above the units: the least L with branching**L >= n."""
    from dpkit.histograms.hierarchical import tree_levels  # it counts the units' level too

    return tree_levels(n, branching) - 1


@dataclasses.dataclass(frozen=True, eq=False)
class WeightedTree:
    """The measurement strategy: weighted block sums of a b-ary tree, and its exact errors.

    Attributes:
        n: the number of unit bins (the tree covers ``branching ** levels`` >= n;
            the bins beyond n are public zeros).
        branching: b.
        weights: w_0 (units) .. w_L (the total), multiples of 2⁻²⁰; w_0 > 0.
        sensitivity: Σ w_l, exactly (every column's l1 norm).
        workload_key: the Gram's key the weights were chosen for.
    """

    n: int
    branching: int
    weights: NDArray[np.float64]
    sensitivity: float
    workload_key: tuple[Any, ...] = ()

    @property
    def levels(self) -> int:
        """L: the number of levels above the units."""
        return int(self.weights.size - 1)

    @property
    def sizes(self) -> NDArray[np.int64]:
        """s_l = b**l, the block size of each level."""
        return self.branching ** np.arange(self.levels + 1, dtype=np.int64)

    @property
    def padded(self) -> int:
        """N = b**L, the bins the tree covers."""
        return int(self.branching**self.levels)

    @property
    def measured(self) -> NDArray[np.bool_]:
        """The levels with a non-zero weight (a zero-weight level is not measured)."""
        return self.weights > 0

    @property
    def size(self) -> int:
        """The number of measured values: N/s_l blocks on every measured level."""
        return int(np.sum(self.padded // self.sizes[self.measured]))

    @property
    def changed(self) -> int:
        """How many measured values one unit count moves: one block per measured level."""
        return int(np.count_nonzero(self.measured))

    @property
    def eigenvalues(self) -> NDArray[np.float64]:
        """λ_j = Σ_{l<=j} w_l² s_l, AᵀA's eigenvalue on level j's Haar space."""
        out: NDArray[np.float64] = np.cumsum(self.weights**2 * self.sizes)
        return out

    def measure(self, x: ArrayLike) -> NDArray[np.float64]:
        """A x: w_l times every block sum of every measured level, units first."""
        z = np.zeros(self.padded)
        z[: self.n] = np.asarray(x, dtype=np.float64)
        parts = []
        for w, s in zip(self.weights, self.sizes, strict=True):
            if w > 0:
                parts.append(w * z.reshape(-1, int(s)).sum(axis=1))
        return np.concatenate(parts)

    def reconstruct(self, y: ArrayLike) -> NDArray[np.float64]:
        """The least-squares estimate (AᵀA)⁻¹ Aᵀ y in O(N·L); y (size,) or (size, k), as :meth:`measure` lays it out."""
        arr = np.asarray(y, dtype=np.float64)
        z = np.zeros((self.padded, *arr.shape[1:]))
        start = 0
        for w, s in zip(self.weights, self.sizes, strict=True):
            if w > 0:
                blocks = self.padded // int(s)
                z += np.repeat(w * arr[start : start + blocks], int(s), axis=0)
                start += blocks
        return self.solve(z)[: self.n]

    def solve(self, z: NDArray[np.float64]) -> NDArray[np.float64]:
        """(AᵀA)⁻¹ z = Σ_j (C_j z - C_{j+1} z)/λ_j for z over the N padded bins (axis 0)."""
        out = np.zeros_like(z)
        finer = z  # C_j z, full length
        for lam, s_next in zip(self.eigenvalues, [*self.sizes[1:].tolist(), 0], strict=True):
            if s_next:
                means = finer.reshape(-1, s_next, *z.shape[1:]).mean(axis=1)
                coarser = np.repeat(means, s_next, axis=0)
            else:
                coarser = np.zeros_like(finer)
            out += (finer - coarser) / lam
            finer = coarser
        return out

    def unit_variances(self) -> NDArray[np.float64]:
        """diag((AᵀA)⁻¹): every unit's variance per unit noise variance (the same for all)."""
        inverse = 1.0 / self.sizes.astype(np.float64)
        norms = inverse - np.append(inverse[1:], 0.0)
        return np.full(self.n, float(np.sum(norms / self.eigenvalues)))

    def range_variances(self, lo: ArrayLike, hi: ArrayLike) -> NDArray[np.float64]:
        """qᵀ(AᵀA)⁻¹q for the indicators q of ranges [lo, hi] (0-based, inclusive); O(L) each."""
        norms = projection_norms(np.asarray(lo, np.int64), np.asarray(hi, np.int64), self.sizes)
        spaces = norms - np.vstack((norms[1:], np.zeros((1, norms.shape[1]))))
        out: NDArray[np.float64] = (spaces / self.eigenvalues[:, None]).sum(axis=0)
        return out

    def unit_error(self, gram: Gram) -> float:
        """Δ²·tr(M (AᵀA)⁻¹)/m: the per-query mean squared error per unit noise variance (exact)."""
        traces = block_traces(gram, self.sizes)
        spaces = traces - np.append(traces[1:], 0.0)
        return float(self.sensitivity**2 * np.sum(spaces / self.eigenvalues) / gram.m)


def projection_norms(
    lo: NDArray[np.int64], hi: NDArray[np.int64], sizes: NDArray[np.int64]
) -> NDArray[np.float64]:
    """‖C_s q‖² = Σ_blocks overlap²/s for range indicators q, per block size s (rows) and range."""
    s = sizes.astype(np.int64)[:, None]
    first, last = lo[None, :] // s, hi[None, :] // s
    same = first == last
    left = np.where(same, hi - lo + 1, (first + 1) * s - lo).astype(np.float64)
    right = np.where(same, 0, hi - last * s + 1).astype(np.float64)
    full = np.maximum(last - first - 1, 0).astype(np.float64)
    sf = s.astype(np.float64)
    out: NDArray[np.float64] = (left**2 + right**2) / sf + full * sf
    return out


def block_traces(gram: Gram, sizes: NDArray[np.int64]) -> NDArray[np.float64]:
    """t_j = tr(M C_j) = Σ over the workload's queries of ‖C_{s_j} q‖², per block size."""
    n = gram.n
    if gram.kind == "prefixes":
        hi = np.arange(n, dtype=np.int64)
        return projection_norms(np.zeros_like(hi), hi, sizes).sum(axis=1)
    if gram.kind == "explicit":
        return projection_norms(gram.lo, gram.hi, sizes).sum(axis=1)
    # All ranges: M_ij = (min(i, j) + 1)(n - max(i, j)), so a block [u, v] gives
    # 1ᵀM1 = Σ_{j in block} (j + 1)(n - j) + 2 (n - j) Σ_{u <= i < j} (i + 1).
    j = np.arange(n, dtype=np.float64)
    out = np.empty(sizes.size)
    for k, s in enumerate(sizes.tolist()):
        u = np.floor(j / s) * s
        below = (j * (j + 1.0) - u * (u + 1.0)) / 2.0  # Σ_{u <= i < j} (i + 1)
        out[k] = float(np.sum((j + 1.0) * (n - j) + 2.0 * (n - j) * below)) / s
    return out


def weighted_error(
    weights: NDArray[np.float64], sizes: NDArray[np.int64], spaces: NDArray[np.float64]
) -> tuple[float, NDArray[np.float64]]:
    """U(w) = (Σ w)² Σ_j c_j/λ_j(w) (scale-free workload error) and its gradient in w."""
    lam = np.cumsum(weights**2 * sizes)
    ratio = spaces / lam
    total = float(np.sum(weights))
    value = total * total * float(np.sum(ratio))
    tail = np.cumsum((spaces / lam**2)[::-1])[::-1]  # Σ_{j >= l} c_j/λ_j²
    grad = 2.0 * total * float(np.sum(ratio)) - total * total * 2.0 * weights * sizes * tail
    return value, grad


def optimise_weights(gram: Gram, branching: int) -> NDArray[np.float64]:
    """Level weights minimising the workload's error for a b-ary tree (L-BFGS-B from Hb's uniform weights).

    Deterministic and public. The result is normalised to sum to 1 before quantisation.
    """
    from scipy.optimize import minimize

    sizes = branching ** np.arange(levels_for(gram.n, branching) + 1, dtype=np.int64)
    traces = block_traces(gram, sizes)
    spaces = np.maximum(traces - np.append(traces[1:], 0.0), 0.0)

    def fun(log_w: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        w = np.exp(log_w)
        value, grad = weighted_error(w, sizes, spaces)
        return value, grad * w

    start = np.zeros(sizes.size)
    result = minimize(
        fun, start, jac=True, method="L-BFGS-B", bounds=[(-30.0, 0.0)] * sizes.size,
        options={"maxiter": 500},
    )  # fmt: skip
    best = result.x if result.fun <= fun(start)[0] else start
    w = np.exp(best - best.max())
    out: NDArray[np.float64] = w / w.sum()
    return out


def from_weights(
    n: int, branching: int, weights: NDArray[np.float64], workload_key: tuple[Any, ...] = ()
) -> WeightedTree:
    """The quantised strategy: weights rounded down to 2⁻²⁰ (the units' at least 2⁻²⁰)."""
    scale = float(1 << QUANTUM_BITS)
    units = np.floor(np.asarray(weights, dtype=np.float64) * scale).astype(np.int64)
    units[0] = max(int(units[0]), 1)  # the units must be measured: AᵀA is then invertible
    sensitivity = float(units.sum()) / scale  # exact: an integer number of quanta
    return WeightedTree(n, branching, units / scale, sensitivity, workload_key)


def weighted_tree(gram: Gram) -> WeightedTree:
    """The best weighted tree for the workload over :data:`BRANCHINGS` (cached; public)."""
    return _cached(Keyed(gram))


@functools.lru_cache(maxsize=16)
def _cached(keyed: Keyed) -> WeightedTree:
    gram = keyed.gram
    best: WeightedTree | None = None
    best_error = math.inf
    for b in BRANCHINGS:
        if b > max(2, gram.n):
            break
        tree = from_weights(gram.n, b, optimise_weights(gram, b), gram.key)
        error = tree.unit_error(gram)
        if error < best_error:
            best, best_error = tree, error
    assert best is not None
    return best
