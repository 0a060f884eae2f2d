"""Peer libraries for benchmarks/queries.py, run in the isolated ``.venv-bench``.

Called by ``queries.py`` as a subprocess (never imported by dpkit):

    .venv-bench/bin/python benchmarks/_peers.py SPEC.json

SPEC names the data files (``.npy``, written by queries.py from the same
generated data) and the experiment; the script prints one JSON object with
errors and timings. diffprivlib and OpenDP are pinned in
``benchmarks/requirements-peers.txt``.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from typing import Any

import numpy as np

import _people_loop


def _diffprivlib(kind: str, x: np.ndarray, eps: float, spec: dict[str, Any], seed: int) -> Any:
    import diffprivlib.tools as tools

    lo, hi = spec["bounds"]
    if kind == "mean":
        return float(tools.mean(x, epsilon=eps, bounds=(lo, hi), random_state=seed))
    if kind == "median":
        return float(tools.quantile(x, 0.5, epsilon=eps, bounds=(lo, hi), random_state=seed))
    counts, _ = tools.histogram(
        x, epsilon=eps, bins=spec["bins"], range=(lo, hi), random_state=seed
    )
    return np.asarray(counts, dtype=float)


class _OpenDP:
    """OpenDP releases with the same neighbouring relation as dpkit (add/remove one row)."""

    def __init__(self, x: np.ndarray, spec: dict[str, Any]) -> None:
        import opendp.prelude as dp
        import polars as pl

        dp.enable_features("contrib")
        self.dp, self.pl = dp, pl
        self.frame = pl.LazyFrame({"x": x})
        self.n_max = int(2 * x.size)
        self.lo, self.hi = spec["bounds"]
        self.candidates = [float(c) for c in np.linspace(self.lo, self.hi, spec["grid_size"])]
        self.edges = [float(e) for e in np.linspace(self.lo, self.hi, spec["bins"] + 1)]
        self.list_x = None
        self.histograms: dict[float, Any] = {}

    def _context(self, eps: float) -> Any:
        dp = self.dp
        return dp.Context.compositor(
            data=self.frame,
            privacy_unit=dp.unit_of(contributions=1),
            privacy_loss=dp.loss_of(epsilon=eps),
            split_evenly_over=1,
            margins=[dp.polars.Margin(max_length=self.n_max)],
        )

    def release(self, kind: str, x: np.ndarray, eps: float) -> Any:
        pl, dp = self.pl, self.dp
        if kind == "mean":
            query = (
                self._context(eps)
                .query()
                .select(pl.col("x").fill_null(0.0).dp.mean(bounds=(self.lo, self.hi)))
            )
            return float(query.release().collect().item())
        if kind == "median":
            query = (
                self._context(eps)
                .query()
                .select(pl.col("x").fill_null(0.0).dp.median(candidates=self.candidates))
            )
            return float(query.release().collect().item())
        if eps not in self.histograms:
            space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance()
            chain = (
                space
                >> dp.t.then_clamp((self.lo, self.hi))
                >> dp.t.then_find_bin(edges=self.edges[1:-1])
                >> dp.t.then_count_by_categories(
                    categories=list(range(len(self.edges) - 1)), null_category=False
                )
            )
            self.histograms[eps] = dp.binary_search_chain(
                lambda s: chain >> dp.m.then_laplace(s), d_in=1, d_out=eps
            )
        if self.list_x is None:
            self.list_x = x.tolist()
        return np.asarray(self.histograms[eps](self.list_x), dtype=float)


def _opendp_rho(epsilon: float, delta: float) -> float:
    """The largest ρ whose (ε, δ) by OpenDP's own zCDP → approx-DP conversion fits the total."""
    import opendp.prelude as dp

    def converted(rho: float) -> float:
        # a Gaussian of scale s at d_in = 1 is exactly ρ = 1 / (2 s²)-zCDP
        space = dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float)
        meas = dp.m.make_gaussian(*space, scale=(1 / (2 * rho)) ** 0.5)
        return float(dp.c.make_zCDP_to_approxDP(meas).map(1.0).epsilon(delta))

    lo, hi = 1e-6, 1.0
    for _ in range(80):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if converted(mid) <= epsilon else (lo, mid)
    return lo


def _means_opendp(spec: dict[str, Any], x: np.ndarray, g: np.ndarray) -> dict[str, Any]:
    """OpenDP's polars mean (noisy sum / noisy length: n is not given) under a zCDP compositor.

    ``Margin(max_length=2 * rows)`` is the public upper bound on the table's
    length that OpenDP's floating-point sum needs; it is not the size n.
    """
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    rho = _opendp_rho(*spec["total"])
    frame = pl.LazyFrame({"x": x, "g": g})
    lo, hi = spec["bounds"]
    answers: list[tuple[int, float]] = []
    times = []
    summary = None
    for _ in range(spec["reps"]):
        context = dp.Context.compositor(
            data=frame,
            privacy_unit=dp.unit_of(contributions=1),
            privacy_loss=dp.loss_of(rho=rho),
            split_evenly_over=spec["queries"],
            margins=[dp.polars.Margin(max_length=int(2 * x.size))],
        )
        for k in range(spec["answered"]):
            start = time.perf_counter()
            column: Any = pl.col("x").fill_null(0.0)  # .dp is OpenDP's polars plugin
            query = (
                context.query()
                .filter((pl.col("g") >= k) & (pl.col("g") < k + spec["window"]))
                .select(column.dp.mean(bounds=(lo, hi)))
            )
            if summary is None:
                summary = query.summarize()
            answers.append((k, float(query.release().collect().item())))
            times.append(time.perf_counter() - start)
    assert summary is not None
    scales = dict(zip(summary["aggregate"].to_list(), summary["scale"].to_list(), strict=True))
    return {
        "rho": rho / spec["queries"],
        "rho_total": rho,
        "sum_sd": float(scales["Sum"]),
        "count_sd": float(scales["Length"]),
        "centred": False,
        "mechanism": ", ".join(summary["distribution"].to_list()),
        "answers": answers,
        "query_s": float(np.median(times)),
    }


def _local_spark() -> Any:
    """Spark local[2] with a 3 GB driver heap, as Tumult's sessions run here."""
    import os

    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's workers must import tmlt too
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "3g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _means_tumult(spec: dict[str, Any], x: np.ndarray, g: np.ndarray) -> dict[str, Any]:
    """Tumult Analytics' ``average`` (noisy centred sum / noisy count) in a ρ-zCDP session.

    Tumult has no (ε, δ) → ρ conversion: the session gets ``spec["rho"]``, the
    largest ρ whose CKS conversion fits (1, 10⁻⁶) (computed by queries.py).
    """
    import tempfile
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq
    from tmlt.analytics import AddOneRow, QueryBuilder, RhoZCDPBudget, Session

    spark = _local_spark()
    lo, hi = spec["bounds"]
    rho = spec["rho"]
    answers: list[tuple[int, float]] = []
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "data.parquet")
        pq.write_table(pa.table({"x": x, "g": g}), path)
        frame = spark.read.parquet(path).cache()
        frame.count()
        noise = None
        for _ in range(spec["reps"]):
            session = Session.from_dataframe(
                privacy_budget=RhoZCDPBudget(rho),
                source_id="data",
                dataframe=frame,
                protected_change=AddOneRow(),
            )
            for k in range(spec["answered"]):
                start = time.perf_counter()
                query = (
                    QueryBuilder("data")
                    .filter(f"g >= {k} AND g < {k + spec['window']}")
                    .average("x", low=lo, high=hi)
                )
                budget = RhoZCDPBudget(rho / spec["queries"])
                if noise is None:
                    noise = session._noise_info(query, budget)  # [sum, count]; Gaussian: variance
                answers.append((k, float(session.evaluate(query, budget).collect()[0][0])))
                times.append(time.perf_counter() - start)
    spark.stop()
    assert noise is not None
    return {
        "rho": rho / spec["queries"],
        "rho_total": rho,
        "sum_sd": float(noise[0]["noise_parameter"]) ** 0.5,
        "count_sd": float(noise[1]["noise_parameter"]) ** 0.5,
        "centred": True,
        "mechanism": ", ".join(str(n["noise_mechanism"].name) for n in noise),
        "answers": answers,
        "query_s": float(np.median(times)),
    }


def means(spec: dict[str, Any]) -> dict[str, Any]:
    """benchmarks/queries.py's 100-means section: one library, its answers to the first questions."""
    from importlib.metadata import version

    warnings.filterwarnings("ignore")
    x, g = np.load(spec["x"]), np.load(spec["g"])
    if spec["lib"] == "opendp":
        out = _means_opendp(spec, x, g)
        out["versions"] = {lib: version(lib) for lib in ("opendp", "polars")}
    else:
        out = _means_tumult(spec, x, g)
        out["versions"] = {lib: version(lib) for lib in ("tmlt.analytics", "tmlt.core", "pyspark")}
    return out


def _opendp_sd(distribution: str, scale: float) -> float:
    """Standard deviation of OpenDP's noise, from ``summarize()``'s distribution and scale."""
    if distribution == "Integer Laplace":  # P(z) ∝ exp(-|z| / scale) on the integers
        a = np.exp(-1.0 / scale)
        return float(np.sqrt(2 * a) / (1 - a))
    if distribution.endswith("Laplace"):
        return float(np.sqrt(2) * scale)
    return float(scale)  # Gaussian: the scale is σ


def _people_opendp(spec: dict[str, Any]) -> dict[str, Any]:
    """OpenDP's Polars API on the people table: seven releases at pure ε = 1 each.

    Row-level queries come from one compositor under ``unit_of(contributions=1)``
    (add/remove one row) with ``loss_of(epsilon=6 R)`` split evenly over the 6 R
    releases (exactly 1 each); the bounded count from a second compositor under
    ``unit_of(contributions=1, identifier="pid")`` and OpenDP's own
    ``truncate_per_group(k)``. ``max_length`` (2 × rows) is the public bound on
    the length OpenDP's float sums need, not n; the regions are public keys
    (``invariant="keys"``, ``max_groups=10``).
    """
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    frame = pl.read_parquet(spec["paths"]["parquet"]).lazy()
    rows = int(frame.select(pl.len()).collect().item())  # public: the length bound only
    reps, regions, k = spec["reps"], spec["regions"], spec["k"]
    by_region = dp.polars.Margin(
        by=["region"], invariant="keys", max_length=2 * rows, max_groups=len(regions)
    )
    table = dp.Context.compositor(
        data=frame,
        privacy_unit=dp.unit_of(contributions=1),
        privacy_loss=dp.loss_of(epsilon=6.0 * reps),
        split_evenly_over=6 * reps,
        margins=[dp.polars.Margin(max_length=2 * rows), by_region],
    )
    persons = dp.Context.compositor(
        data=frame,
        privacy_unit=dp.unit_of(contributions=1, identifier="pid"),
        privacy_loss=dp.loss_of(epsilon=1.0 * reps),
        split_evenly_over=reps,
        margins=[dp.polars.Margin(max_length=2 * rows)],
    )
    age = pl.col("age").fill_null(0.0)
    income = pl.col("income").fill_null(0.0)
    candidates = np.linspace(*spec["age"], spec["opendp_grid"]).tolist()
    queries = {
        "median_age": lambda: table.query().select(age.dp.median(candidates=candidates)),
        "mean_income_by_region": lambda: (
            table.query().group_by("region").agg(income.dp.mean(bounds=tuple(spec["income"])))
        ),
        "count_bounded": lambda: persons.query().truncate_per_group(k).select(dp.len()),
        "count": lambda: table.query().select(dp.len()),
        "sum_income": lambda: table.query().select(income.dp.sum(bounds=tuple(spec["income"]))),
        "count_by_region": lambda: table.query().group_by("region").agg(dp.len()),
        "mean_income": lambda: table.query().select(income.dp.mean(bounds=tuple(spec["income"]))),
    }
    stated: dict[str, Any] = {}

    def releaser(name: str) -> Any:
        def release() -> Any:
            query = queries[name]()
            if name not in stated:
                stated[name] = query.summarize()
            out = query.release().collect()
            if out.width == 1:
                return float(out.item())
            value = dict(zip(out["region"].to_list(), out[out.columns[1]].to_list(), strict=True))
            return [float(value[g]) for g in regions]

        return release

    out = _people_loop.run({name: releaser(name) for name in queries}, reps, spec.get("queries"))
    out["stated"] = {}
    for name, summary in stated.items():
        sds = {
            agg: _opendp_sd(dist, scale)
            for agg, dist, scale in summary.select("aggregate", "distribution", "scale").rows()
        }
        if "Sum" in sds and "Length" in sds:
            out["stated"][name] = {
                "sum_sd": sds["Sum"],
                "count_sd": sds["Length"],
                "centred": False,
            }
        elif name != "median_age":
            out["stated"][name] = {"sd": next(iter(sds.values()))}
    base = "pure ε = 1 (loss_of(epsilon)), add/remove one row (unit_of(contributions=1))"
    out["notes"] = {name: base for name in queries}
    out["notes"]["median_age"] = (
        base + f"; exponential mechanism over {spec['opendp_grid']:,} uniform candidates "
        "(dpkit's 2^20 + 1 took 66–109 s per release in OpenDP at 10^5 rows)"
    )
    out["notes"]["mean_income_by_region"] = base + "; noisy sum / noisy length per public region"
    out["notes"]["mean_income"] = base + "; noisy sum / noisy length (not centred)"
    out["notes"]["count_bounded"] = (
        f"pure ε = 1, add/remove one person (unit_of(identifier='pid')), OpenDP's own "
        f"truncate_per_group({k}): Integer Laplace at sensitivity {k}"
    )
    return out


def _tumult_sd(noise: dict[str, Any]) -> float:
    """Standard deviation of one of Tumult's noise draws (``Session._noise_info``), pure DP."""
    name, parameter = str(noise["noise_mechanism"].name), float(noise["noise_parameter"])
    if name == "GEOMETRIC":  # two-sided geometric of scale ``parameter``
        a = np.exp(-1.0 / parameter)
        return float(np.sqrt(2 * a) / (1 - a))
    if name == "LAPLACE":
        return float(np.sqrt(2) * parameter)
    return float(np.sqrt(parameter))  # Gaussian: the parameter is the variance


def _people_tumult(spec: dict[str, Any]) -> dict[str, Any]:
    """Tumult Analytics on the people table (local Spark): seven releases at pure ε = 1 each.

    Row-level queries: one ``Session`` with ``protected_change=AddOneRow()`` and
    ``PureDPBudget(6 R)``, each release ``PureDPBudget(1)``; the bounded count:
    a session with ``AddRowsWithID("pid")`` and Tumult's own
    ``enforce(MaxRowsPerID(k))``. Regions are a public ``KeySet``.
    """
    from tmlt.analytics import (
        AddOneRow,
        AddRowsWithID,
        KeySet,
        MaxRowsPerID,
        PureDPBudget,
        QueryBuilder,
        Session,
    )

    spark = _local_spark()
    frame = spark.read.parquet(spec["paths"]["parquet"]).cache()
    frame.count()
    reps, regions, k = spec["reps"], spec["regions"], spec["k"]
    (a_lo, a_hi), (i_lo, i_hi) = spec["age"], spec["income"]
    table = Session.from_dataframe(
        privacy_budget=PureDPBudget(6 * reps), source_id="data", dataframe=frame,
        protected_change=AddOneRow(),
    )  # fmt: skip
    persons = Session.from_dataframe(
        privacy_budget=PureDPBudget(reps), source_id="data", dataframe=frame,
        protected_change=AddRowsWithID("pid"),
    )  # fmt: skip
    keys = KeySet.from_dict({"region": regions})
    queries = {
        "median_age": (table, QueryBuilder("data").median("age", low=a_lo, high=a_hi)),
        "mean_income_by_region": (
            table,
            QueryBuilder("data").groupby(keys).average("income", low=i_lo, high=i_hi),
        ),
        "count_bounded": (persons, QueryBuilder("data").enforce(MaxRowsPerID(k)).count()),
        "count": (table, QueryBuilder("data").count()),
        "sum_income": (table, QueryBuilder("data").sum("income", low=i_lo, high=i_hi)),
        "count_by_region": (table, QueryBuilder("data").groupby(keys).count()),
        "mean_income": (table, QueryBuilder("data").average("income", low=i_lo, high=i_hi)),
    }
    stated: dict[str, Any] = {}

    def releaser(name: str) -> Any:
        session, query = queries[name]

        def release() -> Any:
            out = session.evaluate(query, PureDPBudget(1)).collect()
            if len(out) == 1 and "region" not in out[0].asDict():
                return float(out[0][0])
            value = {row["region"]: float(row[1]) for row in out}
            return [value[g] for g in regions]

        if name != "median_age":
            noise = session._noise_info(query, PureDPBudget(1))  # private API, as in means
            sds = [_tumult_sd(n) for n in noise]
            stated[name] = (
                {"sum_sd": sds[0], "count_sd": sds[1], "centred": True}
                if len(sds) == 2
                else {"sd": sds[0]}
            )
        return release

    out = _people_loop.run({name: releaser(name) for name in queries}, reps, spec.get("queries"))
    spark.stop()
    out["stated"] = stated
    base = "pure ε = 1 (PureDPBudget), add/remove one row (AddOneRow)"
    out["notes"] = {name: base for name in queries}
    out["notes"]["median_age"] = (
        base + "; exponential mechanism over the intervals between data values"
    )
    out["notes"]["mean_income_by_region"] = base + "; centred sum / count per KeySet region"
    out["notes"]["mean_income"] = base + "; centred sum / count, ε split evenly"
    out["notes"]["count_bounded"] = (
        f"pure ε = 1, add/remove one person (AddRowsWithID('pid')), Tumult's own "
        f"enforce(MaxRowsPerID({k}))"
    )
    return out


def people(spec: dict[str, Any]) -> dict[str, Any]:
    """benchmarks/queries.py --people (issue 33): OpenDP or Tumult on the people table."""
    from importlib.metadata import version

    warnings.filterwarnings("ignore")
    if spec["lib"] == "opendp":
        out = _people_opendp(spec)
        out["versions"] = {lib: version(lib) for lib in ("opendp", "polars")}
    else:
        out = _people_tumult(spec)
        out["versions"] = {lib: version(lib) for lib in ("tmlt.analytics", "tmlt.core", "pyspark")}
    return out


def main() -> None:
    spec = json.loads(open(sys.argv[1], encoding="utf-8").read())
    if spec.get("experiment") == "means":
        print(json.dumps(means(spec)))
        return
    if spec.get("experiment") == "people":
        print(json.dumps(people(spec)))
        return
    warnings.filterwarnings("ignore")
    small = np.load(spec["error_data"])
    out: dict[str, Any] = {"errors": {}, "times": {}, "versions": {}}
    from importlib.metadata import version

    out["versions"] = {lib: version(lib) for lib in ("diffprivlib", "opendp", "scikit-learn")}
    truths = {
        "mean": float(np.clip(small, *spec["bounds"]).mean()),
        "median": float(np.median(small)),
        "histogram": np.histogram(
            np.clip(small, *spec["bounds"]), bins=spec["bins"], range=spec["bounds"]
        )[0].astype(float),
    }
    # diffprivlib's histogram (like np.histogram) drops values outside the range
    # instead of clipping them into the end bins: judge it against its own truth.
    own_truth = {
        ("diffprivlib", "histogram"): np.histogram(small, bins=spec["bins"], range=spec["bounds"])[
            0
        ].astype(float)
    }
    opendp_small = _OpenDP(small, spec)
    for lib in spec.get("libs", ("diffprivlib", "opendp")):
        for kind in spec.get("kinds", ("mean", "median", "histogram")):
            truth = own_truth.get((lib, kind), truths[kind])
            for eps in spec["epsilons"]:
                errs = []
                for rep in range(spec["reps"]):
                    if lib == "diffprivlib":
                        value = _diffprivlib(kind, small, eps, spec, seed=rep)
                    else:
                        value = opendp_small.release(kind, small, eps)
                    err = np.abs(np.asarray(value) - truth)
                    errs.append(float(err.mean()))
                out["errors"][f"{lib}/{kind}/{eps}"] = float(np.median(errs))
                if lib == "opendp" and kind == "median" and spec.get("coarse_grid_size"):
                    coarse = _OpenDP(small, {**spec, "grid_size": spec["coarse_grid_size"]})
                    errs = [
                        abs(coarse.release("median", small, eps) - truth)
                        for _ in range(spec["reps"])
                    ]
                    key = f"opendp@{spec['coarse_grid_size']}/median/{eps}"
                    out["errors"][key] = float(np.median(errs))
    if spec.get("time_data"):
        big = np.load(spec["time_data"])
        opendp_big = _OpenDP(big, spec)
        for lib in ("diffprivlib", "opendp"):
            for kind in ("mean", "median", "histogram"):
                times = []
                for rep in range(spec["time_reps"]):
                    start = time.perf_counter()
                    if lib == "diffprivlib":
                        _diffprivlib(kind, big, 1.0, spec, seed=rep)
                    else:
                        opendp_big.release(kind, big, 1.0)
                    times.append(time.perf_counter() - start)
                out["times"][f"{lib}/{kind}"] = float(np.median(times))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
