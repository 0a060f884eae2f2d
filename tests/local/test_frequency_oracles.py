"""Frequency oracles: unbiasedness, variance against the formula, privacy audits, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpkit.audit import audit_samples
from dpkit.errors import DataError, InvalidParameterError
from dpkit.local import (
    FrequencyEstimate,
    GeneralizedRandomizedResponse,
    HadamardResponse,
    OptimizedLocalHashing,
    OptimizedUnaryEncoding,
    SymmetricUnaryEncoding,
    best_oracle,
)
from dpkit.local._sampling import BitProbability, RationalResponse
from dpkit.mechanisms import SeededRandom

ORACLES = [
    GeneralizedRandomizedResponse,
    OptimizedUnaryEncoding,
    SymmetricUnaryEncoding,
    OptimizedLocalHashing,
    HadamardResponse,
]
D = 6
N = 1_500
RUNS = 300
# A skewed population with one value nobody holds (tests both variance terms).
TRUE_COUNTS = np.array([600, 400, 250, 150, 100, 0])


def _population() -> np.ndarray:
    return np.repeat(np.arange(D), TRUE_COUNTS)


def _repeated_estimates(cls: type, epsilon: float, seed: int) -> tuple[object, list]:
    """RUNS independent surveys of the same population, perturbed in one vectorised call."""
    oracle = cls(epsilon=epsilon, domain=D)
    values = np.tile(_population(), RUNS)
    reports = oracle.perturb(values, rng=seed)
    per_run = reports.reshape(RUNS, N, *reports.shape[1:])
    return oracle, [oracle.estimate(run) for run in per_run]


@pytest.mark.parametrize("cls", ORACLES)
def test_unbiased_variance_matches_formula_and_intervals_cover(cls):
    # Claim: E[count_v] = n_v, and Var[count_v] = n q*(1-q*)/(p*-q*)^2 + n_v (1-p*-q*)/(p*-q*).
    oracle, estimates = _repeated_estimates(cls, 1.0, seed=11)
    counts = np.array([e.counts for e in estimates])
    formula = oracle.variance(N, counts=TRUE_COUNTS)
    mean_error = counts.mean(axis=0) - TRUE_COUNTS
    # Generous: 5 standard errors of the mean over RUNS surveys.
    assert np.all(np.abs(mean_error) < 5 * np.sqrt(formula / RUNS))
    ratio = counts.var(axis=0, ddof=1) / formula
    # Each ratio has a relative sampling sd of sqrt(2/RUNS) ~ 8%.
    assert 0.8 < ratio.mean() < 1.2, ratio
    assert np.all((ratio > 0.7) & (ratio < 1.3)), ratio
    # The 95% normal-approximation intervals cover the truth about 95% of the time.
    covered = [(e.ci[0] <= TRUE_COUNTS) & (TRUE_COUNTS <= e.ci[1]) for e in estimates]
    assert 0.93 < np.mean(covered) < 0.97


@pytest.mark.parametrize("cls", ORACLES)
def test_estimate_fields_and_labels(cls):
    labels = ["red", "green", "blue"]
    oracle = cls(epsilon=2.0, domain=labels)
    values = np.array(["red"] * 300 + ["blue"] * 100, dtype=object)
    est = oracle.estimate(oracle.perturb(values, rng=3), level=0.9)
    assert isinstance(est, FrequencyEstimate)
    assert est.domain == tuple(labels) and est.n == 400 and est.oracle == oracle.name
    assert np.all(est.ci[0] < est.counts) and np.all(est.counts < est.ci[1])
    assert np.allclose(est.frequencies, est.counts / 400)
    z = 1.6448536269514722
    assert np.allclose(est.ci[1] - est.counts, z * np.sqrt(est.variance))
    assert np.all(est.variance > 0)


def test_grr_is_the_coin_flip_scheme_for_two_values():
    oracle = GeneralizedRandomizedResponse(epsilon=math.log(3), domain=2)
    assert oracle.p_star == pytest.approx(0.75, abs=1e-8)


def test_oue_variance_independent_of_domain_and_below_sue():
    for eps in (0.5, 1.0, 4.0):
        oue = [float(OptimizedUnaryEncoding(epsilon=eps, domain=d).variance(1)) for d in (4, 400)]
        sue = float(SymmetricUnaryEncoding(epsilon=eps, domain=4).variance(1))
        e = math.exp(eps)
        assert oue[0] == oue[1] == pytest.approx(4 * e / (e - 1) ** 2, rel=1e-6)
        assert oue[0] <= sue


def test_best_oracle_rule():
    # Small domain: GRR; large domain: OLH/OUE (equal variances when e^eps + 1 is an integer).
    assert best_oracle(epsilon=1.0, domain=4).name == "grr"
    assert best_oracle(epsilon=math.log(3), domain=1024).name == "olh"
    assert best_oracle(epsilon=1.0, domain=1024).name == "oue"
    # d = 10 at eps = 1 is below 3 e^eps + 2, yet OUE's total variance is lower than GRR's.
    assert best_oracle(epsilon=1.0, domain=10).name == "oue"
    rng = np.random.default_rng(3)
    for eps in (0.5, 1.0, 2.0, 4.0):
        for d in (2, 10, 100, 1024):
            # Any composition of n: the rule's total does not depend on it.
            counts = rng.multinomial(10_000, rng.dirichlet(np.ones(d)))
            totals = {
                c.name: float(c(epsilon=eps, domain=d).variance(10_000, counts=counts).sum())
                for c in ORACLES
            }
            chosen = best_oracle(epsilon=eps, domain=d).name
            assert totals[chosen] <= min(totals.values()) * (1 + 1e-6), (eps, d, totals)


def test_olh_large_domain_estimates():
    oracle = OptimizedLocalHashing(epsilon=2.0, domain=1024)
    rng = np.random.default_rng(5)
    values = np.minimum(rng.geometric(0.05, size=50_000) - 1, 1023)
    est = oracle.estimate(oracle.perturb(values, rng=6))
    truth = np.bincount(values, minlength=1024)
    z = (est.counts - truth) / np.sqrt(oracle.variance(50_000, counts=truth))
    assert abs(z.mean()) < 0.2 and 0.85 < z.std() < 1.15


# ---- per-report privacy audits ------------------------------------------------------------

AUDIT_N = 60_000
AUDIT_EPS = 1.0


def _grr_reports(oracle: GeneralizedRandomizedResponse, value: int, seed: int) -> np.ndarray:
    return oracle.perturb(np.full(AUDIT_N, value), rng=seed)


def test_grr_audit_and_broken_variant():
    oracle = GeneralizedRandomizedResponse(epsilon=AUDIT_EPS, domain=4)
    a, b = _grr_reports(oracle, 0, 21), _grr_reports(oracle, 1, 22)
    result = audit_samples(a, b, epsilon=AUDIT_EPS)
    assert result.passed and result.epsilon_estimate == pytest.approx(AUDIT_EPS, abs=0.15)
    broken = GeneralizedRandomizedResponse(epsilon=3 * AUDIT_EPS, domain=4)  # claims AUDIT_EPS
    a, b = _grr_reports(broken, 0, 23), _grr_reports(broken, 1, 24)
    assert not audit_samples(a, b, epsilon=AUDIT_EPS).passed


def _as_integers(bits: np.ndarray) -> np.ndarray:
    """Each unary report (d bits) as one integer, so the audit sees the whole report."""
    return bits @ (1 << np.arange(bits.shape[1]))


class _BrokenOUE(OptimizedUnaryEncoding):
    """OUE whose other bits are flipped as if for 3 eps, while still claiming eps."""

    def __init__(self, *, epsilon: float, domain: int) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        self._spurious = BitProbability(1.0 / (math.exp(3 * epsilon) + 1.0))


@pytest.mark.parametrize("cls", [OptimizedUnaryEncoding, _BrokenOUE])
def test_oue_audit_and_broken_variant(cls):
    oracle = cls(epsilon=AUDIT_EPS, domain=3)
    a = _as_integers(oracle.perturb(np.zeros(AUDIT_N, dtype=np.int64), rng=31))
    b = _as_integers(oracle.perturb(np.ones(AUDIT_N, dtype=np.int64), rng=32))
    result = audit_samples(a, b, epsilon=AUDIT_EPS)
    if cls is OptimizedUnaryEncoding:
        assert result.passed
    else:
        assert not result.passed and result.epsilon_lower_bound > AUDIT_EPS


# ---- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ORACLES)
@pytest.mark.parametrize("epsilon", [0, -1.0, float("nan"), float("inf"), "1"])
def test_bad_epsilon(cls, epsilon):
    with pytest.raises(InvalidParameterError):
        cls(epsilon=epsilon, domain=4)


@pytest.mark.parametrize("cls", ORACLES)
@pytest.mark.parametrize("domain", [1, 0, -3, True, "abc", ["only"], ["x", "x"], 2.5])
def test_bad_domain(cls, domain):
    with pytest.raises(InvalidParameterError):
        cls(epsilon=1.0, domain=domain)


SECRET = 987654321


@pytest.mark.parametrize("cls", ORACLES)
def test_values_outside_domain_never_quoted(cls):
    oracle = cls(epsilon=1.0, domain=4)
    hostile = (
        np.array([0, 1, SECRET]),
        np.array([0, -SECRET]),
        np.array([0, 2**64 - SECRET], dtype=np.uint64),
        [0, "s987654321"],
        [0, None],
        [0, float("nan")],
        [0, 1.5],
    )
    for values in hostile:
        with pytest.raises(DataError) as info:
            oracle.perturb(values, rng=1)
        assert "987654321" not in str(info.value)


def _good_reports(cls: type) -> np.ndarray:
    return cls(epsilon=1.0, domain=4).perturb(
        np.arange(4), rng=SeededRandom(np.random.default_rng(2))
    )


@pytest.mark.parametrize("cls", ORACLES)
def test_bad_reports(cls):
    oracle = cls(epsilon=1.0, domain=4)
    good = _good_reports(cls)
    oracle.estimate(good)  # sanity: the wire format round-trips
    empty = good[:0]
    wrong_rank = good[..., None]
    wrong_type = good.astype(np.float64) + 0.5
    out_of_range = good.astype(np.int64)
    out_of_range.flat[-1] = SECRET
    for bad in (empty, wrong_rank, wrong_type, out_of_range, "text"):
        with pytest.raises(DataError) as info:
            oracle.estimate(bad)
        assert "987654321" not in str(info.value)
    if good.ndim == 2:
        with pytest.raises(DataError):
            oracle.estimate(good[:, :-1])  # wrong width
    with pytest.raises(InvalidParameterError):
        oracle.estimate(good, level=1.5)
    with pytest.raises(InvalidParameterError):
        oracle.variance(0)


def test_hadamard_reports_and_supports_match_the_matrix():
    from scipy.linalg import hadamard

    from dpkit.local.frequency_oracles import walsh_hadamard

    values = np.random.default_rng(3).integers(-50, 50, 64)
    assert np.array_equal(walsh_hadamard(values), hadamard(64) @ values)
    oracle = HadamardResponse(epsilon=1.0, domain=37)
    assert oracle.k == 64
    codes = np.arange(20_000) % 37
    reports = oracle.perturb(codes, rng=42)
    h = hadamard(oracle.k)
    share = np.mean(h[codes + 1, reports] == 1)  # the report lies in the value's own set
    assert abs(share - oracle.p_star) < 4 * math.sqrt(oracle.p_star * (1 - oracle.p_star) / 20_000)
    direct = (h[1:38][:, reports] == 1).sum(axis=1)
    assert np.array_equal(oracle._supports(reports)[1], direct)
    # Reports of one value are uniform within its set and within the complement (chi-square).
    from scipy.stats import chisquare

    own = np.bincount(oracle.perturb(np.full(64_000, 5), rng=43), minlength=64)
    assert chisquare(own[h[6] == 1]).pvalue > 1e-3
    assert chisquare(own[h[6] == -1]).pvalue > 1e-3


class _BrokenHadamard(HadamardResponse):
    """Hadamard response that lands in the own set as if for 3 eps, while claiming eps."""

    def __init__(self, *, epsilon: float, domain: int) -> None:
        super().__init__(epsilon=epsilon, domain=domain)
        self._member_rr = RationalResponse(epsilon=3 * epsilon, k=2)


@pytest.mark.parametrize("cls", [HadamardResponse, _BrokenHadamard])
def test_hadamard_audit_and_broken_variant(cls):
    oracle = cls(epsilon=AUDIT_EPS, domain=3)
    a = oracle.perturb(np.zeros(AUDIT_N, dtype=np.int64), rng=51)
    b = oracle.perturb(np.ones(AUDIT_N, dtype=np.int64), rng=52)
    result = audit_samples(a, b, epsilon=AUDIT_EPS)
    if cls is HadamardResponse:
        assert result.passed
    else:
        assert not result.passed and result.epsilon_lower_bound > AUDIT_EPS


def test_olh_supports_match_the_hash_definition():
    # The blocked uint32 counter against ((a v + b) mod P) mod g == y computed directly.
    from dpkit.local.frequency_oracles import HASH_PRIME

    oracle = OptimizedLocalHashing(epsilon=1.5, domain=37)
    reports = oracle.perturb(np.arange(500) % 37, rng=41)
    reports[:3, :2] = [[HASH_PRIME - 1, HASH_PRIME - 1], [1, 0], [HASH_PRIME - 2, 5]]  # extremes
    a, b, y = (reports[:, i, None] for i in range(3))
    direct = (((a * np.arange(37) + b) % HASH_PRIME) % oracle.g == y).sum(axis=0)
    assert np.array_equal(oracle._supports(reports)[1], direct)


@pytest.mark.parametrize("cls", ORACLES)
def test_single_report_form(cls):
    oracle = cls(epsilon=1.0, domain=["a", "b", "c"])
    one = oracle.perturb_one("b", rng=7)
    many = oracle.perturb(np.array(["b"], dtype=object), rng=7)
    assert np.array_equal(np.asarray(one), many[0])
    with pytest.raises(DataError):
        oracle.perturb_one("z", rng=7)
