"""Frequency oracles for local DP (Wang et al., "Locally Differentially Private
Protocols for Frequency Estimation", USENIX Security 2017).

Each respondent runs ``perturb`` on their own value and sends only the report;
the collector runs ``estimate`` on all reports. Neighbouring relation: *one
respondent's value changed* (local DP); every report on its own is ε-LDP, so
the collection of reports, and anything computed from it, is ε-LDP for each
respondent. Every oracle here is *pure* (see ``_estimate.py``) and shares one
unbiased estimator, its variance formula and normal-approximation intervals.

All randomness comes from dpkit's exact sources (``rng=None``: the OS CSPRNG).
Each oracle fixes rational report probabilities whose likelihood ratio is at
most e^ε and samples them exactly (``_sampling.py``: one uniform integer per
k-ary response, bit-sliced comparisons for unary bits), so the realised ε never
exceeds the one declared, and the estimators use the probabilities actually
sampled.

Memory. A domain given as a size d is never materialised: encoding checks
0 <= v < d, OLH hashes the value itself and Hadamard response computes a row's
bit by popcount parity, so their ``perturb`` takes O(n) memory whatever d (OLH
and Hadamard take d up to 2^61 - 2). ``estimate`` counts every value of the
domain (O(d) memory: refused above 2^24 values) or, with ``candidates=``, only
those values (memory bounded by blocks, whatever d). GRR, OUE and SUE take d up
to 2^31 - 2; OUE and SUE send d bits per report by definition, so a call whose
n * d bits exceed ``MEMORY_CEILING`` is refused before any work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit._checks import MEMORY_CEILING, check_epsilon, check_level
from dpkit.errors import DataError, InvalidParameterError
from dpkit.local._estimate import FrequencyEstimate, count_variance, estimate_from_supports
from dpkit.local._sampling import BitProbability, RationalResponse
from dpkit.mechanisms.randomized_response import RandomizedResponse
from dpkit.mechanisms.sampling import as_source

#: The prime of OLH's universal hash ((a v + b) mod P) mod g (a Mersenne prime, 2^31 - 1):
#: sums of two residues stay below 2^32, so the estimator can run in uint32.
HASH_PRIME = (1 << 31) - 1
#: The prime for domains of 2^31 - 1 values or more (2^61 - 1: every value is below it,
#: so two values never share every hash).
LARGE_HASH_PRIME = (1 << 61) - 1
_MAX_DOMAIN = HASH_PRIME - 1  # labels, and sizes for GRR, OUE and SUE
_MAX_SIZED_DOMAIN = LARGE_HASH_PRIME - 1  # sizes for OLH and Hadamard response
_MAX_ESTIMATE_VALUES = 1 << 24  # full-domain estimates (five float arrays of d entries)
_MAX_HASH_RANGE = 1 << 20
_OLH_BLOCK = 1 << 16  # reports per block in OLH's support counting (fits in L2 cache)
_CELLS_PER_BLOCK = 1 << 20  # reports x candidates per block when counting candidates


def _domain_labels(domain: object, max_size: int) -> tuple[list[Any] | None, int]:
    """The declared labels (None for a size d: never materialised) and d."""
    if isinstance(domain, int | np.integer) and not isinstance(domain, bool | np.bool_):
        d = int(domain)
        if not 2 <= d <= max_size:
            raise InvalidParameterError(
                f"domain must be a size d with 2 <= d <= {max_size:,} for this oracle "
                "(values 0..d-1) or a sequence of at least two distinct labels"
                + (
                    "; use OLH or Hadamard response for larger domains."
                    if max_size < _MAX_SIZED_DOMAIN
                    else "."
                )
            )
        return None, d
    if isinstance(domain, str | bytes) or not isinstance(domain, Sequence | np.ndarray):
        raise InvalidParameterError(
            "domain must be a size d (values 0..d-1) or a sequence of distinct labels; "
            f"got an object of type {type(domain).__name__}."
        )
    labels = list(domain)
    if len(labels) > _MAX_DOMAIN:
        raise InvalidParameterError(f"domain has more than {_MAX_DOMAIN} labels.")
    return labels, len(labels)


def _integer_reports(reports: ArrayLike, *, ndim: int, what: str) -> NDArray[np.int64]:
    """Reports as an int64 array of the expected rank; refuses empties and other types."""
    try:
        arr = np.asarray(reports)
    except (TypeError, ValueError):
        raise DataError(f"reports must be {what}.") from None
    if arr.ndim != ndim or arr.dtype.kind not in "iub":
        raise DataError(f"reports must be {what}.")
    if arr.shape[0] == 0:
        raise DataError("no reports to estimate from: collect at least one report.")
    if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise DataError(f"reports must be {what}; a report is out of range.")
    return arr.astype(np.int64)


class FrequencyOracle:
    """Shared shape of the pure oracles: ``perturb``, ``estimate``, ``variance``.

    Subclasses set ``p_star`` (probability that a report supports the
    respondent's own value) and ``q_star`` (that it supports any other value).
    """

    name = "oracle"
    p_star: float
    q_star: float
    #: Largest domain size d this oracle takes.
    max_domain = _MAX_DOMAIN

    def __init__(self, *, epsilon: float, domain: int | Sequence[Any]) -> None:
        labels, d = _domain_labels(domain, self.max_domain)
        self.epsilon = check_epsilon(epsilon)
        self.d = d
        self._sized = labels is None
        self._labels_rr: RandomizedResponse | None = None
        if labels is None:
            self.domain: Sequence[Any] = range(d)  # O(1): a size is never materialised
        else:
            # Validates the labels (distinct, at least two) and encodes them.
            self._labels_rr = RandomizedResponse(epsilon=self.epsilon, categories=labels)
            self.domain = tuple(labels)

    def encode(self, values: ArrayLike) -> NDArray[np.int64]:
        """Domain indices (0..d-1) of the values; DataError if one is outside the domain."""
        if self._labels_rr is not None:
            return self._labels_rr._codes(values)
        outside = DataError("a value is outside the declared domain 0..d-1; declare every value.")
        arr = np.asarray(values)
        if arr.dtype.kind == "O":  # Python ints (possibly beyond int64), no booleans
            items = arr.ravel().tolist()
            if not all(
                isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)
                for v in items
            ):
                raise outside
            if any(not 0 <= int(v) < self.d for v in items):
                raise outside
            return np.array([int(v) for v in items], dtype=np.int64)
        if arr.dtype.kind == "f":
            flat = arr.ravel()
            if not np.all(np.isfinite(flat)) or not np.all(flat == np.floor(flat)):
                raise outside
            if flat.size and (float(flat.min()) < 0 or float(flat.max()) >= float(self.d)):
                raise outside
            return flat.astype(np.int64)
        if arr.dtype.kind not in "iu":
            raise outside
        codes = arr.ravel()
        if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= self.d):
            raise outside
        return codes.astype(np.int64)

    def _candidate_codes(self, candidates: object) -> NDArray[np.int64] | None:
        """Codes of the declared candidates (public), or None for the whole domain."""
        if candidates is None:
            if self.d > _MAX_ESTIMATE_VALUES:
                raise InvalidParameterError(
                    f"estimating all {self.d:,} values of the domain needs memory for each; "
                    "pass candidates=[...] (the values you want counts for)."
                )
            return None
        if isinstance(candidates, str | bytes) or not isinstance(candidates, Sequence | np.ndarray):
            raise InvalidParameterError("candidates must be a sequence of domain values.")
        if len(candidates) == 0:
            raise InvalidParameterError("candidates must name at least one domain value.")
        try:
            codes = self.encode(np.asarray(list(candidates), dtype=object))
        except DataError:
            raise InvalidParameterError(
                "every candidate must be a value of the declared domain."
            ) from None
        if np.unique(codes).size != codes.size:
            raise InvalidParameterError("candidates must be distinct.")
        return codes

    def perturb(self, values: ArrayLike, rng: object = None) -> NDArray[np.integer]:
        """Client side: one ε-LDP report per value (vectorised over respondents)."""
        return self._perturb_codes(self.encode(values), as_source(rng))

    def perturb_one(self, value: Any, rng: object = None) -> Any:
        """Client side, one respondent: the ε-LDP report of a single value."""
        return self.perturb(np.array([value], dtype=object), rng=rng)[0]

    def estimate(
        self, reports: ArrayLike, *, level: float = 0.95, candidates: Sequence[Any] | None = None
    ) -> FrequencyEstimate:
        """Server side: unbiased counts with variances and confidence intervals.

        Every value of the domain by default (refused above 2^24 values), or only
        the declared ``candidates`` (values of the domain, e.g. the ones a
        study asks about): memory bounded by blocks whatever d. Each count is
        the same unbiased estimator either way. Post-processing of ε-LDP
        reports: no further privacy cost.
        """
        level = check_level(level)
        codes = self._candidate_codes(candidates)
        n, supports = self._supports(reports, codes)
        if codes is None:
            domain = tuple(self.domain)
        elif self._labels_rr is not None:
            domain = tuple(self.domain[int(c)] for c in codes)
        else:
            domain = tuple(int(c) for c in codes)
        return estimate_from_supports(
            supports,
            n=n,
            p_star=self.p_star,
            q_star=self.q_star,
            oracle=self.name,
            epsilon=self.epsilon,
            domain=domain,
            level=level,
        )

    def variance(self, n: int, *, counts: ArrayLike | None = None) -> NDArray[np.float64]:
        """Variance of each estimated count among n reports.

        Without ``counts``: Wang et al.'s value-free Var* = n q*(1-q*)/(p*-q*)^2
        (exact for a value nobody holds, close for rare ones). With the true
        ``counts`` n_v: the exact variance, Var* + n_v (1-p*-q*)/(p*-q*).
        """
        if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
            raise InvalidParameterError("n must be a positive integer (the number of reports).")
        extra = 0.0 if counts is None else np.asarray(counts, dtype=np.float64)
        return count_variance(int(n), self.p_star, self.q_star, extra)

    def _perturb_codes(self, codes: NDArray[np.int64], source: Any) -> NDArray[np.integer]:
        raise NotImplementedError

    def _supports(
        self, reports: ArrayLike, codes: NDArray[np.int64] | None = None
    ) -> tuple[int, NDArray[np.int64]]:
        """(n, support count of each value in ``codes``, or of every value when None)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon!r}, d={self.d})"


class GeneralizedRandomizedResponse(FrequencyOracle):
    """k-ary randomized response (k-RR, "direct encoding") over a declared domain.

    Report: one domain index, the true one with probability
    p = e^ε / (e^ε + d - 1), each other with q = 1 / (e^ε + d - 1).
    Privacy: each report is ε-LDP for any change of that respondent's value,
    since P(report y | v) / P(report y | v') <= p / q = e^ε for every y.
    Sampled exactly with rational probabilities whose ratio is at most e^ε
    (``RationalResponse``). With d = 2 and ε = ln 3 it is the coin-flip survey
    (p = 3/4).
    Var* = n (e^ε + d - 2) / (e^ε - 1)^2: best for small domains.
    ``perturb`` returns int64 indices (shape (n,)); ``estimate`` takes them.
    """

    name = "grr"

    def __init__(self, *, epsilon: float, domain: int | Sequence[Any]) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        self._rr = RationalResponse(epsilon=self.epsilon, k=self.d)
        self.p_star = self._rr.p_keep
        self.q_star = self._rr.p_other

    def _perturb_codes(self, codes: NDArray[np.int64], source: Any) -> NDArray[np.int64]:
        return self._rr.sample(codes, source)

    def _supports(
        self, reports: ArrayLike, codes: NDArray[np.int64] | None = None
    ) -> tuple[int, NDArray[np.int64]]:
        what = f"a 1-D integer array of domain indices in [0, {self.d}) (what perturb returns)"
        arr = _integer_reports(reports, ndim=1, what=what)
        if int(arr.min()) < 0 or int(arr.max()) >= self.d:
            raise DataError(f"reports must be {what}; a report is out of range.")
        if codes is None:
            return arr.size, np.bincount(arr, minlength=self.d).astype(np.int64)
        ordered = np.sort(arr)
        left = np.searchsorted(ordered, codes, side="left")
        right = np.searchsorted(ordered, codes, side="right")
        return arr.size, (right - left).astype(np.int64)


class _UnaryEncoding(FrequencyOracle):
    """One bit per domain value; the respondent's bit is 1 w.p. p, every other w.p. q.

    Privacy: two values v, v' change only the bits at v and v', so the ratio of
    report probabilities is at most p (1 - q) / ((1 - p) q) (= e^ε here).
    """

    def _check_size(self, n: int) -> None:
        if n * self.d > MEMORY_CEILING:
            raise InvalidParameterError(
                "n * d is too large for one unary-encoding call; perturb in batches."
            )

    def _supports(
        self, reports: ArrayLike, codes: NDArray[np.int64] | None = None
    ) -> tuple[int, NDArray[np.int64]]:
        n, supports = self._all_supports(reports)
        return n, supports if codes is None else supports[codes]

    def _all_supports(self, reports: ArrayLike) -> tuple[int, NDArray[np.int64]]:
        what = f"a 2-D 0/1 array with one row per report and {self.d} columns (perturb's output)"
        compact = np.asarray(reports) if isinstance(reports, np.ndarray) else None
        if compact is not None and compact.ndim == 2 and compact.dtype in (np.uint8, np.bool_):
            # perturb's own output: count without widening a possibly huge array.
            if compact.shape[0] == 0:
                raise DataError("no reports to estimate from: collect at least one report.")
            if compact.shape[1] != self.d:
                raise DataError(f"reports must be {what}.")
            if compact.dtype == np.uint8 and int(compact.max()) > 1:
                raise DataError(f"reports must be {what}; an entry is not 0 or 1.")
            return compact.shape[0], compact.sum(axis=0, dtype=np.int64)
        arr = _integer_reports(reports, ndim=2, what=what)
        if arr.shape[1] != self.d:
            raise DataError(f"reports must be {what}.")
        if int(arr.min()) < 0 or int(arr.max()) > 1:
            raise DataError(f"reports must be {what}; an entry is not 0 or 1.")
        return arr.shape[0], arr.sum(axis=0).astype(np.int64)


class SymmetricUnaryEncoding(_UnaryEncoding):
    """Symmetric unary encoding (SUE, basic one-time RAPPOR).

    Report: d bits; each bit of the one-hot encoding is flipped with
    q = 1 / (e^(ε/2) + 1), rounded *up* to a multiple of 2^-52, and kept with
    p = 1 - q (sampled exactly, bit-sliced). Privacy: each report is ε-LDP for
    any change of that respondent's value: the ratio of report probabilities
    is at most p(1-q) / ((1-p) q) = ((1-q)/q)^2 <= (e^(ε/2))^2 = e^ε.
    Var* = n e^(ε/2) / (e^(ε/2) - 1)^2 (never below OUE's).
    ``perturb`` returns an (n, d) 0/1 uint8 array.
    """

    name = "sue"

    def __init__(self, *, epsilon: float, domain: int | Sequence[Any]) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        self._flip = BitProbability(1.0 / (math.exp(min(self.epsilon / 2, 700.0)) + 1.0))
        self.p_star = 1.0 - self._flip.q
        self.q_star = self._flip.q

    def _perturb_codes(self, codes: NDArray[np.int64], source: Any) -> NDArray[np.uint8]:
        self._check_size(codes.size)
        bits = self._flip.sample((codes.size, self.d), source)
        bits[np.arange(codes.size), codes] ^= 1  # flips of the one-hot vector
        return bits


class OptimizedUnaryEncoding(_UnaryEncoding):
    """Optimised unary encoding (OUE).

    Report: d bits; the respondent's own bit is 1 with p = 1/2, every other bit
    is 1 with q = 1 / (e^ε + 1), rounded *up* to a multiple of 2^-52 (a fair
    bit, and exact bit-sliced Bernoulli(q) bits). Privacy: each report is
    ε-LDP for any change of that respondent's value: the ratio of report
    probabilities is at most p(1-q) / ((1-p) q) = (1-q)/q <= e^ε.
    Var* = n 4 e^ε / (e^ε - 1)^2, independent of d.
    ``perturb`` returns an (n, d) 0/1 uint8 array.
    """

    name = "oue"

    def __init__(self, *, epsilon: float, domain: int | Sequence[Any]) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        self._spurious = BitProbability(1.0 / (math.exp(min(self.epsilon, 700.0)) + 1.0))
        self.p_star = 0.5
        self.q_star = self._spurious.q

    def _perturb_codes(self, codes: NDArray[np.int64], source: Any) -> NDArray[np.uint8]:
        self._check_size(codes.size)
        bits = self._spurious.sample((codes.size, self.d), source)
        bits[np.arange(codes.size), codes] = source.bits(codes.size)
        return bits


def _olh_hash_range(epsilon: float, d: int) -> int:
    """Integer g minimising (e^ε - 1 + g)^2 / (g - 1) (optimum g = e^ε + 1), in [2, d]."""
    e = math.exp(min(epsilon, 40.0))
    cap = max(2, min(d, _MAX_HASH_RANGE))
    candidates = {min(max(2, g), cap) for g in (math.floor(e + 1), math.ceil(e + 1))}
    return min(sorted(candidates), key=lambda g: (e - 1 + g) ** 2 / (g - 1))


class OptimizedLocalHashing(FrequencyOracle):
    """Optimised local hashing (OLH) for large domains.

    Report: (a, b, y). The respondent draws a hash H(v) = ((a v + b) mod P) mod g
    from a universal family (P = 2^31 - 1, or 2^61 - 1 for domains of 2^31 - 1
    values or more, so that P > d; a in [1, P), b in [0, P), uniform,
    independent of v), with g ≈ e^ε + 1, and reports y = k-RR over g values of
    H(v): y = H(v) w.p. p* ≈ e^ε / (e^ε + g - 1) (rational, ratio to any other
    value at most e^ε). Privacy: each report is ε-LDP for any change of that
    respondent's value: (a, b) has the same distribution under every value,
    and given (a, b) the ratio of P(y) under two values is at most e^ε (k-RR).
    A report supports v when H(v) = y: p* as above, q* = 1/g (two values below
    P collide under a uniform (a, b) with probability at most 1/g). Var* = n (e^ε - 1 + g)^2 / ((e^ε - 1)^2 (g - 1)) (= OUE's when
    g = e^ε + 1). ``perturb`` returns an (n, 3) int64 array of (a, b, y), in
    O(n) memory whatever d; ``estimate`` counts supports in blocks of reports.
    """

    name = "olh"
    max_domain = _MAX_SIZED_DOMAIN

    def __init__(self, *, epsilon: float, domain: int | Sequence[Any]) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        self.g = _olh_hash_range(self.epsilon, self.d)
        self.prime = HASH_PRIME if self.d < HASH_PRIME else LARGE_HASH_PRIME
        self._hash_rr = RationalResponse(epsilon=self.epsilon, k=self.g)
        self.p_star = self._hash_rr.p_keep
        self.q_star = 1.0 / self.g

    def _perturb_codes(self, codes: NDArray[np.int64], source: Any) -> NDArray[np.int64]:
        n = codes.size
        a = 1 + source.uniform_below(np.full(n, self.prime - 1, dtype=np.int64))
        b = source.uniform_below(np.full(n, self.prime, dtype=np.int64))
        hashed = _olh_hash(a, b, codes, self.prime) % self.g
        y = self._hash_rr.sample(hashed, source)
        return np.column_stack([a, b, y]).astype(np.int64)

    def _supports(
        self, reports: ArrayLike, codes: NDArray[np.int64] | None = None
    ) -> tuple[int, NDArray[np.int64]]:
        what = "a 2-D integer array of (a, b, y) rows (what perturb returns)"
        arr = _integer_reports(reports, ndim=2, what=what)
        if arr.shape[1] != 3:
            raise DataError(f"reports must be {what}.")
        a, b, y = arr[:, 0], arr[:, 1], arr[:, 2]
        if (
            int(a.min()) < 1
            or int(a.max()) >= self.prime
            or int(b.min()) < 0
            or int(b.max()) >= self.prime
            or int(y.min()) < 0
            or int(y.max()) >= self.g
        ):
            raise DataError(f"reports must be {what}; a report is out of range.")
        if codes is None and self.prime == HASH_PRIME:
            return arr.shape[0], _olh_supports(a, b, y, self.d, self.g)
        values = np.arange(self.d, dtype=np.int64) if codes is None else codes
        return arr.shape[0], _olh_candidate_supports(a, b, y, values, self.g, self.prime)


def _mulmod61(a: NDArray[np.int64], v: NDArray[np.int64]) -> NDArray[np.uint64]:
    """(a * v) mod (2^61 - 1) for 0 <= a, v < 2^61, exactly, in uint64 (32-bit limbs)."""
    mask61 = np.uint64(LARGE_HASH_PRIME)
    low32 = np.uint64(0xFFFFFFFF)
    au, vu = a.astype(np.uint64), v.astype(np.uint64)
    a1, a0 = au >> np.uint64(32), au & low32
    v1, v0 = vu >> np.uint64(32), vu & low32
    # a v = a1 v1 2^64 + (a1 v0 + a0 v1) 2^32 + a0 v0, and 2^61 = 1 (mod P).
    high = (a1 * v1) << np.uint64(3)  # 2^64 = 2^3 (mod P); a1 v1 < 2^58
    mid = a1 * v0 + a0 * v1  # < 2^62
    mid_part = (mid >> np.uint64(29)) + ((mid & np.uint64((1 << 29) - 1)) << np.uint64(32))
    low = a0 * v0  # < 2^64
    low_part = (low & mask61) + (low >> np.uint64(61))
    total = _fold61(high) + _fold61(mid_part) + _fold61(low_part)  # each < 2^61 + 8
    total = _fold61(total)
    return np.where(total >= mask61, total - mask61, total)


def _fold61(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """x mod (2^61 - 1) up to one extra P (x < 2^64): the low 61 bits plus the high ones."""
    return (x & np.uint64(LARGE_HASH_PRIME)) + (x >> np.uint64(61))


def _olh_hash(
    a: NDArray[np.int64], b: NDArray[np.int64], v: NDArray[np.int64], prime: int
) -> NDArray[np.int64]:
    """(a v + b) mod P elementwise (broadcasting), exact for either prime."""
    if prime == HASH_PRIME:
        return (a * v + b) % HASH_PRIME  # a * v < 2^62: no overflow
    product = _mulmod61(*np.broadcast_arrays(a, v))
    total = product + np.broadcast_to(b, product.shape).astype(np.uint64)  # < 2^62
    total = np.where(total >= np.uint64(prime), total - np.uint64(prime), total)
    return total.astype(np.int64)


def _olh_candidate_supports(
    a: NDArray[np.int64],
    b: NDArray[np.int64],
    y: NDArray[np.int64],
    values: NDArray[np.int64],
    g: int,
    prime: int,
) -> NDArray[np.int64]:
    """C_v = #{i : ((a_i v + b_i) mod P) mod g = y_i} for each v in ``values``.

    Blocks of reports x values of at most 2^20 cells: memory bounded whatever d
    and however many reports.
    """
    supports = np.zeros(values.size, dtype=np.int64)
    rows = max(1, _CELLS_PER_BLOCK // max(values.size, 1))
    cols = max(1, _CELLS_PER_BLOCK // rows)
    for start in range(0, a.size, rows):
        stop = start + rows
        a_blk, b_blk, y_blk = a[start:stop, None], b[start:stop, None], y[start:stop, None]
        for first in range(0, values.size, cols):
            block = values[None, first : first + cols]
            hashed = _olh_hash(a_blk, b_blk, block, prime) % g
            supports[first : first + cols] += np.count_nonzero(hashed == y_blk, axis=0)
    return supports


def _olh_supports(
    a: NDArray[np.int64], b: NDArray[np.int64], y: NDArray[np.int64], d: int, g: int
) -> NDArray[np.int64]:
    """C_v = #{i : ((a_i v + b_i) mod P) mod g = y_i} for every v, by blocks of reports.

    (a v + b) mod P advances by a (mod P) from one v to the next, so each step
    is an add and a wrapped subtract in uint32 (both residues < 2^31, so the sum
    fits): no multiplication and no 64-bit modulo inside the loop.
    """
    supports = np.zeros(d, dtype=np.int64)
    prime = np.uint32(HASH_PRIME)
    modulus = np.uint32(g)
    for start in range(0, a.size, _OLH_BLOCK):
        stop = start + _OLH_BLOCK
        step = a[start:stop].astype(np.uint32)
        target = y[start:stop].astype(np.uint32)
        residue = b[start:stop].astype(np.uint32)  # (a * 0 + b) mod P
        hashed = np.empty_like(residue)
        reduced = np.empty_like(residue)
        match = np.empty(residue.shape, dtype=bool)
        for v in range(d):
            np.remainder(residue, modulus, out=hashed)
            np.equal(hashed, target, out=match)
            supports[v] += np.count_nonzero(match)
            np.add(residue, step, out=residue)
            # residue - P wraps round to a huge uint32 unless residue >= P: min() is the mod.
            np.subtract(residue, prime, out=reduced)
            np.minimum(residue, reduced, out=residue)
    return supports


#: Largest Hadamard size for a full-domain estimate (its histogram has K entries).
_MAX_HADAMARD = 1 << 26


class HadamardResponse(FrequencyOracle):
    """Hadamard response (Acharya, Sun, Zhang, AISTATS 2019) for large domains.

    Let K be the smallest power of two above d and H the K × K Sylvester
    Hadamard matrix, H[i, j] = (-1)^popcount(i & j). Value v owns the set
    C_v = {j : H[v + 1, j] = +1} of K/2 columns (row 0, all ones, is skipped).
    Report: one column j in [0, K) — a uniform member of C_v with probability
    e^ε/(e^ε + 1), else a uniform member of its complement. Each column then
    has probability 2e^ε/(K(e^ε + 1)) or 2/(K(e^ε + 1)) under any value:
    ε-LDP. Sampled exactly: "in C_v or not" is binary randomized response;
    a uniform column is drawn and, if its parity with row v + 1 is the wrong
    one, one bit of row v + 1 is flipped in it (a bijection between the two
    halves, so the member is uniform). No matrix is built: a report is a
    column index, O(1) memory per respondent whatever d (up to 2^61 - 2).

    Two rows of H agree on exactly K/2 columns, so a report supports its own
    value with p* = e^ε/(e^ε + 1) and any other with q* = 1/2: Var* =
    n (e^ε + 1)²/(e^ε - 1)², never below OUE's 4e^ε/(e^ε - 1)² but close at
    small ε, for a report of log2(K) bits instead of d. The server counts all
    supports at once with a fast Walsh–Hadamard transform of the reports'
    histogram (O(K log K), K up to 2^26), or a declared set of candidates by
    popcount parity, in blocks. ``perturb`` returns int64 columns.
    """

    name = "hadamard"
    max_domain = _MAX_SIZED_DOMAIN

    def __init__(self, *, epsilon: float, domain: int | Sequence[Any]) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        self.k = 1 << self.d.bit_length()  # smallest power of two > d
        self._member_rr = RationalResponse(epsilon=self.epsilon, k=2)
        self.p_star = self._member_rr.p_keep
        self.q_star = 0.5

    def _perturb_codes(self, codes: NDArray[np.int64], source: Any) -> NDArray[np.int64]:
        n = codes.size
        row = codes + 1
        member = self._member_rr.sample(np.ones(n, dtype=np.int64), source)
        column = source.uniform_below(np.full(n, self.k, dtype=np.int64))
        wrong = _parity(row & column) != (1 - member)  # members have even parity
        return np.where(wrong, column ^ (row & -row), column).astype(np.int64)

    def _supports(
        self, reports: ArrayLike, codes: NDArray[np.int64] | None = None
    ) -> tuple[int, NDArray[np.int64]]:
        what = f"a 1-D integer array of columns in [0, {self.k}) (what perturb returns)"
        arr = _integer_reports(reports, ndim=1, what=what)
        if int(arr.min()) < 0 or int(arr.max()) >= self.k:
            raise DataError(f"reports must be {what}; a report is out of range.")
        n = int(arr.size)
        if codes is None:
            if self.k > _MAX_HADAMARD:
                raise InvalidParameterError(
                    f"a full-domain Hadamard estimate needs a histogram of {self.k:,} columns; "
                    "pass candidates=[...] (the values you want counts for)."
                )
            signed = walsh_hadamard(np.bincount(arr, minlength=self.k))
            # Row v + 1: (#members - #others); members = (n + that) / 2.
            return n, (n + signed[1 : self.d + 1]) // 2
        supports = np.zeros(codes.size, dtype=np.int64)
        rows = max(1, _CELLS_PER_BLOCK // codes.size)
        cols = max(1, _CELLS_PER_BLOCK // rows)
        for start in range(0, n, rows):
            block = arr[start : start + rows, None]
            for first in range(0, codes.size, cols):
                row = codes[None, first : first + cols] + 1
                members = _parity(row & block) == 0
                supports[first : first + cols] += np.count_nonzero(members, axis=0)
        return n, supports


def _parity(x: NDArray[np.int64]) -> NDArray[np.int64]:
    """popcount(x) mod 2 for non-negative int64 values, by xor folding."""
    x = x.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        x ^= x >> shift
    return x & 1


def walsh_hadamard(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """H @ values for the Sylvester Hadamard matrix of size len(values) (a power of two)."""
    a = np.asarray(values, dtype=np.int64).copy()
    size, half = a.size, 1
    while half < size:
        blocks = a.reshape(-1, 2, half)
        a = np.concatenate(
            (blocks[:, :1] + blocks[:, 1:], blocks[:, :1] - blocks[:, 1:]), axis=1
        ).reshape(size)
        half *= 2
    return a


_ORACLES: tuple[type[FrequencyOracle], ...] = (
    GeneralizedRandomizedResponse,
    OptimizedLocalHashing,
    OptimizedUnaryEncoding,
    SymmetricUnaryEncoding,
)


def best_oracle(*, epsilon: float, domain: int | Sequence[Any]) -> FrequencyOracle:
    """The oracle with the lowest total variance for (ε, d), by a public rule.

    Rule: the sum over the domain of the estimated counts' variances, per
    report, is d Var* + (1 - p* - q*) / (p* - q*) whatever the data (the
    counts n_v enter the exact variances only through sum_v n_v = n), with
    Var* = q*(1 - q*)/(p* - q*)^2 (Wang et al. 2017): GRR's
    (e^ε + d - 2)/(e^ε - 1)^2, OLH's (e^ε - 1 + g)^2 / ((e^ε - 1)^2 (g - 1))
    with its integer g, OUE's 4 e^ε/(e^ε - 1)^2, SUE's e^(ε/2)/(e^(ε/2) - 1)^2.
    Return the oracle with the smallest sum, computed from the probabilities
    each one actually samples; ties (within 1e-6 relative: the rational
    rounding of the probabilities moves the sums by less) go to the smaller
    report, in the order GRR, OLH, OUE, SUE. In effect GRR for small domains
    (d below about 3 e^ε + 2, a little lower than the value-free rule because
    GRR's second term is larger), else OLH or OUE. Depends only on public ε
    and d, so the choice reveals nothing; the returned oracle's reports are ε-LDP.
    """
    size = domain if isinstance(domain, int | np.integer) else _MAX_DOMAIN
    oracles = [cls(epsilon=epsilon, domain=domain) for cls in _ORACLES if size <= cls.max_domain]
    totals = [
        o.d * float(o.variance(1)) + (1 - o.p_star - o.q_star) / (o.p_star - o.q_star)
        for o in oracles
    ]
    best = min(totals)
    return next(o for o, v in zip(oracles, totals) if v <= best * (1 + 1e-6))
