"""Randomized response: local DP for surveys (Warner 1965), and its k-ary form.

Each respondent randomises their own answer before it leaves their hands, so
the collector never holds a true answer (local DP: the neighbouring relation is
*one respondent's answer changed*, and each response on its own is eps-DP).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from dpkit._checks import check_epsilon, check_level
from dpkit.accounting import Budget, as_accountant, charge_and_run
from dpkit.errors import DataError, InvalidParameterError
from dpkit.mechanisms._exact import bernoulli_exp
from dpkit.mechanisms._random import as_source, rejection_rounds, sampling_limit
from dpkit.mechanisms.selection import _rational_epsilon
from dpkit.release import Release

COIN_FLIP_EPSILON = math.log(3.0)


def coin_flip_survey(answers: ArrayLike, *, rng: object = None) -> NDArray[np.bool_]:
    """The coin-flip survey of the source documents: ln(3)-DP per respondent.

    Flip a fair coin; heads: answer truthfully; tails: flip again and answer
    "yes" on heads, "no" on tails. P(yes | true yes) = 3/4 and
    P(yes | true no) = 1/4, a likelihood ratio of 3: each response is
    ln(3)-DP (local DP, one respondent's answer changed). Exact: fair bits only.
    """
    truth = _boolean(answers)
    source = as_source(rng)
    first = source.bits(truth.size)
    second = source.bits(truth.size)
    return np.where(first, truth.ravel(), second).reshape(truth.shape)


def coin_flip_estimate(responses: ArrayLike, *, level: float = 0.95) -> Release:
    """Unbiased estimate of the true "yes" proportion from coin-flip responses.

    With P the observed share of "yes", E[P] = p/2 + 1/4, so p' = 2P - 1/2 is
    unbiased (the decision-tree course project and the course report on DP applications). The interval is the exact Clopper-Pearson
    interval for P mapped through p' = 2P - 1/2 (conservative coverage >= level),
    clipped to [0, 1]. Post-processing of ln(3)-DP responses: no extra cost.
    """
    return _estimate(
        _boolean(responses).ravel(),
        p_keep=0.75,
        p_other=0.25,
        level=level,
        epsilon=COIN_FLIP_EPSILON,
        name="coin_flip",
    )


def _key(value: Any) -> Any:
    """A hashable key that treats NumPy scalars like the Python values they hold."""
    if isinstance(value, np.generic):
        value = value.item()
    return (type(value) is bool, value)


def _boolean(values: ArrayLike) -> NDArray[np.bool_]:
    arr = np.asarray(values)
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind in "iuf" and np.all(np.isin(arr, (0, 1))):
        return arr.astype(bool)
    raise DataError("answers must be booleans (or 0/1); map your yes/no column first.")


def _estimate(
    indicator: NDArray[np.bool_],
    *,
    p_keep: float,
    p_other: float,
    level: float,
    epsilon: float,
    name: str,
) -> Release:
    level = check_level(level)
    n = indicator.size
    if n == 0:
        raise DataError("no responses to estimate from.")
    yes = int(indicator.sum())
    observed = yes / n
    scale = p_keep - p_other
    value = (observed - p_other) / scale
    alpha = 1.0 - level
    lo = stats.beta.ppf(alpha / 2, yes, n - yes + 1) if yes > 0 else 0.0
    hi = stats.beta.ppf(1 - alpha / 2, yes + 1, n - yes) if yes < n else 1.0
    ci = (max(0.0, float((lo - p_other) / scale)), min(1.0, float((hi - p_other) / scale)))
    return Release(
        value=value, epsilon=epsilon, ci=ci, level=level, mechanism=name, details={"responses": n}
    )


class RandomizedResponse:
    """k-ary randomized response with any epsilon (local DP).

    Each respondent reports their true category with probability
    e^eps / (e^eps + k - 1) and each other category with probability
    1 / (e^eps + k - 1): the likelihood ratio of any report between two true
    answers is at most e^eps, so each report is eps-DP (local DP, one
    respondent's answer changed). Sampled exactly: propose a category
    uniformly, accept the true one always and another with an exact
    Bernoulli(e^-eps), repeat if rejected.
    """

    def __init__(self, *, epsilon: float, categories: Sequence[Any] = (False, True)) -> None:
        self.epsilon = check_epsilon(epsilon, share=True)
        cats = list(categories)
        if len(cats) < 2:
            raise InvalidParameterError("categories needs at least two values.")
        if len({_key(c) for c in cats}) != len(cats):
            raise InvalidParameterError("categories must be distinct.")
        self.categories = cats
        self._eps = _rational_epsilon(self.epsilon)
        k = len(cats)
        e = math.exp(float(self._eps))
        self.p_keep = e / (e + k - 1)
        self.p_other = 1.0 / (e + k - 1)

    def _codes(self, values: ArrayLike) -> NDArray[np.int64]:
        lookup = {_key(c): i for i, c in enumerate(self.categories)}
        typed = isinstance(values, np.ndarray | pd.Series) and np.asarray(values).dtype != object
        arr = np.asarray(values, dtype=None if typed else object).ravel()
        if typed:
            # Typed arrays: look up each distinct value once, then broadcast by index.
            uniques, inverse = np.unique(arr, return_inverse=True)
            table = np.array([lookup.get(_key(u), -1) for u in uniques], dtype=np.int64)
            codes = table[inverse.ravel()] if uniques.size else np.empty(0, dtype=np.int64)
        else:
            codes = np.fromiter(
                (lookup.get(_key(v), -1) for v in arr), dtype=np.int64, count=arr.size
            )
        if (codes < 0).any():
            raise DataError(
                "an answer is not one of the declared categories; declare every category."
            )
        return codes

    def randomise(self, values: ArrayLike, rng: object = None) -> NDArray[Any]:
        """Randomise each answer independently; returns an array of categories."""
        out = self.randomise_codes(self._codes(values), rng=rng)
        categories = np.empty(len(self.categories), dtype=object)
        categories[:] = self.categories
        return categories[out].reshape(np.shape(values))

    def randomise_codes(self, codes: NDArray[np.int64], rng: object = None) -> NDArray[np.int64]:
        """Randomise category *indices* (0..k-1, already checked); returns indices.

        The same exact sampler as :meth:`randomise`, without the label lookup:
        for callers (``dpkit.local``) that hold codes already.
        """
        codes = np.asarray(codes, dtype=np.int64).ravel()
        source = as_source(rng)
        k = len(self.categories)
        out = np.empty(codes.size, dtype=np.int64)
        pending = np.arange(codes.size)
        num, den = self._eps.numerator, self._eps.denominator
        # A proposal is accepted w.p. (1 + (k - 1) e^-eps) / k >= 1/k (public): the round
        # cap grows with k so that the failure bound of rejection_rounds holds.
        for _ in rejection_rounds(1.0 / k):
            if not pending.size:
                break
            m = pending.size
            proposal = source.uniform_below(np.full(m, k, dtype=np.int64))
            accept = proposal == codes[pending]
            other = np.flatnonzero(~accept)
            if other.size:
                accept[other] = bernoulli_exp(
                    source,
                    np.full(other.size, num, dtype=np.int64),
                    np.full(other.size, den, dtype=np.int64),
                )
            out[pending[accept]] = proposal[accept]
            pending = pending[~accept]
        if pending.size:
            raise sampling_limit("randomized response")
        return out

    def estimate(self, responses: ArrayLike, *, level: float = 0.95) -> dict[Any, Release]:
        """Unbiased frequency estimate for each category, with a confidence interval.

        pi_j = (f_j - q) / (p - q) with f_j the observed share, p = p_keep and
        q = p_other; E[f_j] = pi_j p + (1 - pi_j) q, so the estimate is
        unbiased. Each interval is Clopper-Pearson on f_j mapped linearly
        (coverage >= level per category). Post-processing: no extra cost.
        """
        codes = self._codes(responses)
        return {
            cat: _estimate(
                codes == j,
                p_keep=self.p_keep,
                p_other=self.p_other,
                level=level,
                epsilon=self.epsilon,
                name="randomized_response",
            )
            for j, cat in enumerate(self.categories)
        }


def randomized_response(
    values: ArrayLike,
    *,
    epsilon: float,
    categories: Sequence[Any] = (False, True),
    rng: object = None,
    accountant: Any = None,
) -> NDArray[Any]:
    """Randomise answers with k-ary randomized response: each report is epsilon-DP (local).

    ``categories`` defaults to yes/no (booleans). See :class:`RandomizedResponse`
    for the guarantee and :meth:`RandomizedResponse.estimate` for unbiased
    frequencies; :func:`coin_flip_survey` is the ln(3) coin protocol.
    ``accountant`` (an Accountant, ledger path or Session) is charged ε first,
    when the reports are released centrally as one data set.
    """
    mechanism = RandomizedResponse(epsilon=epsilon, categories=categories)
    result: NDArray[Any] = charge_and_run(
        as_accountant(accountant),
        Budget(epsilon),
        "randomized response",
        lambda: mechanism.randomise(values, rng=rng),
    )
    return result
