"""Seeded statistical checks: answers centred on the truth, intervals with their coverage.

Each test states the distributional claim it checks. Tolerances are a few
standard errors of the Monte Carlo estimate; everything is seeded.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from tests.tables._declared import types_of

from dpkit.tables import Session
from dpkit.tables import queries as Q

REPS = 300
REPS_SMALL = 200
LEVEL = 0.9
# Monte Carlo slack for a coverage estimated from REPS draws: 3.5 standard errors.
SLACK = 3.5 * math.sqrt(LEVEL * (1 - LEVEL) / REPS)
SLACK_SMALL = 3.5 * math.sqrt(LEVEL * (1 - LEVEL) / REPS_SMALL)


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    rng = np.random.default_rng(11)
    n = 1500
    return pd.DataFrame(
        {
            "x": np.round(rng.gamma(4.0, 8.0, n), 1),  # some values above the upper bound 60
            "g": rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2]),
        }
    )


def _draws(table: pd.DataFrame, call: str, **kwargs: object) -> tuple[np.ndarray, np.ndarray]:
    s = Session.from_pandas(table, types=types_of(table), epsilon=1e9, rng=2024, level=LEVEL)
    values, covered = [], []
    for _ in range(REPS):
        r = getattr(s, call)(**kwargs)
        values.append(r.value)
        covered.append(r.ci)
    return np.asarray(values, dtype=float), np.asarray(covered, dtype=float)


@pytest.mark.parametrize(
    ("call", "kwargs", "truth", "calibrated"),
    [
        ("count", {"epsilon": 0.2}, lambda x: len(x), True),
        (
            "sum",
            {"column": "x", "epsilon": 0.5, "bounds": (0, 60)},
            lambda x: np.clip(x, 0, 60).sum(),
            True,
        ),
        (
            "mean",
            {"column": "x", "epsilon": 0.1, "bounds": (0, 60)},
            lambda x: np.clip(x, 0, 60).mean(),
            False,
        ),
        (
            "variance",
            {"column": "x", "epsilon": 0.5, "bounds": (0, 60)},
            lambda x: np.clip(x, 0, 60).var(),
            False,
        ),
        (
            "std",
            {"column": "x", "epsilon": 0.5, "bounds": (0, 60)},
            lambda x: np.clip(x, 0, 60).std(),
            False,
        ),
    ],
)
def test_answers_are_centred_and_intervals_cover(
    table: pd.DataFrame, call: str, kwargs: dict[str, object], truth: object, calibrated: bool
) -> None:
    """P[truth in ci] >= level; mean of answers = truth within 4 standard errors.

    For count and sum the interval is exact for the noise, so coverage is also
    not far above the level (the interval is not needlessly wide).
    """
    true = float(truth(table["x"].to_numpy()))  # type: ignore[operator]
    values, cis = _draws(table, call, **kwargs)
    coverage = np.mean((cis[:, 0] <= true) & (true <= cis[:, 1]))
    assert coverage >= LEVEL - SLACK
    if calibrated:
        assert coverage <= LEVEL + 2 * SLACK
    se = values.std() / math.sqrt(REPS)
    assert abs(values.mean() - true) <= 4 * se + 1e-9
    # the interval is informative: much narrower than the bounds allow
    assert np.median(cis[:, 1] - cis[:, 0]) < 0.25 * max(abs(true), 1.0) + 1e-9


def test_grouped_means_cover_each_group(table: pd.DataFrame) -> None:
    """Each group's interval covers its own clipped mean at the stated level."""
    s = Session.from_pandas(table, types=types_of(table), epsilon=1e9, rng=7, level=LEVEL)
    truth = table.assign(x=table["x"].clip(0, 60)).groupby("g")["x"].mean()
    hits = {k: 0 for k in truth.index}
    for _ in range(REPS_SMALL):
        r = s.mean("x", epsilon=0.2, bounds=(0, 60), group_by="g", keys=["a", "b", "c"])
        for k in hits:
            lo, hi = r.ci[k]
            hits[k] += int(lo <= truth[k] <= hi)
    assert min(hits.values()) / REPS_SMALL >= LEVEL - SLACK_SMALL


def _utility(x: np.ndarray, value: float, q: float) -> float:
    n = x.size
    return -max(np.sum(x < value) - q * n, np.sum(x > value) - (1 - q) * n, 0.0)


@pytest.mark.parametrize("q", [0.5, 0.9])
def test_quantile_rank_error_holds_at_the_stated_level(table: pd.DataFrame, q: float) -> None:
    """u(released) >= OPT - rank_error with probability >= level (EM utility theorem)."""
    x = np.clip(table["x"].to_numpy(), 0, 100)
    s = Session.from_pandas(table, types=types_of(table), epsilon=1e9, rng=5, level=LEVEL)
    grid = Q.uniform_grid((0.0, 100.0), 201)
    opt = max(_utility(x, c, q) for c in grid)
    ok, errors = 0, []
    for _ in range(REPS):
        r = s.quantile("x", q, epsilon=0.3, bounds=(0, 100), grid_size=201)
        ok += int(_utility(x, r.value, q) >= opt - r.details["rank_error"])
        errors.append(r.value - np.quantile(x, q))
    assert ok / REPS >= LEVEL - SLACK
    # and the answers sit near the true quantile (a few grid steps)
    assert abs(np.median(errors)) <= 1.5


def test_quantile_defaults_fine_grid_alone_coarser_per_group(table: pd.DataFrame) -> None:
    s = Session.from_pandas(table, types=types_of(table), epsilon=1e9, rng=3)
    one = s.median("x", epsilon=1.0, bounds=(0, 100))
    assert one.mechanism == "permute-and-flip"
    assert one.details["resolution"] == 100 / (Q.QUANTILE_GRID - 1)
    assert Q.QUANTILE_GRID == 2**20 + 1
    grouped = s.median("x", epsilon=1.0, bounds=(0, 100), group_by="g", keys=["a", "b", "c"])
    assert grouped.details["resolution"] == 100 / (Q.GROUPED_QUANTILE_GRID - 1)
    # at a large ε the release is a median of the data, up to a row or two
    x = np.clip(table["x"].to_numpy(), 0, 100)
    assert _utility(x, s.median("x", epsilon=50.0, bounds=(0, 100)).value, 0.5) >= -2


def test_min_and_max_are_extreme_quantiles_not_raw_extremes(table: pd.DataFrame) -> None:
    s = Session.from_pandas(table, types=types_of(table), epsilon=1e9, rng=9)
    mins = [s.min("x", epsilon=2.0, bounds=(0, 200)).value for _ in range(50)]
    maxs = [s.max("x", epsilon=2.0, bounds=(0, 200)).value for _ in range(50)]
    x = table["x"].to_numpy()
    assert np.median(mins) == pytest.approx(np.quantile(x, 0.01), abs=2.0)
    assert np.median(maxs) == pytest.approx(np.quantile(x, 0.99), abs=4.0)


def test_mode_count_error_holds(table: pd.DataFrame) -> None:
    """count(selected) >= max count - count_error with probability >= level."""
    counts = table["g"].value_counts()
    s = Session.from_pandas(table, types=types_of(table), epsilon=1e9, rng=3, level=LEVEL)
    ok, picks = 0, []
    for _ in range(REPS_SMALL):
        r = s.mode("g", epsilon=0.02, domain=["a", "b", "c", "d"])
        picks.append(r.value)
        ok += int(counts.get(r.value, 0) >= counts.max() - r.details["count_error"])
    assert ok / REPS_SMALL >= LEVEL - SLACK_SMALL
    # Picks follow the monotonic exponential mechanism: P(v) ∝ exp(ε · count(v)).
    from dpkit.mechanisms import exponential_probabilities

    probs = exponential_probabilities(
        [counts.get(v, 0) for v in "abcd"], epsilon=0.02, sensitivity=1, monotonic=True
    )
    hits = picks.count("a")
    assert stats.binomtest(hits, REPS_SMALL, probs[0]).pvalue > 1e-3
    assert "d" not in picks  # an absent value: probability e**-15 per release


def test_partition_selection_never_releases_a_singleton_key() -> None:
    """At δ = 1e-8 the chance a count-1 key passes is ≤ 1e-8 per key and trial."""
    big = np.repeat(["big1", "big2"], 400)
    singles = [f"rare{i}" for i in range(300)]
    df = pd.DataFrame({"k": np.concatenate([big, singles])})
    s = Session.from_pandas(df, types=types_of(df), epsilon=1e9, delta=0.5, rng=4)
    released: set[str] = set()
    big_seen = 0
    for _ in range(200):
        r = s.count(epsilon=1.0, group_by="k", keys="private", delta=1e-8)
        released |= set(r.keys)
        big_seen += int({"big1", "big2"} <= set(r.keys))
    assert released == {"big1", "big2"}
    assert big_seen == 200


def test_partition_selection_with_contribution_bound() -> None:
    """A person with k rows creates keys that are still not released (threshold scales with k)."""
    rng = np.random.default_rng(0)
    big = pd.DataFrame({"pid": rng.integers(0, 500, 3000), "k": "big"})
    lonely = pd.DataFrame(
        {"pid": np.repeat(np.arange(1000, 1100), 3), "k": [f"own{i}" for i in range(300)]}
    )
    df = pd.concat([big, lonely], ignore_index=True)
    s = Session.from_pandas(
        df,
        types=types_of(df),
        epsilon=1e9,
        delta=0.5,
        rng=8,
        privacy_unit="pid",
        max_contributions=3,
    )
    released: set[str] = set()
    for _ in range(100):
        r = s.count(epsilon=1.0, group_by="k", keys="private", delta=1e-8)
        released |= set(r.keys)
    assert released == {"big"}


def test_contribution_bound_scales_the_noise(table: pd.DataFrame) -> None:
    """With k rows per person the count noise is geometric of scale k/ε (variance 2a/(1-a)²)."""
    df = table.assign(pid=np.arange(len(table)) // 4)
    s = Session.from_pandas(
        df, types=types_of(df), epsilon=1e9, rng=1, privacy_unit="pid", max_contributions=3
    )
    draws = np.array([s.count(epsilon=0.5).value for _ in range(REPS_SMALL)], dtype=float)
    a = math.exp(-0.5 / 3)
    true_sd = math.sqrt(2 * a) / (1 - a)
    assert draws.std() == pytest.approx(true_sd, rel=0.15)
    persons = df.groupby("pid").size()
    assert draws.mean() == pytest.approx(
        np.minimum(persons, 3).sum(), abs=4 * true_sd / math.sqrt(REPS_SMALL)
    )


def test_private_bounds_cover_the_bulk_of_the_data(table: pd.DataFrame) -> None:
    x = table["x"].to_numpy()
    s = Session.from_pandas(table, types=types_of(table), epsilon=1e9, rng=6)
    for _ in range(20):
        r = s.mean("x", epsilon=1.0, bounds="private")
        lo, hi = r.details["bounds"]
        assert lo <= np.quantile(x, 0.05) and np.quantile(x, 0.95) <= hi <= 4 * x.max()
