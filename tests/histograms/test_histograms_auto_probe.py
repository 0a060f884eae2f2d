"""auto's concentration probe: when it runs, its budget, transcripts, sensitivity, audits."""

from __future__ import annotations

import importlib
import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit import histograms
from dpkit._checks import exact
from dpkit.accounting import Accountant, Budget
from dpkit.audit import audit_samples
from dpkit.errors import InvalidParameterError
from dpkit.histograms.select import (
    CONCENTRATED_ABOVE,
    PROBE_MIN_BINS,
    PROBE_SENSITIVITY,
    PROBE_SHARE,
    concentration_margin,
    concentration_probe,
    probe_top_bins,
)
from dpkit.mechanisms import as_source

select_module = importlib.import_module("dpkit.histograms.select")

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.PrivacyWarning")

N = PROBE_MIN_BINS  # the smallest domain the probe runs on (fast publishers)
TOP = probe_top_bins(N)
HIGH = {"max_records": 10_000}  # s·epsilon/n >= 50 for epsilon >= 1.28 at n = 256
#: ``details`` entries that are releases (the probe, DAWA's partition size and the
#: branching Hb picks for it, the tree's noisy nodes) rather than public parameters.
NOISY_DETAILS = {"probe_margin", "n_bins", "hb_branching", "nodes"}


def _spread(seed: int = 0) -> np.ndarray:
    """Counts over the whole domain: the top n/64 bins hold ~2% of the rows."""
    return np.random.default_rng(seed).poisson(30, N).astype(float)


def _concentrated(seed: int = 0) -> np.ndarray:
    """A few spikes and empty space: the top n/64 bins hold ~90% of the rows."""
    x = np.zeros(N)
    x[[3, 40, 41, 90]] = [900.0, 400.0, 700.0, 300.0]
    x[100:140] = np.random.default_rng(seed).poisson(5, 40)
    return x


def _at_margin(target: float) -> np.ndarray:
    """Spread counts with the top bins raised so that the exact margin is ``target``."""
    x = np.full(N, 20.0)
    # margin = TOP·a - c·(TOP·a + (N - TOP)·20) with a the top bins' count.
    c = CONCENTRATED_ABOVE
    x[:TOP] = (target + c * (N - TOP) * 20.0) / (TOP * (1.0 - c))
    assert concentration_margin(x, TOP) == pytest.approx(target, abs=1e-9)
    return x


def test_the_probe_runs_only_where_the_public_rule_says_hb() -> None:
    # Low signal, no bound, or a small domain: the public rule and the same release.
    x = _concentrated()
    low = histograms.auto(x, 0.01, max_records=10_000, rng=5)
    assert low.details["auto_rule"] == "public" and low.details["epsilon_probe"] == 0.0
    assert np.array_equal(low.estimates, histograms.dawa(x, 0.01, rng=5).estimates)
    unbounded = histograms.auto(x, 10.0, rng=5)
    assert unbounded.details["auto_choice"] == "dawa" and unbounded.details["auto_rule"] == "public"
    small = histograms.auto(x[:128], 10.0, max_records=10_000, workload="units", rng=5)
    assert small.details["auto_rule"] == "public" and small.details["auto_choice"] == "hb"
    assert small.details["probe_margin"] is None
    # Prefixes and ranges above MATRIX_ABOVE: the matrix mechanism, public, no probe (it
    # beats DAWA there on every shape of the benchmark, the sparse one included).
    assert histograms.choose_method(128, 10.0, 10_000, "ranges") == "matrix_mechanism"
    mm = histograms.auto(x, 10.0, **HIGH, rng=5)
    assert mm.details["auto_rule"] == "public" and mm.details["auto_choice"] == "matrix_mechanism"
    direct = histograms.matrix_mechanism(x, 10.0, rng=5)
    assert np.array_equal(mm.estimates, direct.estimates)
    # Single bins at high signal (Hb, flat): the probe decides.
    high = histograms.auto(x, 10.0, **HIGH, workload="units", rng=5)
    assert high.details["auto_rule"] == "probe" and high.details["probe_top_bins"] == TOP


@pytest.mark.parametrize(("make", "method"), [(_concentrated, "dawa"), (_spread, "hb")])
def test_probe_choice_and_budget(make: Any, method: str) -> None:
    acc = Accountant(Budget(5.0))
    h = histograms.auto(make(), 2.0, **HIGH, workload="units", rng=1, accountant=acc)
    assert h.method == method and h.details["auto_choice"] == method
    # One charge of exactly epsilon; the parts' exact sum is at most epsilon and rounds to it.
    assert h.epsilon == 2.0 and acc.spent == Budget(2.0)
    assert [(e.label, e.cost) for e in acc.history] == [("histogram: auto", Budget(2.0))]
    eps_probe, eps_method = h.details["epsilon_probe"], h.details["epsilon_method"]
    assert eps_probe == pytest.approx(PROBE_SHARE * 2.0)
    assert exact(eps_probe) + exact(eps_method) <= Fraction(2)
    assert float(exact(eps_probe) + exact(eps_method)) == pytest.approx(2.0, rel=1e-15)
    assert h.details["remaining"] == Budget(3.0)
    # The chosen publisher ran with the rest of epsilon: hb's flat noise for units.
    if method == "hb":
        assert h.details["scale"] == pytest.approx(1.0 / eps_method, rel=2**-9)
        assert np.allclose(h.errors, math.sqrt(2.0) * h.details["scale"])


def test_bad_public_input_is_refused_before_the_charge() -> None:
    acc = Accountant(Budget(5.0))
    with pytest.raises(InvalidParameterError):
        histograms.auto(_spread(), 2.0, **HIGH, edges=np.arange(5.0), accountant=acc)
    with pytest.raises(InvalidParameterError):
        histograms.auto(_spread(), 2.0, **HIGH, workload="all", accountant=acc)
    assert acc.spent == Budget(0.0)


def _transcript(counts: np.ndarray, **kw: Any) -> tuple[Any, ...]:
    """Everything an analyst sees of one release but the noisy values."""
    acc = Accountant(Budget(10.0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        h = histograms.auto(counts, 2.0, **HIGH, accountant=acc, **kw)
    public = {k: v for k, v in h.details.items() if k not in NOISY_DETAILS}
    return (
        h.method,
        h.epsilon,
        sorted(h.details),
        public,
        acc.spent,
        [(e.label, e.cost, e.scopes) for e in acc.history],
        [type(w.message).__name__ for w in caught],
        h.estimates.shape,
    )


def _neighbours(x: np.ndarray) -> list[np.ndarray]:
    """x plus one row in: an empty bin, a top bin, a middle bin."""
    out = []
    for i in (int(np.argmin(x)), int(np.argmax(x)), N // 2):
        y = x.copy()
        y[i] += 1.0
        out.append(y)
    return out


@pytest.mark.parametrize("make", [_concentrated, _spread])
def test_transcripts_of_neighbours_differ_only_in_noisy_values(make: Any) -> None:
    # Same call and seed on neighbours far from the threshold: the same choice and
    # the same public details, charge, ledger and warnings.
    x = make()
    for y in _neighbours(x):
        for workload in ("ranges", "units"):
            assert _transcript(x, rng=7, workload=workload) == _transcript(
                y, rng=7, workload=workload
            )


class _FixedProbe:
    """Stands in for the probe's mechanism: a fixed output, whatever the input."""

    def __init__(self, output: float) -> None:
        self.output = output
        self.scale = 1.0
        self.seen: list[float] = []

    def randomise(self, value: float, rng: object = None) -> float:
        self.seen.append(float(value))
        return self.output


@pytest.mark.parametrize("output", [-3.0, 3.0])
def test_with_the_probe_output_fixed_the_choice_does_not_depend_on_the_data(
    output: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Neighbours on either side of the threshold (exact margins -0.3 and 0.25):
    # with the probe's output fixed, both get the same method and transcript, so
    # the counts reach the choice only through the probe's release.
    probes: list[_FixedProbe] = []

    def fixed(epsilon_probe: float) -> _FixedProbe:
        probes.append(_FixedProbe(output))
        return probes[-1]

    monkeypatch.setattr(select_module, "concentration_probe", fixed)
    x = _at_margin(-0.3)
    y = x.copy()
    y[0] += 1.0
    a, b = _transcript(x, rng=3, workload="units"), _transcript(y, rng=3, workload="units")
    assert a == b
    assert a[0] == ("dawa" if output > 0 else "hb")
    assert [p.seen[0] for p in probes] == pytest.approx([-0.3, 0.7 - CONCENTRATED_ABOVE])
    # Fractional counts on ranges: not the matrix mechanism (whole numbers only) but the
    # tree rule, Hb with the probe; neighbours are both fractional, so the same choice.
    c, d = _transcript(x, rng=3), _transcript(y, rng=3)
    assert c == d and c[0] == ("dawa" if output > 0 else "hb")


@settings(max_examples=300, deadline=None)
@given(
    counts=st.lists(
        st.one_of(st.integers(0, 3), st.integers(0, 10**9), st.floats(0, 1e6, allow_nan=False)),
        min_size=1,
        max_size=300,
    ),
    where=st.integers(0, 10**6),
    top_share=st.floats(0, 1),
    remove=st.booleans(),
)
def test_probe_sensitivity_is_at_most_one(
    counts: list[float], where: int, top_share: float, remove: bool
) -> None:
    # Add or remove one row anywhere (including the top bins and ties among them).
    x = np.asarray(counts, dtype=np.float64)
    i = where % x.size
    if remove and x[i] < 1.0:
        x[i] += 1.0  # a row must be there to be removed
    y = x.copy()
    y[i] += -1.0 if remove else 1.0
    top = max(1, min(x.size, round(top_share * x.size)))
    change = abs(concentration_margin(y, top) - concentration_margin(x, top))
    assert change <= max(CONCENTRATED_ABOVE, 1.0 - CONCENTRATED_ABOVE) + 1e-6
    assert change <= PROBE_SENSITIVITY


def _probe_outputs(x: np.ndarray, epsilon_probe: float, runs: int, seed: int) -> np.ndarray:
    """The probe's release on ``x``, ``runs`` times (the functions auto calls)."""
    mechanism = concentration_probe(epsilon_probe)
    margin = concentration_margin(x, probe_top_bins(x.size))
    source = as_source(np.random.default_rng(seed))
    return np.array([float(mechanism.randomise(margin, rng=source)) for _ in range(runs)])


@pytest.mark.parametrize("target", [-1.5, 0.0, 0.8])
def test_probe_release_and_choice_match_the_laplace_closed_form(target: float) -> None:
    # The release is margin + Lap(b), b = 1/epsilon_probe (up to the grid's 2^-10):
    # mean margin, sd sqrt(2)·b, and P(DAWA) = P(margin + Lap(b) > 0) =
    # 1 - exp(-m/b)/2 for m >= 0, exp(m/b)/2 for m < 0.
    x = _at_margin(target)
    b = concentration_probe(1.0).scale
    assert b == pytest.approx(1.0, rel=2**-9)
    out = _probe_outputs(x, 1.0, 10_000, seed=int(10 * target) + 50)
    assert np.mean(out) == pytest.approx(target, abs=0.05)
    assert np.std(out) == pytest.approx(math.sqrt(2.0) * b, rel=0.04)
    expected = 1 - 0.5 * math.exp(-target / b) if target >= 0 else 0.5 * math.exp(target / b)
    assert np.mean(out > 0) == pytest.approx(expected, abs=0.015)


def test_auto_choice_frequency_matches_the_closed_form() -> None:
    # End to end (epsilon = 100, so epsilon_probe = 1): auto picks DAWA as often as
    # margin + Lap(b) > 0, with exact margin -0.7.
    x = _at_margin(-0.7)
    rng = np.random.default_rng(8)
    picks = [
        histograms.auto(x, 100.0, **HIGH, workload="units", rng=rng).details["auto_choice"]
        for _ in range(1500)
    ]
    assert picks.count("dawa") / len(picks) == pytest.approx(0.5 * math.exp(-0.7), abs=0.04)


def _neighbouring_top(target: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """x and x plus one row in a top bin: the largest shift of the margin (1 - c)."""
    x = _at_margin(target)
    y = x.copy()
    y[0] += 1.0
    return x, y


def test_probe_audit_within_its_epsilon_and_fails_when_broken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Claim: the probe's release is epsilon_probe-DP (epsilon_probe = 1 here).
    x, y = _neighbouring_top()
    honest = audit_samples(
        _probe_outputs(x, 1.0, 10_000, 1), _probe_outputs(y, 1.0, 10_000, 2), epsilon=1.0
    )
    assert honest.passed, honest
    # The broken variant: noise 30 times too small (sensitivity taken as 1/30).
    monkeypatch.setattr(select_module, "PROBE_SENSITIVITY", PROBE_SENSITIVITY / 30)
    broken = audit_samples(
        _probe_outputs(x, 1.0, 5_000, 3), _probe_outputs(y, 1.0, 5_000, 4), epsilon=1.0
    )
    assert not broken.passed and broken.epsilon_lower_bound > 1.0, broken


def _released_margins(x: np.ndarray, runs: int, seed: int) -> np.ndarray:
    """``probe_margin`` from ``details`` of full auto releases (epsilon 100: probe 1)."""
    rng = np.random.default_rng(seed)
    return np.array(
        [
            histograms.auto(x, 100.0, **HIGH, workload="units", rng=rng).details["probe_margin"]
            for _ in range(runs)
        ]
    )


@pytest.mark.audit
def test_released_probe_audit_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe value auto releases in ``details``: within epsilon_probe, and refuted

    when its noise is 30 times too small, or 3 times (true shift 0.65 at scale
    1/3: loss 1.95 > 1). The margin sits far below 0, so auto runs the fast Hb.
    """
    x, y = _neighbouring_top(-10.0)
    runs = 10_000
    honest = audit_samples(
        _released_margins(x, runs, 1), _released_margins(y, runs, 2), epsilon=1.0
    )
    assert honest.passed, honest
    for factor, runs, seeds in ((30.0, 2_000, (3, 4)), (3.0, 10_000, (5, 6))):
        monkeypatch.setattr(select_module, "PROBE_SENSITIVITY", PROBE_SENSITIVITY / factor)
        broken = audit_samples(
            _released_margins(x, runs, seeds[0]), _released_margins(y, runs, seeds[1]), epsilon=1.0
        )
        assert not broken.passed and broken.epsilon_lower_bound > 1.0, (factor, broken)
