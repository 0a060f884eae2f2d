"""PipelineDP, PyDP and SmartNoise SQL for ``benchmarks/queries.py --people`` (issue 33).

Run in the isolated ``.venv-bench-google`` (``benchmarks/requirements-google.txt``;
it has no pyarrow, so it reads the people table from the ``.npy`` columns
written next to the Parquet, the same rows):

    .venv-bench-google/bin/python benchmarks/_peers_google.py SPEC.json

Prints one JSON object as ``_peers.py`` does for OpenDP and Tumult: the
releases of the seven queries (:mod:`_people_loop`), the noise each library
states, and how its guarantee was matched.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import numpy as np

import _people_loop


def _columns(spec: dict[str, Any]) -> dict[str, np.ndarray]:
    return {c: np.load(spec["paths"][c]) for c in ("pid", "age", "income", "region")}


def _bounded_rows(pid: np.ndarray, k: int) -> np.ndarray:
    """A mask keeping each person's first ``k`` rows (rows of a person are contiguous)."""
    starts = np.r_[0, np.flatnonzero(np.diff(pid)) + 1]
    rank = np.arange(pid.size) - np.repeat(starts, np.diff(np.r_[starts, pid.size]))
    return rank < k


def _people_pydp(spec: dict[str, Any]) -> dict[str, Any]:
    """PyDP (Google's C++ algorithms): one algorithm object per release, pure ε = 1.

    Each row is one contribution (l0 = linf = 1: add/remove one row). Grouped
    queries run one algorithm per public region at ε = 1 each (a row is in one
    region: parallel composition). PyDP has no contribution bounding: the
    bounded count is given each person's first k rows and l0 = 1, linf = k.
    """
    from pydp.algorithms.laplacian import BoundedMean, BoundedSum, Count, Median

    data = _columns(spec)
    (a_lo, a_hi), (i_lo, i_hi), k = spec["age"], spec["income"], spec["k"]
    regions = range(len(spec["regions"]))
    # Every release starts from the NumPy columns, as dpkit's starts from its table:
    # building PyDP's Python lists (and the bounded count's first-k rows) is timed.
    age, income, region, pid = data["age"], data["income"], data["region"], data["pid"]

    def mean(values: list[float]) -> float:
        algorithm = BoundedMean(epsilon=1.0, lower_bound=i_lo, upper_bound=i_hi, dtype="float")
        return float(algorithm.quick_result(values))

    def count(values: list[Any], linf: int = 1) -> float:
        return float(Count(epsilon=1.0, linf_sensitivity=linf, dtype="int").quick_result(values))

    releasers = {
        "median_age": lambda: float(
            Median(epsilon=1.0, lower_bound=a_lo, upper_bound=a_hi, dtype="float").quick_result(
                age.tolist()
            )
        ),
        "mean_income_by_region": lambda: [mean(income[region == g].tolist()) for g in regions],
        "count_bounded": lambda: count(pid[_bounded_rows(pid, k)].tolist(), linf=k),
        "count": lambda: count(pid.tolist()),
        "sum_income": lambda: float(
            BoundedSum(epsilon=1.0, lower_bound=i_lo, upper_bound=i_hi, dtype="float").quick_result(
                income.tolist()
            )
        ),
        "count_by_region": lambda: [count(pid[region == g].tolist()) for g in regions],
        "mean_income": lambda: mean(income.tolist()),
    }
    out = _people_loop.run(releasers, spec["reps"], spec.get("queries"))
    base = "pure ε = 1 (Laplace), add/remove one row (l0 = linf = 1)"
    out["notes"] = {name: base for name in releasers}
    out["notes"]["median_age"] = base + "; laplacian.Median: noisy binary search (no stated noise)"
    for name in ("mean_income_by_region", "count_by_region"):
        out["notes"][name] = base + "; one algorithm per public region, ε = 1 each (parallel)"
    out["notes"]["count_bounded"] = (
        f"pure ε = 1, add/remove one person: PyDP has no contribution bounding, so it is given "
        f"each person's first {k} rows (the same rule as the truth) with l0 = 1, linf = {k}"
    )
    for name in releasers:
        out["notes"][name] += (
            "; PyDP takes Python lists: built from the NumPy columns in each timed release"
        )
    out["stated"] = {}  # PyDP states no noise scale
    return out


def _people_pipelinedp(spec: dict[str, Any]) -> dict[str, Any]:
    """PipelineDP on its local backend: one DPEngine and NaiveBudgetAccountant(ε = 1, δ = 0) per release.

    Row level: ``contribution_bounds_already_enforced=True`` with at most one
    partition and one contribution per row (l0 = linf = 1: add/remove one
    row). Ungrouped queries use one public partition holding every row;
    grouped ones the 10 public regions. The bounded count: privacy id ``pid``
    and PipelineDP's own bounding (``max_contributions_per_partition=k``).
    """
    import pipeline_dp

    data = _columns(spec)
    (a_lo, a_hi), (i_lo, i_hi), k = spec["age"], spec["income"], spec["k"]
    regions = spec["regions"]
    rows = list(
        zip(
            data["pid"].tolist(),
            data["age"].tolist(),
            data["income"].tolist(),
            [regions[g] for g in data["region"].tolist()],
            strict=True,
        )
    )
    stated: dict[str, Any] = {}

    def aggregate(
        metric: Any, column: int | None, grouped: bool, per_person: int | None = None
    ) -> dict[str, Any]:
        accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=1.0, total_delta=0.0)
        engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
        lo, hi = (a_lo, a_hi) if column == 1 else (i_lo, i_hi)
        params = pipeline_dp.AggregateParams(
            metrics=[metric],
            noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            max_partitions_contributed=1,
            max_contributions_per_partition=per_person or 1,
            min_value=None if column is None else lo,
            max_value=None if column is None else hi,
            contribution_bounds_already_enforced=per_person is None,
            output_noise_stddev=metric in (pipeline_dp.Metrics.COUNT, pipeline_dp.Metrics.SUM),
        )
        extractors = pipeline_dp.DataExtractors(
            partition_extractor=(lambda r: r[3]) if grouped else (lambda r: "all"),
            privacy_id_extractor=None if per_person is None else (lambda r: r[0]),
            value_extractor=(lambda r: 0) if column is None else (lambda r: r[column]),
        )
        result = engine.aggregate(
            rows, params, extractors, public_partitions=regions if grouped else ["all"]
        )
        accountant.compute_budgets()
        return {key: value._asdict() for key, value in result}

    def releaser(name: str, metric: Any, column: int | None, grouped: bool, **kw: Any) -> Any:
        field = str(metric).lower().replace("(", "").replace(")", "")

        def release() -> Any:
            out = aggregate(metric, column, grouped, **kw)
            first = next(iter(out.values()))
            if f"{field}_noise_stddev" in first:
                stated[name] = {"sd": float(first[f"{field}_noise_stddev"])}
            values = [float(next(iter(out[g].values()))) for g in (regions if grouped else ["all"])]
            return values if grouped else values[0]

        return release

    M = pipeline_dp.Metrics
    releasers = {
        "median_age": releaser("median_age", M.PERCENTILE(50), 1, False),
        "mean_income_by_region": releaser("mean_income_by_region", M.MEAN, 2, True),
        "count_bounded": releaser("count_bounded", M.COUNT, None, False, per_person=k),
        "count": releaser("count", M.COUNT, None, False),
        "sum_income": releaser("sum_income", M.SUM, 2, False),
        "count_by_region": releaser("count_by_region", M.COUNT, None, True),
        "mean_income": releaser("mean_income", M.MEAN, 2, False),
    }
    out = _people_loop.run(releasers, spec["reps"], spec.get("queries"))
    out["stated"] = stated
    base = "pure ε = 1, δ = 0 (NaiveBudgetAccountant, Laplace), add/remove one row (l0 = linf = 1)"
    out["notes"] = {name: base for name in releasers}
    out["notes"]["median_age"] = base + "; PERCENTILE(50): quantile tree (no stated noise)"
    for name in ("mean_income_by_region", "mean_income"):
        out["notes"][name] = base + "; MEAN: centred noisy sum / noisy count, ε split evenly"
    out["notes"]["count_bounded"] = (
        f"pure ε = 1, add/remove one person: privacy id pid, PipelineDP's own sampling bound "
        f"max_contributions_per_partition={k} (one public partition)"
    )
    return out


def _people_smartnoise(spec: dict[str, Any]) -> dict[str, Any]:
    """SmartNoise SQL on a pandas DataFrame: pure ε = 1 per query by its own odometer.

    Row level: ``row_privacy: True`` (add/remove one row). Bounds are declared
    in the metadata; ``censor_dims: False`` because the regions are public (no
    key thresholding, so δ = 0 is enough). SmartNoise spends its ``epsilon``
    on each noisy column (AVG = SUM and COUNT: 2 ε), so each query gets
    ``1 / get_privacy_cost(query at ε = 1)``: a total of exactly ε = 1. The
    bounded count: ``private_id`` pid, ``max_ids: k``, ``sample_max_ids``
    (SmartNoise's own bounding: at most k rows per person, sampled).
    """
    import pandas as pd
    import snsql
    from snsql import Privacy

    data = _columns(spec)
    regions, k = spec["regions"], spec["k"]
    frame = pd.DataFrame(
        {
            "pid": data["pid"],
            "age": data["age"],
            "income": data["income"],
            "region": np.asarray(regions, dtype=object)[data["region"]],
        }
    )
    (a_lo, a_hi), (i_lo, i_hi) = spec["age"], spec["income"]
    columns = {
        "pid": {"type": "int"},
        "age": {"type": "float", "lower": a_lo, "upper": a_hi},
        "income": {"type": "float", "lower": i_lo, "upper": i_hi},
        "region": {"type": "string"},
    }
    rows = {"row_privacy": True, "censor_dims": False, **columns}
    persons = {
        "row_privacy": False,
        "max_ids": k,
        "sample_max_ids": True,
        "censor_dims": False,
        **columns,
        "pid": {"type": "int", "private_id": True},
    }
    sqls = {
        "mean_income_by_region": "SELECT region, AVG(income) FROM T.people GROUP BY region",
        "count_bounded": "SELECT COUNT(*) FROM T.people",
        "count": "SELECT COUNT(*) FROM T.people",
        "sum_income": "SELECT SUM(income) FROM T.people",
        "count_by_region": "SELECT region, COUNT(*) FROM T.people GROUP BY region",
        "mean_income": "SELECT AVG(income) FROM T.people",
    }
    epsilons: dict[str, float] = {}

    def reader(table: dict[str, Any], epsilon: float) -> Any:
        meta = {"T": {"T": {"people": table}}}
        privacy = Privacy(epsilon=epsilon, delta=0.0)
        return snsql.from_connection(frame, privacy=privacy, metadata=meta, engine="pandas")

    def releaser(name: str) -> Any:
        table = persons if name == "count_bounded" else rows
        cost = float(reader(table, 1.0).get_privacy_cost(sqls[name])[0])
        epsilons[name] = 1.0 / cost
        one = reader(table, epsilons[name])
        assert abs(float(one.get_privacy_cost(sqls[name])[0]) - 1.0) < 1e-12

        def release() -> Any:
            out = one.execute(sqls[name])[1:]
            if len(out[0]) == 1:
                return float(out[0][0])
            value = {row[0]: float(row[1]) for row in out}
            return [value[g] for g in regions]

        return release

    out = _people_loop.run(
        {name: releaser(name) for name in sqls}, spec["reps"], spec.get("queries")
    )
    base = "pure ε = 1 by SmartNoise's get_privacy_cost (δ = 0), add/remove one row (row_privacy)"
    out["notes"] = {name: base for name in sqls}
    for name in ("mean_income_by_region", "mean_income"):
        out["notes"][name] = (
            base + f"; AVG = noisy SUM / noisy COUNT at ε = {epsilons[name]:g} each"
        )
    out["notes"]["count_bounded"] = (
        f"pure ε = 1, add/remove one person: private_id pid, max_ids = {k}, sample_max_ids "
        "(SmartNoise's own bounding)"
    )
    out["cannot"] = {"median_age": "SmartNoise SQL has no median or percentile aggregate"}
    out["stated"] = {}  # no noise scale is exposed by the reader
    return out


def main() -> None:
    from importlib.metadata import version

    warnings.filterwarnings("ignore")
    spec = _people_loop.spec_from_argv(sys.argv)
    lib = spec["lib"]
    run = {"pydp": _people_pydp, "pipelinedp": _people_pipelinedp, "smartnoise": _people_smartnoise}
    out = run[lib](spec)
    dist = {"pydp": "python-dp", "pipelinedp": "pipeline-dp", "smartnoise": "smartnoise-sql"}[lib]
    out["versions"] = {dist: version(dist)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
