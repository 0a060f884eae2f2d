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


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.count(epsilon=11),
        lambda s: s.count(epsilon=11, group_by="g", keys=["a", "b"]),
        lambda s: s.mean("x", bounds=(0, 100), epsilon=11),
        lambda s: s.variance("x", bounds=(0, 100), epsilon=11),
        lambda s: s.median("x", bounds=(0, 100), epsilon=11),
        lambda s: s.histogram("x", edges=[0, 50, 100], epsilon=11),
    ],
    ids=["count", "grouped", "mean", "variance", "median", "histogram"],
)
def test_a_query_above_ten_warns_once_not_once_per_mechanism(call) -> None:  # type: ignore[no-untyped-def]
    import pandas as pd

    from dpkit.tables import Session

    frame = pd.DataFrame({"x": [float(i) for i in range(40)], "g": ["a", "b"] * 20})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)  # the session's own budget of 100
        session = Session.from_pandas(
            frame, types={"x": "DOUBLE", "g": "VARCHAR"}, epsilon=100, rng=1
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(session)
    weak = [w for w in caught if "guarantee is weak" in str(w.message)]
    assert len(weak) == 1, [str(w.message) for w in weak]
    assert "max_contributions" not in str(weak[0].message)
