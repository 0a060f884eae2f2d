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
ratio of dpkit's default (``histograms.auto``) to the winner. ``auto`` is run
for real on the same data samples, starting from the random state the
contender its public rule names (``histograms.choose_method``) started from:
where that rule decides, auto's release is that contender's, bit for bit;
where auto spends 1% of epsilon on its concentration probe (high signal),
its noise is its own. "public rule / best" is what the data-blind rule alone
gives (the named contender's error on the same runs). Usage::

    python benchmarks/histograms_dpbench.py                 # full grid
    python benchmarks/histograms_dpbench.py --quick         # fewer scales, 3 reps
    python benchmarks/histograms_dpbench.py --out benchmarks/results/histograms_dpbench.md
"""

from __future__ import annotations

import argparse
import copy
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
        "matrix_mechanism": lambda x, e, r: histograms.matrix_mechanism(x, e, workload=kind, rng=r),
    }


def run(
    data_dir: Path,
    domain: int,
    scales: tuple[int, ...],
    reps: int,
    only: list[str] | None = None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, shape in shapes(data_dir, domain).items():
        if only and name not in only:
            continue
        for scale in scales:
            for eps in EPSILONS:
                for kind in WORKLOADS:
                    lo, hi = workload(domain, kind)
                    errors: dict[str, list[float]] = {}
                    picks: list[str] = []
                    rules: set[str] = set()
                    public = histograms.choose_method(domain, eps, scale, kind)
                    for rep in range(reps):
                        rng = np.random.default_rng([rep, scale, int(eps * 1000)])
                        x = rng.multinomial(scale, shape).astype(float)
                        prefix = np.concatenate(([0.0], np.cumsum(x)))
                        truth = prefix[hi + 1] - prefix[lo]
                        auto_rng = rng  # replaced by the state the public choice starts from
                        for algo, publish in algorithms(scale, kind).items():
                            if algo == public:
                                auto_rng = copy.deepcopy(rng)
                            h = publish(x, eps, rng)
                            errors.setdefault(algo, []).append(_error(h, lo, hi, truth, scale))
                        h = histograms.auto(x, eps, max_records=scale, workload=kind, rng=auto_rng)
                        errors.setdefault("auto", []).append(_error(h, lo, hi, truth, scale))
                        picks.append(h.details["auto_choice"])
                        rules.add(h.details["auto_rule"])
                    mean = {a: float(np.mean(v)) for a, v in errors.items()}
                    contenders = {a: v for a, v in mean.items() if a != "auto"}
                    winner = min(contenders, key=lambda a: contenders[a])
                    rows.append(
                        {
                            "shape": name,
                            "scale": scale,
                            "epsilon": eps,
                            "workload": kind,
                            **mean,
                            "winner": winner,
                            "auto_choice": _picks(picks, rules),
                            "auto_dawa_share": picks.count("dawa") / len(picks),
                            "auto_ratio": mean["auto"] / contenders[winner],
                            "auto_vs_laplace": mean["auto"] / mean["laplace"],
                            "public_choice": public,
                            "public_ratio": mean[public] / contenders[winner],
                            "public_vs_laplace": mean[public] / mean["laplace"],
                        }
                    )
                    print(
                        f"{name:15s} s={scale:>10,} eps={eps:<5g} {kind:8s} winner={winner:16s}"
                        f" auto={rows[-1]['auto_choice']:12s} auto/best={rows[-1]['auto_ratio']:.2f}"
                        f" public/best={rows[-1]['public_ratio']:.2f}",
                        flush=True,
                    )
    return rows


def _error(h: Any, lo: np.ndarray, hi: np.ndarray, truth: np.ndarray, scale: int) -> float:
    """DPBench's scaled average per-query L2 error of one release."""
    return float(np.linalg.norm(h.answer(lo, hi) - truth) / (scale * lo.size))


def _picks(picks: list[str], rules: set[str]) -> str:
    """The method auto chose, or "dawa 7/10" when its probe chose differently between runs."""
    names = sorted(set(picks))
    label = names[0] if len(names) == 1 else f"dawa {picks.count('dawa')}/{len(picks)}"
    return f"{label} (probe)" if "probe" in rules else label


def _summary(rows: list[dict[str, Any]], key: str, what: str) -> str:
    ratio, vs_laplace = f"{key}_ratio", f"{key}_vs_laplace"
    worst = max(rows, key=lambda r: r[ratio])
    return (
        f"{what} within 1.2× of the best in {sum(r[ratio] <= 1.2 for r in rows)} of "
        f"{len(rows)} cells; worst ratio {worst[ratio]:.2f} ({worst['shape']}, "
        f"s={worst['scale']:,}, ε={worst['epsilon']:g}, {worst['workload']}); "
        f"never worse than Laplace: {all(r[vs_laplace] <= 1.0 for r in rows)} "
        f"(max ratio to Laplace {max(r[vs_laplace] for r in rows):.2f})."
    )


def markdown(rows: list[dict[str, Any]]) -> str:
    algos = list(algorithms(1, "ranges"))
    head = ["shape", "scale", "ε", "workload", *algos, "auto", "winner", "auto picks"]
    head += ["auto / best", "public rule / best"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["shape"], f"{r['scale']:.0e}", f"{r['epsilon']:g}", r["workload"]]
        cells += [f"{r[a]:.2e}" for a in [*algos, "auto"]]
        cells += [r["winner"], r["auto_choice"], f"{r['auto_ratio']:.2f}"]
        cells += [f"{r['public_ratio']:.2f} ({r['public_choice']})"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(_summary(rows, "auto", "auto (measured, with the probe)"))
    lines.append("")
    lines.append(_summary(rows, "public", "The public rule alone (choose_method)"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--domain", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="scales 10³, 10⁵, 10⁷; 3 reps")
    parser.add_argument("--shapes", nargs="*", default=None, help="only these shapes")
    parser.add_argument("--scales", nargs="*", type=int, default=None, help="only these scales")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    if not args.data_dir.is_dir():
        print(f"data directory {args.data_dir} not found; pass --data-dir", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")  # seeded sources warn; this is an experiment
    scales = (1_000, 100_000, 10_000_000) if args.quick else SCALES
    if args.scales:
        scales = tuple(args.scales)
    reps = 3 if args.quick else args.reps
    start = time.perf_counter()
    rows = run(args.data_dir, args.domain, scales, reps, args.shapes)
    table = markdown(rows)
    print()
    print(table)
    print(f"\n{len(rows)} cells, {reps} reps each, {time.perf_counter() - start:.0f} s")
    if args.out is not None:
        args.out.write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
