"""Every release carries one :class:`dpkit.PrivacyReport` as ``.privacy`` (one per family).

What each family reports is checked against what was declared and what the
accountant that paid has left: ε, δ, the neighbouring relation, the mechanisms
and ``remaining``. The old shapes (the trees' dict form, ``ci_low``/``ci_high``,
``details["remaining"]``) still work one release, with a DeprecationWarning
where the name is going.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit
from dpkit import Accountant, Budget, PrivacyReport, Release
from dpkit.privacy import LOCAL_NEIGHBOURING, neighbouring
from dpkit.service.encoding import release_from_json, release_json
from dpkit.tables import GroupedRelease, Query, Session

ROW = "add/remove one row"


def _table(n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    return pd.DataFrame(
        {
            "pid": np.arange(n) // 2,
            "x": rng.uniform(0, 100, n),
            "y": rng.uniform(0, 10, n),
            "g": rng.choice(["a", "b", "c"], n),
        }
    )


TYPES = {"pid": "BIGINT", "x": "DOUBLE", "y": "DOUBLE", "g": "VARCHAR"}


def _session(**kw: Any) -> Session:
    return Session.from_pandas(_table(), types=TYPES, epsilon=50.0, delta=1e-3, rng=4, **kw)


def _check(r: Any, epsilon: float, delta: float, relation: str, remaining: Any) -> None:
    assert isinstance(r.privacy, PrivacyReport)
    assert (r.privacy.epsilon, r.privacy.delta) == (epsilon, delta)
    assert r.privacy.neighbouring == relation
    assert r.privacy.remaining == remaining
    assert r.epsilon == r.privacy.epsilon  # the shortcut


def test_table_queries_carry_the_report_with_the_budget_left() -> None:
    s = _session()
    r = s.mean("x", bounds=(0, 100), epsilon=1.0)
    _check(r, 1.0, 0.0, ROW, s.remaining)
    assert r.privacy.mechanisms == tuple(r.mechanism.split("+"))
    g = s.count(group_by="g", keys=["a", "b", "c"], epsilon=2.0)
    assert isinstance(g, GroupedRelease)
    _check(g, 2.0, 0.0, ROW, s.remaining)
    assert g.privacy.mechanisms == ("geometric",)
    assert g["a"].privacy == g.privacy  # one group's Release carries the whole report
    private = s.count(group_by="g", keys="private", epsilon=2.0, delta=1e-6)
    _check(private, 2.0, 1e-6, ROW, s.remaining)
    assert private.privacy.mechanisms == ("partition selection", "geometric")
    h = s.histogram("x", bins=4, bounds=(0, 100), epsilon=1.0)
    _check(h, 1.0, 0.0, ROW, s.remaining)
    assert h.privacy.mechanisms == (h.mechanism,)
    h2 = s.histogram2d("x", "y", bins=(3, 3), bounds=((0, 100), (0, 10)), epsilon=1.0)
    _check(h2, 1.0, 0.0, ROW, s.remaining)
    assert s.remaining.epsilon == pytest.approx(50.0 - 7.0)


def test_a_privacy_unit_names_the_person_relation() -> None:
    s = _session(privacy_unit="pid", max_contributions=2)
    relation = "add/remove one person (≤ 2 rows, privacy unit 'pid')"
    assert neighbouring("pid", 2) == relation and neighbouring(None, 1) == ROW
    _check(s.count(epsilon=1.0), 1.0, 0.0, relation, s.remaining)
    _check(s.histogram2d("x", "y", bins=(2, 2), bounds=((0, 100), (0, 10)), epsilon=1.0), 1.0,
           0.0, relation, s.remaining)  # fmt: skip
    batch = s.run([Query("count", epsilon=1.0), Query("count", epsilon=1.0)])
    for r in batch:
        _check(r, 1.0, 0.0, relation, s.remaining)


def test_histogram_publishers_and_grids_report_what_the_accountant_has_left() -> None:
    counts = np.array([5.0, 3.0, 0.0, 9.0])
    acc = Accountant(Budget(3.0))
    h = dpkit.histograms.laplace(counts, 1.0, rng=1, accountant=acc)
    _check(h, 1.0, 0.0, ROW, acc.remaining)
    assert h.privacy.mechanisms == (h.method,)
    grid = dpkit.histograms.laplace2d(np.ones((3, 3)), 0.5, rng=1, accountant=acc)
    _check(grid, 0.5, 0.0, ROW, acc.remaining)
    assert acc.remaining.epsilon == pytest.approx(1.5)
    free = dpkit.histograms.laplace(counts, 1.0, rng=1)
    assert free.privacy.remaining is None


def test_a_mechanism_release_paid_by_an_accountant_reports_what_is_left() -> None:
    acc = Accountant(Budget(2.0))
    laplace = dpkit.mechanisms.Laplace(epsilon=0.5, sensitivity=1.0)
    r = laplace.release(3.0, rng=1, accountant=acc)
    _check(r, 0.5, 0.0, ROW, acc.remaining)
    assert acc.remaining.epsilon == pytest.approx(1.5) and r.privacy.mechanisms == (r.mechanism,)
    assert laplace.release(3.0, rng=1).privacy.remaining is None


@pytest.mark.parametrize("name", ["DPDecisionTreeClassifier", "DPRandomForestClassifier",
                                  "DPGradientBoostingClassifier"])  # fmt: skip
def test_fitted_models_carry_the_report(name: str) -> None:
    import dpkit.trees as trees

    rng = np.random.default_rng(5)
    X = rng.uniform(0, 1, (200, 2))
    y = (X[:, 0] > 0.5).astype(int)
    acc = Accountant(Budget(2.0, 1e-5))
    extra = {"max_iter": 5} if "Boosting" in name else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = getattr(trees, name)(
            epsilon=1.0, bounds=(0, 1), classes=[0, 1], random_state=0, accountant=acc, **extra
        ).fit(X, y)
    report = model.privacy_
    assert isinstance(report, PrivacyReport)
    assert report.epsilon == 1.0 and report.neighbouring == ROW
    assert report.remaining == acc.remaining and acc.remaining.epsilon == pytest.approx(1.0)
    assert report.mechanisms == tuple(report.split) and report.mechanisms
    with pytest.warns(DeprecationWarning, match="read its attributes"):
        assert report["epsilon"] == 1.0  # the dict form, one release more


def test_local_estimates_carry_the_report_and_one_interval_shape() -> None:
    oracle = dpkit.local.best_oracle(epsilon=1.0, domain=["a", "b", "c"])
    reports = oracle.perturb(np.array(["a", "b", "a", "c"] * 50), rng=2)
    est = oracle.estimate(reports, level=0.9)
    assert est.privacy == PrivacyReport(
        1.0, neighbouring=LOCAL_NEIGHBOURING, mechanisms=(est.oracle,)
    )
    low, high = est.ci
    assert np.all(low < est.counts) and np.all(est.counts < high) and est.level == 0.9
    with pytest.warns(DeprecationWarning, match=r"ci\[0\]"):
        assert np.array_equal(est.ci_low, low)
    with pytest.warns(DeprecationWarning, match=r"ci\[1\]"):
        assert np.array_equal(est.ci_high, high)
    mean = dpkit.local.DuchiMean(epsilon=1.0, bounds=(0, 1))
    m = mean.estimate(mean.perturb(np.full(100, 0.5), rng=3))
    assert m.privacy.mechanisms == (m.mechanism,) and m.ci[0] < m.mean < m.ci[1]


def test_the_report_travels_as_json_and_back() -> None:
    s = _session()
    for r in (s.mean("x", bounds=(0, 100), epsilon=1.0),
              s.count(group_by="g", keys="private", epsilon=2.0, delta=1e-6)):  # fmt: skip
        data = release_json(r)
        assert data["privacy"]["remaining"] is None  # the response carries the budget left
        back = release_from_json(data, remaining=Budget(7.0, 0.0))
        assert back.privacy == replace(r.privacy, remaining=Budget(7.0, 0.0))
    report = PrivacyReport(1.0, 1e-6, rho=0.1, mechanisms=("gaussian",), remaining=Budget(2.0, 0.0),
                           split={"leaf": 0.5}, uses={"leaf": 2})  # fmt: skip
    assert PrivacyReport.from_dict(report.to_dict()) == report


def test_the_service_answer_carries_the_in_process_report(tmp_path: Any) -> None:
    from fastapi.testclient import TestClient

    from dpkit.client import Client
    from dpkit.service.app import create_app
    from dpkit.service.demo import build_demo

    config, keys = build_demo(tmp_path, rows=300)
    client = Client("http://testserver", keys["alice"], http=TestClient(create_app(config)))
    patients = client.dataset("patients")
    r = patients.mean("age", bounds=(0, 120), epsilon=0.1)
    types = {"age": "DOUBLE", "weight": "DOUBLE", "condition": "BOOLEAN", "district": "VARCHAR"}
    local = Session.from_csv(tmp_path / "patients.csv", types=types, epsilon=1.0, rng=0)
    expected = local.mean("age", bounds=(0, 120), epsilon=0.1).privacy
    assert r.privacy == replace(expected, remaining=r.remaining)
    assert r.remaining.epsilon == pytest.approx(0.9)
    g = patients.count(group_by="district", keys="private", epsilon=0.2, delta=1e-7)
    assert g.privacy.mechanisms[0] == "partition selection" and g.privacy.delta == 1e-7


def test_release_constructor_and_replace_keep_working() -> None:
    r = Release(1.5, 0.5, delta=1e-6, mechanism="laplace+geometric")
    assert r.privacy == PrivacyReport(0.5, 1e-6, mechanisms=("laplace", "geometric"))
    paid = replace(r, remaining=Budget(1.0))  # type: ignore[call-arg]  # runtime compatibility
    assert paid.remaining == Budget(1.0) and paid.privacy.mechanisms == r.privacy.mechanisms
    assert paid != r and replace(paid, privacy=paid.privacy.paid(None)) == r
    assert replace(r, value=2.0).privacy == r.privacy and float(r) == 1.5


def test_a_per_group_bound_is_named_in_the_relation() -> None:
    s = _session(privacy_unit="pid", max_contributions=2, max_groups=3)
    relation = "add/remove one person (≤ 2 rows per group in ≤ 3 groups, privacy unit 'pid')"
    assert neighbouring("pid", 2, 3) == relation
    assert neighbouring("pid", 1, 1) == (
        "add/remove one person (≤ 1 row per group in ≤ 1 group, privacy unit 'pid')"
    )
    _check(s.count(epsilon=1.0), 1.0, 0.0, relation, s.remaining)
