"""Empirical privacy audits: outputs on neighbouring inputs stay within e^eps (+ delta).

Each audit is paired with a deliberately broken variant (noise scale halved,
i.e. the mechanism really spends 2*eps) that must FAIL the same audit: this
shows the audit can fail and has the power to catch a factor-2 mistake.
"""

import numpy as np
import pytest

from dpkit import mechanisms as M
from dpkit.audit import audit_samples

N = 150_000
EPS = 1.0


def _laplace_samples(eps, sensitivity, seed):
    mech = M.Laplace(epsilon=eps, sensitivity=sensitivity)
    src = M.SeededRandom(np.random.default_rng(seed))
    # N independent scalar releases: the mechanism's own exact sampler, vectorised.
    from dpkit.mechanisms._exact import discrete_laplace

    noise = discrete_laplace(src, mech._t, mech._s, 2 * N) * mech.granularity
    return noise[:N] + 0.0, noise[N:] + sensitivity


@pytest.mark.parametrize("sensitivity", [1.0, 3.5])
def test_laplace_audit_and_broken_variant(sensitivity):
    a, b = _laplace_samples(EPS, sensitivity, seed=1)
    assert audit_samples(a, b, epsilon=EPS).passed
    a, b = _laplace_samples(2 * EPS, sensitivity, seed=2)  # half the noise, still claiming EPS
    result = audit_samples(a, b, epsilon=EPS)
    assert not result.passed and result.epsilon_lower_bound > EPS


def _geometric_samples(eps, seed):
    from dpkit.mechanisms._exact import discrete_laplace

    mech = M.Geometric(epsilon=eps, sensitivity=1)
    noise = discrete_laplace(M.SeededRandom(np.random.default_rng(seed)), mech._t, mech._s, 2 * N)
    return noise[:N], noise[N:] + 1


def test_geometric_audit_and_broken_variant():
    a, b = _geometric_samples(EPS, 3)
    result = audit_samples(a, b, epsilon=EPS)
    assert result.passed
    assert result.epsilon_estimate == pytest.approx(EPS, abs=0.1)  # the bound is tight
    a, b = _geometric_samples(2 * EPS, 4)
    assert not audit_samples(a, b, epsilon=EPS).passed


def _gaussian_samples(eps, delta, seed):
    from dpkit.mechanisms._exact import discrete_gaussian

    mech = M.Gaussian(epsilon=eps, delta=delta, sensitivity=1.0)
    noise = discrete_gaussian(M.SeededRandom(np.random.default_rng(seed)), mech._sigma2, 1, 2 * N)
    noise = noise * mech.granularity
    return noise[:N], noise[N:] + 1.0


def test_gaussian_audit_and_broken_variant():
    a, b = _gaussian_samples(EPS, 1e-3, 5)
    assert audit_samples(a, b, epsilon=EPS, delta=1e-3).passed
    # sigma halved: eps grows far beyond the claim
    from dpkit.mechanisms._exact import discrete_gaussian

    mech = M.Gaussian(epsilon=EPS, delta=1e-3, sensitivity=1.0)
    noise = discrete_gaussian(M.SeededRandom(np.random.default_rng(6)), mech._sigma2 // 4, 1, 2 * N)
    noise = noise * mech.granularity
    assert not audit_samples(noise[:N], noise[N:] + 1.0, epsilon=EPS, delta=1e-3).passed


@pytest.mark.parametrize("selector", [M.exponential, M.permute_and_flip])
def test_selection_audit_and_broken_variant(selector):
    # With k candidates the worst-case ratio is ~e^eps * k / (e^eps + k - 1): many candidates
    # are needed before the exponential mechanism's loss approaches its bound.
    k, n = 48, 60_000
    u = np.zeros((n, k))
    u_prime = np.full((n, k), -1.0)
    u_prime[:, 0] = 1.0  # every utility moves by at most the sensitivity 1
    a = selector(u, epsilon=EPS, sensitivity=1.0, rng=7)
    b = selector(u_prime, epsilon=EPS, sensitivity=1.0, rng=8)
    assert audit_samples(a, b, epsilon=EPS).passed
    a = selector(u, epsilon=EPS, sensitivity=0.5, rng=9)  # sensitivity understated by 2x
    b = selector(u_prime, epsilon=EPS, sensitivity=0.5, rng=10)
    assert not audit_samples(a, b, epsilon=EPS).passed


def test_randomized_response_audit_and_broken_variant():
    n = 100_000
    yes = M.randomized_response(np.ones(n, dtype=bool), epsilon=EPS, rng=11).astype(float)
    no = M.randomized_response(np.zeros(n, dtype=bool), epsilon=EPS, rng=12).astype(float)
    result = audit_samples(yes, no, epsilon=EPS)
    assert result.passed and result.epsilon_estimate == pytest.approx(EPS, abs=0.05)
    yes = M.randomized_response(np.ones(n, dtype=bool), epsilon=2 * EPS, rng=13).astype(float)
    no = M.randomized_response(np.zeros(n, dtype=bool), epsilon=2 * EPS, rng=14).astype(float)
    assert not audit_samples(yes, no, epsilon=EPS).passed


def test_coin_flip_survey_is_ln3_dp():
    n = 100_000
    yes = M.coin_flip_survey(np.ones(n, dtype=bool), rng=15).astype(float)
    no = M.coin_flip_survey(np.zeros(n, dtype=bool), rng=16).astype(float)
    result = audit_samples(yes, no, epsilon=np.log(3))
    assert result.passed and result.epsilon_estimate == pytest.approx(np.log(3), abs=0.05)
