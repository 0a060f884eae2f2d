"""Private selection: the exponential mechanism and permute-and-flip, sampled exactly.

Both pick one candidate out of a finite, data-independent set, favouring high
utility u(x, r). With utility sensitivity D (max over candidates r and
neighbours x ~ x' of |u(x, r) - u(x', r)|):

* ``exponential`` (McSherry & Talwar 2007): P(r) proportional to
  exp(eps * u_r / (2 D)); exp(eps * u_r / D) when ``monotonic`` (every utility
  moves in the same direction between neighbours, e.g. counts). eps-DP.
* ``permute_and_flip`` (McKenna & Sheldon, NeurIPS 2020): visit candidates in a
  random order and stop at r with probability exp(eps (u_r - u_max) / (2 D)).
  eps-DP, and its expected utility is never worse than the exponential
  mechanism's (often better at small eps). Prefer it when only the selected
  candidate's quality matters; prefer ``exponential`` when downstream analysis
  needs its closed-form output distribution (e.g. the tree-split and median
  formulas of the papers dpkit reproduces). ``report_noisy_max`` with
  exponential noise is the same distribution as permute-and-flip (Ding et al.
  2021) and is provided under that name.

Exactness: utilities are rounded to a 2^-k grid, which raises the sensitivity
to floor(D/g) + 1 grid steps. The grid is chosen from public input only: the
caller's ``integral=True`` (utilities are integers by construction, e.g.
counts, and D is an integer) selects the unit grid with no inflation;
otherwise the grid is 2^(floor(log2 D) - 10) whatever the utilities' values —
never "integers if they happen to be integral", which would make the
mechanism's resolution, and so its output distribution, depend on the data; epsilon is used as an exact
rational (rounded down if its decimal form is very long); every acceptance test
is an exact Bernoulli(exp(-gamma)) with rational gamma. Subtracting the maximum
utility keeps gamma >= 0 and finite for utilities in the millions (no overflow).
The exponential mechanism samples by rejection (uniform proposal, accepted
with probability exp(-gamma)); permute-and-flip flips every candidate's coin
at once and returns a uniformly chosen success, which has the same law as the
sequential algorithm.

Candidates with utility ``-inf`` are never chosen; which candidates are
excluded must not depend on the data.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpkit._checks import check_epsilon, check_sensitivity, exact
from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.errors import DataError, InvalidParameterError
from dpkit.mechanisms._exact import bernoulli_exp
from dpkit.mechanisms._random import (
    RandomSource,
    as_source,
    rejection_rounds,
    sampling_limit,
)

_MAX_EPSILON_DEN = 1 << 30
_INT64_SAFE = 1 << 62


@functools.lru_cache(maxsize=256)
def _budget(epsilon: float) -> Budget:
    """``Budget(epsilon)``, built once per epsilon (Budgets are immutable; callers such as
    StructureFirst's k - 1 draws select thousands of times with one epsilon)."""
    return Budget(epsilon)


def _budget_of(epsilon: Any) -> Budget:
    # Only floats are cached: a Fraction equal to a float's binary value hashes like it
    # but is its own (different) exact budget.
    return _budget(epsilon) if type(epsilon) is float else Budget(epsilon)


@functools.lru_cache(maxsize=256)
def _rational_epsilon(epsilon: float) -> Fraction:
    """epsilon as a rational with a short denominator, never larger than epsilon.

    A long decimal is rounded down to 30 significant bits (m / 2^j with
    2^29 <= m < 2^30): a relative loss below 2^-29 at any epsilon (every
    epsilon dpkit accepts is at least ``MIN_EPSILON``, so j stays below 60).
    """
    eps = exact(epsilon)
    if eps.denominator <= _MAX_EPSILON_DEN:
        return eps
    shift = max(0, 30 - math.floor(math.log2(eps)) - 1)
    rounded = Fraction(math.floor(eps * (1 << shift)), 1 << shift)
    if rounded <= 0:
        raise InvalidParameterError("epsilon is too small for exact selection.")
    return rounded


def _prepare(
    utilities: ArrayLike, epsilon: float, sensitivity: float, monotonic: bool, integral: bool
) -> tuple[NDArray[np.generic], NDArray[np.generic], NDArray[np.bool_], bool]:
    """Integer gamma numerators/denominators (gamma_r = eps (u_max - u_r) / (c D)) per candidate."""
    eps = _rational_epsilon(check_epsilon(epsilon, share=True))
    sens = check_sensitivity(sensitivity)
    try:
        u = np.asarray(utilities, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError("utilities must be numeric.") from None
    scalar = u.ndim == 1
    if u.ndim not in (1, 2) or u.shape[-1] == 0:
        raise InvalidParameterError(
            "utilities must be a non-empty 1-D array (or 2-D: one selection per row)."
        )
    if not isinstance(integral, bool):
        raise InvalidParameterError("integral must be True or False.")
    if integral and not float(sens).is_integer():
        raise InvalidParameterError(
            "integral=True needs an integer sensitivity (integer utilities move by integers)."
        )
    u2 = u.reshape(1, -1) if scalar else u
    if np.isnan(u2).any() or np.isposinf(u2).any():
        raise DataError(
            "utilities contain NaN or +inf; utilities must be finite (or -inf to exclude)."
        )
    allowed = np.isfinite(u2)
    if not allowed.any(axis=1).all():
        raise InvalidParameterError(
            "every selection needs at least one candidate with finite utility."
        )
    if integral:  # declared by the caller (public), never inferred from the values
        grid, grid_sens = 1.0, int(sens)
    else:
        grid = math.ldexp(1.0, math.floor(math.log2(sens)) - 10)
        grid_sens = math.floor(Fraction(sens) / Fraction(grid)) + 1
    if allowed.all():  # the same numbers as below, without the masks' copies
        ug = np.rint(u2 / grid)
        gap = ug.max(axis=1, keepdims=True) - ug
    else:
        ug = np.where(allowed, np.rint(np.where(allowed, u2, 0.0) / grid), 0.0)
        best = np.max(np.where(allowed, ug, -np.inf), axis=1, keepdims=True)
        gap = np.where(allowed, best - ug, 0.0)  # non-negative integers (as floats)
    factor = 1 if monotonic else 2
    den_value = eps.denominator * factor * grid_sens
    max_num = float(gap.max(initial=0.0)) * eps.numerator
    if max_num < 2**52 and den_value < 2**54:
        num = gap.astype(np.int64)
        if eps.numerator != 1:
            num *= eps.numerator
        den = np.full(gap.shape, den_value, dtype=np.int64)
    else:
        num = np.vectorize(int, otypes=[object])(gap) * eps.numerator
        den = np.full(gap.shape, den_value, dtype=object)
    return num, den, allowed, scalar


def _first_true(mask: NDArray[np.bool_]) -> NDArray[np.int64]:
    return np.argmax(mask, axis=1)


def _uniform_true(source: RandomSource, mask: NDArray[np.bool_]) -> NDArray[np.int64]:
    """Per row, an index chosen uniformly among the True entries (each row has one)."""
    counts = mask.sum(axis=1)
    pick = source.uniform_below(counts.astype(np.int64))
    # The True entries in row-major order: row r's pick-th one sits after all earlier rows'.
    hits = np.flatnonzero(mask)
    start = np.cumsum(counts) - counts
    return hits[start + pick] % mask.shape[1]


def exponential(
    utilities: ArrayLike,
    *,
    epsilon: float,
    sensitivity: float,
    rng: object = None,
    monotonic: bool = False,
    integral: bool = False,
    accountant: Any = None,
) -> Any:
    """Select an index with P(r) proportional to exp(epsilon u_r / (2 sensitivity)).

    Guarantee: epsilon-DP when every utility changes by at most
    ``sensitivity`` between neighbouring datasets (add/remove one row unless
    the caller states otherwise); with ``monotonic=True`` the exponent is
    epsilon u_r / sensitivity, valid when all utilities move in the same
    direction between neighbours. ``integral=True`` declares that the
    utilities are integers by construction (counts) and the sensitivity an
    integer: they are then used on the unit grid, with no inflation (values
    that are not integers would be rounded, so declare it only when true).
    ``utilities`` 1-D: returns one int; 2-D: one independent selection per row (each row costs epsilon; rows computed
    on disjoint data compose in parallel). Sampled exactly; see module doc.
    """
    check_epsilon(epsilon, share=True)
    check_sensitivity(sensitivity)

    def select() -> Any:
        source = as_source(rng)
        num, den, allowed, scalar = _prepare(utilities, epsilon, sensitivity, monotonic, integral)
        rows, n = allowed.shape
        chosen = np.full(rows, -1, dtype=np.int64)
        pending = np.arange(rows)
        # A round of n proposals includes the best candidate (always accepted) w.p.
        # 1 - (1 - 1/n)^n >= 1 - 1/e: above 1/4 whatever the utilities.
        for _ in rejection_rounds():
            if not pending.size:
                break
            m = pending.size
            proposal = source.uniform_below(np.full((m, n), n, dtype=np.int64))
            row_index = np.repeat(pending, n)
            flat = proposal.ravel()
            ok = allowed[row_index, flat].reshape(m, n)
            accept = np.zeros((m, n), dtype=bool)
            idx = np.flatnonzero(ok.ravel())
            if idx.size:
                accept.ravel()[idx] = bernoulli_exp(
                    source, num[row_index[idx], flat[idx]], den[row_index[idx], flat[idx]]
                )
            done = accept.any(axis=1)
            first = _first_true(accept)
            chosen[pending[done]] = proposal[done, first[done]]
            pending = pending[~done]
        if pending.size:
            raise sampling_limit("the exponential mechanism")
        return int(chosen[0]) if scalar else chosen

    return charge_and_run(as_accountant(accountant), _budget_of(epsilon), "exponential", select)


def permute_and_flip(
    utilities: ArrayLike,
    *,
    epsilon: float,
    sensitivity: float,
    rng: object = None,
    monotonic: bool = False,
    integral: bool = False,
    accountant: Any = None,
) -> Any:
    """Select an index by permute-and-flip (McKenna & Sheldon 2020); epsilon-DP.

    Same guarantee, arguments and return shape as :func:`exponential`; never a
    worse expected utility. Each candidate r is accepted with probability
    exp(epsilon (u_r - u_max) / (2 sensitivity)) (without the 2 when
    ``monotonic``); the first acceptance in a uniformly random order is
    returned. The best candidate is always accepted, so one pass suffices.
    """
    check_epsilon(epsilon, share=True)
    check_sensitivity(sensitivity)

    def select() -> Any:
        source = as_source(rng)
        num, den, allowed, scalar = _prepare(utilities, epsilon, sensitivity, monotonic, integral)
        if allowed.all():  # the usual case: no candidate excluded, no copies
            accept = bernoulli_exp(source, num, den).reshape(allowed.shape)
        else:
            accept = np.zeros(allowed.shape, dtype=bool)
            idx = np.flatnonzero(allowed.ravel())
            accept.ravel()[idx] = bernoulli_exp(source, num.ravel()[idx], den.ravel()[idx])
        chosen = _uniform_true(source, accept)
        return int(chosen[0]) if scalar else chosen

    return charge_and_run(as_accountant(accountant), Budget(epsilon), "permute_and_flip", select)


def report_noisy_max(
    utilities: ArrayLike,
    *,
    epsilon: float,
    sensitivity: float,
    rng: object = None,
    monotonic: bool = False,
    integral: bool = False,
    accountant: Any = None,
) -> Any:
    """Report-noisy-max with exponential noise: the same distribution as permute-and-flip.

    Ding, Kifer, Saghafian, Wang & Zhang (2021) show that adding Exp(2D/eps)
    noise to each utility and reporting the argmax is distributed exactly as
    permute-and-flip; dpkit samples it that way (exactly). epsilon-DP.
    """
    return permute_and_flip(
        utilities,
        epsilon=epsilon,
        sensitivity=sensitivity,
        rng=rng,
        monotonic=monotonic,
        integral=integral,
        accountant=accountant,
    )


def exponential_probabilities(
    utilities: ArrayLike, *, epsilon: float, sensitivity: float, monotonic: bool = False
) -> NDArray[np.float64]:
    """The exponential mechanism's selection probabilities (for analysis and tests; floats)."""
    u = np.asarray(utilities, dtype=np.float64)
    factor = 1.0 if monotonic else 2.0
    logits = check_epsilon(epsilon, share=True) * u / (factor * check_sensitivity(sensitivity))
    logits = logits - np.max(logits, axis=-1, keepdims=True)
    weights = np.exp(logits)
    return np.asarray(weights / weights.sum(axis=-1, keepdims=True), dtype=np.float64)
