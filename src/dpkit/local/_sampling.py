"""Fast exact samplers for the local oracles: probabilities that are rationals by construction.

A local oracle's privacy rests on likelihood ratios only, so instead of
sampling e^ε exactly (slow: rejection on an exact Bernoulli(e^-ε)), each
oracle fixes rational probabilities whose ratio is *at most* e^ε and samples
those exactly from uniform integers or fair bits. The realised ε can only be
smaller than the declared one; the estimators use the probabilities actually
sampled, so they stay unbiased.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numpy.typing import NDArray

from dpkit.mechanisms.sampling import RandomSource, rejection_rounds, sampling_limit

# Rounding margin so that floor(e^ε · 2^s · (1 - 2^-50)) stays below e^ε · 2^s even
# with the libm exp off by an ulp (relative error < 2^-52).
_SHRINK = 1.0 - 2.0**-50
_GROW = 1.0 + 2.0**-50
_MAX_TOTAL = 1 << 52  # D for k-ary responses: 64-bit words are rejected w.p. < 2^-12
_BATCH_WORDS = 1 << 20


def _scale_bits(e: float, k: int, total: int) -> int:
    """Largest s in [0, 52] with (e + k - 1) 2^s <= total (0 when none)."""
    room = total / (e + k - 1)
    return max(0, min(52, math.floor(math.log2(room)) if room >= 1 else 0))


class RationalResponse:
    """k-ary randomized response with integer weights: keep a, each other value b.

    P(report = own value) = a / D and P(report = w) = b / D for each of the k - 1
    other values, D = a + (k - 1) b, with b = 2^s and a = floor(e^ε b) (rounded
    down with a margin), so a / b <= e^ε: every report is ε-LDP (the ratio of
    its probabilities under two values is a / b). Exact: one uniform integer
    below D per report (64-bit words by rejection, D <= 2^52 so a word is
    rejected with probability below 2^-12); below a keeps the value, above it
    the offset picks one of the other values uniformly.
    """

    def __init__(self, *, epsilon: float, k: int) -> None:
        e = math.exp(min(epsilon, 700.0))
        s = _scale_bits(e, k, _MAX_TOTAL)
        b = 1 << s
        a = max(b, min(math.floor(math.ldexp(e * _SHRINK, s)), _MAX_TOTAL - (k - 1) * b))
        self.k, self.keep_weight, self.other_weight = k, a, b
        self.total = a + (k - 1) * b
        self.p_keep = a / self.total
        self.p_other = b / self.total

    def sample(self, codes: NDArray[np.int64], source: RandomSource) -> NDArray[np.int64]:
        """One report per code (codes in [0, k))."""
        codes = np.ascontiguousarray(codes, dtype=np.int64)
        out = np.empty(codes.size, dtype=np.int64)
        limit = (1 << 64) - (1 << 64) % self.total  # words below it map uniformly onto [0, D)
        done = 0
        # A word is rejected w.p. below 2^-12, so a round fills every pending report
        # unless 65 of its words are rejected: far rarer than rejection_rounds assumes.
        for _ in rejection_rounds():
            if done >= codes.size:
                break
            words = source.words(codes.size - done + 64)
            done = _response_kernel(
                words, codes, out, done, self.total, limit, self.keep_weight, self.other_weight
            )
        if done < codes.size:
            raise sampling_limit("the k-ary response sampler")
        return out


@njit(cache=True, nogil=True)
def _response_kernel(
    words: NDArray[np.uint64],
    codes: NDArray[np.int64],
    out: NDArray[np.int64],
    start: int,
    total: int,
    limit: int,
    keep: int,
    other: int,
) -> int:
    """Fill ``out`` from ``start`` on; returns where it stopped (when the words run out)."""
    cursor = 0
    total_u = np.uint64(total)
    limit_u = np.uint64(limit)
    i = start
    while i < codes.size:
        while cursor < words.size and words[cursor] >= limit_u:
            cursor += 1
        if cursor == words.size:
            return i
        u = np.int64(words[cursor] % total_u)
        cursor += 1
        if u < keep:
            out[i] = codes[i]
        else:
            value = (u - keep) // other
            out[i] = value + 1 if value >= codes[i] else value
        i += 1
    return i


class BitProbability:
    """Bernoulli(c / 2^t) for the rational c / 2^t nearest q from above (t = 52).

    Used where the privacy ratio falls as q rises (a flipped or spurious bit of
    unary encoding), so rounding q up keeps the realised ε at or below the
    declared one.
    """

    bits = 52

    def __init__(self, q: float) -> None:
        self.numerator = min(1 << self.bits, math.ceil(math.ldexp(q * _GROW, self.bits)))
        self.q = self.numerator / (1 << self.bits)

    def sample(self, shape: tuple[int, int], source: RandomSource) -> NDArray[np.uint8]:
        """An array of independent Bernoulli(q) 0/1 entries (uint8).

        Bit-sliced comparison of a uniform 52-bit integer U with the numerator
        c, most significant bit first, 64 entries per random word: at each level
        an entry whose random bit differs from c's is decided (U < c iff the
        first differing bit is 0 in U and 1 in c), so P(1) = c / 2^52 exactly;
        entries equal to c on all 52 bits are not below it (0). Half the open
        entries close per level, so a word needs about log2(64) + 2 random
        words. Random words are drawn in batches; a batch that runs short is
        topped up and the sampler carries on where it stopped.
        """
        count = shape[0] * shape[1]
        words_needed = (count + 63) // 64
        out = np.empty(words_needed * 8, dtype=np.uint64)  # 64 0/1 bytes per random word
        if self.numerator >= 1 << self.bits:
            return np.ones(shape, dtype=np.uint8)
        pattern = np.array(
            [(self.numerator >> (self.bits - 1 - j)) & 1 for j in range(self.bits)], dtype=np.uint8
        )
        done = 0
        while done < words_needed:
            # Batches of at most 8 MiB: the allocator reuses their pages (no fresh faults).
            batch = source.words(min((words_needed - done) * 8, _BATCH_WORDS) + 2 * self.bits)
            done = _bernoulli_kernel(batch, pattern, _SPREAD, out, done)
        return out.view(np.uint8)[:count].reshape(shape)


def _spread_table() -> NDArray[np.uint64]:
    """For each byte value, the little-endian word whose 8 bytes are its bits (LSB first)."""
    values = np.arange(256, dtype=np.uint64)
    table = np.zeros(256, dtype=np.uint64)
    for bit in range(8):
        table |= ((values >> np.uint64(bit)) & np.uint64(1)) << np.uint64(8 * bit)
    return table


_SPREAD = _spread_table()


@njit(cache=True, nogil=True)
def _bernoulli_kernel(
    randoms: NDArray[np.uint64],
    pattern: NDArray[np.uint8],
    spread: NDArray[np.uint64],
    out: NDArray[np.uint64],
    start: int,
) -> int:
    """Fill ``out`` from word ``start`` on; returns the next word (stops before running short)."""
    levels = pattern.size
    cursor = 0
    word = start
    words = out.size // 8
    full = np.uint64(0xFFFFFFFFFFFFFFFF)
    low_byte = np.uint64(0xFF)
    while word < words and cursor + levels <= randoms.size:
        open_lanes = full
        ones = np.uint64(0)
        for level in range(levels):
            r = randoms[cursor]
            cursor += 1
            if pattern[level]:
                ones |= open_lanes & ~r
                open_lanes &= r
            else:
                open_lanes &= ~r
            if open_lanes == 0:
                break
        for chunk in range(8):
            out[word * 8 + chunk] = spread[(ones >> np.uint64(8 * chunk)) & low_byte]
        word += 1
    return word
