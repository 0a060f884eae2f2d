"""Empirical privacy audits: a statistical *lower bound* on a mechanism's epsilon.

An audit runs a mechanism many times on two neighbouring inputs, looks at a
family of output events E (tails and bins), and bounds
    log((P[M(x) in E] - delta) / P[M(x') in E])
from below with Clopper-Pearson intervals (Bonferroni-corrected over events
and both directions). If that lower bound exceeds the claimed epsilon, the
claim is refuted at the stated confidence. Passing an audit is evidence, not
proof: the proofs are in the docstrings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats


@dataclass(frozen=True)
class AuditResult:
    """Outcome of an audit.

    ``epsilon_lower_bound``: with probability >= ``confidence``, the true
    epsilon is at least this. ``epsilon_estimate``: the largest plug-in log
    ratio among well-populated events (a point estimate). ``passed``: the lower
    bound does not exceed the claimed epsilon.
    """

    claimed_epsilon: float
    epsilon_lower_bound: float
    epsilon_estimate: float
    events: int
    samples: int
    passed: bool


def _events_continuous(
    a: NDArray[np.float64], b: NDArray[np.float64], n_thresholds: int
) -> list[NDArray[np.bool_]]:
    pooled = np.concatenate([a, b])
    cuts = np.unique(np.quantile(pooled, np.linspace(0.005, 0.995, n_thresholds)))
    return [pooled >= c for c in cuts] + [pooled <= c for c in cuts]


def _events_discrete(
    a: NDArray[np.float64], b: NDArray[np.float64], max_values: int
) -> list[NDArray[np.bool_]]:
    pooled = np.concatenate([a, b])
    values = np.unique(pooled)
    if values.size > max_values:
        return _events_continuous(a, b, max_values)
    events = [pooled == v for v in values]
    events += [pooled >= v for v in values] + [pooled <= v for v in values]
    return events


def audit_samples(
    samples_x: ArrayLike,
    samples_x_prime: ArrayLike,
    *,
    epsilon: float,
    delta: float = 0.0,
    confidence: float = 0.99,
    n_thresholds: int = 60,
    min_count: int = 1000,
) -> AuditResult:
    """Audit outputs of M on neighbouring inputs x and x' (both directions)."""
    a = np.asarray(samples_x, dtype=np.float64).ravel()
    b = np.asarray(samples_x_prime, dtype=np.float64).ravel()
    n_a, n_b = a.size, b.size
    discrete = np.unique(np.concatenate([a[:2000], b[:2000]])).size < 200
    events = _events_discrete(a, b, 400) if discrete else _events_continuous(a, b, n_thresholds)
    alpha = (1.0 - confidence) / (2 * len(events))
    lower_bound = -math.inf
    estimate = -math.inf
    for event in events:
        k_a = int(event[:n_a].sum())
        k_b = int(event[n_a:].sum())
        for k1, n1, k2, n2 in ((k_a, n_a, k_b, n_b), (k_b, n_b, k_a, n_a)):
            if k1 == 0:
                continue
            p1_low = float(stats.beta.ppf(alpha, k1, n1 - k1 + 1))
            p2_high = float(stats.beta.ppf(1 - alpha, k2 + 1, n2 - k2)) if k2 < n2 else 1.0
            if p1_low - delta > 0:
                lower_bound = max(lower_bound, math.log((p1_low - delta) / p2_high))
            if k1 >= min_count and k2 >= min_count:
                estimate = max(estimate, math.log((k1 / n1) / (k2 / n2)))
    return AuditResult(
        claimed_epsilon=epsilon,
        epsilon_lower_bound=max(lower_bound, 0.0),
        epsilon_estimate=max(estimate, 0.0),
        events=len(events),
        samples=min(n_a, n_b),
        passed=lower_bound <= epsilon,
    )
