"""Public-parameter checks shared by every entry point."""

from __future__ import annotations

import warnings

import pytest

from dpkit import mechanisms as M
from dpkit._checks import check_epsilon
from dpkit.errors import PrivacyWarning


def test_an_epsilon_above_ten_warns_that_the_guarantee_is_weak() -> None:
    with pytest.warns(PrivacyWarning, match="guarantee is weak"):
        check_epsilon(12.0)
    with pytest.warns(PrivacyWarning, match="guarantee is weak"):
        M.laplace(1.0, sensitivity=1, epsilon=50)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyWarning)
        check_epsilon(10.0)
        M.laplace(1.0, sensitivity=1, epsilon=1)
