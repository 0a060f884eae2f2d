"""Gaussian releases of counts and histograms (issue 29, item 4).

Checked: with ``noise="gaussian"`` under a zCDP-composing accountant, a count,
a grouped count and a histogram release discrete Gaussian noise calibrated to
ρ = ε²/2 (σ = k/ε), the ledger records a ``discrete_gaussian`` event with that
ρ and the charge is the event's ``budget()``; the noise added, the event
charged and the error bar said before spending are the same construction;
the intervals cover at their level (seeded Monte-Carlo, refuting a too-narrow
variant); ``"auto"`` takes the narrower noise and Laplace under ``basic``;
``noise="laplace"`` is byte-identical to dpkit before issue 29 (the golden
transcript below was produced by commit 364f1a4); Gaussian noise under
``basic`` is refused before any charge; neighbours' transcripts agree.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from tests.tables._neighbours import (
    CSV_TYPES,
    GROUPS,
    SCHEMA,
    Options,
    Pair,
    assert_same,
    frame,
    neighbours,
    record,
)

from dpkit._checks import exact
from dpkit.accounting import Accountant, Budget
from dpkit.accounting.events import DiscreteGaussianEvent, GeometricEvent, event_from_json
from dpkit.errors import BudgetExceededError, InvalidParameterError
from dpkit.mechanisms import DiscreteGaussian, Geometric
from dpkit.mechanisms.gaussian import discrete_gaussian_tail
from dpkit.tables import Session, costing
from dpkit.tables.kinds import expected_error
from dpkit.tables.kinds.count import counting_noise
from dpkit.tables.specs import QuerySpec

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.errors.PrivacyWarning")

G = ["a", "b", "c"]
TYPES = {"g": "VARCHAR", "x": "DOUBLE"}


def _table(n: int = 60) -> pd.DataFrame:
    return pd.DataFrame({"g": [G[i % 3] for i in range(n)], "x": [float(i) for i in range(n)]})


def _session(noise: str = "gaussian", accountant: str = "rdp", **kw: Any) -> Session:
    options: dict[str, Any] = {"epsilon": 10.0, "delta": 1e-6, "rng": 2029, **kw}
    return Session.from_pandas(_table(), types=TYPES, noise=noise, accountant=accountant, **options)


QUERIES = {
    "count": lambda s: s.count(epsilon=0.1),
    "grouped count": lambda s: s.count("x", epsilon=0.5, group_by="g", keys=G),
    "histogram": lambda s: s.histogram("x", epsilon=0.3, bins=4, bounds=(0, 60)),
    "grouped histogram": lambda s: s.histogram("g", epsilon=0.2, domain=G, group_by="g", keys=G),
}
EPSILON = {"count": 0.1, "grouped count": 0.5, "histogram": 0.3, "grouped histogram": 0.2}


@pytest.mark.parametrize("rule", ["rdp", "zcdp"])
@pytest.mark.parametrize("name", list(QUERIES))
def test_gaussian_release_charges_a_discrete_gaussian_event(
    name: str, rule: str, tmp_path: Any
) -> None:
    ledger = tmp_path / "ledger.db"
    s = _session(accountant=rule, ledger=str(ledger))
    r = QUERIES[name](s)
    eps = EPSILON[name]
    rho = exact(eps) ** 2 / 2
    assert r.mechanism == "discrete_gaussian"
    assert r.privacy.mechanisms == ("discrete_gaussian",)
    # σ² = ⌈k²/(2ρ)⌉ = ⌈k²/ε²⌉, k = 1: σ = k/ε up to the integer variance
    assert r.details["sigma"] ** 2 == pytest.approx(math.ceil(1 / (2 * rho)))
    assert r.details["rho"] == float(rho)
    (record_,) = s.accountant.history
    event = record_.event
    assert isinstance(event, DiscreteGaussianEvent)
    assert event.rho == rho and event.delta == exact(1e-6)
    assert record_.cost == event.budget()
    assert record_.cost.rho_declared == rho
    # the release's report states what was charged (ε' at δ_n, and ρ), not a pure ε
    assert r.privacy.budget == record_.cost
    assert r.epsilon > eps and r.delta == 1e-6 and r.privacy.rho == float(rho)
    # the ledger on disk holds that event as JSON, and it reads back the same
    reopened = Accountant(Budget(10.0, 1e-6), ledger=str(ledger), composition=rule)
    stored = reopened.history[-1].event
    assert stored == event
    data = stored.to_json()
    assert data["type"] == "discrete_gaussian"
    assert event_from_json(data) == event


def test_noise_event_and_error_bar_are_one_construction() -> None:
    """What ``expected_error`` says, what ``release`` adds and what ``parts`` charges agree."""
    s = _session()
    for name, call in QUERIES.items():
        v = s.prepare(call(QueryRecorder())).query
        bar = expected_error(v)
        event, cost = costing.event(v), costing.cost(v)
        assert event.budget() == cost, name
        mech = counting_noise(v, EPSILON[name])
        assert isinstance(event, DiscreteGaussianEvent)
        assert event == mech.event
        r = call(s)
        assert s.accountant.history[-1].event == event
        assert r.details["sigma"] == event.sigma == mech.sigma
        h = r.details["half_width"]
        assert h == bar.half_width == mech.half_width(v.level), name
        # every interval is x ± h cut to [0, ∞), around the released value
        values = r.value if isinstance(r.value, dict) else {None: r.value}
        cis = r.ci if isinstance(r.ci, dict) else {None: r.ci}
        for key in values:
            x, lo, hi = (np.asarray(a, dtype=float) for a in (values[key], *cis[key]))
            pos = x > 0
            assert np.all(hi[pos] == x[pos] + h) and np.all(lo == np.maximum(x - h, 0))
            assert np.all((hi[~pos] >= 0) & (hi[~pos] <= h))
            assert np.all((lo <= x) & (x <= hi))


class QueryRecorder:
    """Stands for a session: each query method returns the spec it was called with."""

    def __getattr__(self, kind: str) -> Any:
        def spec(column: Any = None, **given: Any) -> QuerySpec:
            return QuerySpec(kind, column, **given)

        return spec


def _charges_until_refused(accountant: Accountant, cost: Budget, event: Any, limit: int) -> int:
    n = 0
    while n < limit:
        try:
            accountant.charge(cost, "q", event=event)
        except BudgetExceededError:
            return n
        n += 1
    return n


def test_rdp_admits_many_more_gaussian_counts_than_basic_laplace() -> None:
    """At (1, 1e-6), counts of ε = 0.01 each: 100 under basic Laplace, over 4x as many
    Gaussian ones under rdp or zcdp. (At ε = 0.1 per count basic admits 10 and zCDP/RDP only about 4:
    a zCDP accountant gains when each query spends little, here below ε ≈ 0.04.)"""
    spec = QuerySpec("count", None, epsilon=0.01)
    counts = {}
    for noise, rule in (("laplace", "basic"), ("gaussian", "rdp"), ("gaussian", "zcdp")):
        s = Session.from_pandas(
            _table(), types=TYPES, epsilon=1.0, delta=1e-6, accountant=rule, noise=noise
        )
        v = s.prepare(spec).query
        payer = Accountant(Budget(1.0, 1e-6), composition=rule)
        counts[(noise, rule)] = _charges_until_refused(
            payer, costing.cost(v), costing.event(v), 5000
        )
    assert counts[("laplace", "basic")] == 100
    # measured: basic 100, zcdp 487, rdp 482 (its filter over Rényi orders pays for adaptivity)
    assert counts[("gaussian", "zcdp")] >= 4 * counts[("laplace", "basic")]
    assert counts[("gaussian", "rdp")] >= 4 * counts[("laplace", "basic")]


@pytest.mark.parametrize("eps", [0.05, 0.5, 2.0, 8.0])
@pytest.mark.parametrize("k", [1, 3])
def test_auto_takes_the_narrower_noise(eps: float, k: int) -> None:
    s = Session.from_pandas(
        _table().assign(pid=range(60)),
        types={**TYPES, "pid": "BIGINT"},
        epsilon=10_000.0,
        delta=1e-6,
        accountant="zcdp",
        noise="auto",
        privacy_unit="pid",
        max_contributions=k,
        rng=1,
    )
    lap = Geometric(epsilon=eps, sensitivity=k).half_width(0.95)
    gau = DiscreteGaussian.from_rho(exact(eps) ** 2 / 2, delta=1e-6, sensitivity=k).half_width(0.95)
    want = "discrete_gaussian" if gau < lap else "geometric"
    assert s.count(epsilon=eps).mechanism == want
    assert s.histogram("x", epsilon=eps, bins=3, bounds=(0, 60)).mechanism == want


def test_auto_chooses_both_ways_and_laplace_under_basic() -> None:
    s = _session(noise="auto", accountant="zcdp", epsilon=1000.0)
    assert s.count(epsilon=0.1).mechanism == "discrete_gaussian"  # ± 20 instead of ± 30
    assert s.count(epsilon=8.0).mechanism == "geometric"  # ± 1 instead of ± 2
    basic = _session(noise="auto", accountant="basic")
    r = basic.count(epsilon=0.1)
    assert r.mechanism == "geometric" and isinstance(
        basic.accountant.history[0].event, GeometricEvent
    )


#: What commit 364f1a4 (before noise=) released for the four QUERIES in order on _table(),
#: Session(epsilon=10, delta=1e-6, rng=2029): values, intervals, mechanism, details, report.
GOLDEN = [
    (
        "58",
        "(28.0, 88.0)",
        "geometric",
        "{'sensitivity': 1, 'scale': 10.0, 'half_width': 30.0}",
        "PrivacyReport(epsilon=0.1, delta=0.0, rho=None, neighbouring='add/remove one row', "
        "mechanisms=('geometric',), remaining=Budget(epsilon=9.9, delta=1e-06), split={}, "
        "uses={}, details={})",
    ),
    (
        "{'a': 13, 'b': 23, 'c': 20}",
        "{'a': (7.0, 19.0), 'b': (17.0, 29.0), 'c': (14.0, 26.0)}",
        "geometric",
        "{'sensitivity': 1, 'scale': 2.0, 'half_width': 6.0, 'groups': 3, "
        "'composition': 'parallel'}",
        "PrivacyReport(epsilon=0.5, delta=0.0, rho=None, neighbouring='add/remove one row', "
        "mechanisms=('geometric',), remaining=Budget(epsilon=9.4, delta=1e-06), split={}, "
        "uses={}, details={})",
    ),
    (
        "array([24, 18, 13, 15])",
        "(array([14.,  8.,  3.,  5.]), array([34., 28., 23., 25.]))",
        "geometric",
        "{'edges': [0.0, 15.0, 30.0, 45.0, 60.0], 'labels': ['[0, 15)', '[15, 30)', "
        "'[30, 45)', '[45, 60]'], 'clipped': 'values below the first edge count in the first "
        "bin, above the last edge in the last bin', 'half_width': 10.0, "
        "'scale': 3.3333333333333335}",
        "PrivacyReport(epsilon=0.3, delta=0.0, rho=None, neighbouring='add/remove one row', "
        "mechanisms=('geometric',), remaining=Budget(epsilon=9.1, delta=1e-06), split={}, "
        "uses={}, details={})",
    ),
    (
        "{'a': array([24,  0,  9]), 'b': array([ 0, 18,  0]), 'c': array([ 0,  0, 23])}",
        "{'a': (array([9., 0., 0.]), array([39., 15., 24.])), 'b': (array([0., 3., 0.]), "
        "array([ 9., 33., 15.])), 'c': (array([0., 0., 8.]), array([ 6., 14., 38.]))}",
        "geometric",
        "{'labels': ['a', 'b', 'c'], 'half_width': 15.0, 'scale': 5.0, 'groups': 3, "
        "'composition': 'parallel'}",
        "PrivacyReport(epsilon=0.2, delta=0.0, rho=None, neighbouring='add/remove one row', "
        "mechanisms=('geometric',), remaining=Budget(epsilon=8.9, delta=1e-06), split={}, "
        "uses={}, details={})",
    ),
]
GOLDEN_LEDGER = [
    ("count(*)", "Budget(epsilon=0.1)"),
    ("count(x) by g (3 groups, parallel)", "Budget(epsilon=0.5)"),
    ("histogram(x)", "Budget(epsilon=0.3)"),
    ("histogram(g) by g (3 groups, parallel)", "Budget(epsilon=0.2)"),
]


@pytest.mark.parametrize("noise", ["laplace", "auto"])
def test_laplace_under_basic_is_byte_identical_to_before(noise: str) -> None:
    s = _session(noise=noise, accountant="basic")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seen = [
            (repr(r.value), repr(r.ci), r.mechanism, repr(r.details), repr(r.privacy))
            for r in (call(s) for call in QUERIES.values())
        ]
    assert seen == GOLDEN
    assert [(c.label, repr(c.cost)) for c in s.accountant.history] == GOLDEN_LEDGER
    assert all(isinstance(c.event, GeometricEvent) for c in s.accountant.history)


def _coverage(h: float, sigma2: int) -> float:
    """P(|Z| <= h) for the discrete Gaussian of variance parameter sigma2 (exact)."""
    return 1.0 - 2.0 * discrete_gaussian_tail(math.floor(h) + 1, sigma2)[1]


@pytest.mark.parametrize("level", [0.8, 0.95])
def test_gaussian_intervals_cover_at_their_level(level: float) -> None:
    """Claim: each group's interval covers its true count with probability >= level, and no
    more than the exact discrete Gaussian coverage (4 binomial sd over 3,000 intervals).
    A variant whose bar assumed half the noise (σ/2) covers far less and is refuted."""
    n_keys, per_key = 3000, 50
    keys = [f"k{i}" for i in range(n_keys)]
    table = pd.DataFrame({"g": np.repeat(keys, per_key), "x": 1.0})
    s = Session.from_pandas(
        table,
        types=TYPES,
        epsilon=10.0,
        delta=1e-6,
        accountant="rdp",
        noise="gaussian",
        level=level,
        rng=29,
    )
    r = s.count(epsilon=0.1, group_by="g", keys=keys)
    assert r.mechanism == "discrete_gaussian"
    lo = np.array([r.ci[k][0] for k in keys])
    hi = np.array([r.ci[k][1] for k in keys])
    covered = float(np.mean((lo <= per_key) & (per_key <= hi)))
    h, sigma2 = r.details["half_width"], round(r.details["sigma"] ** 2)
    exact_cover = _coverage(h, sigma2)
    assert exact_cover >= level
    sd = math.sqrt(exact_cover * (1 - exact_cover) / n_keys)
    assert abs(covered - exact_cover) <= 4 * sd, (covered, exact_cover)
    # the broken variant: the bar of noise with half the σ (what a σ = k/(2ε) bar would say)
    narrow = DiscreteGaussian.from_rho(Fraction(4) * exact(0.1) ** 2 / 2, delta=1e-6)
    h_bad = narrow.half_width(level)
    noisy = np.array([r.value[k] for k in keys])
    covered_bad = float(np.mean(np.abs(noisy - per_key) <= h_bad))
    assert covered_bad < level - 4 * sd


def test_gaussian_under_basic_is_refused_before_any_charge(tmp_path: Any) -> None:
    ledger = str(tmp_path / "ledger.db")
    with pytest.raises(InvalidParameterError, match="noise='gaussian' needs an accountant"):
        Session.from_pandas(
            _table(), types=TYPES, epsilon=1.0, delta=1e-6, noise="gaussian", ledger=ledger
        )
    # a query paid by another (basic) accountant: refused before its charge, nothing recorded
    s = _session()
    basic = Accountant(Budget(1.0, 1e-6), ledger=ledger)
    with pytest.raises(InvalidParameterError, match="composition='basic'"):
        s.answer(QuerySpec("count", None, epsilon=0.1), accountant=basic)
    assert basic.history == () and basic.spent == Budget.zero()
    assert s.accountant.history == ()


# ------------------------------------------------------------------------ transcripts

BUDGET = {"epsilon": 1000.0, "delta": 1e-2}
B = (0.0, 100.0)
ADD = Options(additive=True)
GAUSSIAN_CASES = [
    ("count", lambda s: s.count(epsilon=1.0)),
    ("count-column", lambda s: s.count("x", epsilon=0.3)),
    ("count-grouped", lambda s: s.count(epsilon=1.0, group_by="g", keys=list(GROUPS))),
    ("histogram-bins", lambda s: s.histogram("x", epsilon=1.0, bins=5, bounds=B)),
    ("histogram-domain", lambda s: s.histogram("g", epsilon=0.2, domain=list(GROUPS))),
    (
        "histogram-grouped",
        lambda s: s.histogram(
            "cnt", epsilon=1.0, bins=4, bounds=B, group_by="g", keys=list(GROUPS)
        ),
    ),
]


def _gaussian_session(rows: list[dict[str, Any]], noise: str, **unit: Any) -> Session:
    return Session.from_pandas(
        frame(rows),
        types=CSV_TYPES,
        schema=SCHEMA,
        rng=20261126,
        accountant="rdp",
        noise=noise,
        **BUDGET,
        **unit,
    )


@settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(pair=neighbours(max_rows_per_person=3))
def test_gaussian_transcripts_agree_on_neighbours(pair: Pair) -> None:
    """A hostile person added: same errors, warnings, ledger (events), details, σ, half-widths."""
    for noise, unit in (
        ("gaussian", {}),
        ("auto", {"privacy_unit": "pid", "max_contributions": 2}),
    ):
        a = _gaussian_session(pair.smaller, noise, **unit)
        b = _gaussian_session(pair.bigger, noise, **unit)
        for case_id, call in GAUSSIAN_CASES:
            ta, tb = record(a, call, ADD), record(b, call, ADD)
            assert ta.error is None, (case_id, ta.error)
            assert_same(ta, tb)
        events_a = [c.event for c in a.accountant.history]
        assert events_a == [c.event for c in b.accountant.history]
        assert any(isinstance(e, DiscreteGaussianEvent) for e in events_a)


# ------------------------------------------------------------------------ audit

AUDIT_KEYS = 3000
AUDIT_DELTA = 0.05  # a δ at which the ρ-zCDP claim is a small, testable ε


def _audit_samples(rows_per_key: int, seed: int) -> np.ndarray:
    """One grouped Gaussian count over AUDIT_KEYS public keys: that many independent draws."""
    keys = [f"k{i:05d}" for i in range(AUDIT_KEYS)]
    table = pd.DataFrame({"g": np.repeat(keys, rows_per_key), "x": 1.0})
    s = Session.from_pandas(
        table,
        types=TYPES,
        epsilon=1e6,
        delta=1e-3,
        accountant="rdp",
        noise="gaussian",
        rng=seed,
    )
    r = s.count(epsilon=0.25, group_by="g", keys=keys)
    assert r.mechanism == "discrete_gaussian"
    return np.array([r.value[k] for k in keys], dtype=float)


def test_gaussian_count_audit_refutes_a_quarter_of_the_noise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Claim: a count of ε = 0.25 is ρ = 1/32-zCDP, hence (ε_a, 0.05)-DP with ε_a = 0.239 (CKS).

    Neighbours: 3 rows vs 4 rows per key (one row added). The audit's 99% lower
    bound on ε must stay below ε_a; the variant calibrated to 16ρ (σ/4) must be refuted.
    """
    from dpkit.accounting.composition import zcdp_to_dp
    from dpkit.audit import audit_samples
    from dpkit.tables import noise

    claim = zcdp_to_dp(exact(0.25) ** 2 / 2, exact(AUDIT_DELTA)).epsilon

    def audit() -> Any:
        a, b = _audit_samples(3, 11), _audit_samples(4, 12)
        return audit_samples(a, b, epsilon=claim, delta=AUDIT_DELTA, confidence=0.99)

    honest = audit()
    assert honest.passed, f"empirical ε ≥ {honest.epsilon_lower_bound:.3f} > claimed {claim:.3f}"
    real = noise.rho_of
    monkeypatch.setattr(noise, "rho_of", lambda epsilon: 16 * real(epsilon))
    broken = audit()
    assert not broken.passed, f"the audit missed σ/4: lower bound {broken.epsilon_lower_bound:.3f}"
