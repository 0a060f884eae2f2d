"""Sources of randomness for the samplers.

The samplers only ever ask for *uniform integers below a bound* and fair bits,
so exact sampling reduces to one primitive that both sources implement without
bias: rejection sampling on 64-bit words (the secure source) or NumPy's
unbiased bounded-integer routine (the seeded source).

* ``None`` (the default) gives :class:`SecureRandom`, which reads the operating
  system's CSPRNG (``os.urandom``). Noise from it cannot be predicted or
  replayed.
* An ``int`` seed or a ``numpy.random.Generator`` gives :class:`SeededRandom`:
  reproducible, for tests and experiments only. Anyone who knows the seed can
  subtract the noise, so never publish releases made with a seed.
"""

from __future__ import annotations

import os
import warnings
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from dpkit.errors import InvalidParameterError, PrivacyWarning

# Bounds passed to uniform_below stay below this so that products of a bound by
# a small loop counter never overflow int64 (see _exact.py).
MAX_BOUND = 1 << 62

RNGLike = "None | int | np.random.Generator | RandomSource"


@runtime_checkable
class RandomSource(Protocol):
    """What the exact samplers need from a random number generator."""

    def uniform_below(self, bound: NDArray[np.int64]) -> NDArray[np.int64]:
        """Independent uniform integers in ``[0, bound[i])`` (``1 <= bound < 2**62``)."""

    def bits(self, size: int) -> NDArray[np.bool_]:
        """Independent fair coin flips."""

    def generator(self) -> np.random.Generator:
        """A NumPy generator for data-independent, non-noise randomness (shuffles)."""


class SecureRandom:
    """Uniform integers from ``os.urandom`` by rejection (no modulo bias)."""

    def uniform_below(self, bound: NDArray[np.int64]) -> NDArray[np.int64]:
        bound_u = np.asarray(bound, dtype=np.uint64).ravel()
        out = np.empty(bound_u.shape, dtype=np.uint64)
        pending = np.arange(bound_u.size)
        while pending.size:
            words = np.frombuffer(os.urandom(8 * pending.size), dtype=np.uint64)
            b = bound_u[pending]
            # 2**64 mod b, computed without 2**64: (2**64 - b) mod b.
            rem = (np.zeros_like(b) - b) % b
            # Accept words below the largest multiple of b that fits in 64 bits.
            ok = (rem == 0) | (words < np.zeros_like(b) - rem)
            out[pending[ok]] = words[ok] % b[ok]
            pending = pending[~ok]
        return out.astype(np.int64).reshape(np.shape(bound))

    def bits(self, size: int) -> NDArray[np.bool_]:
        raw = np.frombuffer(os.urandom((size + 7) // 8), dtype=np.uint8)
        return np.unpackbits(raw)[:size].astype(bool)

    def generator(self) -> np.random.Generator:
        seed = int.from_bytes(os.urandom(16), "little")
        return np.random.default_rng(seed)


class SeededRandom:
    """A reproducible source backed by a NumPy ``Generator`` (tests only)."""

    def __init__(self, generator: np.random.Generator):
        self._gen = generator

    def uniform_below(self, bound: NDArray[np.int64]) -> NDArray[np.int64]:
        bound_arr = np.asarray(bound, dtype=np.int64)
        return self._gen.integers(0, bound_arr, dtype=np.int64)

    def bits(self, size: int) -> NDArray[np.bool_]:
        return self._gen.integers(0, 2, size=size).astype(bool)

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
