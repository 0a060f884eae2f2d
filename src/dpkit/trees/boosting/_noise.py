"""Noise for a fixed plan of equal-cost vector releases, drawn exactly and in one batch.

A boosted model makes ``count`` releases of vectors of ``size`` values, each
with the same sensitivity and the same cost. The noise does not depend on the
data, so it is drawn for the whole plan at once (one call to the exact
sampler instead of thousands) and handed out release by release.

* zCDP (``delta > 0``): each release is rounded to a 2^-k grid and gets exact
  discrete Gaussian noise N_Z(0, s2) in grid units, with the integer s2 chosen
  so that rho_release = D_grid^2 / (2 s2) <= rho / count (Canonne, Kamath &
  Steinke 2020: the multivariate discrete Gaussian is D^2/(2 s2)-zCDP for l2
  sensitivity D). D_grid bounds the l2 sensitivity of the rounded vector
  (``mechanisms._grid``). zCDP composes by summing rho, adaptively.
* pure epsilon (``delta == 0``): the same rounding and exact discrete Laplace
  noise with scale D1_grid / epsilon_release (l1 sensitivity in grid steps), so
  each release is (epsilon / count)-DP and they compose to epsilon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from dpkit.accounting.budget import Budget
from dpkit.accounting.events import PrivacyEvent
from dpkit.mechanisms import sampling
from dpkit.mechanisms.sampling import as_source, discrete_gaussian, discrete_laplace


@dataclass(frozen=True)
class NoisePlan:
    """``count`` releases of ``size`` values; see the module docstring.

    ``rho_each`` (zCDP) or ``epsilon_each`` (pure) is the cost of one release;
    ``std`` the noise standard deviation per value, in the values' units
    (public: it depends on the plan only).
    """

    count: int
    size: int
    granularity: float
    rho_each: Fraction | None
    epsilon_each: Fraction | None
    sigma2_grid: int = 0
    laplace_scale: tuple[int, int] = (0, 1)
    grid_sensitivity: float = 0.0

    @property
    def std(self) -> float:
        if self.rho_each is not None:
            return self.granularity * math.sqrt(self.sigma2_grid)
        t, s = self.laplace_scale
        return self.granularity * math.sqrt(2.0) * t / s


def gaussian_plan(count: int, size: int, l2_sensitivity: float, rho: Fraction) -> NoisePlan:
    """Discrete Gaussian noise for ``count`` releases costing ``rho`` (zCDP) in total."""
    g = sampling.default_granularity(l2_sensitivity, size, norm=2)
    d_grid = Fraction(sampling.l2_grid_sensitivity(l2_sensitivity, g, size))
    rho_each = rho / count
    sigma2 = math.ceil(d_grid * d_grid / (2 * rho_each))
    actual = d_grid * d_grid / (2 * sigma2)  # <= rho_each
    return NoisePlan(
        count, size, g, actual, None, sigma2_grid=sigma2, grid_sensitivity=float(d_grid)
    )


def laplace_plan(count: int, size: int, l1_sensitivity: float, epsilon: Fraction) -> NoisePlan:
    """Discrete Laplace noise for ``count`` releases costing ``epsilon`` in total."""
    g = sampling.default_granularity(l1_sensitivity, size, norm=1)
    d_grid = sampling.l1_grid_sensitivity(l1_sensitivity, g, size)
    eps_each = epsilon / count
    t, s = sampling.rational_scale(Fraction(d_grid) / eps_each)
    return NoisePlan(
        count, size, g, None, eps_each, laplace_scale=(t, s), grid_sensitivity=float(d_grid)
    )


def plan_event(plan: NoisePlan, charge: Budget) -> PrivacyEvent:
    """The plan's ``count`` releases as one privacy event, charged ``charge`` in all.

    zCDP: ``count`` discrete Gaussians N_Z(0, s2) on l2 grid sensitivity
    D_grid; pure ε: ``count`` discrete Laplaces of scale t/s on l1 grid
    sensitivity D1_grid. Each release carries an equal share of ``charge``
    (the ρ share covers the ρ its noise proves), so the event's ``budget()``
    is ``charge`` exactly.
    """
    from dpkit.accounting.events import DiscreteGaussianEvent, GeometricEvent, RepeatedEvent

    n = plan.count
    each: PrivacyEvent
    if plan.rho_each is not None:
        assert charge.rho_exact is not None
        each = DiscreteGaussianEvent(
            math.sqrt(plan.sigma2_grid),
            plan.grid_sensitivity,
            epsilon=charge.epsilon_exact / n,
            delta=charge.delta_exact / n,
            rho=charge.rho_exact / n,
        )
    else:
        t, s = plan.laplace_scale
        each = GeometricEvent(t / s, plan.grid_sensitivity, epsilon=charge.epsilon_exact / n)
    return each if n == 1 else RepeatedEvent(each, n)


def draw(plan: NoisePlan, rng: np.random.Generator | None) -> NDArray[np.int64]:
    """All the plan's integer noise, shape (count, size), in grid units."""
    source = as_source(rng)
    n = plan.count * plan.size
    if plan.rho_each is not None:
        noise = discrete_gaussian(source, plan.sigma2_grid, 1, n)
    else:
        t, s = plan.laplace_scale
        noise = discrete_laplace(source, t, s, n)
    return noise.reshape(plan.count, plan.size)


def release(
    plan: NoisePlan, values: NDArray[np.float64], noise: NDArray[np.int64]
) -> NDArray[np.float64]:
    """One release: the values rounded to the plan's grid plus its noise row."""
    rounded = sampling.to_grid(values.ravel(), plan.granularity)
    return sampling.from_grid(rounded, noise, plan.granularity).reshape(values.shape)
