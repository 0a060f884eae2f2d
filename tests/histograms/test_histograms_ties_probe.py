"""auto's ties probe (AHP or the matrix mechanism): its statistic, region, budget, transcripts, audits."""

from __future__ import annotations

import importlib
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.histograms._transcripts import transcript

from dpkit import histograms
from dpkit._checks import exact
from dpkit.accounting import Accountant, Budget
from dpkit.audit import audit_samples
from dpkit.errors import DataError
from dpkit.histograms._levels import level_deviation
from dpkit.histograms.select import (
    PROBE_CHOICES,
    TIES_BELOW,
    TIES_LEVELS,
    TIES_PROBE_SHARE,
    TIES_SENSITIVITY,
    ties_margin,
    ties_probe,
    ties_probe_applies,
)
from dpkit.mechanisms import as_source

select_module = importlib.import_module("dpkit.histograms.select")

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.PrivacyWarning")

N = 256
EPS = 0.04
#: s/n = 280: signal 11.2 >= 10 and sampling spread 0.04·sqrt(280) = 0.67 < 0.7.
RECORDS = {"max_records": 280 * N}
#: ``details`` entries that are releases (the probe; AHP's clusters) rather than public.
NOISY_DETAILS = {"probe_margin", "clusters", "labels"}


def _brute(x: np.ndarray, levels: int) -> float:
    """D_K by the O(K n²) dynamic programme over sorted runs, each run's cost summed directly."""
    y = np.sort(x)
    n = y.size

    def cost(i: int, j: int) -> float:
        run = y[i:j]
        return float(np.abs(run - np.median(run)).sum())

    best = [0.0] + [cost(0, j) for j in range(1, n + 1)]
    for _ in range(min(levels, n) - 1):
        best = [0.0] + [
            min([best[j]] + [best[i] + cost(i, j) for i in range(1, j)]) for j in range(1, n + 1)
        ]
    return best[n]


def _tied(seed: int = 0) -> np.ndarray:
    """Sparse counts on four exact levels (a shape like Titanic's fares): D_32 = 0."""
    x = np.zeros(N)
    where = np.random.default_rng(seed).permutation(N)[:40]
    x[where] = np.repeat([2000.0, 4000.0, 6000.0, 30000.0], 10)
    return x


def _smooth() -> np.ndarray:
    """Dense, smooth counts: far from any 32 levels (D_32·epsilon/n about 3)."""
    grid = np.linspace(-3.0, 3.0, N)
    return np.round(29_000 * np.exp(-(grid**2) / 2.0) / 2.5066 * 6.0 / N * 4.0)


def _huge() -> np.ndarray:
    """Tied counts with one bin near the matrix mechanism's ceiling (total below 2³³)."""
    x = _tied()
    x[int(np.argmax(x))] = 8.0e9
    return x


# ------------------------------------------------------------------ the statistic


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(
        st.one_of(st.integers(0, 3), st.integers(0, 2**40), st.sampled_from([0, 7, 7, 100])),
        min_size=1,
        max_size=24,
    ),
    levels=st.integers(1, 6),
)
def test_level_deviation_is_the_exact_minimum(counts: list[int], levels: int) -> None:
    x = np.asarray(counts, dtype=np.float64)
    assert level_deviation(x, levels) == _brute(x, levels)


def test_level_deviation_closed_forms() -> None:
    assert level_deviation(np.zeros(10), 1) == 0.0
    assert level_deviation(np.array([0.0, 10.0]), 1) == 10.0
    assert level_deviation(np.array([0.0, 10.0]), 2) == 0.0
    # 33 values 100 apart, one pair only 50 apart: 32 levels merge that pair.
    x = np.concatenate((np.arange(32) * 100.0, [3150.0]))
    assert level_deviation(x, 32) == 50.0
    assert level_deviation(_tied(), TIES_LEVELS) == 0.0
    assert ties_margin(_tied(), EPS) == pytest.approx(TIES_BELOW * N / EPS)
    assert ties_margin(_smooth(), EPS) < -2 * TIES_BELOW * N / EPS


def test_level_deviation_does_the_same_work_whatever_the_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The sizes of every vectorised cost evaluation depend on n alone, not on the
    # counts (no timing channel from the data's shape).
    levels_module = importlib.import_module("dpkit.histograms._levels")
    real = levels_module.segment_costs
    sizes: list[int] = []

    def counting(y: Any, prefix: Any, i: Any, j: Any) -> Any:
        sizes.append(int(np.size(i)))
        return real(y, prefix, i, j)

    monkeypatch.setattr(levels_module, "segment_costs", counting)
    runs = []
    for x in (_tied(), _smooth(), np.zeros(N), np.arange(N, dtype=float) * 10**6):
        sizes.clear()
        level_deviation(x, TIES_LEVELS)
        runs.append(list(sizes))
    assert all(run == runs[0] for run in runs)


@settings(max_examples=300, deadline=None)
@given(
    counts=st.lists(
        st.one_of(st.integers(0, 3), st.integers(0, 10**9), st.sampled_from([0, 5, 5, 6])),
        min_size=1,
        max_size=80,
    ),
    where=st.integers(0, 10**6),
    levels=st.integers(1, 40),
    remove=st.booleans(),
)
def test_ties_statistic_sensitivity_is_at_most_one(
    counts: list[int], where: int, levels: int, remove: bool
) -> None:
    # Add or remove one row anywhere: in an empty bin, inside a level, across two.
    x = np.asarray(counts, dtype=np.float64)
    i = where % x.size
    if remove and x[i] < 1.0:
        x[i] += 1.0  # a row must be there to be removed
    y = x.copy()
    y[i] += -1.0 if remove else 1.0
    assert abs(level_deviation(y, levels) - level_deviation(x, levels)) <= TIES_SENSITIVITY
    assert abs(ties_margin(y, EPS) - ties_margin(x, EPS)) <= TIES_SENSITIVITY


# ------------------------------------------------------------------ where it runs


def test_the_ties_probe_runs_only_in_its_public_region() -> None:
    assert ties_probe_applies(N, EPS, RECORDS["max_records"], "ranges")
    assert not ties_probe_applies(N, EPS, RECORDS["max_records"], "prefixes")
    assert not ties_probe_applies(N, EPS, RECORDS["max_records"], "units")
    assert not ties_probe_applies(N, EPS, None, "ranges")
    assert not ties_probe_applies(N, EPS, 100 * N, "ranges")  # signal 4 < 10
    assert not ties_probe_applies(N, 0.1, 1000 * N, "ranges")  # spread 3.2 >= 0.7
    # The benchmark's 1,024-bin grid: s = 10⁷ at epsilon = 0.01 has spread 0.99.
    assert not ties_probe_applies(1024, 0.01, 10**7, "ranges")
    # The benchmark's grid at 4,096 bins: s = 10⁷ at epsilon = 0.01 only.
    grid = {
        (s, e)
        for s in (10**3, 10**4, 10**5, 10**6, 10**7)
        for e in (0.01, 0.1, 1.0)
        if ties_probe_applies(4096, e, s, "ranges")
    }
    assert grid == {(10**7, 0.01)}
    x = _smooth()
    outside = histograms.auto(x, EPS, max_records=100 * N, rng=5)
    assert outside.details["auto_rule"] == "public" and outside.details["probe_kind"] is None
    direct = histograms.matrix_mechanism(x, EPS, rng=5)
    assert np.array_equal(outside.estimates, direct.estimates)
    inside = histograms.auto(x, EPS, **RECORDS, rng=5)
    assert inside.details["auto_rule"] == "probe" and inside.details["probe_kind"] == "ties"
    assert inside.details["probe_levels"] == TIES_LEVELS
    assert inside.details["probe_threshold"] == TIES_BELOW
    assert inside.details["probe_top_bins"] is None
    # Weighted counts take the tree rule (DAWA or Hb), never this probe.
    weighted = histograms.auto(x + 0.5, EPS, **RECORDS, rng=5)
    assert weighted.details["probe_kind"] != "ties"
    assert set(PROBE_CHOICES) <= set(histograms.methods.PUBLISHERS_1D)


@pytest.mark.parametrize(("make", "method"), [(_tied, "ahp"), (_smooth, "matrix_mechanism")])
def test_choice_and_budget(make: Any, method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # With the probe's noise removed (a fixed zero draw), the exact margin decides.
    monkeypatch.setattr(select_module, "ties_probe", lambda e: _Shifted(0.0))
    acc = Accountant(Budget(1.0))
    h = histograms.auto(make(), EPS, **RECORDS, rng=1, accountant=acc)
    assert h.method == method and h.details["auto_choice"] == method
    assert h.epsilon == EPS and acc.spent == Budget(EPS)
    assert [(e.label, e.cost) for e in acc.history] == [("histogram: auto", Budget(EPS))]
    eps_probe, eps_method = h.details["epsilon_probe"], h.details["epsilon_method"]
    assert eps_probe == pytest.approx(TIES_PROBE_SHARE * EPS)
    assert exact(eps_probe) + exact(eps_method) <= exact(EPS)
    assert float(exact(eps_probe) + exact(eps_method)) == pytest.approx(EPS, rel=1e-15)
    assert h.details["remaining"] == Budget(1.0 - EPS)
    if method == "ahp":  # AHP ran with the rest of epsilon
        parts = exact(h.details["epsilon_cluster"]) + exact(h.details["epsilon_values"])
        assert parts <= exact(eps_method) and float(parts) == pytest.approx(eps_method)
    else:
        assert h.details["scale"] == pytest.approx(h.details["sensitivity"] / eps_method, rel=2**-9)


def test_counts_the_matrix_mechanism_refuses_are_refused_before_the_charge() -> None:
    # A total of 2³³ rows (beyond the declared bound): refused before the charge,
    # whatever the probe would have chosen, never charged and then failed or not.
    x = _tied()
    x[0] = 2.0**33
    for seed in range(4):
        acc = Accountant(Budget(1.0))
        with pytest.raises(DataError, match="fewer than 2"):
            histograms.auto(x, EPS, **RECORDS, rng=seed, accountant=acc)
        assert acc.spent == Budget(0.0) and not acc.history


class _Shifted:
    """Stands in for the probe's mechanism: the value plus a fixed draw."""

    def __init__(self, draw: float, fixed: float | None = None) -> None:
        self.draw, self.fixed = draw, fixed
        self.scale = 1.0
        self.seen: list[float] = []

    def randomise(self, value: float, rng: object = None) -> float:
        self.seen.append(float(value))
        return self.fixed if self.fixed is not None else float(value) + self.draw


# ------------------------------------------------------------------ transcripts


def _transcript(counts: np.ndarray, **kw: Any) -> tuple[Any, ...]:
    """Everything an analyst sees of one release but the noisy values (the shared helper)."""
    acc = Accountant(Budget(1.0))

    def fields(h: Any) -> tuple[Any, ...]:
        public = {k: v for k, v in h.details.items() if k not in NOISY_DETAILS}
        return (h.method, h.epsilon, sorted(h.details), public, h.estimates.shape, h.errors.shape)

    return transcript(
        acc, lambda: histograms.auto(counts, EPS, **RECORDS, accountant=acc, **kw), fields
    )


def _neighbours(x: np.ndarray) -> list[np.ndarray]:
    """x plus or minus one row: an empty bin, the top bin, a middle bin."""
    out = []
    for i in (int(np.argmin(x)), int(np.argmax(x)), N // 2):
        for step in (1.0, -1.0):
            if x[i] + step >= 0:
                y = x.copy()
                y[i] += step
                out.append(y)
    return out


@pytest.mark.parametrize("output", [-5.0, 5.0])
@pytest.mark.parametrize("make", [_tied, _smooth, _huge])
def test_transcripts_of_neighbours_differ_only_in_noisy_values(
    make: Any, output: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the probe's release fixed (either side of 0), neighbours get the same
    # choice and the same public details, charge, ledger, warnings and shapes:
    # the counts reach the choice only through the probe.
    probes: list[_Shifted] = []

    def fixed(epsilon_probe: float) -> _Shifted:
        probes.append(_Shifted(0.0, fixed=output))
        return probes[-1]

    monkeypatch.setattr(select_module, "ties_probe", fixed)
    x = make()
    base = _transcript(x, rng=7)
    assert base[0] == ("ahp" if output > 0 else "matrix_mechanism")
    for y in _neighbours(x):
        assert _transcript(y, rng=7) == base
    # The margins the probe saw moved by at most 1 between neighbours.
    seen = np.array([p.seen[0] for p in probes])
    assert np.max(np.abs(seen - seen[0])) <= TIES_SENSITIVITY


@pytest.mark.parametrize("make", [_tied, _smooth, _huge])
def test_real_noise_transcripts_far_from_the_threshold(make: Any) -> None:
    # The real probe, same seed, neighbours whose margins are 1 apart: with the
    # margin many noise scales from 0 (smooth) or the draw fixed by the seed, the
    # same public transcript.
    x = make()
    base = _transcript(x, rng=11)
    for y in _neighbours(x):
        assert _transcript(y, rng=11) == base


# ------------------------------------------------------------------ the release and audits


def _probe_outputs(x: np.ndarray, epsilon_probe: float, runs: int, seed: int) -> np.ndarray:
    """The ties probe's release on ``x``, ``runs`` times (the functions auto calls)."""
    mechanism = ties_probe(epsilon_probe)
    margin = ties_margin(x, EPS)
    source = as_source(np.random.default_rng(seed))
    return np.array([float(mechanism.randomise(margin, rng=source)) for _ in range(runs)])


def _neighbouring_pair() -> tuple[np.ndarray, np.ndarray]:
    """x and x plus one row where D_32 grows by exactly 1 (the largest shift)."""
    x = np.zeros(N)
    x[:33] = np.concatenate((np.arange(32) * 100.0 + 1000.0, [4150.0]))
    y = x.copy()
    y[32] += 1.0
    assert level_deviation(y, TIES_LEVELS) - level_deviation(x, TIES_LEVELS) == 1.0
    return x, y


def test_probe_release_matches_the_laplace_closed_form() -> None:
    x, _ = _neighbouring_pair()
    b = ties_probe(1.0).scale
    assert b == pytest.approx(1.0, rel=2**-9)
    out = _probe_outputs(x, 1.0, 10_000, seed=3)
    assert np.mean(out) == pytest.approx(ties_margin(x, EPS), abs=0.05)
    assert np.std(out) == pytest.approx(math.sqrt(2.0) * b, rel=0.04)


def test_auto_choice_frequency_matches_the_closed_form() -> None:
    # End to end with the real probe: P(AHP) = P(m + Lap(b) > 0) = 1 - exp(-m/b)/2,
    # m = TIES_BELOW·n/epsilon (D_32 = 0 on the tied counts), b = 1/(share·epsilon).
    x = _tied()
    margin, b = ties_margin(x, EPS), 1.0 / (TIES_PROBE_SHARE * EPS)
    rng = np.random.default_rng(8)
    picks = [histograms.auto(x, EPS, **RECORDS, rng=rng).details["auto_choice"] for _ in range(800)]
    assert picks.count("ahp") / len(picks) == pytest.approx(
        1 - 0.5 * math.exp(-margin / b), abs=0.05
    )
    assert set(picks) == {"ahp", "matrix_mechanism"}


def test_probe_audit_within_its_epsilon_and_fails_when_broken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Claim: the probe's release is epsilon_probe-DP (epsilon_probe = 1 here).
    x, y = _neighbouring_pair()
    honest = audit_samples(
        _probe_outputs(x, 1.0, 10_000, 1), _probe_outputs(y, 1.0, 10_000, 2), epsilon=1.0
    )
    assert honest.passed, honest
    # The broken variant: noise 30 times too small (sensitivity taken as 1/30).
    monkeypatch.setattr(select_module, "TIES_SENSITIVITY", TIES_SENSITIVITY / 30)
    broken = audit_samples(
        _probe_outputs(x, 1.0, 5_000, 3), _probe_outputs(y, 1.0, 5_000, 4), epsilon=1.0
    )
    assert not broken.passed and broken.epsilon_lower_bound > 1.0, broken


def _released_margins(x: np.ndarray, runs: int, seed: int) -> np.ndarray:
    """``probe_margin`` from ``details`` of full auto releases (epsilon_probe = 0.0008)."""
    rng = np.random.default_rng(seed)
    return np.array(
        [histograms.auto(x, EPS, **RECORDS, rng=rng).details["probe_margin"] for _ in range(runs)]
    )


@pytest.mark.audit
def test_released_ties_probe_audit_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe value auto releases in ``details``: within epsilon_probe, refuted when broken.

    epsilon_probe = 0.02·0.04 = 0.0008 (noise scale 1,250) and the neighbours'
    margins differ by 1; the broken variant's noise is 10,000 times too small
    (scale 0.125: a shift of 1 is a loss of 8).
    """
    x, y = _neighbouring_pair()
    eps_probe = TIES_PROBE_SHARE * EPS
    runs = 4_000
    honest = audit_samples(
        _released_margins(x, runs, 1), _released_margins(y, runs, 2), epsilon=eps_probe
    )
    assert honest.passed, honest
    monkeypatch.setattr(select_module, "TIES_SENSITIVITY", TIES_SENSITIVITY / 10_000)
    broken = audit_samples(
        _released_margins(x, 2_000, 3), _released_margins(y, 2_000, 4), epsilon=eps_probe
    )
    assert not broken.passed and broken.epsilon_lower_bound > eps_probe, broken


# ------------------------------------------------------------------ audits of the full auto


def _auto_bin(counts: np.ndarray, where: int, runs: int, seed: int) -> tuple[np.ndarray, set[str]]:
    """auto's released estimate of bin ``where`` in the ties probe's region, and its choices."""
    rng = np.random.default_rng(seed)
    out = [histograms.auto(counts, EPS, **RECORDS, rng=rng) for _ in range(runs)]
    return np.array([h.estimates[where] for h in out]), {h.details["auto_choice"] for h in out}


def _lone_level() -> tuple[np.ndarray, np.ndarray, int]:
    """Tied counts plus one bin on a level of its own (AHP keeps it alone), and x + 1 row there."""
    x = _tied()
    where = int(np.flatnonzero(x == 0.0)[0])
    x[where] = 60_000.0
    y = x.copy()
    y[where] += 1.0
    return x, y, where


@pytest.mark.audit
@pytest.mark.parametrize("path", ["matrix_mechanism", "ahp"])
def test_auto_audit_end_to_end(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The released estimate of the changed bin, probe and publisher together: within

    epsilon; refuted when the publisher spends 100 times the epsilon it is charged.
    The probe's noise is fixed at 0 so that each path runs on every release (the
    audit is of the publisher's part; the probe's own release is audited above).
    """
    monkeypatch.setattr(select_module, "ties_probe", lambda e: _Shifted(0.0))
    if path == "ahp":
        x, y, where = _lone_level()
    else:
        x = _smooth()
        where = N // 2
        y = x.copy()
        y[where] += 1.0
    runs = 5_000
    (a, chose_a), (b, chose_b) = _auto_bin(x, where, runs, 1), _auto_bin(y, where, runs, 2)
    assert chose_a == chose_b == {path}
    honest = audit_samples(a, b, epsilon=EPS)
    assert honest.passed, honest
    real_split = select_module.split_budget
    monkeypatch.setattr(
        select_module,
        "split_budget",
        lambda eps, share: (real_split(eps, share)[0], 100.0 * real_split(eps, share)[1]),
    )
    a, _ = _auto_bin(x, where, runs, 3)
    b, _ = _auto_bin(y, where, runs, 4)
    broken = audit_samples(a, b, epsilon=EPS)
    assert not broken.passed and broken.epsilon_lower_bound > EPS, broken
