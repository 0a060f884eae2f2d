"""Duchi et al.'s local-DP mean: unbiased, its variance formula, its report law, an audit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpkit.audit import audit_samples
from dpkit.errors import DataError, InvalidParameterError
from dpkit.local import DuchiMean, PiecewiseMean, best_mean_mechanism
from dpkit.mechanisms.randomized_response import RandomizedResponse

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.PrivacyWarning")


def _values(n: int = 2000) -> np.ndarray:
    return np.random.default_rng(0).beta(2, 5, n) * 80 + 10


MECHANISMS = {"duchi": DuchiMean, "piecewise": PiecewiseMean}


@pytest.mark.parametrize("name", sorted(MECHANISMS))
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_estimates_are_unbiased_with_the_stated_variance_and_coverage(
    name: str, epsilon: float
) -> None:
    # 400 independent surveys of the same 2,000 people: mean, spread and 95% coverage.
    m = MECHANISMS[name](epsilon=epsilon, bounds=(0, 100))
    v = _values()
    rng = np.random.default_rng(1)
    estimates = [m.estimate(m.perturb(v, rng=rng)) for _ in range(400)]
    means = np.array([e.mean for e in estimates])
    sd = math.sqrt(m.variance(v))
    assert abs(means.mean() - v.mean()) < 4 * sd / math.sqrt(400)
    assert means.std() == pytest.approx(sd, rel=0.1)
    stated = np.mean([e.variance for e in estimates])
    if name == "duchi":  # plug-in at the estimated mean
        assert stated == pytest.approx(sd**2, rel=0.05)
    else:  # the worst case over values: never below the truth
        assert stated >= sd**2
    covered = np.mean([e.ci[0] <= v.mean() <= e.ci[1] for e in estimates])
    assert 0.92 <= covered <= (0.98 if name == "duchi" else 1.0)


def test_piecewise_grid_matches_the_papers_variance_and_the_choice_rule() -> None:
    for epsilon in (0.5, 1.0, 2.0, 4.0):
        e = math.exp(epsilon / 2)
        paper = 1 / (e - 1) + (e + 3) / (3 * (e - 1) ** 2)  # worst case, |x| = 1
        grid = PiecewiseMean(epsilon=epsilon, bounds=(-1, 1)).worst_variance()
        assert grid == pytest.approx(paper, rel=1e-3)
    assert best_mean_mechanism(1.0) == "duchi"
    assert best_mean_mechanism(1.5) == "piecewise"
    reports = PiecewiseMean(epsilon=1.0, bounds=(0, 10)).reports
    assert reports.size == 2**16 and np.all(np.diff(reports) > 0)


def test_report_law_is_duchis_and_its_likelihood_ratio_is_at_most_e_epsilon() -> None:
    m = DuchiMean(epsilon=1.0, bounds=(-3.0, 5.0))
    rr = RandomizedResponse(epsilon=1.0, categories=(0, 1))
    assert m.c == pytest.approx((math.e + 1) / (math.e - 1), rel=1e-3)
    assert rr._eps <= 1  # the rational ε the exact sampler uses is at most the one declared
    rng = np.random.default_rng(2)
    for value, x in ((-3.0, -1.0), (1.0, 0.0), (3.0, 0.5), (5.0, 1.0), (99.0, 1.0)):
        reports = m.perturb(np.full(100_000, value), rng=rng)
        share = float(np.mean(reports == m.reports[1]))
        expected = 0.5 + x / (2 * m.c)
        assert abs(share - expected) < 4 * math.sqrt(expected * (1 - expected) / 100_000)
    assert set(np.unique(m.perturb(_values(), rng=rng)).tolist()) <= set(m.reports)


def _loss(mechanism: DuchiMean | PiecewiseMean, runs: int) -> float:
    lo, hi = mechanism.bounds
    a = mechanism.perturb(np.full(runs, lo), rng=np.random.default_rng(3))
    b = mechanism.perturb(np.full(runs, hi), rng=np.random.default_rng(4))
    return audit_samples(a, b, epsilon=mechanism.epsilon).epsilon_lower_bound


def test_audit_within_epsilon_and_a_broken_variant_fails() -> None:
    m = DuchiMean(epsilon=1.0, bounds=(0, 1))
    assert _loss(m, 50_000) <= 1.0
    broken = DuchiMean(epsilon=1.0, bounds=(0, 1))
    broken._rr = RandomizedResponse(epsilon=1.6, categories=(0, 1))  # randomises too little
    assert _loss(broken, 50_000) > 1.0


def test_piecewise_audit_within_epsilon_and_a_broken_variant_fails() -> None:
    m = PiecewiseMean(epsilon=1.0, bounds=(0, 1))
    assert _loss(m, 50_000) <= 1.0
    broken = PiecewiseMean(epsilon=1.0, bounds=(0, 1))
    broken._rr = RandomizedResponse(epsilon=1.0, categories=(0, 1))  # the whole ε inside
    assert _loss(broken, 50_000) > 1.0


def test_reports_read_back_from_text_are_accepted() -> None:
    m = PiecewiseMean(epsilon=2.0, bounds=(0, 10))
    reports = m.perturb(_values(300) / 10, rng=4)
    again = np.array([float(f"{r:.15g}") for r in reports])  # as a CSV file would hold them
    assert m.estimate(again).mean == pytest.approx(m.estimate(reports).mean, abs=1e-9)


def test_single_reports_and_reproducible_simulation() -> None:
    m = DuchiMean(epsilon=1.0, bounds=(0, 10))
    assert m.perturb_one(4.0, rng=5) in m.reports
    v = _values(50)
    assert np.array_equal(m.perturb(v, rng=9), m.perturb(v, rng=9))


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_bad_input_is_refused_with_a_clear_message(name: str) -> None:
    cls = MECHANISMS[name]
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(InvalidParameterError):
            cls(epsilon=bad, bounds=(0, 1))
    with pytest.raises(InvalidParameterError):
        cls(epsilon=1.0, bounds=(5, 5))
    m = cls(epsilon=1.0, bounds=(0, 1))
    with pytest.raises(DataError, match="finite"):
        m.perturb([0.5, float("nan")])
    with pytest.raises(DataError, match="numbers"):
        m.perturb(["secret-value"])
    with pytest.raises(DataError, match="no reports"):
        m.estimate([])
    with pytest.raises(DataError, match="report values") as info:
        m.estimate([m.reports[0], 123.456])
    assert "123" not in str(info.value)
    with pytest.raises(InvalidParameterError):
        m.estimate(m.perturb([0.5], rng=1), level=1.5)
