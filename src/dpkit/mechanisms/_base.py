"""Shared pieces of the additive mechanisms."""

from __future__ import annotations

import math
from collections.abc import Callable
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
    P(|Y| > k) = 2 p^(k+1) / (1+p). Solved in floats, then the smallest k whose
    float tail (with a 1e-12 margin) is at most alpha is found by bisection
    around that solution, so the returned k is never too small. The search is
    bounded whatever the scale: at most 64 bracket doublings and 128 halvings.
    """
    log_p = -1.0 / scale
    p = math.exp(log_p)

    def ok(k: int) -> bool:
        return 2.0 * math.exp((k + 1) * log_p) / (1.0 + p) * (1 + 1e-12) <= alpha

    guess = max(0, math.ceil(math.log(alpha * (1.0 + p) / 2.0) / log_p) - 1)
    return smallest_true(ok, guess)


def smallest_true(ok: Callable[[int], bool], guess: int) -> int:
    """The smallest k >= 0 with ``ok(k)``, for ``ok`` monotone (False then True), near ``guess``.

    A bounded search (every CI tail search uses it): the bracket around ``guess``
    widens by doubling steps, at most ``guess.bit_length() + 64`` times (a float
    closed form can be off by a relative 2^-50, so the steps must reach the
    guess's own magnitude), then bisection halves it at most as many times plus
    one. A predicate that never turns True within that reach is a bug in the
    caller's closed form, reported as an error, never a hang.
    """
    guess = max(0, int(guess))
    reach = guess.bit_length() + 64
    low, high = -1, guess  # invariant: low < 0 or not ok(low); ok(high)
    if ok(guess):
        step = 1
        for _ in range(reach):  # widen downwards until some k is not ok (or 0 is passed)
            candidate = guess - step
            if candidate < 0:
                break
            if not ok(candidate):
                low = candidate
                break
            high, step = candidate, step * 2
    else:
        low, found, step = guess, False, 1
        for _ in range(reach):
            candidate = guess + step
            if ok(candidate):
                high, found = candidate, True
                break
            low, step = candidate, step * 2
        if not found:
            raise ValueError("no k within reach of the closed-form guess satisfies the bound")
    for _ in range(2 * reach + 2):
        if high - low <= 1:
            return high
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid
    raise ValueError("the tail search did not converge within its bound")


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

    @property
    def event(self) -> Any:
        """What one call does, as a privacy event (:mod:`dpkit.accounting.events`).

        Its ``budget()`` equals :attr:`cost`; it is recorded with the charge.
        This default knows only the cost; the noise-adding mechanisms describe
        their noise.
        """
        from dpkit.accounting.events import as_event

        return as_event(self.cost)

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
        payer = as_accountant(accountant)
        noisy = self.paid(value, rng, payer, label)
        return Release(
            value=noisy,
            epsilon=self.epsilon,
            delta=self.delta,
            ci=interval(noisy, self.half_width(level)),
            level=level,
            mechanism=self.name,
            remaining=None if payer is None else payer.remaining_seen,
            details=self.details(),
        )

    def paid(self, value: ArrayLike, rng: object, accountant: Any, label: str | None = None) -> Any:
        """``randomise(value)``, charged to ``accountant`` first when one is given."""
        return charge_and_run(
            as_accountant(accountant),
            self.cost,
            label or f"{self.name} mechanism",
            lambda: self.randomise(value, rng=rng),
            event=self.event,
        )

    def details(self) -> dict[str, Any]:
        return {}
