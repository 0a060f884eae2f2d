"""Distribution tests: each exact sampler draws from the distribution it claims."""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpkit.mechanisms import _exact
from dpkit.mechanisms._exact import bernoulli_exp, discrete_gaussian, discrete_laplace
from dpkit.mechanisms._random import SecureRandom, SeededRandom

N = 100_000


def _chi2_pvalue(samples: np.ndarray, pmf) -> float:
    """Chi-square goodness of fit over integer support, tails pooled to expected >= 20."""
    lo, hi = int(samples.min()), int(samples.max())
    support = np.arange(lo, hi + 1)
    probs = pmf(support)
    observed = np.bincount(samples - lo, minlength=support.size).astype(float)
    expected = probs * samples.size
    keep = expected >= 20
    obs = np.append(observed[keep], observed[~keep].sum() + 0.0)
    exp = np.append(expected[keep], samples.size - expected[keep].sum())
    if exp[-1] < 1:
        obs, exp = obs[:-1], exp[:-1]
        exp = exp * obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


@pytest.mark.parametrize(("num", "den"), [(0, 1), (1, 3), (1, 1), (5, 2), (13, 7)])
def test_bernoulli_exp_matches_exp_minus_gamma(num, den):
    src = SeededRandom(np.random.default_rng(num * 31 + den))
    hits = bernoulli_exp(src, np.full(N, num), np.full(N, den)).sum()
    p = math.exp(-num / den)
    assert stats.binomtest(int(hits), N, p).pvalue > 1e-3


def test_bernoulli_exp_big_integer_path():
    src = SeededRandom(np.random.default_rng(5))
    big = 1 << 70
    num = np.full(20_000, big // 2, dtype=object)
    den = np.full(20_000, big, dtype=object)
    hits = bernoulli_exp(src, num, den).sum()
    assert stats.binomtest(int(hits), 20_000, math.exp(-0.5)).pvalue > 1e-3


@pytest.mark.parametrize(("t", "s"), [(1, 1), (3, 1), (10, 3), (1, 4), (25, 2)])
def test_discrete_laplace_pmf(t, s):
    src = SeededRandom(np.random.default_rng(t * 100 + s))
    y = discrete_laplace(src, t, s, N)
    p = math.exp(-s / t)
    pmf = lambda k: (1 - p) / (1 + p) * p ** np.abs(k)  # noqa: E731
    assert _chi2_pvalue(y, pmf) > 1e-3


@pytest.mark.parametrize(("a", "b"), [(1, 1), (7, 3), (50, 1), (2**20, 1)])
def test_discrete_gaussian_pmf(a, b):
    src = SeededRandom(np.random.default_rng(a + b))
    y = discrete_gaussian(src, a, b, N)
    sigma2 = a / b
    lim = int(12 * math.sqrt(sigma2)) + 2
    norm = np.exp(-(np.arange(-lim, lim + 1) ** 2) / (2 * sigma2)).sum()
    pmf = lambda k: np.exp(-(k.astype(float) ** 2) / (2 * sigma2)) / norm  # noqa: E731
    assert _chi2_pvalue(y, pmf) > 1e-3


def test_discrete_gaussian_large_sigma_uses_exact_big_path():
    src = SeededRandom(np.random.default_rng(3))
    y = discrete_gaussian(src, 1 << 44, 1, 20_000)  # sigma = 2^22: Python-int arithmetic
    assert stats.kstest(y / 2**22, "norm").pvalue > 1e-3


def test_secure_source_is_uniform_and_unbiased():
    src = SecureRandom()
    draws = src.uniform_below(np.full(60_000, 6, dtype=np.int64))
    counts = np.bincount(draws, minlength=6)
    assert draws.min() >= 0 and draws.max() <= 5
    assert stats.chisquare(counts).pvalue > 1e-4
    bits = src.bits(50_000)
    assert stats.binomtest(int(bits.sum()), 50_000, 0.5).pvalue > 1e-4


def _exp_neg_bracket(num: int, den: int, terms: int = 120) -> tuple[Fraction, Fraction]:
    """exp(-num/den) between two partial sums of its alternating Taylor series."""
    g = Fraction(num, den)
    total, term = Fraction(0), Fraction(1)
    sums = []
    for j in range(terms):
        total += term
        sums.append(total)
        term = term * (-g) / (j + 1)
    return min(sums[-2:]), max(sums[-2:])


@pytest.mark.parametrize(("num", "den"), [(1, 1), (1, 3), (5, 2), (13, 7), (1, 2**40), (7, 1)])
def test_exact_digits_of_exp_minus_gamma(num: int, den: int) -> None:
    lo, hi = _exp_neg_bracket(num, den)
    for words in (1, 2, 3):
        scale = 2 ** (62 * words)
        assert math.floor(lo * scale) == math.floor(hi * scale)  # the bracket is tight enough
        assert _exact._exp_neg_digits(num, den, words) == math.floor(lo * scale)


@pytest.mark.parametrize(
    ("num", "den"), [(1, 1), (1, 3), (5, 2), (1 << 70, 1 << 71), (3, 1 << 60), (40, 1)]
)
def test_bernoulli_exp_exact_path_alone_has_the_right_law(
    num: int, den: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A margin so wide that most draws are settled by the exact digit comparison."""
    monkeypatch.setattr(_exact, "_MARGIN", 0.05)
    monkeypatch.setattr(_exact, "_TINY", 2.0**-20)
    n = 4_000
    src = SeededRandom(np.random.default_rng(num % 1000 + den % 997))
    big = num > 2**62 or den > 2**62
    nums = np.full(n, num, dtype=object if big else np.int64)
    dens = np.full(n, den, dtype=object if big else np.int64)
    hits = bernoulli_exp(src, nums, dens).sum()
    p = math.exp(-num / den)
    assert stats.binomtest(int(hits), n, p).pvalue > 1e-3


def test_bernoulli_exp_with_integers_too_large_for_a_double() -> None:
    src = SeededRandom(np.random.default_rng(12))
    n, big = 5_000, 1 << 1100
    hits = bernoulli_exp(src, np.full(n, big, dtype=object), np.full(n, 2 * big, dtype=object))
    assert stats.binomtest(int(hits.sum()), n, math.exp(-0.5)).pvalue > 1e-3


def test_bernoulli_exp_extremes() -> None:
    src = SeededRandom(np.random.default_rng(8))
    assert bernoulli_exp(src, np.zeros(1000, dtype=np.int64), np.ones(1000, dtype=np.int64)).all()
    huge = np.full(1000, 10**40, dtype=object)
    assert not bernoulli_exp(src, huge, np.ones(1000, dtype=object)).any()
    assert not bernoulli_exp(src, np.full(1000, 5000), np.ones(1000, dtype=np.int64)).any()


def test_exp_minus_one_tie_goes_to_the_next_digit() -> None:
    """A first word equal to exp(-1)'s first digit is decided by the following words."""
    first, second = _exact._digit(1, 1, 1), _exact._digit(1, 1, 2)

    class Scripted:
        def __init__(self, words: list[int]) -> None:
            self.words = words

        def uniform_below(self, bound: np.ndarray) -> np.ndarray:
            return np.array([self.words.pop(0) for _ in range(np.size(bound))], dtype=np.int64)

    assert _exact._bernoulli_exp_minus_one(Scripted([first, second - 1]), 1)[0]
    assert not _exact._bernoulli_exp_minus_one(Scripted([first, second + 1]), 1)[0]
    assert _exact._bernoulli_exp_minus_one(Scripted([first - 1]), 1)[0]
    assert not _exact._bernoulli_exp_minus_one(Scripted([first + 1]), 1)[0]


@pytest.mark.parametrize("bound", [1, 2, 3, 65_537, 2**32, 2**32 + 1, 2**53 + 7, 2**62, 2**63 - 1])
@pytest.mark.parametrize("shape", [(1,), (17,), (2, 9)])
def test_seeded_source_draws_the_same_stream_for_one_bound_or_many(
    bound: int, shape: tuple
) -> None:
    # The seeded source takes NumPy's scalar-bound path when every bound is equal (faster);
    # seeded releases must stay bit for bit what the per-element path drew, and the
    # generator must be left in the same state.
    fast = SeededRandom(np.random.default_rng(bound % 997))
    reference = np.random.default_rng(bound % 997)
    got = fast.uniform_below(np.full(shape, bound, dtype=np.int64))
    want = reference.integers(0, np.full(shape, bound, dtype=np.int64), dtype=np.int64)
    assert got.shape == want.shape and np.array_equal(got, want)
    assert fast.generator().integers(0, 2**62) == reference.integers(0, 2**62)


class _ScriptedWords:
    """A source replaying given bytes (``words``) and given integers (``uniform_below``)."""

    def __init__(self, top: list[int], rest: list[int]) -> None:
        self.top, self.rest = list(top), list(rest)
        self.byte_requests = 0

    def words(self, size: int) -> np.ndarray:
        self.byte_requests += 8 * size
        raw = (self.top + [255] * (8 * size))[: 8 * size]
        self.top = self.top[8 * size :]
        return np.array(raw, dtype=np.uint8).view(np.uint64)

    def uniform_below(self, bound: np.ndarray) -> np.ndarray:
        return np.array([self.rest.pop(0) for _ in range(np.size(bound))], dtype=np.int64)


def test_far_draws_need_the_whole_first_word_zero_then_the_exact_digits() -> None:
    """γ >= 45: exp(-γ)'s first digit is 0, so only W = 0 (top byte 0, low 54 bits 0) may win."""
    num, den = 45, 1
    assert _exact._digit(num, den, 1) == 0
    second = _exact._digit(num, den, 2)
    far = np.ones(4, dtype=bool)
    nums, dens = np.full(4, num, dtype=np.int64), np.full(4, den, dtype=np.int64)
    # draw 0: top byte 7 (W > 0); 1: top 0, low 3 (W > 0); 2: W = 0, next word below
    # the second digit (U < exp(-γ)); 3: W = 0, next word above it.
    src = _ScriptedWords([7, 0, 0, 0], [3, 0, 0, second - 1, second + 1])
    got = _exact._far_draws(src, far, nums, dens)
    assert got.tolist() == [False, False, True, False]
    assert src.rest == [] and src.byte_requests == 8  # one byte per draw, rounded to a word


def test_bernoulli_exp_routes_far_and_near_draws_by_gamma() -> None:
    """Mixed γ: the near ones keep their law, the far ones lose unless W = 0."""
    n = 40_000
    nums = np.tile(np.array([1, 50, 0, 10**6], dtype=np.int64), n // 4)
    dens = np.tile(np.array([2, 1, 1, 3], dtype=np.int64), n // 4)
    got = bernoulli_exp(SeededRandom(np.random.default_rng(4)), nums, dens).reshape(-1, 4)
    assert stats.binomtest(int(got[:, 0].sum()), n // 4, math.exp(-0.5)).pvalue > 1e-3
    assert not got[:, 1].any() and got[:, 2].all() and not got[:, 3].any()
