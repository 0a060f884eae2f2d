"""The randomness source and the exact samplers, for every package that draws noise.

This is the public internal interface to :mod:`dpkit.mechanisms`' sampling
layer: other packages (local, trees, histograms, tables) import these names
from here, never from the private modules that implement them.

* The source: :class:`RandomSource` (the protocol: uniform integers below a
  bound, fair bits), :class:`SecureRandom` (the OS CSPRNG, the default),
  :class:`SeededRandom` (reproducible, tests only) and :func:`as_source`, which
  turns ``rng=None | int | Generator | RandomSource`` into one.
* Bounded rejection loops: :func:`rejection_rounds` (a public cap on the
  rounds) and :func:`sampling_limit` (the one error when the cap is reached,
  :class:`SamplingLimitError`).
* Exact samplers on a :class:`RandomSource`: :func:`bernoulli_exp`
  (Bernoulli(exp(-num/den))), :func:`discrete_laplace` and
  :func:`discrete_gaussian` (Canonne, Kamath and Steinke 2020).
* The noise grid (real-valued queries rounded onto ``2**-k`` before integer
  noise; see ``_grid``'s docstring for the sensitivity inflation):
  :func:`default_granularity`, :func:`l1_grid_sensitivity`,
  :func:`l2_grid_sensitivity`, :func:`rational_scale`, :func:`to_grid`,
  :func:`from_grid`.
"""

from __future__ import annotations

from dpkit.mechanisms._exact import bernoulli_exp, discrete_gaussian, discrete_laplace
from dpkit.mechanisms._grid import (
    default_granularity,
    from_grid,
    l1_grid_sensitivity,
    l2_grid_sensitivity,
    rational_scale,
    to_grid,
)
from dpkit.mechanisms._random import (
    RandomSource,
    SamplingLimitError,
    SecureRandom,
    SeededRandom,
    as_source,
    rejection_rounds,
    sampling_limit,
)

__all__ = [
    "RandomSource",
    "SamplingLimitError",
    "SecureRandom",
    "SeededRandom",
    "as_source",
    "bernoulli_exp",
    "default_granularity",
    "discrete_gaussian",
    "discrete_laplace",
    "from_grid",
    "l1_grid_sensitivity",
    "l2_grid_sensitivity",
    "rational_scale",
    "rejection_rounds",
    "sampling_limit",
    "to_grid",
]
