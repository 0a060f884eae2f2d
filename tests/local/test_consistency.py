"""norm_sub: non-negative, sums to n, and it is the projection it claims to be."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpkit.errors import InvalidParameterError
from dpkit.local import norm_sub

estimates = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=40
)
totals = st.floats(min_value=0.0, max_value=1e6)


@given(estimates, totals)
def test_non_negative_and_sums_to_n(values, n):
    out = norm_sub(np.array(values), n=n)
    assert np.all(out >= 0)
    assert out.sum() == pytest.approx(n, rel=1e-9, abs=1e-6)


@given(estimates, totals)
def test_one_common_shift_on_the_support(values, n):
    x = np.array(values)
    out = norm_sub(x, n=n)
    kept = out > 0
    if n > 0 and kept.any():
        shifts = x[kept] - out[kept]
        assert np.ptp(shifts) <= 1e-6 * max(1.0, np.abs(x).max())
        # Everything clipped to zero lies at or below the shift.
        assert np.all(x[~kept] <= shifts[0] + 1e-6 * max(1.0, np.abs(x).max()))


def test_consistent_input_is_unchanged_and_example():
    x = np.array([3.0, 2.0, 5.0])
    assert np.allclose(norm_sub(x, n=10), x)
    # Negatives clipped; the positives shifted down by 2/3 to sum to 6.
    assert np.allclose(norm_sub(np.array([5.0, -3.0, 2.0, 1.0]), n=6), [13 / 3, 0, 4 / 3, 1 / 3])


@pytest.mark.parametrize(
    ("x", "n"),
    [([], 1), ([[1.0]], 1), ([1.0, np.nan], 1), ([1.0], -1), ([1.0], np.inf), ([1.0], "5")],
)
def test_bad_input(x, n):
    with pytest.raises(InvalidParameterError):
        norm_sub(np.array(x, dtype=float), n=n)
