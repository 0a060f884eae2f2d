"""Measurement strategies for range workloads under ℓ2 sensitivity (Gaussian noise); pure, no privacy here.

A strategy A (k × n) is measured as y = A x + noise and reconstructed by least
squares, x̂ = (AᵀA)⁻¹Aᵀy. Every strategy here is scaled to ℓ2 sensitivity 1
(its largest column 2-norm is 1: adding or removing one row moves y by at most
1 in 2-norm), so the Gaussian mechanism with the σ calibrated for sensitivity 1
applies to y unchanged, and a query q of x̂ has variance σ²·qᵀ(AᵀA)⁻¹q. The
*unit error* of a workload with Gram M = WᵀW and m queries is
E = Δ₂²·tr(M (AᵀA)⁻¹)/m (HDMM's convention; per-query RMSE = sqrt(E) per unit
noise), computed exactly below (closed forms or one eigendecomposition; never a
sampled estimate). Everything depends on public parameters only (n, the
workload), so a strategy can be cached per workload.

The designs:

* :func:`weighted_eigen_design`: AᵀA = D⁻¹(DMD)^½D⁻¹ with D = diag(√w), the
  weights found by a multiplicative fixed point that equalises the columns'
  norms. For every w on the simplex, tr((DMD)^½)²/m is a lower bound on the
  unit error of *any* strategy (``lower_bound``: max_i G_ii >= Σ w_i G_ii and
  min_G tr(DGD)·tr(M G⁻¹) = tr((DMD)^½)²), so the gap to it certifies how
  close to optimal the design is. Prefixes and all ranges use M⁻¹'s
  tridiagonal structure (n <= :data:`TRIDIAGONAL_LIMIT`); explicit ranges a
  dense eigendecomposition (covered bins <= :data:`DENSE_LIMIT`).
* :func:`square_root_factorisation`: the prefix matrix W = C·C with C the lower
  triangular Toeplitz matrix of c_k = binom(2k, k)/4^k (the coefficients of
  (1 - z)^-½); measure C x, answer prefixes with C. O(n log n) by FFT, any n.
* :func:`ranges_eigen_design`: AᵀA = M^½ for all ranges, M = (n + 1)·T⁻¹ with
  T = tridiag(-1, 2, -1), whose eigenvectors are the DST-I basis. O(n log n).

:func:`best_l2_strategy` returns the applicable design with the lowest exact
unit error (a public rule: ties go to the earlier design in :data:`DESIGNS`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.errors import InvalidParameterError
from dpkit.histograms._range_grams import Gram, svd_bound

#: Largest n for the weighted eigen-design of prefixes / all ranges (eigenvectors n × n).
TRIDIAGONAL_LIMIT = 4096
#: Largest number of covered bins for the weighted eigen-design of explicit ranges (dense:
#: one O(n³) eigendecomposition per fixed-point step, up to MAX_ITERATIONS of them).
DENSE_LIMIT = 512
#: The fixed point's public stopping rule: at most this many steps, or until the
#: primal/dual gap in unit error is below ``GAP_TOLERANCE``.
MAX_ITERATIONS = 80
GAP_TOLERANCE = 1e-3
#: The fixed point's step exponent: w <- w·(G_ii/mean)^STEP (1.3: fewest steps measured at
#: n = 17..4,096 with the same final error as 0.8 or 1.0; the best weights seen are kept).
STEP = 1.3
DESIGNS: tuple[str, ...] = ("weighted_eigen", "square_root", "ranges_eigen")

FloatArray = NDArray[np.float64]


def _as_int_ranges(
    lo: ArrayLike, hi: ArrayLike, n: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    a = np.asarray(lo, dtype=np.int64).ravel()
    b = np.asarray(hi, dtype=np.int64).ravel()
    if a.shape != b.shape or np.any(a < 0) or np.any(b >= n) or np.any(a > b):
        raise InvalidParameterError(
            f"ranges must satisfy 0 <= lo <= hi <= {n - 1} (0-based, inclusive)."
        )
    return a, b


@dataclasses.dataclass(frozen=True, eq=False)
class L2Strategy:
    """A strategy of ℓ2 sensitivity 1 with its exact unit error (subclasses implement the maps).

    Attributes:
        name: one of :data:`DESIGNS`.
        n: the number of unit bins.
        kind: the workload it was built for (``Gram.kind``).
        unit_error: Δ₂²·tr(M (AᵀA)⁻¹)/m, exact, for that workload.
        svd_bound: the SVD lower bound (Σσ)²/(n·m) for that workload.
        lower_bound: a certified lower bound on any ℓ2 strategy's unit error
            (the dual certificate; the SVD bound where no better one is known).
        iterations: fixed-point steps taken (0 for closed forms).
        scale: the factor that made the raw design's sensitivity 1 (1/Δ₂).

    The column norms are 1 up to floating-point rounding (tests check
    |norm - 1| <= 1e-12 against the dense A); a publisher calibrating noise
    should allow for that (a relative margin such as 1e-9 on the sensitivity).
    """

    name: str
    n: int
    kind: str
    unit_error: float
    svd_bound: float
    lower_bound: float
    iterations: int
    scale: float

    @property
    def rmse_ratio(self) -> float:
        """sqrt(unit_error / svd_bound): how far the per-query RMSE is above the SVD bound."""
        return math.sqrt(self.unit_error / self.svd_bound)

    def measure(self, x: ArrayLike) -> FloatArray:  # pragma: no cover - abstract
        """A x (unit ℓ2 sensitivity); the Gaussian mechanism's noise is added to this."""
        raise NotImplementedError

    def reconstruct(self, y: ArrayLike) -> FloatArray:  # pragma: no cover - abstract
        """The least-squares estimate x̂ of the unit counts from (noisy) measurements y."""
        raise NotImplementedError

    def linear_variance(self, u: ArrayLike) -> float:  # pragma: no cover - abstract
        """uᵀ(AᵀA)⁻¹u: the variance of uᵀx̂ per unit noise variance on y."""
        raise NotImplementedError

    def range_variance(self, lo: ArrayLike, hi: ArrayLike) -> FloatArray:  # pragma: no cover
        """The variance of each range sum [lo, hi] of x̂ per unit noise variance on y."""
        raise NotImplementedError


# --- weighted eigen-design ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class WeightedEigenDesign(L2Strategy):
    """A = scale·Λ^¼·Vᵀ·D⁻¹ on the covered bins, with K = DMD = V Λ Vᵀ (λ > 0 only).

    AᵀA = scale²·D⁻¹K^½D⁻¹, whose diagonal's maximum is 1/scale² (so Δ₂ = 1);
    x̂ = D V Λ^-¼ y/scale solves A x̂ = y exactly, a least-squares solution whose
    workload answers are unique (the range of AᵀA is the range of M).
    """

    weights: FloatArray = dataclasses.field(default_factory=lambda: np.zeros(0))
    support: NDArray[np.int64] = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    eigenvalues: FloatArray = dataclasses.field(default_factory=lambda: np.zeros(0))
    eigenvectors: FloatArray = dataclasses.field(default_factory=lambda: np.zeros((0, 0)))

    def measure(self, x: ArrayLike) -> FloatArray:
        v = np.asarray(x, dtype=np.float64)[self.support] / np.sqrt(self.weights)
        out: FloatArray = self.scale * self.eigenvalues**0.25 * (self.eigenvectors.T @ v)
        return out

    def reconstruct(self, y: ArrayLike) -> FloatArray:
        z = np.asarray(y, dtype=np.float64) / (self.scale * self.eigenvalues**0.25)
        out = np.zeros(self.n)
        out[self.support] = np.sqrt(self.weights) * (self.eigenvectors @ z)
        return out

    def _coefficients(self, u: FloatArray) -> FloatArray:
        # (A⁺)ᵀu in the eigenbasis: Λ^-¼ Vᵀ D u / scale (rows: functionals).
        du = u[..., self.support] * np.sqrt(self.weights)
        out: FloatArray = (du @ self.eigenvectors) / (self.scale * self.eigenvalues**0.25)
        return out

    def linear_variance(self, u: ArrayLike) -> float:
        c = self._coefficients(np.asarray(u, dtype=np.float64))
        return float(c @ c)

    def range_variance(self, lo: ArrayLike, hi: ArrayLike) -> FloatArray:
        a, b = _as_int_ranges(lo, hi, self.n)
        dv = np.sqrt(self.weights)[:, None] * self.eigenvectors
        full = np.zeros((self.n + 1, dv.shape[1]))
        np.add.at(full, self.support + 1, dv)
        prefix = np.cumsum(full, axis=0)
        out = np.empty(a.size)
        inv = 1.0 / (self.scale * self.eigenvalues**0.25)
        for start in range(0, a.size, 256):  # bounded memory: 256 rows of length n at a time
            rows = (prefix[b[start : start + 256] + 1] - prefix[a[start : start + 256]]) * inv
            out[start : start + 256] = np.einsum("ij,ij->i", rows, rows)
        return out


def _m_inverse_tridiagonal(gram: Gram) -> tuple[FloatArray, FloatArray]:
    """M⁻¹ as (diagonal, off-diagonal): tridiagonal for prefixes and all ranges."""
    n = gram.n
    if gram.kind == "prefixes":
        # M = WᵀW with W lower-triangular ones (0-based bin 0 is in every prefix):
        # M⁻¹ = W⁻¹W⁻ᵀ, W⁻¹ the bidiagonal difference matrix.
        diag = np.full(n, 2.0)
        diag[0] = 1.0
        return diag, np.full(n - 1, -1.0)
    # All ranges: M = (n + 1)·T⁻¹.
    return np.full(n, 2.0 / (n + 1)), np.full(n - 1, -1.0 / (n + 1))


def _diag_inverse_sqrt(diag: FloatArray, off: FloatArray) -> FloatArray:
    """diag(T^-½) of a symmetric positive definite tridiagonal T, in O(n) per quadrature node.

    T^-½ = (2/π)∫₀^∞ (T + t²)⁻¹ dt; with t = e^u the integrand is analytic in a
    strip of half-width π/2, so the trapezoid rule with step 0.4 is accurate to
    ~e^(-π²/0.4) and the tails cut at e^±22 beyond the spectrum to ~e^-22
    (relative). diag((T + s)⁻¹)_i = 1/(p⁺_i + p⁻_i - (T + s)_ii) with p± the
    forward / backward LDLᵀ pivots (LAPACK dpttrf). Used only inside the fixed
    point; the returned design's error comes from an exact eigendecomposition.
    """
    from scipy.linalg import eigvalsh_tridiagonal, lapack

    n = diag.size
    if n == 1:
        out1: FloatArray = diag**-0.5
        return out1
    low = float(eigvalsh_tridiagonal(diag, off, select="i", select_range=(0, 0))[0])
    high = float(np.max(diag + np.abs(np.r_[off, 0.0]) + np.abs(np.r_[0.0, off])))
    h = 0.4
    nodes = np.arange(0.5 * math.log(low) - 22.0, 0.5 * math.log(high) + 22.0 + h, h)
    total = np.zeros(n)
    rev_diag, rev_off = diag[::-1].copy(), off[::-1].copy()
    for u in nodes:
        s = math.exp(2.0 * u)
        forward, _, info_f = lapack.dpttrf(diag + s, off)
        backward, _, info_b = lapack.dpttrf(rev_diag + s, rev_off)
        if info_f != 0 or info_b != 0:  # pragma: no cover - T + s is positive definite
            raise ArithmeticError("tridiagonal factorisation failed")
        total += math.exp(u) / (forward + backward[::-1] - (diag + s))
    out: FloatArray = (2.0 / math.pi) * h * total
    return out


#: LAPACK driver for the design's one tridiagonal eigendecomposition, per workload (a public
#: rule, by measurement at n = 4,096 on the converged K⁻¹, one thread): prefixes MRRR
#: (dstemr) 2.2 s against divide and conquer (dstevd) 4.3-4.6 s; all ranges dstevd 2.6-2.9 s
#: against dstemr 4.1-4.2 s.
EIGEN_DRIVER = {"prefixes": "stemr", "ranges": "stevd"}


def _tridiagonal_eigh(
    diag: FloatArray, off: FloatArray, driver: str
) -> tuple[FloatArray, FloatArray]:
    """All eigenpairs of a symmetric tridiagonal matrix (``driver``: "stemr" or "stevd")."""
    from scipy.linalg import eigh_tridiagonal, lapack

    if driver == "stemr":
        mu, vec = eigh_tridiagonal(diag, off, lapack_driver="stemr", check_finite=False)
        return mu, vec
    mu, vec, info = lapack.dstevd(diag, off, compute_v=1)
    if info != 0:  # pragma: no cover - dstevd converges on symmetric tridiagonals
        raise ArithmeticError(f"tridiagonal eigendecomposition failed (dstevd info {info})")
    return mu, vec


def _fixed_point(diag_of_half: Any, n: int, m: int) -> tuple[FloatArray, int]:
    """The multiplicative weights w <- w·(G_ii/mean)^STEP, G_ii = (K^½)_ii / w_i (public rule).

    ``diag_of_half(w)`` returns (diag(K^½), tr(K^½)) for K = DMD. Stops after
    :data:`MAX_ITERATIONS` steps or when the primal/dual gap is below
    :data:`GAP_TOLERANCE`; returns the best weights seen (by primal error).
    """
    w = np.full(n, 1.0 / n)
    best_w, best_err = w, np.inf
    steps = 0
    for steps in range(1, MAX_ITERATIONS + 1):  # noqa: B007 - the count is reported
        half_diag, trace = diag_of_half(w)
        g = half_diag / w
        err = float(g.max()) * trace / m
        dual = trace * trace / m
        if err < best_err:
            best_w, best_err = w, err
        if err <= dual * (1.0 + GAP_TOLERANCE):
            break
        w = w * (g / g.mean()) ** STEP
        w = w / w.sum()
    return best_w, steps


def _finish(
    gram: Gram,
    support: NDArray[np.int64],
    w: FloatArray,
    lam: FloatArray,
    vec: FloatArray,
    steps: int,
) -> WeightedEigenDesign:
    """Keep λ > 0, scale to sensitivity 1 and compute the exact error and certificate."""
    keep = lam > lam.max() * lam.size * np.finfo(np.float64).eps
    lam, vec = lam[keep], vec[:, keep]
    root = np.sqrt(lam)
    col_sq = ((vec * vec) @ root) / w  # diag(AᵀA) of the unscaled design
    trace = float(root.sum())
    delta_sq = float(col_sq.max())
    return WeightedEigenDesign(
        name="weighted_eigen",
        n=gram.n,
        kind=gram.kind,
        unit_error=delta_sq * trace / gram.m,
        svd_bound=svd_bound(gram),
        lower_bound=max(trace * trace / gram.m, svd_bound(gram)),
        iterations=steps,
        scale=1.0 / math.sqrt(delta_sq),
        weights=w,
        support=support,
        eigenvalues=lam,
        eigenvectors=vec,
    )


def _weighted_tridiagonal(gram: Gram, w: FloatArray) -> tuple[FloatArray, FloatArray]:
    """K⁻¹ = D⁻¹M⁻¹D⁻¹ (D = diag(√w)) as (diagonal, off-diagonal), prefixes / all ranges."""
    a, b = _m_inverse_tridiagonal(gram)
    d = np.sqrt(w)
    return a / w, b / (d[:-1] * d[1:])


def tridiagonal_weights(gram: Gram) -> tuple[FloatArray, int]:
    """The fixed point's weights and step count for prefixes / all ranges (O(n) per node).

    Each step is one quadrature of diag(K^½) (:func:`_diag_inverse_sqrt`); the
    count is the build's public work measure (pinned at 4,096 bins in the tests).
    """

    def half_tri(w: FloatArray) -> tuple[FloatArray, float]:
        half = _diag_inverse_sqrt(*_weighted_tridiagonal(gram, w))
        return half, float(half.sum())

    return _fixed_point(half_tri, gram.n, gram.m)


def weighted_eigen_design(gram: Gram) -> WeightedEigenDesign:
    """The weighted eigen-design for the workload (the ℓ2 optimum up to the certified gap).

    Prefixes / all ranges: n <= :data:`TRIDIAGONAL_LIMIT`; the fixed point uses
    O(n) quadrature steps on the tridiagonal K⁻¹ = D⁻¹M⁻¹D⁻¹ and the design one
    tridiagonal eigendecomposition (:data:`EIGEN_DRIVER`; n² memory).
    Explicit ranges: at most :data:`DENSE_LIMIT` covered bins (dense ``eigh``
    per step); uncovered bins are not measured (reconstructed as 0, never asked).
    """
    from scipy.linalg import eigh

    if gram.kind in ("prefixes", "ranges"):
        if gram.n > TRIDIAGONAL_LIMIT:
            raise InvalidParameterError(
                f"the weighted eigen-design needs n <= {TRIDIAGONAL_LIMIT}; use "
                "square_root_factorisation (prefixes) or ranges_eigen_design (all ranges)."
            )
        w, steps = tridiagonal_weights(gram)
        diag_k, off_k = _weighted_tridiagonal(gram, w)
        if gram.n == 1:
            mu, vec = diag_k, np.ones((1, 1))
        else:
            mu, vec = _tridiagonal_eigh(diag_k, off_k, EIGEN_DRIVER[gram.kind])
        # Eigenvalues of K are 1/μ; order is irrelevant to the design.
        return _finish(gram, np.arange(gram.n), w, 1.0 / mu, vec, steps)
    covered = np.flatnonzero(gram.diag() > 0)
    if covered.size > DENSE_LIMIT:
        raise InvalidParameterError(
            f"the weighted eigen-design of explicit ranges needs at most {DENSE_LIMIT} covered bins."
        )
    dense = gram.dense()[np.ix_(covered, covered)]

    def half_dense(w: FloatArray) -> tuple[FloatArray, float]:
        d = np.sqrt(w)
        lam, vec = eigh(d[:, None] * dense * d[None, :])
        root = np.sqrt(np.clip(lam, 0.0, None))
        return (vec * vec) @ root, float(root.sum())

    w, steps = _fixed_point(half_dense, covered.size, gram.m)
    d = np.sqrt(w)
    lam, vec = eigh(d[:, None] * dense * d[None, :])
    return _finish(gram, covered.astype(np.int64), w, lam, vec, steps)


# --- square-root factorisation of the prefix matrix ----------------------------------------


def _root_coefficients(n: int) -> tuple[FloatArray, FloatArray]:
    """c_k = binom(2k, k)/4^k ((1 - z)^-½) and d_k, its inverse series ((1 - z)^½), k < n."""
    k = np.arange(1, n, dtype=np.float64)
    c = np.cumprod(np.concatenate(([1.0], (2.0 * k - 1.0) / (2.0 * k))), dtype=np.float64)
    d = np.cumprod(np.concatenate(([1.0], (2.0 * k - 3.0) / (2.0 * k))), dtype=np.float64)
    return c, d


def _lower_toeplitz(coef: FloatArray, x: FloatArray) -> FloatArray:
    """(L x) with L lower-triangular Toeplitz of first column ``coef``: a truncated FFT convolution."""
    from scipy.signal import fftconvolve

    out: FloatArray = fftconvolve(coef, x)[: coef.size]
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class SquareRootFactorisation(L2Strategy):
    """A = scale·C with C² = W (the prefix matrix); x̂ = C⁻¹y/scale (square, so exact LS).

    Column j of C holds c_0..c_(n-1-j), so the largest column norm is column 0's,
    sqrt(Σ_k c_k²) = 1/scale. The prefix [0, j] of x̂ is (C y)_j/scale.
    """

    coefficients: FloatArray = dataclasses.field(default_factory=lambda: np.zeros(0))
    inverse_coefficients: FloatArray = dataclasses.field(default_factory=lambda: np.zeros(0))

    def measure(self, x: ArrayLike) -> FloatArray:
        return self.scale * _lower_toeplitz(self.coefficients, np.asarray(x, dtype=np.float64))

    def reconstruct(self, y: ArrayLike) -> FloatArray:
        z = np.asarray(y, dtype=np.float64) / self.scale
        return _lower_toeplitz(self.inverse_coefficients, z)

    def linear_variance(self, u: ArrayLike) -> float:
        # Var(uᵀC⁻¹y)/scale² = |C⁻ᵀu|²/scale²; C⁻ᵀ is upper Toeplitz: reverse, convolve, reverse.
        v = _lower_toeplitz(self.inverse_coefficients, np.asarray(u, dtype=np.float64)[::-1])
        return float(v @ v) / self.scale**2

    def range_variance(self, lo: ArrayLike, hi: ArrayLike) -> FloatArray:
        """|row_hi(C) - row_(lo-1)(C)|²/scale² = (Σ_(k<=hi-lo) c_k² + Σ_(t<lo)(c_(t+g) - c_t)²)/scale².

        g = hi - lo + 1; O(n) per distinct length g (cumulative sums), never n × n.
        """
        a, b = _as_int_ranges(lo, hi, self.n)
        result: FloatArray = toeplitz_range_variance(self.coefficients, a, b) / self.scale**2
        return result


def toeplitz_range_variance(
    c: FloatArray, a: NDArray[np.int64], b: NDArray[np.int64]
) -> FloatArray:
    """|row_b(L) - row_(a-1)(L)|² for L lower-triangular Toeplitz of first column c (row_-1 = 0).

    = Σ_(k<=b-a) c_k² + Σ_(t<a)(c_(t+g) - c_t)², g = b - a + 1; O(n) per distinct g.
    Ranges [a, b] must be checked (0 <= a <= b < len(c)).
    """
    n = c.size
    head = np.cumsum(c * c)
    out: FloatArray = head[b - a].copy()
    gaps = b - a + 1
    for g in np.unique(gaps[a > 0]):
        diff = c[g:] - c[: n - g]
        tail = np.r_[0.0, np.cumsum(diff * diff)]
        sel = (gaps == g) & (a > 0)
        out[sel] += tail[a[sel]]
    return out


def square_root_factorisation(gram: Gram) -> SquareRootFactorisation:
    """The square-root factorisation of the prefix matrix, for prefixes or all ranges, any n.

    Exact unit errors in O(n): prefixes tr(M G⁻¹) = |C|_F² = Σ_k (n - k)c_k²;
    all ranges, with P_b the prefix sums of x̂ (P_0 = 0, Var P_b = Σ_(k<b) c_k²),
    Σ_(a<b) Var(P_b - P_a) = (n + 1)·Σ_b Var P_b - Var(Σ_b P_b) and
    Σ_b P_b = Σ_j (n - j)·x̂_j = yᵀ(column sums of C), column j summing to
    Σ_(k < n-j) c_k.
    """
    if gram.kind not in ("prefixes", "ranges"):
        raise InvalidParameterError(
            "the square-root factorisation applies to prefixes and all ranges."
        )
    n = gram.n
    c, d = _root_coefficients(n)
    sq = np.cumsum(c * c)
    delta_sq = float(sq[-1])
    if gram.kind == "prefixes":
        trace = float(sq.sum())
    else:
        trace = float((n + 1) * sq.sum() - np.sum(np.cumsum(c) ** 2))
    return SquareRootFactorisation(
        name="square_root",
        n=n,
        kind=gram.kind,
        unit_error=delta_sq * trace / gram.m,
        svd_bound=svd_bound(gram),
        lower_bound=svd_bound(gram),
        iterations=0,
        scale=1.0 / math.sqrt(delta_sq),
        coefficients=c,
        inverse_coefficients=d,
    )


# --- DST-I eigen-design for all ranges -----------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class RangesEigenDesign(L2Strategy):
    """A = scale·diag(s^½)·S, S the orthonormal DST-I, s_k = sqrt(λ_k(M)).

    S is symmetric and its own inverse, so x̂ = S (y / (scale·s^½)).
    """

    root_eigenvalues: FloatArray = dataclasses.field(default_factory=lambda: np.zeros(0))

    def measure(self, x: ArrayLike) -> FloatArray:
        from scipy.fft import dst

        sx = dst(np.asarray(x, dtype=np.float64), type=1, norm="ortho")
        out: FloatArray = self.scale * np.sqrt(self.root_eigenvalues) * sx
        return out

    def reconstruct(self, y: ArrayLike) -> FloatArray:
        from scipy.fft import dst

        z = np.asarray(y, dtype=np.float64) / (self.scale * np.sqrt(self.root_eigenvalues))
        out: FloatArray = dst(z, type=1, norm="ortho")
        return out

    def linear_variance(self, u: ArrayLike) -> float:
        from scipy.fft import dst

        su = dst(np.asarray(u, dtype=np.float64), type=1, norm="ortho")
        return float(np.sum(su * su / self.root_eigenvalues)) / self.scale**2

    def range_variance(self, lo: ArrayLike, hi: ArrayLike) -> FloatArray:
        """Σ_k (S q)_k²/s_k/scale², (S q)_k by the closed-form sum of sines over the range."""
        a, b = _as_int_ranges(lo, hi, self.n)
        n = self.n
        theta = np.pi * np.arange(1, n + 1) / (n + 1)
        norm = math.sqrt(2.0 / (n + 1)) / (2.0 * np.sin(theta / 2.0))
        out = np.empty(a.size)
        for start in range(0, a.size, 64):
            aa = a[start : start + 64, None] + 0.5
            bb = b[start : start + 64, None] + 1.5
            sq = norm * (np.cos(aa * theta) - np.cos(bb * theta))
            out[start : start + 64] = (sq * sq) @ (1.0 / self.root_eigenvalues)
        result: FloatArray = out / self.scale**2
        return result


def ranges_eigen_design(gram: Gram) -> RangesEigenDesign:
    """AᵀA = M^½ for all ranges (unweighted eigen-design), any n, O(n log n).

    diag(M^½)_i = Σ_k S_ik² s_k = (Σ_k s_k - Σ_k s_k cos(2π(i+1)k/(n + 1)))/(n + 1)
    (one FFT); tr(M·M^-½) = Σ_k s_k.
    """
    if gram.kind != "ranges":
        raise InvalidParameterError("the DST-I eigen-design applies to all ranges only.")
    n = gram.n
    # sqrt of M's eigenvalues in DST-I order (frequency k = 1..n): M = (n + 1)·T⁻¹.
    k = np.arange(1, n + 1, dtype=np.float64)
    s = math.sqrt(n + 1.0) / (2.0 * np.sin(k * np.pi / (2.0 * (n + 1.0))))
    cosines = np.fft.fft(np.r_[0.0, s]).real  # Σ_k s_k cos(2π·i·k/(n + 1)), i = 0..n
    diag = (s.sum() - cosines[1:]) / (n + 1)
    delta_sq = float(diag.max())
    return RangesEigenDesign(
        name="ranges_eigen",
        n=n,
        kind="ranges",
        unit_error=delta_sq * float(s.sum()) / gram.m,
        svd_bound=svd_bound(gram),
        lower_bound=svd_bound(gram),
        iterations=0,
        scale=1.0 / math.sqrt(delta_sq),
        root_eigenvalues=s,
    )


# --- the public choice ---------------------------------------------------------------------


def applicable_designs(gram: Gram) -> tuple[str, ...]:
    """The designs of :data:`DESIGNS` that apply to the workload (size limits are public)."""
    names: list[str] = []
    if gram.kind in ("prefixes", "ranges"):
        if gram.n <= TRIDIAGONAL_LIMIT:
            names.append("weighted_eigen")
        names.append("square_root")
        if gram.kind == "ranges":
            names.append("ranges_eigen")
    elif int(np.count_nonzero(gram.diag() > 0)) <= DENSE_LIMIT:
        names.append("weighted_eigen")
    return tuple(names)


_BUILDERS = {
    "weighted_eigen": weighted_eigen_design,
    "square_root": square_root_factorisation,
    "ranges_eigen": ranges_eigen_design,
}


def build_design(name: str, gram: Gram) -> L2Strategy:
    """One design by name (see :data:`DESIGNS`)."""
    if name not in _BUILDERS:
        raise InvalidParameterError(f"design must be one of {', '.join(DESIGNS)}.")
    builder: Any = _BUILDERS[name]
    strategy: L2Strategy = builder(gram)
    return strategy


def best_l2_strategy(gram: Gram, *, store: bool = True) -> L2Strategy:
    """The applicable design with the lowest exact unit error (ties: earlier in :data:`DESIGNS`).

    A function of the public workload only; cached per ``gram.key`` (the last
    :data:`CACHE_SIZE` workloads). ``store=False`` reads the cache but does not
    add to it (the stored strategies of :mod:`dpkit.histograms._strategy_exact`
    need the design once, not its n × n eigenvectors kept beside their own cache).
    """
    key = gram.key
    if key in _CACHE:
        return _CACHE[key]
    names = applicable_designs(gram)
    if not names:
        raise InvalidParameterError(
            f"no ℓ2 design applies: explicit ranges need at most {DENSE_LIMIT} covered bins."
        )
    best: L2Strategy | None = None
    for name in names:
        candidate = build_design(name, gram)
        if best is None or candidate.unit_error < best.unit_error:
            best = candidate
    assert best is not None
    if not store:
        return best
    if len(_CACHE) >= CACHE_SIZE:
        del _CACHE[next(iter(_CACHE))]
    _CACHE[key] = best
    return best


#: Few: a design over 4,096 bins holds about 128 MB (the exact strategies built from it are
#: cached on their own, in :mod:`dpkit.histograms._strategy_exact`).
CACHE_SIZE = 2
_CACHE: dict[tuple[Any, ...], L2Strategy] = {}
