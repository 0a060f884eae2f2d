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

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from dpkit.privacy import LOCAL_NEIGHBOURING, PrivacyReport


class LocalRelease:
    """What every local-DP estimate shares: its privacy report and ``ci`` with its aliases.

    ``privacy``: each respondent's reports are ε-LDP, so the estimate (a
    function of the reports only) is ε-DP when one respondent's input changes;
    δ = 0; no accountant pays (the budget is spent on the devices).
    """

    epsilon: float
    ci: tuple[Any, Any]

    def _mechanism_name(self) -> str:
        raise NotImplementedError

    @property
    def privacy(self) -> PrivacyReport:
        """The :class:`dpkit.PrivacyReport` every release carries (public parameters only)."""
        return PrivacyReport(
            epsilon=self.epsilon,
            neighbouring=LOCAL_NEIGHBOURING,
            mechanisms=(self._mechanism_name(),),
        )

    @property
    def ci_low(self) -> Any:
        """Deprecated: ``ci[0]`` (goes in the next release)."""
        _deprecated_bound("ci_low", "ci[0]")
        return self.ci[0]

    @property
    def ci_high(self) -> Any:
        """Deprecated: ``ci[1]`` (goes in the next release)."""
        _deprecated_bound("ci_high", "ci[1]")
        return self.ci[1]


def _deprecated_bound(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is deprecated and goes in the next release; read {new} (ci is (low, high)).",
        DeprecationWarning,
        stacklevel=3,
    )


@dataclass(frozen=True)
class FrequencyEstimate(LocalRelease):
    """Unbiased counts per domain value, with variance and normal-approximation intervals.

    ``counts`` are unbiased (they can be negative or exceed n: use
    :func:`dpkit.local.norm_sub` for consistent ones); ``variance`` is each
    count's variance from the oracle's formula with the estimated count
    plugged in (clipped to [0, n]); ``ci`` is the pair of arrays
    ``(counts - z * sqrt(variance), counts + z * sqrt(variance))`` at ``level``
    (``ci_low``/``ci_high`` are its deprecated aliases). Frequencies are
    counts / n. ``privacy`` is the :class:`dpkit.PrivacyReport`.
    """

    oracle: str
    epsilon: float
    n: int
    domain: tuple[Any, ...]
    counts: NDArray[np.float64]
    variance: NDArray[np.float64]
    ci: tuple[NDArray[np.float64], NDArray[np.float64]]
    level: float

    def _mechanism_name(self) -> str:
        return self.oracle

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
        return self.ci[0] / self.n, self.ci[1] / self.n


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
        ci=(counts - half, counts + half),
        level=level,
    )
