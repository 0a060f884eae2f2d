"""The pure helpers of ``benchmarks/queries.py --people`` (issue 33): data, truths, RMSE, loop.

The benchmark itself is not run by CI; these check what its figures rest on:
the generated table has the stated shape, the bounded count's truth is
Σ min(rows, 5), PyDP's pre-bounding keeps the same rows, the RMSE/SE/coverage
arithmetic, the geometric noise's standard deviation, and the interleaved loop.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def people() -> Any:
    sys.path.insert(0, str(BENCH))
    try:
        import _people

        yield _people
    finally:
        sys.path.remove(str(BENCH))


def test_generated_table_shape(people: Any) -> None:
    data = people.generate(20_000, seed=5)
    assert all(v.size == 20_000 for v in data.values())
    per_person = np.bincount(data["pid"])
    assert per_person.min() >= 1 and per_person[:-1].max() <= 20  # the last person may be cut
    assert np.all(np.diff(data["pid"]) >= 0)  # a person's rows are contiguous
    assert data["age"].min() >= 0.0 and data["age"].max() <= 100.0
    assert np.unique(data["age"]).size > 19_000  # continuous: no ties to speak of
    assert data["income"].min() >= 0.0 and data["income"].max() <= 500_000.0
    assert set(np.unique(data["region"])) == set(range(10))


def test_truths_against_a_loop(people: Any) -> None:
    data = people.generate(3_000, seed=6)
    truth = people.truths(data)
    kept = sum(min(int((data["pid"] == p).sum()), 5) for p in np.unique(data["pid"]))
    assert truth["count_bounded"] == kept
    assert truth["count"] == 3_000
    for g in range(10):
        rows = data["region"] == g
        assert truth["count_by_region"][g] == rows.sum()
        assert truth["mean_income_by_region"][g] == pytest.approx(data["income"][rows].mean())
    assert truth["median_age"] == pytest.approx(float(np.median(data["age"])))


def test_pydp_prebounding_keeps_the_truths_rows(people: Any) -> None:
    import _peers_google

    data = people.generate(3_000, seed=7)
    mask = _peers_google._bounded_rows(data["pid"], 5)
    assert mask.sum() == people.truths(data)["count_bounded"]
    assert np.bincount(data["pid"][mask]).max() <= 5


def test_rmse_and_standard_error(people: Any) -> None:
    assert people.rmse_and_se(np.full(7, 2.0)) == (2.0, 0.0)
    grouped = np.array([[3.0, 4.0], [0.0, 0.0]])  # per release: 12.5 and 0 -> RMSE 2.5
    rmse, se = people.rmse_and_se(grouped)
    assert rmse == pytest.approx(2.5)
    assert se == pytest.approx(np.std([12.5, 0.0], ddof=1) / (2 * 2.5 * math.sqrt(2)))
    rng = np.random.default_rng(0)  # Laplace of scale 1: RMSE √2, SE near its spread
    draws = [people.rmse_and_se(rng.laplace(0, 1, 400))[0] for _ in range(200)]
    _, se = people.rmse_and_se(rng.laplace(0, 1, 400))
    assert np.mean(draws) == pytest.approx(math.sqrt(2), rel=0.02)
    assert se == pytest.approx(np.std(draws), rel=0.25)


def test_geometric_sd_is_the_distributions(people: Any) -> None:
    for scale in (1.0, 5.0):
        z = np.arange(-400, 401)
        p = np.exp(-np.abs(z) / scale)
        assert people._geometric_sd(scale) == pytest.approx(math.sqrt((z**2 * p).sum() / p.sum()))


def test_predicted_rmse_and_coverage(people: Any) -> None:
    assert people.predicted_rmse({"sd": 3.0}, 10.0, 0) == 3.0
    mid = sum(people.INCOME) / 2
    centred = {"sum_sd": 100.0, "count_sd": 2.0, "centred": True}
    assert people.predicted_rmse(centred, mid, 50) == pytest.approx(2.0)  # the count term vanishes
    raw = {**centred, "centred": False}
    assert people.predicted_rmse(raw, mid, 50) == pytest.approx(math.hypot(100, 2 * mid) / 50)
    assert people.coverage([(0, 2), (3, 4)], 1.0) == 0.5
    assert people.coverage([[(0, 2), (0, 2)], [(0, 2), (5, 6)]], [1.0, 1.0]) == 0.75


def test_loop_interleaves_and_skips_the_warm_up(people: Any) -> None:
    import _people_loop

    log: list[str] = []

    def releaser(name: str, ci: bool) -> Any:
        def release() -> Any:
            log.append(name)
            return {"value": 1.0, "ci": (0.0, 2.0)} if ci else [1.0, 2.0]

        return release

    out = _people_loop.run({"a": releaser("a", True), "b": releaser("b", False)}, reps=3)
    assert log == ["a", "b"] * 3
    assert out["values"] == {"a": [1.0] * 3, "b": [[1.0, 2.0]] * 3}
    assert out["cis"] == {"a": [(0.0, 2.0)] * 3}
    assert set(out["time_s"]) == {"a", "b"}


def test_predicted_rmse_of_two_sided_sums(people: Any) -> None:
    lo, hi = people.INCOME
    paired = {"pair_sd": 10.0, "bounds": [lo, hi]}
    # at the middle f = 1/2: sd·sqrt(1/4 + 1/4)/n; at a bound, sd/n
    assert people.predicted_rmse(paired, (lo + hi) / 2, 5) == pytest.approx(10 * math.sqrt(0.5) / 5)
    assert people.predicted_rmse(paired, lo, 5) == pytest.approx(2.0)


def test_merge_takes_each_runs_libraries_and_refuses_other_tables(people: Any) -> None:
    a = {"rows": 10, "reps": 400, "truth": {"count": 10.0}, "libraries": {"dpkit": {"x": 1}}}
    b = {"rows": 10, "reps": 50, "truth": {"count": 10.0}, "libraries": {"pydp": {"x": 2}}}
    merged = people.merge([a, b])
    assert merged["libraries"] == {"dpkit": {"x": 1}, "pydp": {"x": 2}}
    assert merged["reps"] == 50 and merged["rows"] == 10
    rerun = {**b, "libraries": {"pydp": {"queries": {"count": 3}}}}
    first = {**b, "libraries": {"pydp": {"queries": {"count": 1, "sum_income": 2}}}}
    assert people.merge([first, rerun])["libraries"]["pydp"]["queries"] == {
        "count": 3,
        "sum_income": 2,
    }
    with pytest.raises(ValueError, match="truth"):
        people.merge([a, {**b, "truth": {"count": 11.0}}])


def test_loop_runs_only_the_queries_asked_for(people: Any) -> None:
    import _people_loop

    log: list[str] = []
    releasers = {q: (lambda q=q: log.append(q) or 1.0) for q in ("a", "b", "c")}
    out = _people_loop.run(releasers, reps=2, only=["c", "a"])
    assert log == ["a", "c"] * 2 and set(out["values"]) == {"a", "c"}


def test_retime_takes_the_median_time_of_the_timing_runs_only(people: Any) -> None:
    def run(time_s: float, rmse: float) -> dict[str, Any]:
        row = {"rmse": rmse, "se": 0.1, "releases": 6, "time_s": time_s}
        return {"libraries": {"dpkit": {"queries": {"count": dict(row)}}}}

    long = {
        "rows": 10,
        "reps": 400,
        "truth": {},
        "libraries": {
            "dpkit": {"queries": {"count": {"rmse": 1.4, "releases": 400, "time_s": 9.0}}},
            "pydp": {"queries": {"count": {"rmse": 1.5, "releases": 400, "time_s": 7.0}}},
        },
    }
    out = people.retime(long, [run(3.0, 99.0), run(1.0, 99.0), run(2.0, 99.0)])
    dpkit = out["libraries"]["dpkit"]["queries"]["count"]
    assert dpkit["time_s"] == 2.0 and dpkit["timing_runs"] == 3
    assert dpkit["rmse"] == 1.4 and dpkit["releases"] == 400  # accuracy from the long run
    assert out["libraries"]["pydp"]["queries"]["count"]["time_s"] == 7.0  # not retimed
    assert long["libraries"]["dpkit"]["queries"]["count"]["time_s"] == 9.0  # not mutated


def test_pooled_rows_equal_one_run_of_all_their_releases(people: Any) -> None:
    rng = np.random.default_rng(3)
    errors = [rng.laplace(0, 5, n) for n in (8, 42, 17)]
    rows = []
    for e, cover, t in zip(errors, (0.5, 1.0, 0.0), (3.0, 1.0, 2.0)):
        rmse, se = people.rmse_and_se(e)
        rows.append({"rmse": rmse, "se": se, "releases": e.size, "time_s": t, "coverage": cover})
    rmse, se = people.rmse_and_se(np.concatenate(errors))
    pooled = people.pool_rows(rows)
    assert pooled["rmse"] == pytest.approx(rmse, rel=1e-12)
    assert pooled["se"] == pytest.approx(se, rel=1e-9)
    assert pooled["releases"] == 67 and pooled["time_s"] == 2.0
    assert pooled["coverage"] == pytest.approx((0.5 * 8 + 42) / 67)


def test_pool_adds_releases_and_refuses_other_tables(people: Any) -> None:
    row = {"rmse": 2.0, "se": 0.5, "releases": 8, "time_s": 9.0}
    base = {"rows": 10, "reps": 8, "truth": {"count": 1.0}, "libraries": {}}
    first = {**base, "libraries": {"tumult": {"queries": {"count": row}, "notes": {"count": "n"}}}}
    chunk = {**base, "libraries": {"tumult": {"queries": {"count": {**row, "releases": 10}}}}}
    out = people.pool(first, [chunk, chunk])
    assert out["libraries"]["tumult"]["queries"]["count"]["releases"] == 28
    assert out["libraries"]["tumult"]["notes"] == {"count": "n"}
    assert first["libraries"]["tumult"]["queries"]["count"]["releases"] == 8  # not mutated
    with pytest.raises(ValueError, match="truth"):
        people.pool(first, [{**chunk, "truth": {"count": 2.0}}])


def test_report_counts_pooled_releases_not_the_smallest_runs_reps(people: Any) -> None:
    row = {"rmse": 2.0, "se": 0.5, "releases": 8, "time_s": 9.0}
    base = {"rows": 10, "reps": 8, "truth": {"count": 1.0}, "libraries": {}}
    dpkit = {"queries": {"count": {**row, "releases": 400}}}
    first = {**base, "libraries": {"dpkit": dpkit, "tumult": {"queries": {"count": row}}}}
    chunk = {
        **base,
        "reps": 7,
        "libraries": {"tumult": {"queries": {"count": {**row, "releases": 42}}}},
    }
    text = people.report(people.pool(first, [chunk]), smoke=False)
    assert "at least 50 releases per library and query (dpkit 400, Tumult Analytics 50)" in text
