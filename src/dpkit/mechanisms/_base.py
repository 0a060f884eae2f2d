"""Shared pieces of the additive mechanisms."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit._checks import check_level
from dpkit.accounting import as_accountant, charge_and_run
from dpkit.release import Release


def as_output(noisy: NDArray[Any], like: ArrayLike) -> Any:
    """Return a Python scalar for scalar input, else an array of the input's shape."""
    if np.ndim(like) == 0:
        return noisy.reshape(()).item()
    return noisy.reshape(np.shape(like))


def interval(noisy: Any, half_width: float) -> tuple[Any, Any]:
    """(noisy - h, noisy + h), elementwise for arrays."""
    if np.ndim(noisy) == 0:
        return (float(noisy) - half_width, float(noisy) + half_width)
    arr = np.asarray(noisy, dtype=np.float64)
    return (arr - half_width, arr + half_width)


def discrete_laplace_tail_index(scale: float, alpha: float) -> int:
    """Smallest k >= 0 with P(|Y| > k) <= alpha for Y ~ DLap(scale).

    P(Y = y) = (1-p)/(1+p) p^|y| with p = exp(-1/scale), so
    P(|Y| > k) = 2 p^(k+1) / (1+p). Solved in floats, then checked and nudged so
    the returned k is never too small.
    """
    log_p = -1.0 / scale
    p = math.exp(log_p)

    def tail(k: int) -> float:
        return 2.0 * math.exp((k + 1) * log_p) / (1.0 + p)

    k = max(0, math.ceil(math.log(alpha * (1.0 + p) / 2.0) / log_p) - 1)
    while tail(k) * (1 + 1e-12) > alpha:
        k += 1
    while k > 0 and tail(k - 1) * (1 + 1e-12) <= alpha:
        k -= 1
    return k


class AdditiveMechanism:
    """Base class: ``randomise`` adds noise; ``release`` also reports an interval."""

    name = "additive"
    epsilon: float
    delta: float = 0.0

    def randomise(self, value: ArrayLike, rng: object = None) -> Any:
        raise NotImplementedError

    def half_width(self, level: float = 0.95) -> float:
        raise NotImplementedError

    @property
    def cost(self) -> Any:
        """The privacy cost of one call, as a :class:`dpkit.Budget`."""
        from dpkit.accounting import Budget

        return Budget(self.epsilon, self.delta)

    def release(
        self,
        value: ArrayLike,
        level: float = 0.95,
        rng: object = None,
        *,
        accountant: Any = None,
        label: str | None = None,
    ) -> Release:
        """Randomise ``value`` and attach a ``level`` confidence interval.

        The interval holds the exact ``value`` with probability >= ``level``
        (for an array: each coordinate separately). It is computed from the
        noise distribution only: post-processing, no extra budget. With
        ``accountant`` (an Accountant, a ledger path or a Session), :attr:`cost`
        is charged first, through :func:`dpkit.accounting.charge_and_run`.
        """
        level = check_level(level)
        noisy = self.paid(value, rng, accountant, label)
        return Release(
            value=noisy,
            epsilon=self.epsilon,
            delta=self.delta,
            ci=interval(noisy, self.half_width(level)),
            level=level,
            mechanism=self.name,
            details=self.details(),
        )

    def paid(
        self, value: ArrayLike, rng: object, accountant: Any, label: str | None = None
    ) -> Any:
        """``randomise(value)``, charged to ``accountant`` first when one is given."""
        return charge_and_run(
            as_accountant(accountant),
            self.cost,
            label or f"{self.name} mechanism",
            lambda: self.randomise(value, rng=rng),
        )

    def details(self) -> dict[str, Any]:
        return {}
