"""The estimator every pure frequency oracle shares (Wang et al., USENIX Security 2017).

A *pure* oracle has a support set for each value: a report supports value v
with probability p* if the respondent's value is v and q* otherwise. With C_v
the number of reports supporting v among n, E[C_v] = n_v p* + (n - n_v) q*, so
    count_v = (C_v - n q*) / (p* - q*)
is unbiased, and, reports being independent,
    Var[count_v] = n q*(1 - q*) / (p* - q*)^2 + n_v (1 - p* - q*) / (p* - q*).
The first term is Wang et al.'s Var* (the value-free part, used to compare
oracles); the second is small when n_v is. Pure functions of public
parameters and support counts: post-processing, no privacy cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats


@dataclass(frozen=True)
class FrequencyEstimate:
    """Unbiased counts per domain value, with variance and normal-approximation intervals.

    ``counts`` are unbiased (they can be negative or exceed n: use
    :func:`dpkit.local.norm_sub` for consistent ones); ``variance`` is each
    count's variance from the oracle's formula with the estimated count
    plugged in (clipped to [0, n]); ``ci_low``/``ci_high`` are
    ``counts -/+ z * sqrt(variance)`` at ``level``. Frequencies are counts / n.
    """

    oracle: str
    epsilon: float
    n: int
    domain: tuple[Any, ...]
    counts: NDArray[np.float64]
    variance: NDArray[np.float64]
    ci_low: NDArray[np.float64]
    ci_high: NDArray[np.float64]
    level: float

    @property
    def frequencies(self) -> NDArray[np.float64]:
        """Unbiased frequencies (counts / n)."""
        return self.counts / self.n

    @property
    def frequency_variance(self) -> NDArray[np.float64]:
        """Variance of each frequency (variance / n^2)."""
        return self.variance / float(self.n) ** 2

    @property
    def frequency_ci(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The intervals on the frequency scale."""
        return self.ci_low / self.n, self.ci_high / self.n


def count_variance(
    n: int | float, p_star: float, q_star: float, counts: NDArray[np.float64] | float = 0.0
) -> NDArray[np.float64]:
    """Var[count_v] for true (or plugged-in) counts n_v; counts=0 gives Var*."""
    gap = p_star - q_star
    base = n * q_star * (1.0 - q_star) / gap**2
    return np.asarray(base + np.asarray(counts, dtype=np.float64) * (1.0 - p_star - q_star) / gap)


def estimate_from_supports(
    supports: NDArray[np.int64],
    *,
    n: int,
    p_star: float,
    q_star: float,
    oracle: str,
    epsilon: float,
    domain: tuple[Any, ...],
    level: float,
) -> FrequencyEstimate:
    """Unbiased counts, plug-in variances and intervals from support counts C_v."""
    counts = (supports.astype(np.float64) - n * q_star) / (p_star - q_star)
    variance = count_variance(n, p_star, q_star, np.clip(counts, 0.0, float(n)))
    half = float(stats.norm.ppf(0.5 + level / 2)) * np.sqrt(variance)
    return FrequencyEstimate(
        oracle=oracle,
        epsilon=epsilon,
        n=n,
        domain=domain,
        counts=counts,
        variance=variance,
        ci_low=counts - half,
        ci_high=counts + half,
        level=level,
    )
