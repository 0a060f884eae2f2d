"""``Session.synthesize(method="mst")``: refusals before the charge, transcripts, accuracy.

* Every invalid call is refused before anything is charged or read (the
  budget and the ledger stay as they were, the engine is not called).
* Transcript: a table and its neighbour with one hostile row (NaN, a huge
  number, a category outside the declared domain), with the same seeded
  noise, give the same charge, ledger rows, report (selected pairs, σ, ρ
  per step, cells) except the noisy counts; with the selection's draws
  fixed too, the same pairs. The graphical-model fit is post-processing and
  is replaced by a stub here (it is exercised by the accuracy test).
* Accuracy: at a large ε, on a strongly dependent 3-column table, the
  synthetic table's two-way total-variation error is small.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.synth._tables import dependent, session

import dpkit.synth.mst as mst
from dpkit.errors import BudgetExceededError, InvalidParameterError, PrivacyWarning
from dpkit.synth import evaluate

EDGES = {"size": np.linspace(0, 100, 17)}


@pytest.fixture
def no_fit(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Replace the (post-processing) model fit by a stub that records what it was given."""
    calls: list[Any] = []

    def stub(attributes, measurements, rows, seed, iterations=0):
        calls.append((tuple(m.columns for m in measurements), rows))
        return {a.name: np.zeros(rows, dtype=np.int64) for a in attributes}

    monkeypatch.setattr(mst, "fit_and_sample", stub)
    return calls


def _seeded(s: Any, **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return s.synthesize(rng=np.random.default_rng(7), **kw)


class _Spy:
    """An engine wrapper that counts coded_counts calls."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.calls = engine, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def coded_counts(self, codings: Any) -> Any:
        self.calls += 1
        return self.engine.coded_counts(codings)


REFUSED = [
    ({"rows": 0, "epsilon": 1.0}, "rows must be"),
    ({"rows": 10**9, "epsilon": 1.0}, "rows must be"),
    ({"rows": 10, "epsilon": 1.0, "columns": ["colour", "nope"]}, "unknown column"),
    ({"rows": 10, "epsilon": 1.0, "columns": ["colour"]}, "from 2 to"),
    ({"rows": 10, "epsilon": 1.0, "columns": ["colour", "colour"]}, "twice"),
    ({"rows": 10, "epsilon": 1.0, "bins": 1}, "bins must be"),
    ({"rows": 10, "epsilon": 1.0, "bins": True}, "bins must be"),
    ({"rows": 10, "epsilon": 1.0, "rho": 0.1}, "exactly one of"),
    ({"rows": 10}, "exactly one of"),
    ({"rows": 10, "rho": -1.0}, "rho must be"),
    ({"rows": 10, "rho": 1e-30}, "too small"),
    ({"rows": 10, "epsilon": 1.0, "delta": 0.0}, "delta must be"),
    ({"rows": 10, "epsilon": 1.0, "method": "pgm"}, "method must be"),
    ({"rows": 10, "epsilon": 1.0, "workload": [("colour", "ok")]}, "no workload"),
    ({"rows": 10, "epsilon": 1.0, "bins": 1024, "columns": ["size", "size2"]}, "cells"),
]


@pytest.mark.parametrize(("kwargs", "message"), REFUSED)
def test_invalid_calls_are_refused_before_the_charge(kwargs, message, no_fit) -> None:
    frame = dependent(50).assign(size2=lambda f: f["size"])
    s = session(frame, {"size2": "DOUBLE"}, {"size2": {"bounds": [0, 100]}})
    spy = _Spy(s._engine)
    s._engine = spy
    before = s.spent
    with pytest.raises(InvalidParameterError, match=message):
        s.synthesize(**kwargs)
    assert s.spent == before and s.accountant.history == () and spy.calls == 0


def test_without_mbi_the_call_is_refused_before_the_charge(no_fit, monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mbi" else real(name, *a)
    )
    s = session(dependent(50))
    with pytest.raises(InvalidParameterError, match="dpkit\\[synth\\]"):
        s.synthesize(rows=10, epsilon=1.0)
    assert s.accountant.history == ()


def test_a_boolean_and_a_numeric_category_column_are_coded_by_the_engine(no_fit) -> None:
    frame = dependent(200).assign(flag=lambda f: f["ok"] == "yes", n=lambda f: f["size"] // 40)
    s = session(
        frame,
        {"flag": "BOOLEAN", "n": "BIGINT"},
        {"flag": {"domain": [True, False]}, "n": {"domain": [0, 1, 2]}},
    )
    report = _seeded(s, rows=5, rho=15.0, columns=["flag", "n"]).report
    flag, n = (m.counts for m in report.marginals[:2])
    expected_flag = [int(frame["flag"].sum()), int((~frame["flag"]).sum()), 0]
    expected_n = [int((frame["n"] == v).sum()) for v in (0, 1, 2)] + [0]
    assert np.abs(flag - expected_flag).max() < 10 and np.abs(n - expected_n).max() < 10


@pytest.mark.parametrize(
    ("types", "domain"),
    [
        ({"code": "VARCHAR"}, [1, 2]),  # numbers for a text column
        ({"code": "BIGINT"}, ["1", "2"]),  # text for a number column
        ({"code": "DECIMAL(10,2)"}, [0.125, 1.0]),  # not exact in the declared type
    ],
)
def test_a_category_the_column_cannot_hold_is_refused_before_the_charge(
    types, domain, no_fit
) -> None:
    frame = dependent(50).assign(code=lambda f: (f["size"] // 50).astype(int))
    if types["code"] == "VARCHAR":
        frame["code"] = frame["code"].astype(str)
    s = session(frame, types, {"code": {"domain": domain}})
    spy = _Spy(s._engine)
    s._engine = spy
    with pytest.raises(InvalidParameterError, match="'code'"):
        s.synthesize(rows=10, epsilon=1.0, columns=["colour", "code"])
    assert spy.calls == 0 and s.accountant.history == ()


def test_a_column_without_a_domain_is_refused_before_the_charge(no_fit) -> None:
    s = session(dependent(50).assign(free=1.0), {"free": "DOUBLE"})
    with pytest.raises(InvalidParameterError, match="no declared domain or bounds"):
        s.synthesize(rows=10, epsilon=1.0)  # columns=None: all, 'free' has none
    assert s.accountant.history == ()


def test_a_privacy_unit_is_refused_before_the_charge(no_fit) -> None:
    frame = dependent(50).assign(pid=np.arange(50) % 7)
    s = session(frame, {"pid": "BIGINT"}, privacy_unit="pid")
    with pytest.raises(InvalidParameterError, match="privacy unit"):
        s.synthesize(rows=10, epsilon=1.0, columns=["colour", "ok"])
    assert s.accountant.history == ()


def test_an_overspend_is_refused_before_any_read(no_fit) -> None:
    s = session(dependent(50), epsilon=1.0)
    spy = _Spy(s._engine)
    s._engine = spy
    with pytest.raises(BudgetExceededError):
        s.synthesize(rows=10, epsilon=5.0)
    assert spy.calls == 0 and s.accountant.history == ()


def _hostile(frame: pd.DataFrame, which: str) -> pd.DataFrame:
    row = {
        "nan": {"colour": None, "size": np.nan, "ok": None},
        "huge": {"colour": "red", "size": 1e308, "ok": "yes"},
        "new-category": {"colour": "SECRET-purple", "size": -1e9, "ok": "maybe"},
    }[which]
    return pd.concat([frame, pd.DataFrame([row])], ignore_index=True)


def _transcript(s: Any, kwargs: dict[str, Any], pairs_fixed: bool) -> tuple[Any, Any]:
    """Everything a release shows but the noisy counts (and, unless fixed, the DP-chosen pairs)."""
    result = _seeded(s, **kwargs)
    ledger = [(r.label, r.cost, r.event.to_json()) for r in s.accountant.history]
    report = result.report
    shown = [
        (m.columns, m.counts.shape) if pairs_fixed or len(m.columns) == 1 else None
        for m in report.marginals
    ] + [(m.sigma, m.rho) for m in report.marginals]
    public = (
        report.method,
        report.rows,
        report.rho,
        report.steps,
        report.selection_epsilon,
        report.cells,
        shown,
        result.privacy,
        list(result.table.columns),
        result.table.shape,
    )
    return (public, ledger, s.remaining), report


@pytest.mark.parametrize("which", ["nan", "huge", "new-category"])
@pytest.mark.parametrize("budget", [{"epsilon": 1.0, "delta": 1e-6}, {"rho": 0.05}])
def test_neighbours_with_a_hostile_row_have_the_same_transcript(
    which, budget, no_fit, monkeypatch
) -> None:
    frame = dependent(300)
    kwargs = {"rows": 100, "bins": 8, **budget}
    a_public, a_report = _transcript(session(frame), kwargs, False)
    b_public, b_report = _transcript(session(_hostile(frame, which)), kwargs, False)
    assert a_public == b_public
    one_way = zip(a_report.marginals[:3], b_report.marginals[:3])
    # the noisy counts are the only thing that may differ
    assert any(not np.array_equal(x.counts, y.counts) for x, y in one_way)

    # With the selection's draws fixed as well (always the first candidate), the same pairs.
    monkeypatch.setattr(mst, "exponential", lambda utilities, **kw: 0)
    a_public, a_report = _transcript(session(frame), kwargs, True)
    b_public, b_report = _transcript(session(_hostile(frame, which)), kwargs, True)
    assert a_public == b_public and a_report.selected == b_report.selected


def test_the_report_states_the_split_and_sigmas(no_fit) -> None:
    s = session(dependent(300))
    result = _seeded(s, rows=50, rho=0.375, bins=8)  # exact in binary: ρ/3 = 1/8
    report = result.report
    assert report.steps == {"one-way marginals": 0.125, "selection": 0.125, "pair marginals": 0.125}
    assert len(report.marginals) == 3 + 2 and len(report.selected) == 2
    # σ² = ⌈1/(2ρᵢ)⌉ with ρᵢ = (ρ/3)/3 one-way, (ρ/3)/2 per pair
    assert [round(m.sigma**2, 9) for m in report.marginals] == [12.0] * 3 + [8.0] * 2
    assert report.selection_epsilon == pytest.approx((8 * 0.125 / 2) ** 0.5)
    assert result.privacy.rho == 0.375 and result.privacy.delta == 1e-6
    assert s.accountant.history[0].cost.rho == 0.375
    assert result.table.shape == (50, 3)


def test_epsilon_delta_is_converted_to_the_largest_rho_that_fits(no_fit) -> None:
    from dpkit.accounting import largest_rho, zcdp_to_dp

    s = session(dependent(200))
    result = _seeded(s, rows=10, epsilon=1.0, delta=1e-9, bins=4)
    rho = largest_rho(1.0, 1e-9)
    assert result.report.rho == float(rho) and 0.01 < float(rho) < 0.02
    assert result.privacy.epsilon == float(zcdp_to_dp(rho, 1e-9).epsilon) <= 1.0


def test_high_epsilon_mst_is_accurate_on_a_dependent_table() -> None:
    pytest.importorskip("mbi")
    frame = dependent(3000)
    s = session(frame, epsilon=200.0)
    result = _seeded(s, rows=3000, rho=20.0)
    table = result.table
    # the missing cell is in the domain, so noise may draw a few (pandas shows them as NaN)
    colour = table["colour"]
    assert set(colour.dropna()) <= {"red", "green", "blue"} and colour.isna().sum() < 30
    assert set(np.unique(table["size"])) <= {3.125 + 6.25 * i for i in range(16)}
    assert result.report.edges == {"size": tuple(EDGES["size"])}  # the schema's bins
    scores = evaluate(frame, table, ["colour", "size", "ok"], edges=result.report.edges)
    assert scores.mean < 0.05 and scores.max < 0.08, scores
    # the independent model of the same marginals is far worse: the pairs matter
    rng = np.random.default_rng(0)
    shuffled = table.apply(lambda c: rng.permutation(c.to_numpy()))
    assert evaluate(frame, shuffled, ["colour", "size", "ok"], edges=EDGES).mean > 0.2
