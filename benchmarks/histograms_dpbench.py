"""DPBench-style evaluation of dpkit's 1-D histogram algorithms (Hay et al., SIGMOD 2016).

Protocol (DPBench's, on the shared data's shapes):

* shape: a real column binned over a fixed public range into a domain of
  ``--domain`` unit bins (default 1,024) and normalised to a distribution;
* scale s: a dataset of s records drawn from the shape (multinomial), for
  s in 10³ .. 10⁷;
* workloads: all prefix ranges, and 2,000 random ranges;
* error: DPBench's scaled average per-query L2 error,
  ||W x - W x̂||₂ / (s · |W|), averaged over ``--reps`` independent runs (data
  sample and noise both redrawn).

Every algorithm runs in the same process and run. The table per (shape,
scale, epsilon, workload) gives each algorithm's error, the winner, and the
ratio of dpkit's default (``histograms.auto``) to the winner. Usage::

    python benchmarks/histograms_dpbench.py                 # full grid
    python benchmarks/histograms_dpbench.py --quick         # fewer scales, 3 reps
    python benchmarks/histograms_dpbench.py --out benchmarks/results/histograms_dpbench.md
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import histograms

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
EPSILONS = (0.01, 0.1, 1.0)
SCALES = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)
WORKLOADS = ("prefixes", "ranges")


def shapes(data_dir: Path, domain: int) -> dict[str, np.ndarray]:
    """Distributions over ``domain`` bins from real columns (fixed public ranges)."""
    import duckdb
    import pandas as pd

    out: dict[str, np.ndarray] = {}

    def shape_of(values: np.ndarray, lo: float, hi: float, weights: Any = None) -> np.ndarray:
        counts, _ = np.histogram(
            np.clip(values, lo, hi), bins=domain, range=(lo, hi), weights=weights
        )
        return counts / counts.sum()

    housing = pd.read_csv(data_dir / "california_housing_raw.csv")
    out["income"] = shape_of(housing["medianIncome"].to_numpy(), 0.0, 15.0)
    out["house_value"] = shape_of(housing["medianHouseValue"].to_numpy(), 0.0, 510_000.0)
    out["population"] = shape_of(housing["population"].to_numpy(), 0.0, 10_000.0)
    titanic = pd.read_csv(data_dir / "titanic.csv", usecols=["Age", "Fare"])
    out["fare"] = shape_of(titanic["Fare"].dropna().to_numpy(), 0.0, 520.0)
    con = duckdb.connect()
    path = str(data_dir / "us_babynames_1880_2010.csv")
    by_year = con.execute(
        "SELECT year, sum(births) FROM read_csv_auto(?) GROUP BY year", [path]
    ).fetchnumpy()
    con.close()
    years = np.asarray(by_year["year"], dtype=float)
    births = np.asarray(by_year["sum(births)"], dtype=float)
    out["births_by_year"] = shape_of(years, 1880.0, 2011.0, weights=births)
    return out


def workload(n: int, kind: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    if kind == "prefixes":
        hi = np.arange(n)
        return np.zeros(n, dtype=np.int64), hi
    rng = np.random.default_rng(seed)
    ends = np.sort(rng.integers(0, n, size=(2000, 2)), axis=1)
    return ends[:, 0], ends[:, 1]


def algorithms(scale: int, kind: str) -> dict[str, Callable[[np.ndarray, float, Any], Any]]:
    """Every algorithm with the public parameters a user has: the scale bound and the workload."""
    return {
        "laplace": lambda x, e, r: histograms.laplace(x, e, rng=r),
        "hierarchical": lambda x, e, r: histograms.hierarchical(x, e, rng=r),
        "hb": lambda x, e, r: histograms.hb(x, e, workload=kind, rng=r),
        "noise_first": lambda x, e, r: histograms.noise_first(x, e, rng=r),
        "structure_first": lambda x, e, r: histograms.structure_first(x, e, max_count=scale, rng=r),
        "ahp": lambda x, e, r: histograms.ahp(x, e, rng=r),
        "dawa": lambda x, e, r: histograms.dawa(x, e, workload=kind, rng=r),
    }


def run(data_dir: Path, domain: int, scales: tuple[int, ...], reps: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, shape in shapes(data_dir, domain).items():
        for scale in scales:
            for eps in EPSILONS:
                for kind in WORKLOADS:
                    lo, hi = workload(domain, kind)
                    errors: dict[str, list[float]] = {}
                    for rep in range(reps):
                        rng = np.random.default_rng([rep, scale, int(eps * 1000)])
                        x = rng.multinomial(scale, shape).astype(float)
                        prefix = np.concatenate(([0.0], np.cumsum(x)))
                        truth = prefix[hi + 1] - prefix[lo]
                        for algo, publish in algorithms(scale, kind).items():
                            h = publish(x, eps, rng)
                            diff = h.answer(lo, hi) - truth
                            err = float(np.linalg.norm(diff) / (scale * lo.size))
                            errors.setdefault(algo, []).append(err)
                    mean = {a: float(np.mean(v)) for a, v in errors.items()}
                    contenders = dict(mean)
                    # auto runs exactly the algorithm it picks (a public choice): its
                    # error is that algorithm's, measured on the same runs.
                    choice = histograms.choose_method(domain, eps, scale, kind)
                    mean["auto"] = mean[choice]
                    winner = min(contenders, key=lambda a: contenders[a])
                    rows.append(
                        {
                            "shape": name,
                            "scale": scale,
                            "epsilon": eps,
                            "workload": kind,
                            **mean,
                            "winner": winner,
                            "auto_choice": choice,
                            "auto_ratio": mean["auto"] / contenders[winner],
                            "auto_vs_laplace": mean["auto"] / mean["laplace"],
                        }
                    )
                    print(
                        f"{name:15s} s={scale:>10,} eps={eps:<5g} {kind:8s} winner={winner:16s}"
                        f" auto/best={rows[-1]['auto_ratio']:.2f}",
                        flush=True,
                    )
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    algos = list(algorithms(1, "ranges"))
    head = ["shape", "scale", "ε", "workload", *algos, "winner", "auto picks", "auto / best"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["shape"], f"{r['scale']:.0e}", f"{r['epsilon']:g}", r["workload"]]
        cells += [f"{r[a]:.2e}" for a in algos]
        cells += [r["winner"], r["auto_choice"], f"{r['auto_ratio']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    worst = max(rows, key=lambda r: r["auto_ratio"])
    lines.append("")
    lines.append(
        f"auto within 1.2× of the best in {sum(r['auto_ratio'] <= 1.2 for r in rows)} of "
        f"{len(rows)} cells; worst ratio {worst['auto_ratio']:.2f} ({worst['shape']}, "
        f"s={worst['scale']:,}, ε={worst['epsilon']:g}, {worst['workload']}); "
        f"auto never worse than Laplace: {all(r['auto_vs_laplace'] <= 1.0 for r in rows)} "
        f"(max auto/laplace {max(r['auto_vs_laplace'] for r in rows):.2f})."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--domain", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="scales 10³, 10⁵, 10⁷; 3 reps")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    if not args.data_dir.is_dir():
        print(f"data directory {args.data_dir} not found; pass --data-dir", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")  # seeded sources warn; this is an experiment
    scales = (1_000, 100_000, 10_000_000) if args.quick else SCALES
    reps = 3 if args.quick else args.reps
    start = time.perf_counter()
    rows = run(args.data_dir, args.domain, scales, reps)
    table = markdown(rows)
    print()
    print(table)
    print(f"\n{len(rows)} cells, {reps} reps each, {time.perf_counter() - start:.0f} s")
    if args.out is not None:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
