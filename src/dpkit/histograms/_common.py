"""Validation, budget charging and randomness shared by the publishers."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit._checks import check_epsilon, is_real_scalar
from dpkit.errors import DataError, InvalidParameterError


def check_counts(counts: ArrayLike) -> NDArray[np.float64]:
    """Unit-bin counts as a float array: 1-D, non-empty, finite and non-negative.

    The messages say what is wrong, never where or which value.
    """
    try:
        arr = np.asarray(counts, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(
            "counts must be a 1-D sequence of numbers (one count per unit bin)."
        ) from None
    if arr.ndim != 1 or arr.size == 0:
        raise DataError(
            "counts must be a non-empty 1-D sequence (one count per unit bin); "
            "flatten it or bin the column first."
        )
    return finite_non_negative(arr)


def finite_non_negative(arr: NDArray[np.float64]) -> NDArray[np.float64]:
    """``arr`` if every count is finite and >= 0 (messages never say where or which)."""
    if not np.all(np.isfinite(arr)):
        raise DataError("counts contain NaN or infinite entries; counts must be finite.")
    if np.any(arr < 0):
        raise DataError(
            "counts must be non-negative; pass the true count of each unit bin or cell, "
            "not noisy or centred values."
        )
    return arr


def check_edges(edges: ArrayLike | None, n: int, name: str = "edges") -> NDArray[np.float64]:
    """Public value-space edges of n unit bins (n + 1 increasing numbers); ``0..n`` if None."""
    if edges is None:
        return np.arange(n + 1, dtype=np.float64)
    try:
        arr = np.asarray(edges, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name} must be a sequence of numbers.") from None
    if arr.shape != (n + 1,):
        raise InvalidParameterError(
            f"{name} must have one more entry than there are unit bins along it ({n + 1}), "
            f"got shape {arr.shape}."
        )
    if not np.all(np.isfinite(arr)) or np.any(np.diff(arr) <= 0):
        raise InvalidParameterError(f"{name} must be finite and strictly increasing.")
    return arr


def check_n_bins(n_bins: object, n: int, name: str = "n_bins") -> int:
    """An integer number of bins in [1, n]."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer):
        raise InvalidParameterError(f"{name} must be an integer in [1, {n}].")
    value = int(n_bins)
    if not 1 <= value <= n:
        raise InvalidParameterError(
            f"{name} must be in [1, {n}] (the number of unit bins), got {value}."
        )
    return value


def check_fraction(value: object, name: str) -> float:
    """A number strictly between 0 and 1."""
    if not is_real_scalar(value) or not 0 < float(value) < 1:  # type: ignore[arg-type]
        raise InvalidParameterError(f"{name} must be a number strictly between 0 and 1.")
    return float(value)  # type: ignore[arg-type]


def check_positive(value: object, name: str, hint: str = "") -> float:
    """A finite number > 0."""
    if not is_real_scalar(value) or not np.isfinite(float(value)) or float(value) <= 0:  # type: ignore[arg-type]
        raise InvalidParameterError(f"{name} must be a finite number > 0.{hint}")
    return float(value)  # type: ignore[arg-type]


def source_for(rng: object) -> Any:
    """One random source for the whole release: an int seed must not be reused per step."""
    from dpkit.mechanisms import as_source

    return as_source(rng)


def epsilon_of(epsilon: object) -> float:
    """Checked epsilon."""
    return check_epsilon(epsilon, share=True)
