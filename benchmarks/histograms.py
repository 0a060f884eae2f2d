"""Evaluate dpkit's DP histograms on real count sequences (issue 4).

Usage (from the repository root):

    python benchmarks/histograms.py                 # full run: 50 reps, tables + plots
    python benchmarks/histograms.py --quick         # 5 reps, timing up to n = 4,096
    python benchmarks/histograms.py --tune          # also the default-choosing experiments
    python benchmarks/histograms.py --timing-only   # time vs n up to 65,536 bins, log-log figure
    python benchmarks/histograms.py --data-dir PATH --img-dir docs/img --reps 50

Prints Markdown tables (unit-bin MSE and short/long range-query MSE for every
method at epsilon in {0.01, 0.1, 1}), checks the paper's claims and the floor,
times the dynamic programme and writes plots. Everything is seeded.

The data are never copied: they are read from ``--data-dir`` (default
``../shared/data`` relative to the repository). Unit bins come from fixed,
public edges below; F (StructureFirst's bound on a unit count) is an assumed
public bound per sequence, a round number above the true maximum.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import histograms
from dpkit.histograms._cli import bin_counts
from dpkit.histograms._optimal import interval_costs, optimal_table
from dpkit.histograms.plot import plot_comparison, save

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
EPSILONS = (0.01, 0.1, 1.0)
# Benchmark keys: the four methods of the issue with dpkit's defaults, then variants.
METHODS = (
    "laplace",
    "hierarchical",
    "noise_first",
    "structure_first",
    "noise_first_penalised",
    "structure_first_joint",
    "noise_first_median",
    "structure_first_median",
)
PAPER_METHODS = METHODS[:4]
LABELS = {
    "laplace": "Laplace",
    "hierarchical": "Hierarchical (b=4)",
    "noise_first": "NoiseFirst (Alg. 2 k)",
    "structure_first": "StructureFirst (Alg. 3)",
    "noise_first_penalised": "NoiseFirst, penalised k",
    "structure_first_joint": "StructureFirst, joint sampler",
    "noise_first_median": "NoiseFirst median",
    "structure_first_median": "StructureFirst median",
}
COLOURS = {
    "laplace": "#777777",
    "hierarchical": "#56B4E9",
    "noise_first": "#E69F00",
    "structure_first": "#009E73",
    "noise_first_penalised": "#D55E00",
    "structure_first_joint": "#0072B2",
    "noise_first_median": "#F0E442",
    "structure_first_median": "#CC79A7",
}


@dataclass(frozen=True)
class Sequence:
    name: str
    label: str
    counts: np.ndarray
    edges: np.ndarray
    max_count: float  # assumed public F
    smooth: bool  # the floor applies


def load_sequences(data_dir: Path) -> list[Sequence]:
    """The real count sequences of the issue, binned over fixed public edges."""
    import duckdb
    import pandas as pd

    out = []
    titanic = pd.read_csv(data_dir / "titanic.csv", usecols=["Age"])["Age"].dropna().to_numpy()
    edges = np.arange(0, 82, dtype=float)  # 81 one-year bins, ages 0..80
    out.append(
        Sequence("ages", "Titanic ages (1 year)", bin_counts(titanic, edges), edges, 100, True)
    )

    housing = pd.read_csv(
        data_dir / "california_housing.csv", usecols=["HouseAge", "MedInc", "Population"]
    )
    edges = np.arange(0.5, 53.0, 1.0)  # 52 one-year bins, 1..52
    out.append(
        Sequence(
            "house_age",
            "Housing median age (1 year)",
            bin_counts(housing["HouseAge"].to_numpy(), edges),
            edges,
            2000,
            True,
        )
    )
    edges = np.linspace(0.0, 15.0, 151)  # 150 bins of $10k/10, income in [0, 15]
    out.append(
        Sequence(
            "income",
            "Median income (0.1 units)",
            bin_counts(housing["MedInc"].to_numpy(), edges),
            edges,
            2000,
            False,
        )
    )
    edges = np.arange(0.0, 5001.0, 50.0)  # 100 bins of 50 people; above 5,000 clipped
    out.append(
        Sequence(
            "population",
            "Block population (50 people)",
            bin_counts(housing["Population"].to_numpy(), edges),
            edges,
            1000,
            False,
        )
    )

    con = duckdb.connect()
    path = str(data_dir / "us_babynames_1880_2010.csv")
    years = con.execute(
        "SELECT year, sum(births) FROM read_csv_auto(?) GROUP BY year ORDER BY year", [path]
    ).fetchnumpy()
    edges = np.arange(1880, 2012, dtype=float)
    births = np.zeros(edges.size - 1)
    births[np.asarray(years["year"], dtype=np.int64) - 1880] = np.asarray(years["sum(births)"])
    out.append(Sequence("births", "US births per year, 1880-2010", births, edges, 5e6, False))
    lengths = con.execute(
        "SELECT length(name) AS l, sum(births) FROM read_csv_auto(?) GROUP BY l ORDER BY l", [path]
    ).fetchnumpy()
    edges = np.arange(2, 17, dtype=float)  # name lengths 2..15
    by_length = np.zeros(edges.size - 1)
    by_length[np.asarray(lengths["l"], dtype=np.int64) - 2] = np.asarray(lengths["sum(births)"])
    out.append(
        Sequence("name_length", "Births by name length (letters)", by_length, edges, 1e8, False)
    )
    con.close()
    return out


def publisher(
    method: str, seq: Sequence, **overrides: Any
) -> Callable[[float, Any], histograms.PublishedHistogram]:
    """A function (epsilon, rng) -> published histogram with dpkit's defaults."""
    x = seq.counts
    kw: dict[str, Any] = {"edges": seq.edges}
    if method == "laplace":
        return lambda eps, rng: histograms.laplace(x, eps, rng=rng, **kw)
    if method == "hierarchical":
        return lambda eps, rng: histograms.hierarchical(x, eps, rng=rng, **kw, **overrides)
    if method.startswith("noise_first"):
        if method.endswith("median"):
            kw["statistic"] = "median"
        if method.endswith("penalised"):
            kw["selection"] = "penalised"
        return lambda eps, rng: histograms.noise_first(x, eps, rng=rng, **kw, **overrides)
    kw["max_count"] = seq.max_count  # also sets k for the median variant
    if method.endswith("median"):
        kw["statistic"] = "median"
    if method.endswith("joint"):
        kw["sampler"] = "joint"
    return lambda eps, rng: histograms.structure_first(x, eps, rng=rng, **{**kw, **overrides})


def range_queries(n: int, seed: int, count: int = 1000) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Random ranges: short = length 1..max(1, n/10); long = length n/2..n."""
    gen = np.random.default_rng(seed)
    short_len = gen.integers(1, max(1, n // 10) + 1, size=count)
    long_len = gen.integers(max(1, n // 2), n + 1, size=count)
    out = {}
    for name, length in (("short", short_len), ("long", long_len)):
        left = (gen.random(count) * (n - length + 1)).astype(np.int64)
        out[name] = (left, left + length - 1)
    return out


def evaluate(
    seq: Sequence, method: str, eps: float, reps: int, seed: int, **overrides: Any
) -> dict[str, float]:
    """Mean squared errors over ``reps`` runs: unit bins, short and long ranges."""
    make = publisher(method, seq, **overrides)
    gen = np.random.default_rng(seed)
    queries = range_queries(seq.counts.size, seed=1234)
    prefix = np.concatenate(([0.0], np.cumsum(seq.counts)))
    truth = {k: prefix[r + 1] - prefix[lo] for k, (lo, r) in queries.items()}
    unit, short, long_ = [], [], []
    for _ in range(reps):
        h = make(eps, gen)
        unit.append(np.mean((h.estimates - seq.counts) ** 2))
        short.append(np.mean((h.answer(*queries["short"]) - truth["short"]) ** 2))
        long_.append(np.mean((h.answer(*queries["long"]) - truth["long"]) ** 2))
    return {
        "unit": float(np.mean(unit)),
        "short": float(np.mean(short)),
        "long": float(np.mean(long_)),
    }


def fmt(value: float) -> str:
    if value == 0:
        return "0"
    if value >= 1e5 or value < 0.1:
        return f"{value:.2e}"
    return f"{value:,.1f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def run_evaluation(
    seqs: list[Sequence], reps: int
) -> dict[tuple[str, str, float], dict[str, float]]:
    results = {}
    for s_index, seq in enumerate(seqs):
        for m_index, method in enumerate(METHODS):
            for e_index, eps in enumerate(EPSILONS):
                seed = 1000 * s_index + 100 * m_index + e_index
                results[(seq.name, method, eps)] = evaluate(seq, method, eps, reps, seed)
    return results


def print_tables(
    seqs: list[Sequence], results: dict[tuple[str, str, float], dict[str, float]]
) -> None:
    header = ["method"] + [f"{q} ε={eps:g}" for eps in EPSILONS for q in ("unit", "short", "long")]
    for seq in seqs:
        print(
            f"\n#### {seq.label}: n = {seq.counts.size}, total = {seq.counts.sum():,.0f}, max = {seq.counts.max():,.0f}, F = {seq.max_count:,.0f}\n"
        )
        rows = []
        for method in METHODS:
            row = [LABELS[method]]
            for eps in EPSILONS:
                r = results[(seq.name, method, eps)]
                row += [fmt(r["unit"]), fmt(r["short"]), fmt(r["long"])]
            rows.append(row)
        print(markdown_table(header, rows))


def check_claims(
    seqs: list[Sequence], results: dict[tuple[str, str, float], dict[str, float]]
) -> None:
    """The paper's claims and the issue's floor, stated per sequence and epsilon."""
    print("\n### Claims\n")
    rows = []
    for seq in seqs:
        for eps in EPSILONS:

            def get(m: str, q: str, name: str = seq.name, e: float = eps) -> float:
                return results[(name, m, e)][q]

            lap = get("laplace", "unit")
            nf, sf = get("noise_first", "unit"), get("structure_first", "unit")
            nf_short = get("noise_first", "short") < get("structure_first", "short")
            sf_long = get("structure_first", "long") < get("noise_first", "long")
            variants = min(
                get("noise_first_penalised", "unit"), get("structure_first_joint", "unit")
            )
            rows.append(
                [
                    seq.label,
                    f"{eps:g}",
                    f"{lap / nf:.2f}",
                    f"{lap / sf:.2f}",
                    "yes" if nf_short else "no",
                    "yes" if sf_long else "no",
                    f"{lap / min(nf, sf):.2f}",
                    f"{lap / variants:.2f}",
                ]
            )
    print(
        markdown_table(
            [
                "sequence",
                "ε",
                "Laplace/NF unit MSE",
                "Laplace/SF unit MSE",
                "NF < SF short",
                "SF < NF long",
                "Laplace/best of NF, SF",
                "Laplace/best variant",
            ],
            rows,
        )
    )
    print(
        "\n### Floor (ε = 0.1, smooth sequences: better of NF/SF >= 2x lower unit MSE than Laplace)\n"
    )
    for seq in seqs:
        if not seq.smooth:
            continue
        r = {m: results[(seq.name, m, 0.1)]["unit"] for m in METHODS}
        best = min(r["noise_first"], r["structure_first"])
        best_any = min(r[m] for m in METHODS if m.startswith(("noise", "structure")))
        ratio = r["laplace"] / best
        verdict = "HOLDS" if ratio >= 2 else "FAILS"
        print(
            f"- {seq.label}: Laplace {fmt(r['laplace'])}, best of NF/SF (defaults) {fmt(best)}, "
            f"ratio {ratio:.2f}: {verdict}; best variant ratio {r['laplace'] / best_any:.2f}; "
            f"oracle ratio {oracle_ratio(seq.counts, 0.1):.2f}"
        )


def oracle_ratio(counts: np.ndarray, eps: float) -> float:
    """Laplace MSE / the best expected MSE of any merged histogram with noise per bin.

    An oracle that knows the best structure for free and spends all of eps on
    Lap(1/eps) per bin sum: expected SSE = sum over bins of SSE + 2/(eps² w).
    No StructureFirst/NoiseFirst run can beat it, so it bounds what the floor asks.
    """
    n = counts.size
    variance = 2.0 / eps**2
    costs = interval_costs(counts, "sse")
    width = np.arange(n + 1)[None, :] - np.arange(n + 1)[:, None]
    noisy_costs = costs + variance / np.maximum(width, 1)
    table, _ = optimal_table(noisy_costs, n)
    return float(variance / (table[1:, n].min() / n))


def tune(seqs: list[Sequence], reps: int) -> None:
    """Experiments that chose the defaults (StructureFirst k, split and sampler; tree branching)."""
    import math

    smooth = [s for s in seqs if s.name in ("ages", "house_age", "income", "population")]
    print(
        "\n### Tuning StructureFirst: Laplace unit MSE / StructureFirst unit MSE "
        "(geometric mean over ages, house age, income, population; higher is better)\n"
    )
    print("k = c · sqrt(n · ε · F), clipped to [1, n].\n")
    header = ["sampler", "c", "ε₁/ε"] + [f"ε={e:g}" for e in EPSILONS] + ["all", "worst"]
    rows = []
    for sampler in ("paper", "joint"):
        for c in (0.3, 0.6, 1.2, 2.4):
            for share in (0.05, 0.1, 0.3):
                per_eps, logs = [], []
                for eps in EPSILONS:
                    vals = []
                    for i, seq in enumerate(smooth):
                        n = seq.counts.size
                        k = int(min(n, max(1, round(c * math.sqrt(n * eps * seq.max_count)))))
                        r = evaluate(
                            seq, "structure_first", eps, reps, 7 + i,
                            n_bins=k, structure_share=share, sampler=sampler,
                        )  # fmt: skip
                        vals.append(math.log((2.0 / eps**2) / r["unit"]))
                    per_eps.append(f"{math.exp(np.mean(vals)):.2f}")
                    logs += vals
                rows.append(
                    [
                        sampler,
                        f"{c:g}",
                        f"{share:g}",
                        *per_eps,
                        f"{math.exp(np.mean(logs)):.2f}",
                        f"{math.exp(min(logs)):.2f}",
                    ]
                )
    print(markdown_table(header, rows))
    print(
        "\n### Tuning the hierarchical branching: Laplace long-range MSE / hierarchical (geometric mean)\n"
    )
    rows = []
    for b in (2, 4, 8, 16):
        row = [str(b)]
        for eps in EPSILONS:
            logs = []
            for i, seq in enumerate(smooth):
                h = evaluate(seq, "hierarchical", eps, reps, 70 + i, branching=b)
                lap = evaluate(seq, "laplace", eps, reps, 70 + i)
                logs.append(np.log(lap["long"] / h["long"]))
            row.append(f"{np.exp(np.mean(logs)):.2f}")
        rows.append(row)
    print(markdown_table(["branching"] + [f"ε={e:g}" for e in EPSILONS], rows))


def timing(sizes: tuple[int, ...], img_dir: Path | None = None) -> None:
    """Wall time of NoiseFirst/StructureFirst (pruned DP) vs n, against the exact O(n²k) scan.

    Poisson(50) counts, epsilon = 0.1, StructureFirst with F = 200 and its default
    k. The reference scan (``_optimal``, the previous implementation) runs up
    to n = 1,024 on the same k; above that, the pruned rows are checked equal
    to the reference on a 2,048-bin window of the same data (the subsample check).
    """
    from dpkit.histograms._segmentation import sse_rows
    from dpkit.histograms.structure_first import default_n_bins

    print("\n### Time of NoiseFirst / StructureFirst vs n (this machine, warm JIT)\n")
    histograms.noise_first(np.arange(8.0), 1.0, rng=0)  # compile the kernels once
    histograms.structure_first(np.arange(8.0), 1.0, max_count=10, n_bins=3, rng=0)
    rows, measured = [], []
    for n in sizes:
        x = np.random.default_rng(n).poisson(50, n).astype(float)
        k = default_n_bins(n, 0.1, 200)
        t0 = time.perf_counter()
        histograms.noise_first(x, 0.1, rng=0)
        t1 = time.perf_counter()
        histograms.structure_first(x, 0.1, max_count=200, rng=0)
        t2 = time.perf_counter()
        reference = "-"
        if n <= 1024:
            t3 = time.perf_counter()
            optimal_table(interval_costs(np.minimum(x, 200)), k - 1)
            reference = f"{time.perf_counter() - t3:.2f}"
        window = x[: min(n, 2048)]
        kk = min(32, window.size)
        table, _ = optimal_table(interval_costs(window), kk)
        worst = 0.0
        for j, row, _ in sse_rows(window, kk):
            finite = np.isfinite(table[j])
            worst = max(worst, float(np.max(np.abs(row[finite] - table[j][finite]))))
        rows.append(
            [f"{n:,}", f"{k:,}", f"{t1 - t0:.3f}", f"{t2 - t1:.2f}", reference, f"{worst:.1e}"]
        )
        measured.append((n, t1 - t0, t2 - t1))
    print(
        markdown_table(
            [
                "n",
                "StructureFirst k",
                "noise_first ε=0.1 (s)",
                "structure_first (s)",
                "exact O(n²k) table (s)",
                "max |pruned - exact| on a 2,048-bin window",
            ],
            rows,
        )
    )
    if img_dir is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        ns = [m[0] for m in measured]
        ax.loglog(ns, [m[1] for m in measured], "o-", label="noise_first")
        ax.loglog(ns, [m[2] for m in measured], "s-", label="structure_first (default k)")
        ax.set_xlabel("unit bins n")
        ax.set_ylabel("seconds")
        ax.set_title("NoiseFirst / StructureFirst time vs n (pruned exact DP)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(img_dir / "histograms_time_vs_n.png", dpi=120)
        plt.close(fig)
        print(f"\nfigure: {img_dir / 'histograms_time_vs_n.png'}")


def plots(
    seqs: list[Sequence], results: dict[tuple[str, str, float], dict[str, float]], img_dir: Path
) -> None:
    from matplotlib.figure import Figure

    img_dir.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(12, 2.6 * len(seqs)), layout="constrained")
    axes = fig.subplots(len(seqs), 3, squeeze=False)
    for row, seq in enumerate(seqs):
        for col, query in enumerate(("unit", "short", "long")):
            ax = axes[row, col]
            for method in METHODS:
                ys = [results[(seq.name, method, e)][query] for e in EPSILONS]
                dashed = method.endswith("median")
                ax.plot(
                    EPSILONS,
                    ys,
                    marker="o",
                    markersize=4,
                    linestyle="--" if dashed else "-",
                    color=COLOURS[method],
                    label=LABELS[method],
                )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(color="#e6e6e6", linewidth=0.8)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            if row == 0:
                ax.set_title(
                    {"unit": "unit bins", "short": "short ranges", "long": "long ranges"}[query],
                    fontsize=11,
                )
            if col == 0:
                ax.set_ylabel(f"{seq.label}\nMSE", fontsize=9)
            if row == len(seqs) - 1:
                ax.set_xlabel("ε")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4, frameon=False, fontsize=9)
    save(fig, img_dir / "histograms_mse.png", dpi=110)

    plot_examples(seqs, img_dir)


def plot_examples(seqs: list[Sequence], img_dir: Path) -> None:
    """One seeded run of each method on the two smooth sequences at epsilon = 0.1."""
    for seq in seqs:
        if seq.name not in ("ages", "house_age"):
            continue
        for eps in (0.1,):
            chosen = (*PAPER_METHODS, "noise_first_penalised", "structure_first_joint")
            made = [publisher(m, seq)(eps, np.random.default_rng(5)) for m in chosen]
            fig = plot_comparison(
                made,
                true_counts=seq.counts,
                xlabel=seq.label,
                suptitle=f"{seq.label}, ε = {eps:g} (one seeded run each)",
                titles=[LABELS[m] for m in chosen],
                columns=3,
            )
            save(fig, img_dir / f"histograms_{seq.name}_eps{eps:g}.png", dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--img-dir", type=Path, default=REPO / "docs" / "img")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument(
        "--quick", action="store_true", help="5 reps, timing without n = 4,096, no plots"
    )
    parser.add_argument(
        "--tune", action="store_true", help="also run the default-choosing experiments"
    )
    parser.add_argument(
        "--tune-only", action="store_true", help="only the default-choosing experiments"
    )
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument(
        "--timing-only", action="store_true", help="only the time-vs-n table and figure"
    )
    parser.add_argument("--examples-only", action="store_true", help="only the example plots")
    args = parser.parse_args(argv)
    if not args.data_dir.is_dir():
        print(f"data directory {args.data_dir} not found; pass --data-dir", file=sys.stderr)
        return 2
    reps = 5 if args.quick else args.reps
    start = time.perf_counter()
    seqs = load_sequences(args.data_dir)
    if args.examples_only:
        plot_examples(seqs, args.img_dir)
        return 0
    if args.tune_only:
        tune(seqs, max(5, reps // 5))
        return 0
    if args.timing_only:
        timing((256, 1024, 4096, 16384, 65536), None if args.no_plots else args.img_dir)
        return 0
    print(f"## DP histogram benchmark: {reps} repetitions, ε ∈ {{0.01, 0.1, 1}}")
    print(
        "\nMSE of unit-bin counts and of 1,000 random range counts per run (short: length ≤ n/10; long: ≥ n/2)."
    )
    results = run_evaluation(seqs, reps)
    print_tables(seqs, results)
    check_claims(seqs, results)
    if args.tune:
        tune(seqs, max(5, reps // 5))
    timing(
        (256, 1024, 4096) if args.quick else (256, 1024, 4096, 16384, 65536),
        None if args.no_plots else args.img_dir,
    )
    if not (args.quick or args.no_plots):
        plots(seqs, results, args.img_dir)
    print(f"\n(total {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
