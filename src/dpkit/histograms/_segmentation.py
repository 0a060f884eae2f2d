"""Exact least-squares segmentation in about O(n log n) per row: functional pruning.

Pure functions on arrays, no privacy here. The same recurrences as
:mod:`dpkit.histograms._optimal` (whose O(n²)-per-row scan stays as the
reference), for the SSE objective only, computed without the (n+1)² cost
matrix:

* k-constrained rows ``T[j, i] = min_{a} T[j-1, a] + C(a, i)`` (Xu et al. 2013);
* the penalised problem ``F[i] = min_{a < i} F[a] + C(a, i) + penalty``, which
  has the same optimum as ``min_k T[n, k] + penalty · k``.

Why not divide and conquer on monotone split points: ``C(a, i)``, the SSE of
``x[a:i]`` about its mean, is *not* Monge for an unsorted sequence (x = 0, 10, 0
breaks the quadrangle inequality), so optimal split points need not move
monotonically and that shortcut is wrong here. Functional pruning (Rigaill
2015, "A pruned dynamic programming algorithm to recover the best
segmentations with 1 to K_max change-points"; Maidstone et al. 2017, FPOP) is
exact: write candidate a's cost at time i as a function of the segment level
mu, ``f_a(mu) = T[j-1, a] + sum_{a <= t < i} (x_t - mu)²``. Every candidate
gains the same term when i grows, so ``f_a - f_b`` never changes and the set of
mu where a is the lowest only shrinks. A candidate that is nowhere strictly
lowest on [min x, max x] (where every segment mean lies) can never be the
unique minimiser again, and is dropped. What is kept is the lower envelope of
the parabolas ``g_a(mu) = -a mu² + 2 S_a mu + T[j-1, a] - Q_a`` (S, Q prefix
sums of x and x²), stored as pieces (interval, candidate); on typical data a
handful of candidates stay alive, so each row costs about O(n log n).

Ties between candidates go to the smallest start, as NumPy's ``argmin`` in the
reference does; values agree with the reference up to floating-point rounding.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import ArrayLike, NDArray


@njit(cache=True, nogil=True)
def _insert(  # pragma: no cover - compiled
    c: int,
    const_c: float,
    s1: NDArray[np.float64],
    consts: NDArray[np.float64],
    lo: NDArray[np.float64],
    hi: NDArray[np.float64],
    owner: NDArray[np.int64],
    n_pieces: int,
    new_lo: NDArray[np.float64],
    new_hi: NDArray[np.float64],
    new_owner: NDArray[np.int64],
) -> int:
    """Add candidate c to the envelope; write the new pieces, return their number."""
    m = 0
    for p in range(n_pieces):
        a = owner[p]
        left = lo[p]
        right = hi[p]
        # d(mu) = g_c(mu) - g_a(mu) = qa mu² + qb mu + qc, qa < 0 since c > a.
        qa = -float(c - a)
        qb = 2.0 * (s1[c] - s1[a])
        qc = const_c - consts[a]
        disc = qb * qb - 4.0 * qa * qc
        if disc <= 0.0:
            r1 = math.inf
            r2 = -math.inf
        else:
            root = math.sqrt(disc)
            # Stable roots of qa mu² + qb mu + qc.
            if qb >= 0.0:
                t = -0.5 * (qb + root)
            else:
                t = -0.5 * (qb - root)
            x1 = t / qa
            x2 = qc / t if t != 0.0 else x1
            r1 = min(x1, x2)
            r2 = max(x1, x2)
        # c is strictly lower outside [r1, r2]; a keeps [r1, r2].
        keep_lo = max(left, r1)
        keep_hi = min(right, r2)
        if keep_lo >= keep_hi:
            m = _append(new_lo, new_hi, new_owner, m, left, right, c)
            continue
        if left < keep_lo:
            m = _append(new_lo, new_hi, new_owner, m, left, keep_lo, c)
        m = _append(new_lo, new_hi, new_owner, m, keep_lo, keep_hi, a)
        if keep_hi < right:
            m = _append(new_lo, new_hi, new_owner, m, keep_hi, right, c)
    return m


@njit(cache=True, nogil=True)
def _append(  # pragma: no cover - compiled
    lo: NDArray[np.float64],
    hi: NDArray[np.float64],
    owner: NDArray[np.int64],
    m: int,
    left: float,
    right: float,
    who: int,
) -> int:
    """Append a piece, merging it with the previous one when they share an owner."""
    if m > 0 and owner[m - 1] == who:
        hi[m - 1] = right
        return m
    lo[m] = left
    hi[m] = right
    owner[m] = who
    return m + 1


@njit(cache=True, nogil=True)
def _sse_scan(  # pragma: no cover - compiled
    base: NDArray[np.float64],
    out: NDArray[np.float64],
    start: NDArray[np.int64],
    s1: NDArray[np.float64],
    s2: NDArray[np.float64],
    first: int,
    last: int,
    penalty: float,
    mu_lo: float,
    mu_hi: float,
) -> None:
    """``out[i] = min_{first <= a < i, base[a] finite} base[a] + penalty + C(a, i)``, first < i <= last.

    A k-constrained row: ``base`` is row j - 1, ``first = j - 1``, no penalty.
    The penalised problem: ``base`` *is* ``out`` (each total becomes a
    candidate once computed), ``first = 0``, ``out[0] = 0``. ``out[:first + 1]``
    and ``out[last + 1:]`` are left as the caller set them. The scan is online
    (``out[i]`` reads only candidates a < i), so stopping at ``last`` leaves
    ``out[:last + 1]`` bit for bit what the full scan gives.
    """
    n = s1.size - 1
    consts = np.empty(n + 1)
    size = 4 * (n + 1) + 8
    lo = np.empty(size)
    hi = np.empty(size)
    owner = np.empty(size, dtype=np.int64)
    new_lo = np.empty(size)
    new_hi = np.empty(size)
    new_owner = np.empty(size, dtype=np.int64)
    consts[first] = base[first] + penalty - s2[first]
    lo[0] = mu_lo
    hi[0] = mu_hi
    owner[0] = first
    n_pieces = 1
    for i in range(first + 1, last + 1):
        c = i - 1
        if c > first and base[c] < math.inf:
            consts[c] = base[c] + penalty - s2[c]
            n_pieces = _insert(
                c, consts[c], s1, consts, lo, hi, owner, n_pieces, new_lo, new_hi, new_owner
            )
            lo, new_lo = new_lo, lo
            hi, new_hi = new_hi, hi
            owner, new_owner = new_owner, owner
        # The minimum over the live candidates (a candidate may own several pieces);
        # ties go to the smallest start, as argmin in the reference.
        best = math.inf
        best_a = owner[0]
        for p in range(n_pieces):
            a = owner[p]
            width = float(i - a)
            d1 = s1[i] - s1[a]
            cost = (s2[i] - s2[a]) - d1 * d1 / width
            if cost < 0.0:
                cost = 0.0
            value = base[a] + cost
            if value < best or (value == best and a < best_a):
                best = value
                best_a = a
        out[i] = best + penalty
        start[i] = best_a


def _sse_row(
    previous: NDArray[np.float64],
    s1: NDArray[np.float64],
    s2: NDArray[np.float64],
    j: int,
    mu_lo: float,
    mu_hi: float,
    row: NDArray[np.float64],
    start: NDArray[np.int64],
    rest: int,
) -> None:
    """Row j of the k-constrained table from row j - 1 (``previous``), ends up to j + ``rest``."""
    row[:] = np.inf
    start[:] = 0
    last = min(s1.size - 1, j + rest)
    _sse_scan(previous, row, start, s1, s2, j - 1, last, 0.0, mu_lo, mu_hi)


def _prefix_sums(
    values: ArrayLike,
) -> tuple[NDArray[np.float64], NDArray[np.float64], float, float]:
    """Prefix sums of the centred values and of their squares, and their range."""
    x = np.asarray(values, dtype=np.float64)
    centred = x - (x.mean() if x.size else 0.0)  # SSE is shift-invariant; less cancellation
    s1 = np.concatenate(([0.0], np.cumsum(centred)))
    s2 = np.concatenate(([0.0], np.cumsum(centred * centred)))
    if x.size == 0:
        return s1, s2, 0.0, 0.0
    # The pieces cover every possible segment mean, with a margin for rounding.
    low, high = float(centred.min()), float(centred.max())
    margin = 1e-9 * max(1.0, high - low)
    return s1, s2, low - margin, high + margin


def _forward(
    sums: tuple[NDArray[np.float64], NDArray[np.float64], float, float],
    previous: NDArray[np.float64],
    first: int,
    last: int,
    rest: int,
) -> Iterator[tuple[int, NDArray[np.float64], NDArray[np.int64]]]:
    """Rows j = first .. last, starting from row first - 1 (``previous``); ends <= j + rest."""
    s1, s2, mu_lo, mu_hi = sums
    for j in range(first, last + 1):
        row = np.empty(s1.size)
        start = np.empty(s1.size, dtype=np.int64)
        _sse_row(previous, s1, s2, j, mu_lo, mu_hi, row, start, rest)
        yield j, row, start
        previous = row


def _empty_row(n: int) -> NDArray[np.float64]:
    """Row 0: the empty histogram (zero cost for no counts, impossible otherwise)."""
    row = np.full(n + 1, np.inf)
    row[0] = 0.0
    return row


def sse_rows(
    values: ArrayLike, max_bins: int
) -> Iterator[tuple[int, NDArray[np.float64], NDArray[np.int64]]]:
    """Yield ``(j, T_j, start_j)`` for j = 1 .. max_bins, as ``_optimal.optimal_rows``.

    ``T_j[i]`` is the least SSE of a j-bin histogram of ``values[:i]`` (``+inf``
    when ``i < j``) and ``start_j[i]`` where its last bin starts. Memory O(n).
    """
    sums = _prefix_sums(values)
    n = sums[0].size - 1
    if not 1 <= max_bins <= max(n, 1):
        raise ValueError(f"max_bins must be in [1, {n}], got {max_bins}")
    yield from _forward(sums, _empty_row(n), 1, max_bins, n)


#: Memory the backward row iterator may keep; beyond it, rows are recomputed.
ROW_MEMORY = 1 << 30


def sse_rows_backwards(
    values: ArrayLike,
    max_bins: int,
    keep: str,
    memory: int = ROW_MEMORY,
    rest: int | None = None,
) -> Iterator[tuple[int, NDArray[Any]]]:
    """Yield ``(j, row)`` for j = max_bins .. 1 (backwards): ``T_j`` or ``start_j``.

    ``keep="values"`` yields the rows of T, ``keep="starts"`` the start rows
    (as int32). When all rows fit in ``memory`` bytes they are computed once
    and kept; otherwise every m-th row of T (m ≈ sqrt(max_bins)) is kept on
    the forward pass and each block of m rows is recomputed from its
    checkpoint on the way back: memory O(sqrt(k)·n), twice the time. A
    public choice: it depends on n and k only.

    ``rest`` (public): compute row j only at ends i <= j + ``rest`` (the other
    entries are +inf), the ends where the j-th boundary of a histogram of all
    n values with ``max_bins + 1`` bins can fall when ``rest = n - max_bins - 1``.
    Row j there reads row j - 1 only below j + ``rest``, so the entries
    computed are bit for bit those of the full rows; default: every end.
    """
    if keep not in ("values", "starts"):
        raise ValueError("keep must be 'values' or 'starts'")
    sums = _prefix_sums(values)
    n = sums[0].size - 1
    if not 1 <= max_bins <= max(n, 1):
        raise ValueError(f"max_bins must be in [1, {n}], got {max_bins}")
    ends = n if rest is None else int(rest)
    width = 8 if keep == "values" else 4
    fits = max_bins * (n + 1) * width <= memory
    block = max_bins if fits else max(1, math.isqrt(max_bins))
    # Checkpoints: the T row before each block (row 0 is the empty histogram).
    checkpoints = {0: _empty_row(n)}
    if not fits:
        for j, row, _ in _forward(sums, checkpoints[0], 1, max_bins - 1, ends):
            if j % block == 0:
                checkpoints[j] = row
    for base in sorted(checkpoints, reverse=True):
        kept = [
            row if keep == "values" else start.astype(np.int32)
            for _, row, start in _forward(
                sums, checkpoints[base], base + 1, min(base + block, max_bins), ends
            )
        ]
        for offset in range(len(kept) - 1, -1, -1):
            yield base + 1 + offset, kept.pop()


def sse_optimal(values: ArrayLike, n_bins: int) -> NDArray[np.int64]:
    """Boundaries ``[0, r_1, ..., n]`` of the least-SSE ``n_bins``-bin histogram."""
    n = np.asarray(values).size
    boundaries = np.empty(n_bins + 1, dtype=np.int64)
    boundaries[n_bins] = n
    end = n
    for j, start in sse_rows_backwards(values, n_bins, "starts"):
        end = int(start[end])
        boundaries[j - 1] = end
    return boundaries


def sse_rows_memory(n: int, n_bins: int, keep: str) -> int:
    """Upper estimate of the bytes :func:`sse_rows_backwards` allocates (public)."""
    width = 8 if keep == "values" else 4
    rows = n_bins if n_bins * (n + 1) * width <= ROW_MEMORY else 2 * math.isqrt(n_bins) + 2
    return rows * (n + 1) * 8 + 96 * (n + 1)


def sse_penalised(values: ArrayLike, penalty: float) -> tuple[NDArray[np.int64], float]:
    """The structure minimising SSE + ``penalty`` · (number of bins), and its SSE.

    Returns the boundaries ``[0, r_1, ..., n]``. Equals the minimiser over k of
    ``T[n, k] + penalty · k`` (same optimum; on exact ties, possibly another k).
    """
    s1, s2, mu_lo, mu_hi = _prefix_sums(values)
    n = s1.size - 1
    total = np.full(n + 1, np.inf)
    total[0] = 0.0
    start = np.zeros(n + 1, dtype=np.int64)
    _sse_scan(total, total, start, s1, s2, 0, n, float(penalty), mu_lo, mu_hi)
    bounds = [n]
    for _ in range(n):  # start[j] < j: at most n steps back to 0
        if bounds[-1] <= 0:
            break
        bounds.append(int(start[bounds[-1]]))
    boundaries = np.asarray(bounds[::-1], dtype=np.int64)
    return boundaries, float(total[n] - penalty * (boundaries.size - 1))


def segment_costs(
    sums: tuple[NDArray[np.float64], NDArray[np.float64]], starts: NDArray[np.int64], end: int
) -> NDArray[np.float64]:
    """``C(a, end)`` for every a in ``starts`` from ``sums = prefix_sums(values)``, O(1) each."""
    s1, s2 = sums
    a = np.asarray(starts, dtype=np.int64)
    width = (end - a).astype(np.float64)
    d1 = s1[end] - s1[a]
    with np.errstate(divide="ignore", invalid="ignore"):
        cost = (s2[end] - s2[a]) - d1 * d1 / width
    return np.where(width > 0, np.maximum(cost, 0.0), np.inf)


def prefix_sums(values: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Prefix sums of the centred values and of their squares (for :func:`segment_costs`)."""
    s1, s2, _, _ = _prefix_sums(values)
    return s1, s2
