"""Noise mechanisms with exact sampling and a stated guarantee each.

Additive (take the true value(s), return noisy value(s) of the same shape):
:func:`laplace`, :func:`geometric`, :func:`gaussian`, :func:`discrete_gaussian`.
Selection: :func:`exponential`, :func:`permute_and_flip`, :func:`report_noisy_max`.
Local: :func:`randomized_response`, :func:`coin_flip_survey`.

Mechanism objects (:class:`Laplace`, :class:`Geometric`, :class:`Gaussian`,
:class:`DiscreteGaussian`) expose ``cost`` (a :class:`dpkit.Budget`),
``half_width(level)`` and ``release(value, level)`` for error bounds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._lazy import lazy_exports

if TYPE_CHECKING:
    from dpkit.mechanisms._random import RandomSource, SecureRandom, SeededRandom, as_source
    from dpkit.mechanisms.gaussian import (
        DiscreteGaussian,
        Gaussian,
        analytic_sigma,
        classic_sigma,
        discrete_gaussian,
        gaussian,
    )
    from dpkit.mechanisms.laplace import Geometric, Laplace, geometric, laplace, laplace_scale
    from dpkit.mechanisms.randomized_response import (
        COIN_FLIP_EPSILON,
        RandomizedResponse,
        coin_flip_estimate,
        coin_flip_survey,
        randomized_response,
    )
    from dpkit.mechanisms.selection import (
        exponential,
        exponential_probabilities,
        permute_and_flip,
        report_noisy_max,
    )

__all__ = [
    "COIN_FLIP_EPSILON",
    "DiscreteGaussian",
    "Gaussian",
    "Geometric",
    "Laplace",
    "RandomSource",
    "RandomizedResponse",
    "SecureRandom",
    "SeededRandom",
    "analytic_sigma",
    "as_source",
    "classic_sigma",
    "coin_flip_estimate",
    "coin_flip_survey",
    "discrete_gaussian",
    "exponential",
    "exponential_probabilities",
    "gaussian",
    "geometric",
    "laplace",
    "laplace_scale",
    "permute_and_flip",
    "randomized_response",
    "report_noisy_max",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "COIN_FLIP_EPSILON": "dpkit.mechanisms.randomized_response",
        "DiscreteGaussian": "dpkit.mechanisms.gaussian",
        "Gaussian": "dpkit.mechanisms.gaussian",
        "Geometric": "dpkit.mechanisms.laplace",
        "Laplace": "dpkit.mechanisms.laplace",
        "RandomSource": "dpkit.mechanisms._random",
        "RandomizedResponse": "dpkit.mechanisms.randomized_response",
        "SecureRandom": "dpkit.mechanisms._random",
        "SeededRandom": "dpkit.mechanisms._random",
        "analytic_sigma": "dpkit.mechanisms.gaussian",
        "as_source": "dpkit.mechanisms._random",
        "classic_sigma": "dpkit.mechanisms.gaussian",
        "coin_flip_estimate": "dpkit.mechanisms.randomized_response",
        "coin_flip_survey": "dpkit.mechanisms.randomized_response",
        "discrete_gaussian": "dpkit.mechanisms.gaussian",
        "exponential": "dpkit.mechanisms.selection",
        "exponential_probabilities": "dpkit.mechanisms.selection",
        "gaussian": "dpkit.mechanisms.gaussian",
        "geometric": "dpkit.mechanisms.laplace",
        "laplace": "dpkit.mechanisms.laplace",
        "laplace_scale": "dpkit.mechanisms.laplace",
        "permute_and_flip": "dpkit.mechanisms.selection",
        "randomized_response": "dpkit.mechanisms.randomized_response",
        "report_noisy_max": "dpkit.mechanisms.selection",
    },
)
