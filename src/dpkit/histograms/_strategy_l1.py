"""HDMM's p-Identity measurement strategy for range workloads under l1 sensitivity (pure).

McKenna, Miklau, Hay, Machanavajjhala, "Optimizing error of high-dimensional
statistical queries under differential privacy", VLDB 2018, Section 6: the
strategy is A = [I; Θ] D with Θ >= 0 (p × n) and D the diagonal matrix that
makes every column's l1 norm 1, and Θ minimises the workload error
tr(M (AᵀA)⁻¹) (M = WᵀW, :mod:`dpkit.histograms._range_grams`) by L-BFGS-B.
AᵀA = D (I + ΘᵀΘ) D is a diagonal plus a rank-p matrix, so every product with
its inverse goes through the p × p matrix R = I + ΘΘᵀ (Woodbury): O(n·p) per
product, O(n·p²) to form R, never an n × n matrix.

Everything here is a function of public parameters (n, the workload, p); no
data and no privacy. The stored strategy is quantised onto multiples of
2⁻²⁰ (rounded down) after the optimisation: its column l1 norms are then
exact dyadic numbers (1 up to a few 2⁻²⁰; the sensitivity used is their exact
maximum), and
A x is computed without rounding for integer counts whose total is below 2³³
(every product and partial sum is a multiple of 2⁻²⁰ below 2³³), so the
sensitivity argument of :func:`dpkit.histograms.matrix_mechanism` holds for
the values actually computed. Errors below are exact for the quantised A.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit.errors import InvalidParameterError
from dpkit.histograms._range_grams import Gram, Keyed

#: The strategy's entries are multiples of 2**-QUANTUM_BITS (rounded down).
QUANTUM_BITS = 20
#: Upper bound of every Θ entry in the optimisation: with p <= MAX_ROWS the
#: column sums stay below 2**20 - 1, so every quantised diagonal entry is >= 2**-20.
THETA_MAX = 1000.0
MAX_ROWS = 1024


def rows_for(n: int) -> int:
    """The default number p of aggregate rows for n unit bins (public).

    HDMM uses n/16; the optimisation costs O(n·p²) per iteration. Measured
    (unit RMSE; see the report of issue 32): n = 64 ranges 4.69 at p = 4, 3.95
    at 8; n = 1,024 prefixes 6.89 at p = 32 (6.76 at 64 after 1,500
    iterations); n = 4,096 prefixes 9.61 at p = 32 (converged), 9.19 at 64.
    Beyond 8,192 bins one layer of aggregates cannot match Hb's tree at any
    affordable p, so p stays small there (bounded work).
    """
    if n < 256:
        return max(1, n // 8)
    return 64 if 4096 <= n <= 8192 else 32


def max_rows(n: int) -> int:
    """The largest p accepted for n bins: n·p² <= 2³² (bounded work, public), at most MAX_ROWS."""
    return int(max(1, min(MAX_ROWS, math.isqrt((1 << 32) // max(n, 1)))))


def iterations_for(n: int, p: int) -> int:
    """L-BFGS-B iteration cap, a public function of n and p (never of wall-clock time).

    About 2·10¹⁰ flops of optimisation in all (each iteration costs ~ 8·n·p²;
    10¹⁰ beyond 8,192 bins, where the strategy loses to Hb's tree anyway), at
    most 400 and at least 20 iterations.
    """
    budget = 2e10 if n <= 8192 else 1e10
    return int(min(400, max(20, budget // (8 * n * max(p, 4) ** 2))))


@dataclasses.dataclass(frozen=True, eq=False)
class PIdentity:
    """The strategy A = [diag(a); B] ((n + p) × n) and the factors its errors need.

    Attributes:
        theta: the optimised Θ (p × n, >= 0) before normalisation.
        a: the identity rows' weights (n,), multiples of 2⁻²⁰, > 0.
        b: the p aggregate rows (p × n), multiples of 2⁻²⁰, >= 0.
        sensitivity: the exact maximum column l1 norm of A (about 1).
        workload_key: the Gram's key the strategy was optimised for.
    """

    theta: NDArray[np.float64]
    a: NDArray[np.float64]
    b: NDArray[np.float64]
    sensitivity: float
    workload_key: tuple[Any, ...]
    # C = B diag(a)^-2 and K = L^-1 C (L L^T = R = I + C B^T), prefix sums of K and 1/a^2.
    _c: NDArray[np.float64] = dataclasses.field(repr=False)
    _chol: NDArray[np.float64] = dataclasses.field(repr=False)
    _k_prefix: NDArray[np.float64] = dataclasses.field(repr=False)
    _inv_a2_prefix: NDArray[np.float64] = dataclasses.field(repr=False)

    @property
    def n(self) -> int:
        """Number of unit bins."""
        return int(self.a.size)

    @property
    def p(self) -> int:
        """Number of aggregate rows."""
        return int(self.b.shape[0])

    @property
    def size(self) -> int:
        """The number of measured values, n + p."""
        return self.n + self.p

    @property
    def changed(self) -> int:
        """How many measured values one unit count moves: its unit row and the p aggregates."""
        return self.p + 1

    def measure(self, x: ArrayLike) -> NDArray[np.float64]:
        """A x (length n + p): the weighted unit counts, then the p weighted aggregates."""
        arr = np.asarray(x, dtype=np.float64)
        return np.concatenate((self.a * arr, self.b @ arr))

    def reconstruct(self, y: ArrayLike) -> NDArray[np.float64]:
        """The least-squares estimate (AᵀA)⁻¹ Aᵀ y (Woodbury; O(n·p)); y (n + p,) or (n + p, k)."""
        arr = np.asarray(y, dtype=np.float64)
        a = self.a if arr.ndim == 1 else self.a[:, None]
        return self.solve(a * arr[: self.n] + self.b.T @ arr[self.n :])

    def solve(self, v: ArrayLike) -> NDArray[np.float64]:
        """(AᵀA)⁻¹ v = v / a² - Cᵀ R⁻¹ C v, for a vector (n,) or a matrix (n, k)."""
        from scipy.linalg import cho_solve

        arr = np.asarray(v, dtype=np.float64)
        inv_a2 = 1.0 / (self.a * self.a)
        scaled = arr * (inv_a2 if arr.ndim == 1 else inv_a2[:, None])
        correction = self._c.T @ cho_solve((self._chol, True), self._c @ arr)
        out: NDArray[np.float64] = scaled - correction
        return out

    def unit_variances(self) -> NDArray[np.float64]:
        """diag((AᵀA)⁻¹): the variance of each unit estimate per unit noise variance."""
        k = np.diff(self._k_prefix, axis=1)
        out: NDArray[np.float64] = np.diff(self._inv_a2_prefix) - np.einsum("ij,ij->j", k, k)
        return out

    def range_variances(self, lo: ArrayLike, hi: ArrayLike) -> NDArray[np.float64]:
        """q ᵀ(AᵀA)⁻¹ q for the indicators q of ranges [lo, hi] (0-based, inclusive).

        O(p) per range: sum of 1/a² over the range minus |K q|², both from prefix sums.
        """
        lo_arr = np.asarray(lo, dtype=np.int64)
        hi_arr = np.asarray(hi, dtype=np.int64) + 1
        k = self._k_prefix[:, hi_arr] - self._k_prefix[:, lo_arr]
        diag = self._inv_a2_prefix[hi_arr] - self._inv_a2_prefix[lo_arr]
        out: NDArray[np.float64] = diag - np.einsum("ij,ij->j", k, k)
        return out

    def unit_error(self, gram: Gram) -> float:
        """Δ²·tr(M (AᵀA)⁻¹)/m: the per-query mean squared error per unit noise variance.

        Exact (one product with M of an n × p matrix). With noise variance v per
        unit sensitivity (Laplace of scale Δ/ε: v = 2/ε²) the mean squared error of
        the workload's queries is v times this.
        """
        if gram.n != self.n:
            raise InvalidParameterError("the workload's n differs from the strategy's.")
        k = np.diff(self._k_prefix, axis=1)
        inv_a2 = 1.0 / (self.a * self.a)
        trace = float(gram.diag() @ inv_a2 - np.sum(k * gram.matmat(k.T).T))
        return self.sensitivity**2 * trace / gram.m


def objective(
    theta: NDArray[np.float64], gram: Gram, diag_m: NDArray[np.float64]
) -> tuple[float, NDArray[np.float64]]:
    """f(Θ) = tr(M (AᵀA)⁻¹) for A = [I; Θ] D, and its gradient (HDMM, Section 6.2).

    With d = 1 + column sums of Θ (= D⁻¹), M̃ = diag(d) M diag(d), R = I + ΘΘᵀ and
    Z = R⁻¹Θ: f = Σ d² diag(M) - tr(Z M̃ Θᵀ). Two products with M per call.
    """
    from scipy.linalg import cho_factor, cho_solve

    p = theta.shape[0]
    d = 1.0 + theta.sum(axis=0)
    z = cho_solve(cho_factor(np.eye(p) + theta @ theta.T), theta)
    m_dz = gram.matmat(d[:, None] * z.T)
    m_dt = gram.matmat(d[:, None] * theta.T)
    f = float(np.sum(d * d * diag_m) - np.sum(z.T * (d[:, None] * m_dt)))
    zm = (d[:, None] * m_dz).T
    grad = -2.0 * (zm - (zm @ theta.T) @ z)
    grad += (2.0 * (diag_m * d - np.sum(m_dt * z.T, axis=1)))[None, :]
    return f, grad


def _seed(gram: Gram, p: int) -> list[int]:
    """A seed from public facts only: the workload's key and p."""
    digest = hashlib.sha256(repr((gram.key, p)).encode()).digest()
    return [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


def cells_for(n: int) -> int:
    """How many cells Θ is constant on during the optimisation (public): min(n, 256).

    Θ = Φ S with S the indicator of ``cells`` contiguous cells: the optimisation
    has p·cells variables instead of p·n (L-BFGS-B's own work grows with them),
    while the error is still the exact one of the full-resolution strategy.
    The optimised rows are smooth bumps about n/p bins wide, which a cell
    structure of n/256 bins hardly changes (n = 1,024, p = 32, prefixes: see
    the report's table).
    """
    return int(min(n, 256))


def optimise_theta(
    gram: Gram, p: int, iterations: int, cells: int | None = None
) -> NDArray[np.float64]:
    """Θ minimising :func:`objective` by L-BFGS-B (Θ in [0, THETA_MAX]), deterministically.

    Θ is constant on ``cells`` contiguous cells (default :func:`cells_for`).
    The start is p contiguous blocks (row k sums about the k-th n/p bins, a
    two-level tree) plus a small uniform perturbation seeded from the public
    workload key and p; the run stops after ``iterations`` iterations at most.
    """
    from scipy.optimize import minimize

    n = gram.n
    k = cells_for(n) if cells is None else int(min(max(cells, 1), n))
    diag_m = gram.diag()
    rng = np.random.default_rng(_seed(gram, p))
    cell_of = np.arange(n) * k // n  # non-decreasing, every cell non-empty
    starts = np.searchsorted(cell_of, np.arange(k))
    width = math.ceil(k / p)
    start = 0.5 * (np.arange(k)[None, :] // width == np.arange(p)[:, None])
    start = start + 0.01 * rng.random((p, k))

    def fun(flat: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
        f, grad = objective(flat.reshape(p, k)[:, cell_of], gram, diag_m)
        return f, np.add.reduceat(grad, starts, axis=1).ravel()

    result = minimize(
        fun,
        start.ravel(),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, THETA_MAX)] * (p * k),
        options={"maxiter": int(iterations)},
    )
    phi = np.clip(result.x.reshape(p, k), 0.0, THETA_MAX)
    theta: NDArray[np.float64] = np.ascontiguousarray(phi[:, cell_of])
    return theta


def from_theta(theta: NDArray[np.float64], workload_key: tuple[Any, ...] = ()) -> PIdentity:
    """The quantised strategy [I; Θ] D and its factors (see the module doc)."""
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape[0] > MAX_ROWS or np.any(theta < 0) or np.any(theta > THETA_MAX):
        raise InvalidParameterError(
            f"Θ needs at most {MAX_ROWS} rows and entries in [0, {THETA_MAX}]."
        )
    scale = float(1 << QUANTUM_BITS)
    d = 1.0 / (1.0 + theta.sum(axis=0))
    a_units = np.floor(d * scale).astype(np.int64)
    b_units = np.floor(theta * d[None, :] * scale).astype(np.int64)
    return assemble(a_units / scale, b_units / scale, theta, workload_key)


def assemble(
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    theta: NDArray[np.float64],
    workload_key: tuple[Any, ...] = (),
) -> PIdentity:
    """The strategy [diag(a); b] (entries multiples of 2⁻²⁰, a > 0) with its exact sensitivity.

    The column l1 norms are summed exactly (as integers in units of 2⁻²⁰).
    """
    from scipy.linalg import cholesky, solve_triangular

    scale = float(1 << QUANTUM_BITS)
    column = np.rint(a * scale).astype(np.int64) + np.rint(b * scale).astype(np.int64).sum(axis=0)
    sensitivity = float(column.max()) / scale
    inv_a2 = 1.0 / (a * a)
    c = b * inv_a2[None, :]
    chol = cholesky(np.eye(b.shape[0]) + c @ b.T, lower=True)
    k = solve_triangular(chol, c, lower=True)
    k_prefix = np.concatenate((np.zeros((b.shape[0], 1)), np.cumsum(k, axis=1)), axis=1)
    inv_a2_prefix = np.concatenate(([0.0], np.cumsum(inv_a2)))
    return PIdentity(theta, a, b, sensitivity, workload_key, c, chol, k_prefix, inv_a2_prefix)


def p_identity(gram: Gram, p: int | None = None) -> PIdentity:
    """The optimised p-Identity strategy for a workload (cached per (workload key, p)).

    ``p`` defaults to :func:`rows_for` (n); the iteration cap is
    :func:`iterations_for` (n, p). Deterministic and public. If the optimised
    strategy is no better than the identity (Θ = 0, e.g. all ranges over a few
    dozen bins), the identity is returned: its p aggregate rows are zero.
    """
    return _cached(Keyed(gram), checked_rows(gram.n, p))


def checked_rows(n: int, rows: object) -> int:
    """``rows`` (None: :func:`rows_for`) if it is an integer in [1, :func:`max_rows`]; else a clear error."""
    value = rows_for(n) if rows is None else rows
    most = max_rows(n)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= most:
        raise InvalidParameterError(
            f"rows (the strategy's aggregate rows) must be an integer in [1, {most}] for "
            f"{n} unit bins (the optimisation costs n·rows² per step); omit it for the default."
        )
    return int(value)


@functools.lru_cache(maxsize=16)
def _cached(keyed: Keyed, p: int) -> PIdentity:
    from threadpoolctl import threadpool_limits  # installed with scikit-learn

    gram = keyed.gram
    # One BLAS thread: the products are small (threads only contend, badly so on a busy
    # machine: 30x the CPU time measured), and the result does not depend on a thread count.
    with threadpool_limits(limits=1):
        optimised = from_theta(optimise_theta(gram, p, iterations_for(gram.n, p)), gram.key)
        # Never worse than the identity (Θ = 0), where the optimiser stops at a poor point.
        identity = from_theta(np.zeros((p, gram.n)), gram.key)
        better = identity.unit_error(gram) <= optimised.unit_error(gram)
    return identity if better else optimised
