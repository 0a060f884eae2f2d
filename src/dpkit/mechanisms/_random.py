"""Sources of randomness for the samplers.

The samplers only ever ask for *uniform integers below a bound* and fair bits,
so exact sampling reduces to one primitive that both sources implement without
bias: rejection sampling on 64-bit words (the secure source) or NumPy's
unbiased bounded-integer routine (the seeded source).

* ``None`` (the default) gives :class:`SecureRandom`, which reads the operating
  system's CSPRNG (``os.urandom``); large requests are drawn from a ChaCha20
  keystream under a fresh key from ``os.urandom`` (the construction the kernel
  uses itself, here from the ``cryptography`` package), about three times
  faster. Noise from it cannot be predicted or replayed.
* An ``int`` seed or a ``numpy.random.Generator`` gives :class:`SeededRandom`:
  reproducible, for tests and experiments only. Anyone who knows the seed can
  subtract the noise, so never publish releases made with a seed.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Protocol, runtime_checkable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from numpy.typing import NDArray

from dpkit.errors import InvalidParameterError, PrivacyWarning

#: Rounds a rejection loop may run when every pending draw is accepted with
#: probability at least 1/4 per round (true of every loop that uses it: each states
#: its own bound). A draw is still pending after R rounds with probability at most
#: (3/4)^R, so with R = 512 a batch of up to 2^48 draws (far beyond memory) is
#: unfinished with probability below 2^48 (3/4)^512 < 2^-164: a public cap whose
#: failure is negligible and whose work is bounded in advance.
REJECTION_ROUNDS = 512


class SamplingLimitError(RuntimeError):
    """A rejection sampler reached its public round limit (probability below 2^-164).

    Never raised in practice; it exists so that every loop ends. Nothing is
    released when it is raised (after a charge, the analyst sees the usual
    ``ReleaseFailedError``). For samplers whose acceptance does not depend on the
    data the event is independent of the data; for the exponential mechanism its
    probability is below 2^-164 on every dataset, so it adds at most that to δ.
    """


def rejection_rounds(acceptance: float = 0.25) -> range:
    """The rounds a rejection loop whose draws are accepted w.p. >= ``acceptance`` may run.

    Same failure bound as :data:`REJECTION_ROUNDS` (which is the value at 1/4):
    R = ceil(REJECTION_ROUNDS ln(3/4) / ln(1 - acceptance)).
    """
    if not 0 < acceptance <= 1:
        raise ValueError("acceptance must be in (0, 1]")
    if acceptance >= 0.25:
        return range(REJECTION_ROUNDS)
    rounds = math.ceil(REJECTION_ROUNDS * math.log(0.75) / math.log1p(-acceptance))
    return range(rounds)


def sampling_limit(what: str) -> SamplingLimitError:
    """The error a sampler raises after its last permitted round."""
    return SamplingLimitError(
        f"{what} did not finish within its public round limit (an event of probability below "
        "2^-164); nothing was released. Run the call again."
    )


@runtime_checkable
class RandomSource(Protocol):
    """What the exact samplers need from a random number generator."""

    def uniform_below(self, bound: NDArray[np.int64]) -> NDArray[np.int64]:
        """Independent uniform integers in ``[0, bound[i])`` (``1 <= bound < 2**62``)."""

    def bits(self, size: int) -> NDArray[np.bool_]:
        """Independent fair coin flips."""

    def words(self, size: int) -> NDArray[np.uint64]:
        """Independent uniform 64-bit words (64 fair bits each)."""

    def generator(self) -> np.random.Generator:
        """A NumPy generator for data-independent, non-noise randomness (shuffles)."""


#: Requests of at least this many bytes come from a ChaCha20 keystream (below it,
#: os.urandom directly: the cipher's set-up costs more than it saves).
_STREAM_THRESHOLD = 1 << 16
_CHUNK = 1 << 20
_ZEROS = bytes(_CHUNK)


def _secure_bytes(size: int) -> bytes | bytearray:
    """``size`` bytes from the OS CSPRNG, or from ChaCha20 under a fresh OS key.

    Each large request gets its own 256-bit key and nonce from ``os.urandom``
    and no state is kept, so forked processes and threads never share a stream.
    """
    if size < _STREAM_THRESHOLD:
        return os.urandom(size)
    cipher = Cipher(algorithms.ChaCha20(os.urandom(32), os.urandom(16)), mode=None)
    encryptor = cipher.encryptor()
    out = bytearray(size)
    view = memoryview(out)
    for start in range(0, size, _CHUNK):
        stop = min(size, start + _CHUNK)
        encryptor.update_into(_ZEROS[: stop - start], view[start:stop])
    return out


class SecureRandom:
    """Uniform integers from the OS CSPRNG by rejection (no modulo bias)."""

    def uniform_below(self, bound: NDArray[np.int64]) -> NDArray[np.int64]:
        shape = np.shape(bound)
        bound_u = np.asarray(bound, dtype=np.uint64).ravel()
        if bound_u.size == 0:
            return np.zeros(shape, dtype=np.int64)
        if int(bound_u.max()) <= 1 << 32:
            # Half the randomness: 32-bit words suffice for bounds up to 2**32.
            out32 = _uniform_below(bound_u.astype(np.uint64), np.uint32, 4)
            return out32.astype(np.int64).reshape(shape)
        return _uniform_below(bound_u, np.uint64, 8).astype(np.int64).reshape(shape)

    def bits(self, size: int) -> NDArray[np.bool_]:
        raw = np.frombuffer(_secure_bytes((size + 7) // 8), dtype=np.uint8)
        return np.unpackbits(raw)[:size].astype(bool)

    def words(self, size: int) -> NDArray[np.uint64]:
        return np.frombuffer(_secure_bytes(8 * size), dtype=np.uint64)

    def generator(self) -> np.random.Generator:
        seed = int.from_bytes(os.urandom(16), "little")
        return np.random.default_rng(seed)


def _uniform_below(
    bound: NDArray[np.uint64], word: type[np.unsignedinteger], nbytes: int
) -> NDArray[np.uint64]:
    """Rejection on ``nbytes``-byte words: accept those below the largest multiple of b."""
    span = 1 << (8 * nbytes)
    out = np.empty(bound.shape, dtype=np.uint64)
    pending = np.arange(bound.size)
    constant = int(bound.min()) == int(bound.max())
    # Each word is accepted with probability > 1/2 (limit >= span / 2).
    for _ in rejection_rounds(0.5):
        if not pending.size:
            return out
        words = np.frombuffer(_secure_bytes(nbytes * pending.size), dtype=word).astype(np.uint64)
        if constant and span % int(bound[0]) == 0 and pending.size == bound.size:
            # b divides the span (a power of two, e.g. the samplers' 62-bit digits):
            # every word is accepted and w mod b is its low bits, in one pass.
            b_int = int(bound[0])
            out[:] = words & np.uint64(b_int - 1)
            return out
        if constant:
            b_int = int(bound[0])
            limit = span - span % b_int  # words below limit map uniformly onto [0, b)
            ok = words < np.uint64(limit) if limit < span else np.ones(words.size, dtype=bool)
            out[pending[ok]] = words[ok] % np.uint64(b_int)
        else:
            b = bound[pending]
            if nbytes == 8:
                # 2**64 mod b, computed without 2**64: (2**64 - b) mod b.
                rem = (np.zeros_like(b) - b) % b
                ok = (rem == 0) | (words < np.zeros_like(b) - rem)
            else:
                rem = np.uint64(span) % b
                ok = words < np.uint64(span) - rem
            out[pending[ok]] = words[ok] % b[ok]
        pending = pending[~ok]
    if pending.size:
        raise sampling_limit("the uniform integer sampler")
    return out


class SeededRandom:
    """A reproducible source backed by a NumPy ``Generator`` (tests only)."""

    def __init__(self, generator: np.random.Generator):
        self._gen = generator

    def uniform_below(self, bound: NDArray[np.int64]) -> NDArray[np.int64]:
        bound_arr = np.asarray(bound, dtype=np.int64)
        if bound_arr.ndim and bound_arr.size and bound_arr.min() == bound_arr.max():
            # One bound for all (the samplers' usual call): NumPy's scalar-bound path
            # draws the same numbers from the same stream, about twice as fast.
            high = int(bound_arr.flat[0])
            return self._gen.integers(0, high, size=bound_arr.shape, dtype=np.int64)
        return self._gen.integers(0, bound_arr, dtype=np.int64)

    def bits(self, size: int) -> NDArray[np.bool_]:
        return self._gen.integers(0, 2, size=size).astype(bool)

    def words(self, size: int) -> NDArray[np.uint64]:
        return self._gen.integers(0, 2**64, size=size, dtype=np.uint64)

    def generator(self) -> np.random.Generator:
        return self._gen


_SECURE = SecureRandom()


SEEDED_WARNING = (
    "a seeded random source makes the noise reproducible: anyone who knows the seed can "
    "remove it, so releases made with it are not differentially private. Use rng=None "
    "(the operating system's CSPRNG) for anything you publish; seeds are for tests."
)


def _warn_seeded() -> None:
    warnings.warn(SEEDED_WARNING, PrivacyWarning, stacklevel=3)


def as_source(rng: object = None) -> RandomSource:
    """Turn the ``rng`` argument every mechanism accepts into a source.

    A seed or a NumPy ``Generator`` gives a reproducible source and a
    :class:`~dpkit.errors.PrivacyWarning` (the test suite filters it by message).
    """
    if rng is None:
        return _SECURE
    if isinstance(rng, SecureRandom | SeededRandom):
        return rng
    if isinstance(rng, np.random.Generator):
        _warn_seeded()
        return SeededRandom(rng)
    if isinstance(rng, int | np.integer) and not isinstance(rng, bool):
        _warn_seeded()
        return SeededRandom(np.random.default_rng(int(rng)))
    if isinstance(rng, RandomSource):
        return rng
    raise InvalidParameterError(
        "rng must be None (secure randomness, the default), an int seed or a "
        f"numpy.random.Generator; got {type(rng).__name__}."
    )
