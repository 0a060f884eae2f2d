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


def main() -> None:
    spec = json.loads(open(sys.argv[1], encoding="utf-8").read())
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
