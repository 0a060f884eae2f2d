"""ℓ2 strategies whose measurement A x is computed exactly (for the Gaussian matrix mechanism).

The ℓ2 designs of :mod:`dpkit.histograms._strategy_l2` are irrational
(eigenvectors, FFTs): computed in floating point, A x carries a rounding
error that depends on the data, so their sensitivity would not be proven for
the values actually computed. Here each design is *stored* with every entry a
whole multiple of 2⁻²⁰ of magnitude at most 1, and A x is computed in a way
whose every product and partial sum is exact:

* :class:`DenseExact` (n <= :data:`DENSE_LIMIT`, prefixes and all ranges): the
  upper-triangular Cholesky factor R of the design's AᵀA (same Gram, hence the
  same error and column norms as the design), rounded onto the 2⁻²⁰ grid. x̂ =
  R_q⁻¹y (square, so least squares is exact inversion).
* :class:`ToeplitzExact` (any n <= 2¹⁶ and any range workload): the
  square-root factorisation C of the prefix matrix (lower-triangular Toeplitz,
  c_k = binom(2k, k)/4^k, scaled to column norm 1), its coefficients rounded
  onto the 2⁻²⁰ grid; C_q x by blocked dense products of Toeplitz blocks (BLAS),
  x̂ = C_q⁻¹y by the inverse power series (FFT; post-processing).

Exactness: with numerators q (integers, |q| <= 2²⁰) and whole counts x with
Σx < 2³³, every product q·x_j and every partial sum of such products is an
integer of magnitude at most 2²⁰·Σx < 2⁵³, hence a double; so each float
operation is exact whatever the summation order (BLAS blocking, FMA), and
A x = (q-product)/2²⁰ is exact (division by a power of two). The sensitivity
is the exact maximum column 2-norm of the stored numerators (integer sums of
squares, square root rounded up onto the 2⁻²⁰ grid).

Everything depends on public parameters only (n, the workload); strategies are
cached per workload. The errors are those of the *stored* strategy:
tr(M (A_qᵀA_q)⁻¹) from the exact inverse (dense) or from the Toeplitz
coefficients of W·C_q⁻¹ (closed forms, O(n) per range length).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.errors import InvalidParameterError
from dpkit.histograms._range_grams import Gram, svd_bound
from dpkit.histograms._strategy_l2 import (
    _as_int_ranges,
    _root_coefficients,
    best_l2_strategy,
    toeplitz_range_variance,
)

FloatArray = NDArray[np.float64]

#: Entries of a stored strategy are whole multiples of this (and at most 1 in magnitude).
QUANTUM = 2.0**-20
_ONE = 1 << 20
#: Largest n stored as a dense triangular matrix (memory ~ 3·8·n² bytes while it is built).
DENSE_LIMIT = 4096
#: The Toeplitz product's block (Toeplitz blocks of BLOCK × BLOCK entries, one GEMM each).
BLOCK = 512
#: Strategies kept: a dense one at 4,096 bins holds 256 MB (numerators and prefix sums of
#: R_q⁻¹, n² doubles each), so two of them (e.g. prefixes and ranges) hold 512 MB; the oldest
#: is dropped *before* a new one is built, whose build needs ~4 n² doubles more (the design's
#: eigenvectors, C, AᵀA / R and the prefix sums): under 1 GB in all at 4,096 bins.
CACHE_SIZE = 2


def _column_norm_up(sum_of_squares: int) -> float:
    """sqrt(S)·2⁻²⁰ rounded up onto the 2⁻²⁰ grid (exact integer square root)."""
    root = math.isqrt(sum_of_squares)
    if root * root < sum_of_squares:
        root += 1
    return root * QUANTUM


def _numerators(values: FloatArray) -> FloatArray:
    """round(v·2²⁰) as whole floats in [-2²⁰, 2²⁰] (so the stored entries are at most 1)."""
    out: FloatArray = np.clip(np.rint(values * _ONE), -_ONE, _ONE)
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class ExactStrategy:
    """A stored strategy: exact measurement, exact sensitivity, the stored matrix's errors.

    Attributes:
        name: ``"dense_<design>"`` or ``"square_root"``.
        n: the number of unit bins.
        kind: the workload it was chosen for (``Gram.kind``).
        sensitivity: the exact maximum column 2-norm of the stored A, rounded up
            onto the 2⁻²⁰ grid.
        trace: tr(M (AᵀA)⁻¹)/m for that workload, for the stored A (noise
            variance 1 per measured value).
        svd_bound: the SVD lower bound on Δ₂²·tr(M (AᵀA)⁻¹)/m.
        rows: the number of measured values.
    """

    name: str
    n: int
    kind: str
    sensitivity: float
    trace: float
    svd_bound: float
    rows: int

    @property
    def unit_error(self) -> float:
        """Δ₂²·tr(M (AᵀA)⁻¹)/m (HDMM's convention, comparable with the SVD bound)."""
        return self.sensitivity**2 * self.trace

    def dense(self) -> FloatArray:  # pragma: no cover - abstract
        """The stored A as a dense array (tests)."""
        raise NotImplementedError

    def measure(self, x: ArrayLike) -> FloatArray:  # pragma: no cover - abstract
        """A x, exactly, for whole counts totalling below 2³³."""
        raise NotImplementedError

    def reconstruct(self, y: ArrayLike) -> FloatArray:  # pragma: no cover - abstract
        """x̂ = A⁻¹y (least squares: A is square and invertible)."""
        raise NotImplementedError

    def unit_variances(self) -> FloatArray:  # pragma: no cover - abstract
        """Var(x̂_i) per unit noise variance."""
        raise NotImplementedError

    def range_variances(self, lo: ArrayLike, hi: ArrayLike) -> FloatArray:  # pragma: no cover
        """Var of each range sum [lo, hi] of x̂ per unit noise variance."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True, eq=False)
class DenseExact(ExactStrategy):
    """A = R_q = numerators·2⁻²⁰, upper triangular n × n; x̂ = R_q⁻¹y.

    ``prefix`` holds the cumulative row sums of R_q⁻¹ ((n + 1) × n, row 0 zero),
    so a range [a, b] of x̂ is (prefix[b + 1] - prefix[a])·y.
    """

    numerators: FloatArray = dataclasses.field(default_factory=lambda: np.zeros((0, 0)))
    prefix: FloatArray = dataclasses.field(default_factory=lambda: np.zeros((0, 0)))

    def dense(self) -> FloatArray:
        out: FloatArray = self.numerators * QUANTUM
        return out

    def measure(self, x: ArrayLike) -> FloatArray:
        out: FloatArray = (self.numerators @ np.asarray(x, dtype=np.float64)) * QUANTUM
        return out

    def reconstruct(self, y: ArrayLike) -> FloatArray:
        from scipy.linalg import solve_triangular

        z = np.asarray(y, dtype=np.float64) * float(_ONE)
        out: FloatArray = solve_triangular(self.numerators, z, lower=False)
        return out

    def unit_variances(self) -> FloatArray:
        rows = np.diff(self.prefix, axis=0)
        out: FloatArray = np.einsum("ij,ij->i", rows, rows)
        return out

    def range_variances(self, lo: ArrayLike, hi: ArrayLike) -> FloatArray:
        a, b = _as_int_ranges(lo, hi, self.n)
        out = np.empty(a.size)
        for start in range(0, a.size, 256):  # bounded memory: 256 rows of length n at a time
            rows = self.prefix[b[start : start + 256] + 1] - self.prefix[a[start : start + 256]]
            out[start : start + 256] = np.einsum("ij,ij->i", rows, rows)
        return out


def _workload_trace(gram: Gram, prefix_norms: FloatArray, total_norm: float, ranges: Any) -> float:
    """tr(M (AᵀA)⁻¹)/m from |P_b|² (b = 0..n, P the prefix sums of x̂) and |Σ_b P_b|².

    Prefixes: Σ_(b>=1)|P_b|²; all ranges: Σ_(a<b)|P_b - P_a|² = (n + 1)Σ|P_b|² - |Σ P_b|²;
    explicit: the mean of ``ranges(lo, hi)``.
    """
    if gram.kind == "prefixes":
        return float(prefix_norms.sum()) / gram.m
    if gram.kind == "ranges":
        return float((gram.n + 1) * prefix_norms.sum() - total_norm) / gram.m
    return float(np.mean(ranges(gram.lo, gram.hi)))


def _dense_factor(gram: Gram) -> tuple[str, FloatArray] | None:
    """C with C Cᵀ = AᵀA for the best ℓ2 eigen-design (Fortran order), or None.

    None when the best design is not a full-rank eigen-design. The eigen-design's
    eigendecomposition (cached with it) is reused: C = D⁻¹V Λ^¼·scale, one n × n
    product of the cached eigenvectors and two diagonals.
    """
    from scipy.fft import dst

    design: Any = best_l2_strategy(gram, store=False)
    if design.name == "weighted_eigen":
        if design.support.size != gram.n or design.eigenvalues.size != gram.n:
            return None
        row = 1.0 / np.sqrt(design.weights)
        column = design.scale * design.eigenvalues**0.25
        c: FloatArray = np.asfortranarray(design.eigenvectors * column[None, :])
        c *= row[:, None]
    elif design.name == "ranges_eigen":
        # AᵀA = S diag(scale²·s) S with S the symmetric DST-I: C = S diag(scale·s^½).
        c = np.asfortranarray(dst(np.eye(gram.n), type=1, norm="ortho", axis=0))
        c *= (design.scale * np.sqrt(design.root_eigenvalues))[None, :]
    else:
        return None
    return str(design.name), c


def dense_exact(gram: Gram) -> DenseExact | None:
    """The best ℓ2 eigen-design as a stored upper-triangular factor (n <= :data:`DENSE_LIMIT`).

    AᵀA = RᵀR (Cholesky), so R has A's error and column norms; R is rounded onto
    the 2⁻²⁰ grid and its errors recomputed exactly from R_q⁻¹ (LAPACK ``dtrtri``).
    None when no dense eigen-design applies or its Gram is not positive definite
    (a public property of the workload).

    Work: one tridiagonal eigendecomposition (the design's) and three n³-class
    LAPACK/BLAS calls, each in place: ``dsyrk`` (AᵀA = C Cᵀ, n³ flops),
    ``dpotrf`` (n³/3) and ``dtrtri`` (n³/3), plus O(n²) passes; no n × n array
    is copied.
    """
    from scipy.linalg import blas, lapack

    if gram.kind not in ("prefixes", "ranges") or gram.n > DENSE_LIMIT:
        return None
    found = _dense_factor(gram)
    if found is None:
        return None
    name, c = found
    n = gram.n
    gram_matrix = blas.dsyrk(1.0, c, trans=0)  # upper triangle of C Cᵀ = AᵀA (Fortran order)
    del c
    r, info = lapack.dpotrf(gram_matrix, lower=0, clean=1, overwrite_a=1)
    del gram_matrix
    if info != 0:
        return None
    # R onto the grid in place: numerators round(R·2²⁰), clipped to [-2²⁰, 2²⁰].
    r *= float(_ONE)
    np.rint(r, out=r)
    np.clip(r, -_ONE, _ONE, out=r)
    numerators: FloatArray = r
    if np.any(np.diag(numerators) == 0):
        return None
    # Exact column sums of squares in float64: each square is an integer <= 2⁴⁰ and n <= 2¹²,
    # so every partial sum is an integer below 2⁵³ (exact in any summation order).
    squares = np.einsum("ij,ij->j", numerators, numerators)
    sensitivity = _column_norm_up(int(squares.max()))
    # R_q⁻¹ computed in the rows 1..n of ``prefix`` (C order), in place: its transpose is
    # Fortran-contiguous, R_qᵀ (lower triangular), and (R_qᵀ)⁻¹ = (R_q⁻¹)ᵀ.
    prefix = np.zeros((n + 1, n))
    body = prefix[1:]
    np.multiply(numerators, QUANTUM, out=body)
    inverse_t, info = lapack.dtrtri(body.T, lower=1, overwrite_c=1)
    if info != 0:  # pragma: no cover - the diagonal is non-zero
        return None
    if not np.shares_memory(inverse_t, body):  # pragma: no cover - f2py copied after all
        body[...] = inverse_t.T
    del inverse_t
    np.cumsum(body, axis=0, out=body)  # prefix[b] = Σ_(i<b) row i of R_q⁻¹
    norms = np.einsum("ij,ij->i", prefix, prefix)
    total = prefix.sum(axis=0)
    strategy = DenseExact(
        name=f"dense_{name}",
        n=n,
        kind=gram.kind,
        sensitivity=sensitivity,
        trace=0.0,
        svd_bound=svd_bound(gram),
        rows=n,
        numerators=numerators,
        prefix=prefix,
    )
    trace = _workload_trace(gram, norms, float(total @ total), strategy.range_variances)
    return dataclasses.replace(strategy, trace=trace)


# --- the quantised square-root factorisation (lower-triangular Toeplitz) -------------------


def _toeplitz_product(numerators: FloatArray, x: FloatArray) -> FloatArray:
    """L x for L lower-triangular Toeplitz of first column ``numerators`` (whole floats).

    Blocks: y_i = Σ_(d<=i) T_d x_(i-d) with T_d[r, c] = q[d·B + r - c] (q[<0] = 0),
    one GEMM per block offset d (n²/2 multiply-adds in all). Exact for whole x
    with Σ|q|·Σ|x| < 2⁵³ (see the module docstring).
    """
    from numpy.lib.stride_tricks import sliding_window_view

    n = numerators.size
    size = min(BLOCK, n)
    blocks = -(-n // size)
    padded_n = blocks * size
    xs = np.zeros(padded_n)
    xs[:n] = x
    xb = xs.reshape(blocks, size).T  # column j: block j of x
    # rev[t] = qpad[len - 1 - t] with qpad = [0]*size + q + [0]*(padded_n - n + size).
    qpad = np.zeros(padded_n + 2 * size)
    qpad[size : size + n] = numerators
    rev = qpad[::-1]
    windows = sliding_window_view(rev, size)
    last = qpad.size - 1
    out = np.zeros((size, blocks))
    for d in range(blocks):
        start = last - size - d * size
        # T_d[r, :] = rev[start - r : start - r + size]
        t_d = windows[start - size + 1 : start + 1][::-1]
        out[:, d:] += t_d @ xb[:, : blocks - d]
    result: FloatArray = out.T.ravel()[:n]
    return result


def _inverse_series(a: FloatArray) -> FloatArray:
    """r with (a * r)_k = [k = 0] for k < len(a) (Newton's iteration, FFT products)."""
    from scipy.signal import fftconvolve

    n = a.size
    r = np.array([1.0 / a[0]])
    m = 1
    while m < n:
        m = min(2 * m, n)
        t = -fftconvolve(a[:m], r)[:m]
        t[0] += 2.0
        r = fftconvolve(r, t)[:m]
    return r


@dataclasses.dataclass(frozen=True, eq=False)
class ToeplitzExact(ExactStrategy):
    """A = C_q, lower-triangular Toeplitz of first column numerators·2⁻²⁰; x̂ = C_q⁻¹y.

    ``inverse``: the first column of C_q⁻¹ (float); ``answer``: that of W·C_q⁻¹
    (its cumulative sums), whose rows give every prefix of x̂.
    """

    numerators: FloatArray = dataclasses.field(default_factory=lambda: np.zeros(0))
    inverse: FloatArray = dataclasses.field(default_factory=lambda: np.zeros(0))
    answer: FloatArray = dataclasses.field(default_factory=lambda: np.zeros(0))

    def dense(self) -> FloatArray:
        from scipy.linalg import toeplitz

        out: FloatArray = np.tril(toeplitz(self.numerators * QUANTUM))
        return out

    def measure(self, x: ArrayLike) -> FloatArray:
        out: FloatArray = (
            _toeplitz_product(self.numerators, np.asarray(x, dtype=np.float64)) * QUANTUM
        )
        return out

    def reconstruct(self, y: ArrayLike) -> FloatArray:
        from scipy.signal import fftconvolve

        out: FloatArray = fftconvolve(self.inverse, np.asarray(y, dtype=np.float64))[: self.n]
        return out

    def unit_variances(self) -> FloatArray:
        j = np.arange(self.n, dtype=np.int64)
        return self.range_variances(j, j)

    def range_variances(self, lo: ArrayLike, hi: ArrayLike) -> FloatArray:
        a, b = _as_int_ranges(lo, hi, self.n)
        return toeplitz_range_variance(self.answer, a, b)


def toeplitz_exact(gram: Gram) -> ToeplitzExact:
    """The square-root factorisation of the prefix matrix, stored on the 2⁻²⁰ grid (any n).

    The numerators round(c_k·2²⁰/|c|) are positive and non-increasing in k (the
    c_k are), so column 0 has the largest norm: the sensitivity is
    sqrt(Σ q_k²)·2⁻²⁰ rounded up.
    """
    n = gram.n
    c, _ = _root_coefficients(n)
    numerators = _numerators(c / math.sqrt(float(np.sum(c * c))))
    whole = numerators.astype(np.int64)
    sensitivity = _column_norm_up(int(np.sum(whole * whole)))  # < 2⁶³: n·2⁴⁰ at most
    inverse = _inverse_series(numerators * QUANTUM)
    answer = np.cumsum(inverse)
    strategy = ToeplitzExact(
        name="square_root",
        n=n,
        kind=gram.kind,
        sensitivity=sensitivity,
        trace=0.0,
        svd_bound=svd_bound(gram),
        rows=n,
        numerators=numerators,
        inverse=inverse,
        answer=answer,
    )
    # |P_b|² = Σ_(k<b) e_k² (b = 0..n); Σ_b P_b = yᵀ(column sums of W C_q⁻¹): Σ_k cumsum(e)_k².
    norms = np.r_[0.0, np.cumsum(answer * answer)]
    total = float(np.sum(np.cumsum(answer) ** 2))
    trace = _workload_trace(gram, norms, total, strategy.range_variances)
    return dataclasses.replace(strategy, trace=trace)


def exact_strategy(gram: Gram) -> ExactStrategy:
    """The stored strategy with the lowest exact unit error for the workload (a public rule).

    Prefixes / all ranges with n <= :data:`DENSE_LIMIT`: the dense factor of the
    best eigen-design against the quantised square root; otherwise (larger n,
    explicit ranges) the quantised square root. Cached per ``gram.key``.
    """
    key = gram.key
    if key in _CACHE:
        return _CACHE[key]
    if gram.n > 1 << 16:
        raise InvalidParameterError("the Gaussian matrix mechanism takes at most 65,536 bins.")
    from threadpoolctl import threadpool_limits  # installed with scikit-learn

    while len(_CACHE) >= CACHE_SIZE:  # free the memory before the build needs it
        del _CACHE[next(iter(_CACHE))]
    # One BLAS thread: measured at 4,096 bins on the shared 2-core machine, 12.2-12.4 s
    # against 14.2-17.6 s with two; and the stored matrix then does not depend on the
    # thread count (BLAS blocking), only on (n, workload).
    with threadpool_limits(limits=1):
        best: ExactStrategy = toeplitz_exact(gram)
        dense = dense_exact(gram)
    if dense is not None and dense.unit_error < best.unit_error:
        best = dense
    _CACHE[key] = best
    return best


def memory_needed(n: int) -> int:
    """Bytes the strategy may hold while it is built (public; checked before the charge)."""
    if n <= DENSE_LIMIT:
        return 40 * n * n + 256 * (n + 1)
    return 64 * BLOCK * BLOCK + 256 * (n + 1)


_CACHE: dict[tuple[Any, ...], ExactStrategy] = {}
