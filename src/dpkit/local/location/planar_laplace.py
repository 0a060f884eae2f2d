"""Geo-indistinguishability: the planar Laplace mechanism, sampled exactly on a lattice.

Andrés, Bordenabe, Chatzikokolakis, Palamidessi, "Geo-indistinguishability:
differential privacy for location-based systems" (CCS 2013). A mechanism K is
ε-geo-indistinguishable when, for all locations x, x' and every set of
reports S, P(K(x) ∈ S) <= e^(ε·d(x, x')) · P(K(x') ∈ S), d Euclidean: ε is
*per unit of distance*, so two places r apart are ε·r-indistinguishable
(within 1 km at ε = 1/km the odds move by at most e; 10 km apart, by e^10).

Why a lattice. The paper samples the continuous planar Laplace (density
∝ exp(-ε·|z - x|)) in polar coordinates and rounds to a grid; its
discussion of finite precision shows that doubles alone break the guarantee
(the set of reachable floating-point outputs depends on x, as in Mironov's
attack on the textbook Laplace), and its repair costs an approximate,
larger ε. dpkit instead samples the
*discrete* planar Laplace on the lattice x0 + step·Z² exactly:

    P(z | x) = exp(-ε0 · g(z - x)) / C,    z, x lattice points,

where g(v) is |v| (in lattice steps) rounded *up* to a multiple of 2^-20, so
|v| <= g(v) <= |v| + 2^-20, and C does not depend on x (the lattice is
translation invariant). For lattice points x != x' (at least one step apart)

    P(z | x) / P(z | x') = exp(ε0 (g(z - x') - g(z - x)))
                        <= exp(ε0 (|x - x'| + 2^-20)) <= exp(ε0 (1 + 2^-20) |x - x'|),

and ε0 = ε·step / (1 + 2^-20), rounded down to a rational, so the bound is
e^(ε·d(x, x')) exactly. Sampling: propose z from two independent discrete
Laplace coordinates with rate ε1 <= ε0/√2 (|v|₁ <= √2·|v|), accept with
probability exp(-(ε0·g(z) - ε1·|z|₁)) (an exponent >= 0 that is a rational
computed with integer square roots); accepted z have exactly the law above.
Every coin is one of :mod:`dpkit.mechanisms._exact`'s exact Bernoulli(exp(-γ))
draws: no floating point shapes the output.

The true location is first snapped to the nearest lattice point, so for
arbitrary x, x' the bound is e^(ε·(d(x, x') + step·√2)): choose the step small
against 1/ε (the default step is 1/(100·ε)). Reports are truncated to the
declared rectangular area (each coordinate clipped: the nearest lattice point
in the area), which is post-processing. Each report is a fresh use: k reports
of one person at ε compose to k·ε per unit of distance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from dpkit._checks import check_epsilon, exact
from dpkit.errors import DataError, InvalidParameterError
from dpkit.mechanisms.sampling import (
    as_source,
    bernoulli_exp,
    discrete_laplace,
    rejection_rounds,
    sampling_limit,
)

__all__ = ["PlanarLaplace", "check_area", "check_points"]

_DIST_BITS = 20  # g(v) is |v| rounded up to a multiple of 2**-20 lattice steps
_EPS_BITS = 30  # lattice rates are multiples of 2**-30
_MAX_STEPS = 1 << 40  # lattice coordinates stay far inside int64


def check_area(area: object) -> tuple[float, float, float, float]:
    """The declared area (x_min, y_min, x_max, y_max) as finite floats with x_min < x_max, y_min < y_max."""
    try:
        values = tuple(float(v) for v in area)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise InvalidParameterError(
            "area must be four numbers (x_min, y_min, x_max, y_max) in the units of distance."
        ) from None
    if len(values) != 4 or not all(math.isfinite(v) for v in values):
        raise InvalidParameterError(
            "area must be four finite numbers (x_min, y_min, x_max, y_max)."
        )
    x0, y0, x1, y1 = values
    if not (x0 < x1 and y0 < y1):
        raise InvalidParameterError("area needs x_min < x_max and y_min < y_max.")
    return x0, y0, x1, y1


def check_points(points: ArrayLike, what: str = "points") -> NDArray[np.float64]:
    """Points as an (m, 2) float array of finite coordinates; DataError otherwise."""
    try:
        arr = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"{what} must be numbers: an (m, 2) array of x, y coordinates.") from None
    if arr.ndim == 1 and arr.shape[0] == 2:
        arr = arr.reshape(1, 2)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise DataError(f"{what} must be an (m, 2) array of x, y coordinates.")
    if arr.shape[0] == 0:
        raise DataError(f"no {what}: give at least one location.")
    if not np.isfinite(arr).all():
        raise DataError(f"{what} must be finite: remove or fix missing or infinite coordinates.")
    return arr


@dataclass(frozen=True)
class PlanarLaplace:
    """ε-geo-indistinguishable location reports (see the module docstring for the proof).

    ``epsilon`` is per unit of distance (the units of the coordinates, e.g.
    per km for projected coordinates in km); ``area`` = (x_min, y_min,
    x_max, y_max) is the declared area of interest, public: true locations
    outside it are refused and reports are truncated to it. ``step`` is the
    lattice spacing (default 1/(100·ε)); ``epsilon_lattice`` is the rational
    rate per lattice step actually sampled (never above ε·step).
    """

    epsilon: float
    area: tuple[float, float, float, float]
    step: float
    epsilon_lattice: Fraction

    def __init__(self, *, epsilon: float, area: ArrayLike, step: float | None = None) -> None:
        eps = check_epsilon(epsilon)
        box = check_area(area)
        if step is None:
            step = 1.0 / (100.0 * eps)
        if isinstance(step, bool) or not isinstance(step, int | float | np.integer | np.floating):
            raise InvalidParameterError("step must be a positive number (the lattice spacing).")
        step = float(step)
        if not math.isfinite(step) or step <= 0:
            raise InvalidParameterError("step must be a finite number > 0 (the lattice spacing).")
        if max(box[2] - box[0], box[3] - box[1]) / step > _MAX_STEPS:
            raise InvalidParameterError(
                "the area spans more than 2^40 lattice steps: choose a larger step."
            )
        per_step = exact(eps) * exact(step) * Fraction(1 << _DIST_BITS, (1 << _DIST_BITS) + 1)
        num = math.floor(per_step * (1 << _EPS_BITS))
        if num < 2:
            raise InvalidParameterError(
                "epsilon·step is below 2^-29: choose a larger step (the lattice is finer "
                "than the noise can use)."
            )
        if per_step > 64:
            raise InvalidParameterError(
                "epsilon·step is above 64: the lattice is too coarse for the noise; choose a "
                "smaller step (the default 1/(100·epsilon) keeps the lattice's cost small)."
            )
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "area", box)
        object.__setattr__(self, "step", step)
        object.__setattr__(self, "epsilon_lattice", Fraction(num, 1 << _EPS_BITS))

    # -- lattice <-> coordinates ---------------------------------------------------------
    def _limits(self) -> tuple[int, int]:
        x0, y0, x1, y1 = self.area
        return math.floor((x1 - x0) / self.step), math.floor((y1 - y0) / self.step)

    def to_lattice(self, points: ArrayLike) -> NDArray[np.int64]:
        """The nearest lattice point (in steps from the area's corner) of each location."""
        pts = check_points(points)
        x0, y0, x1, y1 = self.area
        inside = (pts[:, 0] >= x0) & (pts[:, 0] <= x1) & (pts[:, 1] >= y0) & (pts[:, 1] <= y1)
        if not inside.all():
            raise DataError(
                "a location is outside the declared area: declare an area that contains "
                "every location that may be reported."
            )
        kx, ky = self._limits()
        cells = np.rint((pts - np.array([x0, y0])) / self.step).astype(np.int64)
        cells[:, 0] = np.clip(cells[:, 0], 0, kx)
        cells[:, 1] = np.clip(cells[:, 1], 0, ky)
        return cells

    def from_lattice(self, cells: NDArray[np.int64]) -> NDArray[np.float64]:
        """Coordinates of lattice points."""
        x0, y0 = self.area[0], self.area[1]
        return np.column_stack([x0 + cells[:, 0] * self.step, y0 + cells[:, 1] * self.step]).astype(
            np.float64
        )

    # -- sampling --------------------------------------------------------------------------
    def noise(self, size: int, rng: object = None) -> NDArray[np.int64]:
        """``size`` exact draws of the lattice offset z, P(z) ∝ exp(-ε0·g(z)) (in steps)."""
        source = as_source(rng)
        e0 = self.epsilon_lattice.numerator * ((1 << _EPS_BITS) // self.epsilon_lattice.denominator)
        e1 = math.isqrt(e0 * e0 // 2)  # e1/2^30 <= (e0/2^30)/√2
        den = 1 << (_EPS_BITS + _DIST_BITS)
        out = np.empty((size, 2), dtype=np.int64)
        pending = np.arange(size)
        # Acceptance per round is the ratio of the two normalisers, about pi/4 for small
        # epsilon and near 1 for large: above 1/4 (rejection_rounds' assumption).
        for _ in rejection_rounds():
            if not pending.size:
                break
            m = pending.size
            # Rate e1/2^30 per step: discrete_laplace's scale t/s = 2^30/e1.
            a = discrete_laplace(source, 1 << _EPS_BITS, e1, m)
            b = discrete_laplace(source, 1 << _EPS_BITS, e1, m)
            gamma = np.array(
                [
                    e0 * (math.isqrt((int(u) * int(u) + int(v) * int(v)) << (2 * _DIST_BITS)) + 1)
                    - e1 * (abs(int(u)) + abs(int(v))) * (1 << _DIST_BITS)
                    for u, v in zip(a, b)
                ],
                dtype=object,
            )
            accept = bernoulli_exp(source, gamma, np.full(m, den, dtype=object))
            out[pending[accept], 0] = a[accept]
            out[pending[accept], 1] = b[accept]
            pending = pending[~accept]
        if pending.size:
            raise sampling_limit("the planar Laplace sampler")
        return out

    def perturb(self, points: ArrayLike, rng: object = None) -> NDArray[np.float64]:
        """Client side: one ε-geo-indistinguishable report per location, as (m, 2) coordinates."""
        cells = self.to_lattice(points)
        reported = cells + self.noise(cells.shape[0], rng)
        kx, ky = self._limits()
        reported[:, 0] = np.clip(reported[:, 0], 0, kx)  # truncation: post-processing
        reported[:, 1] = np.clip(reported[:, 1], 0, ky)
        return self.from_lattice(reported)

    def perturb_one(self, point: ArrayLike, rng: object = None) -> tuple[float, float]:
        """Client side, one person: the report of a single location (x, y)."""
        x, y = self.perturb(np.asarray(point, dtype=np.float64).reshape(1, 2), rng)[0]
        return float(x), float(y)

    # -- accuracy and likelihood ------------------------------------------------------------
    def error_radius(self, alpha: float = 0.05) -> float:
        """A radius the report's distance from the true location exceeds with probability ~alpha.

        The continuous planar Laplace's distance is Gamma(2, 1/ε); the lattice
        adds at most step·√2/2 for the snapping, and truncation only moves a
        report closer. Data-independent: published with every report.
        """
        if not (isinstance(alpha, float | int) and 0 < float(alpha) < 1):
            raise InvalidParameterError("alpha must be a number in (0, 1).")
        rate = float(self.epsilon_lattice) / self.step
        return float(
            stats.gamma.ppf(1.0 - float(alpha), 2.0, scale=1.0 / rate)
        ) + self.step * math.sqrt(0.5)

    def log_likelihood(self, reported: ArrayLike, candidates: ArrayLike) -> NDArray[np.float64]:
        """log P(report | true location = candidate) up to a constant, (reports × candidates).

        Uses the untruncated lattice law -ε0·|z - x| (in steps): exact away from the
        area's edge, approximate beside it. For remapping and for an adversary's
        posterior; it reads no private data.
        """
        z = check_points(reported, "reports")
        c = check_points(candidates, "candidates")
        dist = np.sqrt(((z[:, None, :] - c[None, :, :]) ** 2).sum(axis=2)) / self.step
        return -float(self.epsilon_lattice) * dist
