"""``Session.synthesize(method="aim")``: the exact round budget, refusals, transcripts, accuracy.

* Budget (hypothesis over the public parameters and any annealing pattern):
  the rounds' ρ never sum above the charged ρ and sum to it exactly at the
  end, there are at most ``16·d`` rounds, and no share is below the floor that
  :func:`dpkit.synth.aim.check_shares` checks before the charge.
* Refusals: every invalid call (workload, a ρ too small for AIM's shares) is
  refused before anything is charged or read.
* Transcript: a table and its neighbour with a hostile row, same seeded noise,
  the model fit stubbed (post-processing): the same charge, ledger, report
  (rounds, σ, ρ per round, ε per round, cells, error estimates) except the
  noisy counts; with the selection fixed too, the same cliques.
* Accuracy: a small dependent table at a large ρ.
"""

from __future__ import annotations

import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.synth._tables import dependent, session
from tests.synth.test_synthesize import _hostile, _Spy

import dpkit.synth.aim as aim
from dpkit.errors import InvalidParameterError, PrivacyWarning
from dpkit.synth import evaluate
from dpkit.synth.compression import merged_cells

pytest.importorskip("mbi")


class _Factor:
    def __init__(self, size: int) -> None:
        self.size = size

    def datavector(self, flatten: bool = True) -> np.ndarray:
        return np.full(self.size, 5.0)


class _StubModel:
    """A fixed model (uniform counts): the fit is post-processing, stubbed for transcripts."""

    def __init__(self, attributes: Any, measurements: Any) -> None:
        self.sizes = {a.name: a.size for a in attributes}
        self.cliques = [m.columns for m in measurements]

    def project(self, columns: Any) -> _Factor:
        return _Factor(int(np.prod([self.sizes[c] for c in columns])))


@pytest.fixture
def no_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        aim,
        "fit_model",
        lambda attributes, measurements, *a, **k: _StubModel(attributes, measurements),
    )
    monkeypatch.setattr(
        aim,
        "sample_model",
        lambda model, attributes, rows, seed: {
            a.name: np.zeros(rows, np.int64) for a in attributes
        },
    )


def _seeded(s: Any, **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return s.synthesize("aim", rng=np.random.default_rng(7), **kw)


@settings(max_examples=300, deadline=None)
@given(
    num=st.integers(1, 10**9),
    den=st.integers(1, 10**9),
    d=st.integers(2, 64),
    anneal=st.lists(st.booleans(), max_size=2000),
    one_way=st.sampled_from([None, Fraction(1, 2), Fraction(1, 7), Fraction(99, 100)]),
)
def test_the_rounds_never_spend_more_than_rho(num, den, d, anneal, one_way) -> None:
    rho = Fraction(num, den)
    budget = aim.RoundBudget(rho, d, one_way)
    t = aim.max_rounds(d)
    rest = rho if one_way is None else (1 - one_way) * rho
    floor_m, floor_s = Fraction(9, 10) * rest / t, rest / (10 * t)
    assert budget.spent == d * budget.one_way == (rho - rest if one_way else d * floor_m)
    assert budget.one_way >= floor_m
    spent = budget.spent
    rounds = 0
    while not budget.done:
        r_m, r_s = budget.next_round()
        rounds += 1
        spent += r_m + r_s
        assert budget.spent == spent <= rho
        assert r_m >= floor_m and r_s >= floor_s
        assert rounds <= t
        if anneal[rounds - 1 : rounds] == [True]:
            budget.anneal()
    assert spent == rho


def test_candidates_and_their_weights_are_the_papers() -> None:
    # all pairs of 3 columns: a column is in 2 workload pairs, a pair shares 2 + 1 + 1 columns
    w = aim.candidates([(0, 1), (0, 2), (1, 2)])
    assert w == {(0,): 2, (1,): 2, (2,): 2, (0, 1): 4, (0, 2): 4, (1, 2): 4}
    assert aim.candidates([(2, 0)]) == {(0,): 1, (2,): 1, (0, 2): 2}


REFUSED = [
    ({"workload": "colour"}, "workload must be"),
    ({"workload": []}, "workload must be"),
    ({"workload": [("colour", "size", "ok")]}, "1 or 2 column"),
    ({"workload": [("colour", "nope")]}, "not among"),
    ({"workload": [("colour", "ok")], "columns": ["colour", "size"]}, "not among"),
    ({"workload": [("ok", "ok")]}, "twice"),
    ({"workload": ["colour"]}, "1 or 2 column"),
    ({"rho": 1e-12, "epsilon": None}, "too small for AIM"),
    ({"rows": 0}, "rows must be"),
]


@pytest.mark.parametrize(("kwargs", "message"), REFUSED)
def test_invalid_aim_calls_are_refused_before_the_charge(kwargs, message, no_fit) -> None:
    s = session(dependent(50))
    spy = _Spy(s._engine)
    s._engine = spy
    call = {"rows": 10, "epsilon": 1.0, **kwargs}
    with pytest.raises(InvalidParameterError, match=message):
        s.synthesize("aim", **{k: v for k, v in call.items() if v is not None})
    assert s.accountant.history == () and spy.calls == 0


def _transcript(s: Any, kwargs: dict[str, Any], fixed: bool) -> tuple[Any, Any]:
    result = _seeded(s, **kwargs)
    report = result.report
    ledger = [(r.label, r.cost, r.event.to_json()) for r in s.accountant.history]
    shown = [
        (m.columns, m.counts.shape) if fixed or len(m.columns) == 1 else None
        for m in report.marginals
    ] + [(m.sigma, m.rho) for m in report.marginals]
    public = (
        report.method,
        report.rho,
        report.steps,
        report.selection_epsilon,
        report.selection_epsilons,
        report.cells,
        report.errors if fixed else None,
        shown,
        result.privacy,
        result.table.shape,
    )
    return (public, ledger, s.remaining), report


@pytest.mark.parametrize("which", ["nan", "huge", "new-category"])
def test_aim_neighbours_with_a_hostile_row_have_the_same_transcript(
    which, no_fit, monkeypatch
) -> None:
    frame = dependent(300)
    kwargs = {"rows": 20, "bins": 8, "epsilon": 1.0, "delta": 1e-6}
    a_public, a_report = _transcript(session(frame), kwargs, False)
    b_public, b_report = _transcript(session(_hostile(frame, which)), kwargs, False)
    assert a_public == b_public
    assert len(a_report.selected) > 1
    assert any(
        not np.array_equal(x.counts, y.counts)
        for x, y in zip(a_report.marginals, b_report.marginals)
    )
    # the selection fixed as well (always the first admissible candidate): the same cliques
    monkeypatch.setattr(aim, "exponential", lambda utilities, **kw: 0)
    a_public, a_report = _transcript(session(frame), kwargs, True)
    b_public, b_report = _transcript(session(_hostile(frame, which)), kwargs, True)
    assert a_public == b_public and a_report.selected == b_report.selected


def test_the_report_spends_exactly_rho_and_estimates_the_workload(no_fit) -> None:
    s = session(dependent(300))
    result = _seeded(s, rows=10, rho=0.5, bins=8, workload=[("colour", "size"), ("ok",)])
    report = result.report
    assert sum(Fraction(v) for v in report.steps.values()) == pytest.approx(0.5, rel=1e-12)
    assert aim.ONE_WAY_SHARE is None and not aim.MERGE_RARE_CELLS  # the paper's AIM
    assert report.steps["one-way marginals"] == pytest.approx(3 * 0.9 * 0.5 / 48)
    assert not any(m.merges for m in report.marginals)
    assert set(report.errors) == {("colour", "size"), ("ok",)}
    # a one-way marginal is always measured: its error estimate is √(2/π)·σ·n
    sigma_ok = report.marginals[2].sigma
    assert report.errors["ok",] == pytest.approx((2 / np.pi) ** 0.5 * sigma_ok * 3)
    assert s.accountant.history[0].cost.rho == 0.5
    assert "workload=[['colour', 'size'], ['ok']]" in s.accountant.history[0].label


def test_half_on_the_one_way_marginals_and_merged_cells(no_fit, monkeypatch) -> None:
    monkeypatch.setattr(aim, "ONE_WAY_SHARE", Fraction(1, 2))
    monkeypatch.setattr(aim, "MERGE_RARE_CELLS", True)
    s = session(dependent(300))
    report = _seeded(s, rows=10, rho=0.5, bins=8, workload=[("colour", "size"), ("ok",)]).report
    assert sum(Fraction(v) for v in report.steps.values()) == pytest.approx(0.5, rel=1e-12)
    assert report.steps["one-way marginals"] == 0.25  # half of ρ, ρ/(2d) each
    assert [round(m.sigma**2, 9) for m in report.marginals[:3]] == [6.0] * 3  # ⌈1/(2·ρ/6)⌉
    # every round measures in the cells the released one-way counts merge (post-processing)
    released = {m.columns[0]: merged_cells(m.counts, m.sigma) for m in report.marginals[:3]}
    for m in report.marginals[3:]:
        want = {c: tuple(released[c].tolist()) for c in m.columns if released[c] is not None}
        assert m.merges == want
    assert any(m.merges for m in report.marginals[3:]), "no merge: the check above is empty"


def test_high_rho_aim_is_accurate_on_a_dependent_table() -> None:
    frame = dependent(2000)
    s = session(frame, epsilon=200.0)
    result = _seeded(s, rows=2000, rho=2.0)
    scores = evaluate(
        frame, result.table, ["colour", "size", "ok"], edges={"size": np.linspace(0, 100, 17)}
    )
    assert scores.mean < 0.05 and scores.max < 0.08, scores
    assert any(len(c) == 2 for c in result.report.selected)
