"""The Gram matrix M = WᵀW of a range workload W, as a fast operator (pure; no privacy here).

A measurement strategy's expected error on a workload depends on the workload
only through M (Li et al., "The matrix mechanism", 2015): with least-squares
reconstruction the per-query mean squared error is Δ²·tr(M (AᵀA)⁻¹)/m for a
strategy A of sensitivity Δ and m queries. For prefixes and all ranges M has a
closed form, a product with it costs O(n) per column (cumulative sums, never a
dense n × n matrix) and its singular values are known in closed form; an
explicit list of ranges costs O(n + m) per column.

Indices are 0-based and ranges inclusive, as everywhere in ``dpkit.histograms``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.errors import InvalidParameterError

#: Largest n for which a dense n × n Gram (or its eigenvalues) is formed.
DENSE_LIMIT = 8192


@dataclasses.dataclass(frozen=True, eq=False)
class Gram:
    """M = WᵀW of a range workload over n unit bins.

    Attributes:
        n: the number of unit bins.
        m: the number of queries in the workload.
        kind: ``"prefixes"`` (``[0, j]`` for every j), ``"ranges"`` (every
            ``[a, b]``, a <= b) or ``"explicit"`` (the ranges in ``lo``/``hi``).
        lo, hi: the explicit ranges (empty for the other kinds).
    """

    n: int
    m: int
    kind: str
    lo: NDArray[np.int64] = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    hi: NDArray[np.int64] = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def key(self) -> tuple[Any, ...]:
        """A hashable identity of the workload (for caches of public strategies)."""
        if self.kind != "explicit":
            return (self.kind, self.n)
        digest = hashlib.sha256(self.lo.tobytes() + b"|" + self.hi.tobytes()).hexdigest()
        return (self.kind, self.n, digest)

    def matmat(self, x: ArrayLike) -> NDArray[np.float64]:
        """M @ x for a vector (n,) or a matrix (n, p), in O(n·p) (O((n + m)·p) if explicit)."""
        arr = np.asarray(x, dtype=np.float64)
        vector = arr.ndim == 1
        a = arr.reshape(self.n, -1)
        if self.kind == "prefixes":
            # W a = cumulative sums; Wᵀ b = reversed cumulative sums.
            out = np.cumsum(np.cumsum(a, axis=0)[::-1], axis=0)[::-1]
        elif self.kind == "ranges":
            out = _all_ranges_product(a)
        else:
            out = _explicit_product(a, self.lo, self.hi)
        out = np.ascontiguousarray(out)
        return out.ravel() if vector else out

    def diag(self) -> NDArray[np.float64]:
        """The diagonal of M: how many queries cover each unit bin."""
        j = np.arange(self.n, dtype=np.float64)
        if self.kind == "prefixes":
            return self.n - j
        if self.kind == "ranges":
            return (j + 1.0) * (self.n - j)
        cover = np.zeros(self.n + 1)
        np.add.at(cover, self.lo, 1.0)
        np.add.at(cover, self.hi + 1, -1.0)
        return np.cumsum(cover)[: self.n]

    def trace(self) -> float:
        """tr(M): the unit error of the identity strategy times m."""
        return float(self.diag().sum())

    def dense(self) -> NDArray[np.float64]:
        """M as a dense n × n array (n <= :data:`DENSE_LIMIT`)."""
        if self.n > DENSE_LIMIT:
            raise InvalidParameterError(f"a dense Gram needs n <= {DENSE_LIMIT}.")
        i = np.arange(self.n)
        hi_ij = np.maximum(i[:, None], i[None, :]).astype(np.float64)
        lo_ij = np.minimum(i[:, None], i[None, :]).astype(np.float64)
        if self.kind == "prefixes":
            return self.n - hi_ij
        if self.kind == "ranges":
            return (lo_ij + 1.0) * (self.n - hi_ij)
        return self.matmat(np.eye(self.n))

    def singular_values(self) -> NDArray[np.float64]:
        """The singular values of W (square roots of M's eigenvalues), in closed form where known.

        Prefixes: 1 / (2 sin((2k - 1)π / (2(2n + 1)))), k = 1..n (W is the
        lower-triangular matrix of ones). All ranges: M = (n + 1)·T⁻¹ with T the
        tridiagonal (-1, 2, -1) matrix, so sqrt(n + 1) / (2 sin(kπ / (2(n + 1)))).
        Explicit: from the dense M (n <= :data:`DENSE_LIMIT`).
        """
        k = np.arange(1, self.n + 1, dtype=np.float64)
        if self.kind == "prefixes":
            return 1.0 / (2.0 * np.sin((2.0 * k - 1.0) * np.pi / (2.0 * (2.0 * self.n + 1.0))))
        if self.kind == "ranges":
            return np.sqrt(self.n + 1.0) / (2.0 * np.sin(k * np.pi / (2.0 * (self.n + 1.0))))
        eig = np.linalg.eigvalsh(self.dense())
        # Round-off leaves tiny non-zero eigenvalues where W is rank deficient.
        eig[eig < self.n * np.finfo(np.float64).eps * max(float(eig[-1]), 1.0)] = 0.0
        return np.sqrt(eig)[::-1]


class Keyed:
    """A Gram hashed by its public key, so equal workloads share one cached strategy."""

    def __init__(self, gram: Gram) -> None:
        self.gram = gram

    def __hash__(self) -> int:
        return hash(self.gram.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Keyed) and self.gram.key == other.gram.key


def svd_bound(gram: Gram) -> float:
    """The SVD lower bound on the unit error (Li & Miklau 2013): (Σ σᵢ)² / (n·m).

    No strategy with least-squares reconstruction has a smaller per-query
    mean squared error Δ₂²·tr(M (AᵀA)⁻¹)/m under ℓ2 sensitivity Δ₂; since an
    ℓ1 norm is at least the ℓ2 norm, none under ℓ1 sensitivity either. Its
    square root is comparable to a per-query RMSE with unit noise.
    """
    total = float(np.sum(gram.singular_values()))
    return total * total / (gram.n * gram.m)


def gram_for(n: int, workload: object) -> Gram:
    """The Gram of ``"prefixes"``, ``"ranges"`` or explicit ranges ``(lo, hi)`` over n bins.

    Explicit ranges are two equal-length integer sequences (0-based, inclusive,
    ``0 <= lo <= hi < n``); they are public (never derived from the data).
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or int(n) < 1:
        raise InvalidParameterError("n must be a positive integer (the number of unit bins).")
    n = int(n)
    if workload == "prefixes":
        return Gram(n, n, "prefixes")
    if workload == "ranges":
        return Gram(n, n * (n + 1) // 2, "ranges")
    if isinstance(workload, str) or not isinstance(workload, tuple | list) or len(workload) != 2:
        raise InvalidParameterError(
            'workload must be "prefixes", "ranges" or a pair (lo, hi) of integer arrays '
            "of range ends (0-based, inclusive)."
        )
    lo_raw, hi_raw = (np.asarray(side) for side in workload)
    if (
        lo_raw.dtype.kind not in "iu"
        or hi_raw.dtype.kind not in "iu"
        or lo_raw.ndim != 1
        or lo_raw.shape != hi_raw.shape
        or lo_raw.size == 0
    ):
        raise InvalidParameterError(
            "explicit ranges must be two non-empty 1-D integer arrays of the same length."
        )
    lo, hi = lo_raw.astype(np.int64), hi_raw.astype(np.int64)
    if np.any(lo < 0) or np.any(hi >= n) or np.any(lo > hi):
        raise InvalidParameterError(
            f"every explicit range must satisfy 0 <= lo <= hi <= {n - 1} (0-based, inclusive)."
        )
    lo.setflags(write=False)
    hi.setflags(write=False)
    return Gram(n, int(lo.size), "explicit", lo, hi)


def _all_ranges_product(a: NDArray[np.float64]) -> NDArray[np.float64]:
    """M a for all ranges: (M a)_j = (j + 1)·Σ_{b >= j} P[b + 1] - (n - j)·Σ_{c <= j} P[c].

    P is the prefix-sum array of a (P[0] = 0): the range [c, b] sums to
    P[b + 1] - P[c], and the ranges covering j are those with c <= j <= b.
    """
    n = a.shape[0]
    prefix = np.vstack([np.zeros((1, a.shape[1])), np.cumsum(a, axis=0)])
    upper = np.cumsum(prefix[1:][::-1], axis=0)[::-1]  # Σ_{b >= j} P[b + 1]
    lower = np.cumsum(prefix[:-1], axis=0)  # Σ_{c <= j} P[c]
    j = np.arange(n, dtype=np.float64)[:, None]
    out: NDArray[np.float64] = (j + 1.0) * upper - (n - j) * lower
    return out


def _explicit_product(
    a: NDArray[np.float64], lo: NDArray[np.int64], hi: NDArray[np.int64]
) -> NDArray[np.float64]:
    """M a = Σ_q 1_[lo_q, hi_q] (sum of a over [lo_q, hi_q]), by prefix sums and a difference array."""
    n = a.shape[0]
    prefix = np.vstack([np.zeros((1, a.shape[1])), np.cumsum(a, axis=0)])
    sums = prefix[hi + 1] - prefix[lo]
    diff = np.zeros((n + 1, a.shape[1]))
    np.add.at(diff, lo, sums)
    np.add.at(diff, hi + 1, -sums)
    out: NDArray[np.float64] = np.cumsum(diff, axis=0)[:n]
    return out
