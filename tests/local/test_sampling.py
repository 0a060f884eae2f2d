"""The local oracles' exact samplers: rational probabilities, bit-sliced Bernoulli bits."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest
from scipy import stats

from dpkit.local._sampling import (
    _SPREAD,
    BitProbability,
    RationalResponse,
    _bernoulli_kernel,
    _response_kernel,
)
from dpkit.mechanisms import SecureRandom, SeededRandom
from dpkit.mechanisms._random import _secure_bytes


@pytest.mark.parametrize("eps", [2.0**-20, 0.1, 0.5, math.log(3), 1.0, 4.0, 10.0, 30.0])
@pytest.mark.parametrize("k", [2, 3, 10, 1024, 2**20])
def test_rational_response_ratio_never_exceeds_e_eps(eps, k):
    rr = RationalResponse(epsilon=eps, k=k)
    a, b = rr.keep_weight, rr.other_weight
    assert rr.total == a + (k - 1) * b <= 2**52
    with localcontext() as ctx:  # the privacy ratio a / b <= e^eps, checked to 60 digits
        ctx.prec = 60
        assert Decimal(a) <= Decimal(b) * Decimal(eps).exp()
    if eps < 30:  # and it gives away almost nothing
        assert math.log(a / b) >= eps - 1e-6
    assert rr.p_keep == pytest.approx(math.exp(eps) / (math.exp(eps) + k - 1), rel=1e-6)


def test_response_kernel_maps_every_word_exactly():
    # D = 5 + 3 * 2 = 11: over one full cycle of words, the own value comes up 5 times
    # and every other value 2 times, whatever the own value.
    total, keep, other, k = 11, 5, 2, 4
    limit = 2**64 - 2**64 % total
    words = np.arange(total, dtype=np.uint64)
    for code in range(k):
        codes = np.full(total, code, dtype=np.int64)
        out = np.empty(total, dtype=np.int64)
        assert _response_kernel(words, codes, out, 0, total, limit, keep, other) == total
        expected = np.full(k, other)
        expected[code] = keep
        assert np.bincount(out, minlength=k).tolist() == expected.tolist()


def test_response_kernel_rejects_the_top_words_and_resumes():
    total = 11
    limit = 2**64 - 2**64 % total
    words = np.array([limit, 2**64 - 1, 3], dtype=np.uint64)
    out = np.full(2, -1, dtype=np.int64)
    codes = np.zeros(2, dtype=np.int64)
    assert _response_kernel(words, codes, out, 0, total, limit, 5, 2) == 1  # ran out
    assert out[0] == 0  # 3 < keep
    assert _response_kernel(np.array([9], dtype=np.uint64), codes, out, 1, total, limit, 5, 2) == 2
    assert out[1] == 3  # (9 - 5) // 2 = 2 >= code 0, so the third other value


def test_rational_response_sampled_frequencies():
    rr = RationalResponse(epsilon=1.0, k=5)
    codes = np.full(200_000, 2, dtype=np.int64)
    out = rr.sample(codes, SeededRandom(np.random.default_rng(4)))
    observed = np.bincount(out, minlength=5)
    expected = np.array([rr.p_other] * 5) * codes.size
    expected[2] = rr.p_keep * codes.size
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_bernoulli_kernel_is_exact_on_every_lane_pattern():
    # Three levels, numerator 0b101 = 5: lane j reads the bits of j (most significant
    # first) across the three words, so it must come out 1 exactly when j < 5.
    pattern = np.array([1, 0, 1], dtype=np.uint8)
    words = np.zeros(3, dtype=np.uint64)
    for lane in range(8):
        for level in range(3):
            if (lane >> (2 - level)) & 1:
                words[level] |= np.uint64(1) << np.uint64(lane)
    out = np.zeros(8, dtype=np.uint64)
    assert _bernoulli_kernel(words, pattern, _SPREAD, out, 0) == 1
    bits = out.view(np.uint8)[:8]
    assert bits.tolist() == [1, 1, 1, 1, 1, 0, 0, 0]


@pytest.mark.parametrize("q", [2.0**-40, 0.018, 0.3, 0.5, 0.9])
def test_bit_probability_rounds_up_and_samples_q(q):
    bp = BitProbability(q)
    assert q <= bp.q <= q * (1 + 2.0**-48) + 2.0**-52  # up, by at most one step of 2^-52
    bits = bp.sample((400, 1000), SecureRandom())
    assert bits.dtype == np.uint8 and set(np.unique(bits)) <= {0, 1}
    ones = int(bits.sum())
    assert stats.binomtest(ones, bits.size, bp.q).pvalue > 1e-4


def test_bit_probability_odd_shapes_and_tops_up_randomness():
    bp = BitProbability(0.3)
    for shape in [(1, 1), (3, 5), (7, 63), (1, 65)]:
        assert bp.sample(shape, SeededRandom(np.random.default_rng(1))).shape == shape
    assert BitProbability(1.0).sample((2, 3), SecureRandom()).tolist() == [[1] * 3] * 2


def test_secure_source_paths():
    source = SecureRandom()
    big = _secure_bytes(1 << 17)  # the ChaCha20 path
    assert len(big) == 1 << 17 and big != _secure_bytes(1 << 17)
    assert source.words(3).dtype == np.uint64
    for bound in (7, 2**32, 2**40 + 3):  # 32-bit and 64-bit words, constant bound
        draws = source.uniform_below(np.full(60_000, bound, dtype=np.int64))
        assert draws.min() >= 0 and draws.max() < bound
        assert stats.kstest(draws / bound, "uniform").pvalue > 1e-4 if bound > 7 else True
    mixed = source.uniform_below(np.array([3, 2**33, 5] * 20_000, dtype=np.int64))
    assert (mixed[0::3] < 3).all() and (mixed[2::3] < 5).all()
    observed = np.bincount(mixed[0::3], minlength=3)
    assert stats.chisquare(observed).pvalue > 1e-4
