"""Shared fixtures for the tree tests: small generated data only (never the shared data files)."""

from __future__ import annotations

import numpy as np
import pytest


def friedman(n: int, seed: int = 0, noise: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Friedman #1-like data on [0, 1]^5 with a target roughly in [0, 30]."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 5))
    y = (
        10 * np.sin(np.pi * X[:, 0] * X[:, 1])
        + 20 * (X[:, 2] - 0.5) ** 2
        + 10 * X[:, 3]
        + 5 * X[:, 4]
    )
    return X, y + rng.normal(0, noise, n)


@pytest.fixture
def make_friedman():  # type: ignore[no-untyped-def]
    return friedman
