"""The mean's two-sided sums (issue 33): sensitivity as computed, intervals, accuracy, an audit.

A Laplace mean releases ``A = Σ (r_g + t)`` and ``B = Σ (r_g - t)`` per group
(``t`` a row's clipped, centred term on the sum grid) with one Laplace of ℓ1
sensitivity ``2 k r_g`` and reads the mean as ``(mid - r_g) + 2 r_g A / (A + B)``.
These tests check each step of that argument on the numbers the engines compute.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.tables._declared import types_of
from tests.tables.test_privacy_audits import CASES, FAST_KEYS, _audit

from dpkit.errors import PrivacyWarning
from dpkit.tables import Session
from dpkit.tables import queries as Q
from dpkit.tables.kinds import moments as M

BOUNDS = (-3.0, 10.0)
CENTER, RADIUS = M.moment_scale(BOUNDS, "mean")
HOSTILE = [
    -3.0,
    10.0,
    -3.0000000000000004,
    10.000000000000002,
    -1e308,
    1e308,
    math.inf,
    -math.inf,
    math.nan,
    None,
    -0.0,
    3.5,
    0.1 + 0.2,
]


def _session(xs: list[Any], groups: list[str] | None = None, **kw: Any) -> Session:
    frame = pd.DataFrame({"x": pd.array(xs, dtype="Float64"), "g": groups or ["a"] * len(xs)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Session.from_pandas(frame, types=types_of(frame), epsilon=1e6, rng=3, **kw)


def _pairs(xs: list[Any], groups: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) per public group as the release computes them, from the engine's own sums."""
    keys = sorted(set(groups or ["a"]))
    seen: dict[str, Any] = {}
    real = M.Q.paired_sums

    def spy(centred: Any, count: Any, radius: float) -> Any:
        seen["pairs"] = real(centred, count, radius)
        return seen["pairs"]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(M.Q, "paired_sums", spy)
        _session(xs, groups).mean("x", epsilon=1.0, bounds=BOUNDS, group_by="g", keys=keys)
    low, high = seen["pairs"]
    return np.asarray(low), np.asarray(high)


@pytest.mark.parametrize("x", HOSTILE, ids=repr)
def test_every_row_adds_two_non_negative_terms_of_total_two_r_g(x: Any) -> None:
    r_g, _ = Q.paired_radius(RADIUS)
    low, high = _pairs([x])
    assert low[0] >= 0.0 and high[0] >= 0.0
    # exactly 2 r_g, the ℓ1 norm of one row's contribution, or nothing for a row the
    # mean leaves out (missing, non-finite, beyond a double's valid range)
    kept = x is not None and abs(x) < 1e300
    assert low[0] + high[0] == (2 * r_g if kept else 0.0)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(st.sampled_from(HOSTILE), min_size=0, max_size=6),
    added=st.sampled_from(HOSTILE),
    group=st.sampled_from(["a", "b"]),
)
def test_a_neighbour_moves_the_computed_pairs_by_at_most_the_sensitivity(
    rows: list[Any], added: Any, group: str
) -> None:
    groups = ["a" if i % 2 else "b" for i in range(len(rows))]
    before = _pairs([*rows, 1.0, 1.0], [*groups, "a", "b"])  # both groups present
    after = _pairs([*rows, 1.0, 1.0, added], [*groups, "a", "b", group])
    moved = float(np.abs(np.concatenate(after) - np.concatenate(before)).sum())
    assert moved <= Q.paired_sensitivity(RADIUS, 1, 1)


def test_the_sensitivity_covers_the_conversion_to_doubles() -> None:
    r_g, g = Q.paired_radius(RADIUS)
    assert r_g >= RADIUS and (r_g / g).is_integer()
    margin = Q.paired_sensitivity(RADIUS, 1, 1) - 2 * r_g
    assert 0 < margin <= 1e-3 * g * 2**20  # a few ulps of the largest value, far below g·2^20
    assert Q.paired_sensitivity(RADIUS, 3, 2) == 6 * r_g + 4 * math.ulp(2.0**34 * r_g)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.floats(min_value=-5, max_value=20), min_size=0, max_size=30),
    h=st.floats(min_value=0, max_value=80),
    u=st.tuples(st.floats(-1, 1), st.floats(-1, 1)),
)
def test_paired_interval_holds_the_mean_when_both_noises_are_within_h(
    values: list[float], h: float, u: tuple[float, float]
) -> None:
    lo, hi = 0.0, 10.0
    radius = 5.0
    _, g = Q.paired_radius(radius)
    t = np.rint((np.clip(values, lo, hi) - 5.0) / g) * g
    low, high = Q.paired_sums(t.sum(), len(t), radius)
    noisy = (float(low) + u[0] * h, float(high) + u[1] * h)
    a, b = Q.paired_mean_interval(*noisy, h, (lo, hi), radius)
    estimate = float(Q.paired_mean_estimate(*noisy, (lo, hi), radius))
    assert lo <= float(a) <= estimate <= float(b) <= hi
    if len(t):
        assert float(a) - 1e-9 <= 5.0 + float(t.mean()) <= float(b) + 1e-9
    if h == 0 and len(t):
        assert estimate == pytest.approx(5.0 + float(t.mean()))


def test_an_empty_group_gives_the_midpoint_and_the_whole_range() -> None:
    assert float(Q.paired_mean_estimate(3.0, -2.0, (0.0, 10.0), 5.0)) == 5.0
    a, b = Q.paired_mean_interval(30.0, 2.0, 25.0, (0.0, 10.0), 5.0)
    assert (float(a), float(b)) == (0.0, 10.0)


def test_paired_mean_rmse_matches_its_closed_form_and_beats_the_split() -> None:
    # 400 seeded releases of a mean of 1,000 rows at ε = 0.5 (values near the low bound,
    # where the split sum/count estimator suffers most). Closed form:
    # sd(Z)·sqrt((1 - f)² + f²)/n against the split's sqrt(sd_S² + (μ - mid)² sd_n²)/n.
    rng = np.random.default_rng(5)
    xs = list(rng.uniform(-3.0, 0.0, 1000))
    session = _session(xs)
    truth = float(np.mean(xs))
    values, scale = [], None
    for _ in range(400):
        release = session.mean("x", epsilon=0.5, bounds=BOUNDS)
        values.append(release.value)
        scale = release.details["scale"]
        assert release.ci[0] <= release.value <= release.ci[1]
    rmse = float(np.sqrt(np.mean(np.square(np.asarray(values) - truth))))
    f = (truth - BOUNDS[0]) / (BOUNDS[1] - BOUNDS[0])
    closed = math.sqrt(2) * scale * math.sqrt((1 - f) ** 2 + f**2) / 1000
    split = math.sqrt(2 * (RADIUS / 0.25) ** 2 + 2 * ((truth - CENTER) / 0.25) ** 2) / 1000
    print(f"RMSE {rmse:.5f}, closed form {closed:.5f}, the old split's {split:.5f}")
    assert rmse == pytest.approx(closed, rel=0.15)  # 400 releases: about ±7% (1 SE)
    assert closed < 0.75 * split


@pytest.mark.parametrize("case", [c for c in CASES if c.id == "mean"], ids=["mean"])
def test_audit_refutes_pairs_calibrated_for_half_the_sensitivity(
    case: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The honest mean passes test_privacy_audits' audit; here the natural slip of
    # calibrating each of A and B for one row's r_g instead of the pair's 2 r_g.
    real = Q.paired_sensitivity
    monkeypatch.setattr(Q, "paired_sensitivity", lambda r, k, c: real(r, k, c) / 2)
    broken = _audit(case, FAST_KEYS, seed=11)
    assert not broken.passed, f"missed: lower bound {broken.epsilon_lower_bound:.3f}"
