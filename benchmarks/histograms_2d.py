"""Two-dimensional histograms on real coordinates: Laplace, UGrid, AGrid, DAWA-2D, the matrix mechanism.

Protocol (DPBench's, in two dimensions): the shape is the California housing
block groups' (longitude, latitude) binned on a ``--cells`` × ``--cells``
grid over the state's public bounding box and normalised; a dataset of s
records is drawn from it (multinomial) for each scale s; workloads are 2,000
random rectangles and 2,000 small ones (sides of 1 to 16 cells); the error is
the scaled average per-query L2 error ||W x - W x̂||₂ / (s · |W|), averaged
over ``--reps`` runs (sample and noise redrawn). Every method in one run;
the table gives each one's error, the winner and each one's ratio to 2-D
Laplace. The grid methods buy their row count with 5% of ε (the default),
like a user who declares nothing. Also draws the heat-map figure for the docs
on the 20,640 real points. Usage::

    python benchmarks/histograms_2d.py
    python benchmarks/histograms_2d.py --quick
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from dpkit import histograms

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
BOX = ((-124.5, -114.0), (32.5, 42.0))  # California's bounding box (public)
EPSILONS = (0.1, 0.5, 1.0)
SCALES = (10_000, 100_000, 1_000_000, 10_000_000)
METHODS = ("laplace2d", "ugrid", "agrid", "dawa2d", "matrix_mechanism2d", "auto2d")


def coordinates(data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    import pandas as pd

    frame = pd.read_csv(data_dir / "california_housing.csv", usecols=["Longitude", "Latitude"])
    return frame["Longitude"].to_numpy(), frame["Latitude"].to_numpy()


def grid_counts(lon: np.ndarray, lat: np.ndarray, cells: int) -> np.ndarray:
    counts, _, _ = np.histogram2d(
        np.clip(lon, *BOX[0]), np.clip(lat, *BOX[1]), bins=cells, range=BOX
    )
    return counts


def workloads(cells: int, seed: int = 0) -> dict[str, tuple[np.ndarray, ...]]:
    rng = np.random.default_rng(seed)
    xs = np.sort(rng.integers(0, cells, (2000, 2)), axis=1)
    ys = np.sort(rng.integers(0, cells, (2000, 2)), axis=1)
    sides = rng.integers(1, 17, (2000, 2))
    x0, y0 = rng.integers(0, cells - sides[:, 0] + 1), rng.integers(0, cells - sides[:, 1] + 1)
    return {
        "random": (xs[:, 0], xs[:, 1], ys[:, 0], ys[:, 1]),
        "small": (x0, x0 + sides[:, 0] - 1, y0, y0 + sides[:, 1] - 1),
    }


def rectangle_sums(x: np.ndarray, q: tuple[np.ndarray, ...]) -> np.ndarray:
    table = np.zeros((x.shape[0] + 1, x.shape[1] + 1))
    table[1:, 1:] = x.cumsum(axis=0).cumsum(axis=1)
    a, b, c, d = q
    return table[b + 1, d + 1] - table[a, d + 1] - table[b + 1, c] + table[a, c]


def evaluate(
    shape: np.ndarray, scales: tuple[int, ...], reps: int, seed: int
) -> tuple[dict[tuple[int, float, str, str], float], dict[str, float]]:
    cells = shape.shape[0]
    loads = workloads(cells)
    errors: dict[tuple[int, float, str, str], list[float]] = {}
    seconds: dict[str, float] = dict.fromkeys(METHODS, 0.0)
    rng = np.random.default_rng(seed)
    for s in scales:
        for eps in EPSILONS:
            for _ in range(reps):
                x = rng.multinomial(s, shape.ravel()).reshape(shape.shape).astype(np.float64)
                truth = {k: rectangle_sums(x, q) for k, q in loads.items()}
                for name in METHODS:
                    start = time.perf_counter()
                    grid = getattr(histograms, name)(x, eps, rng=rng)
                    seconds[name] += time.perf_counter() - start
                    for k, q in loads.items():
                        err = np.linalg.norm(grid.answer(*q) - truth[k]) / (s * q[0].size)
                        errors.setdefault((s, eps, k, name), []).append(float(err))
    return {k: float(np.mean(v)) for k, v in errors.items()}, seconds


def table(errors: dict[tuple[int, float, str, str], float], scales: tuple[int, ...]) -> str:
    head = ["records", "ε", "workload", *METHODS, "winner", "auto2d / best", "auto2d / Laplace"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in scales:
        for eps in EPSILONS:
            for k in ("random", "small"):
                row = {m: errors[(s, eps, k, m)] for m in METHODS}
                best = min(row, key=row.__getitem__)
                cells = [f"{row[m]:.2e}" + (" **←**" if m == best else "") for m in METHODS]
                to_best, to_laplace = row["auto2d"] / row[best], row["auto2d"] / row["laplace2d"]
                lines.append(
                    f"| {s:,} | {eps:g} | {k} | "
                    + " | ".join(cells)
                    + f" | {best} | {to_best:.2f} | {to_laplace:.2f} |"
                )
    return "\n".join(lines)


def heat_map(lon: np.ndarray, lat: np.ndarray, cells: int, path: Path, eps: float) -> None:
    from matplotlib.figure import Figure

    from dpkit.histograms.plot import plot_grid, save

    counts = grid_counts(lon, lat, cells)
    edges = [np.linspace(*BOX[0], cells + 1), np.linspace(*BOX[1], cells + 1)]
    fig = Figure(figsize=(11.5, 9.5), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True, sharey=True)
    rng = np.random.default_rng(7)
    true = histograms.laplace2d(counts, 1e9, rng=rng, x_edges=edges[0], y_edges=edges[1])
    panels: list[tuple[Any, str]] = [
        (true, f"true counts ({counts.sum():,.0f} block groups; public data, evaluation only)")
    ]
    for name in ("laplace2d", "agrid", "dawa2d"):
        grid = getattr(histograms, name)(counts, eps, rng=rng, x_edges=edges[0], y_edges=edges[1])
        panels.append((grid, None))
    top = float(counts.max())
    for ax, (grid, title) in zip(axes.ravel(), panels):
        plot_grid(grid, ax, title=title, vmax=top, xlabel="longitude", ylabel="latitude")
    fig.suptitle(
        f"California block groups on a {cells} × {cells} grid, ε = {eps:g} "
        "(colour: square root of the count)",
        fontsize=12,
        x=0.01,
        ha="left",
    )
    save(fig, path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cells", type=int, default=256)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--quick", action="store_true", help="two scales, 2 reps")
    parser.add_argument(
        "--out", type=Path, default=REPO / "benchmarks" / "results" / "histograms_2d.md"
    )
    parser.add_argument(
        "--img", type=Path, default=REPO / "docs" / "img" / "histogram2d_california.png"
    )
    args = parser.parse_args(argv)
    if not (args.data_dir / "california_housing.csv").exists():
        print(f"no california_housing.csv under {args.data_dir}; pass --data-dir", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")  # seeded runs warn that they are not private: expected here
    lon, lat = coordinates(args.data_dir)
    shape = grid_counts(lon, lat, args.cells)
    shape /= shape.sum()
    scales = SCALES[:2] if args.quick else SCALES
    reps = 2 if args.quick else args.reps
    start = time.perf_counter()
    errors, seconds = evaluate(shape, scales, reps, args.seed)
    text = table(errors, scales)
    keys = [(s, e, k) for s in scales for e in EPSILONS for k in ("random", "small")]
    ratios = [errors[(*key, "auto2d")] / errors[(*key, "laplace2d")] for key in keys]
    to_best = [errors[(*key, "auto2d")] / min(errors[(*key, m)] for m in METHODS) for key in keys]
    wins = {m: 0 for m in METHODS}
    for s in scales:
        for e in EPSILONS:
            for k in ("random", "small"):
                wins[min(METHODS, key=lambda m: errors[(s, e, k, m)])] += 1
    runs = len(scales) * len(EPSILONS) * reps
    summary = (
        f"{args.cells} × {args.cells} cells, {reps} runs per cell, {time.perf_counter() - start:.0f} s. "
        f"Cells won: {', '.join(f'{m} {n}' for m, n in wins.items())}. auto2d / Laplace error: "
        f"median {np.median(ratios):.2f}, worst {max(ratios):.2f}; auto2d / best: median "
        f"{np.median(to_best):.2f}, worst {max(to_best):.2f}, within 1.2x in "
        f"{sum(r <= 1.2 for r in to_best)}/{len(to_best)} cells. Mean seconds per release: "
        + ", ".join(f"{m} {seconds[m] / runs:.2f}" for m in METHODS)
        + "."
    )
    print(text)
    print(summary)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        "# 2-D histograms on California coordinates (`python benchmarks/histograms_2d.py`)\n\n"
        "Scaled average per-query L2 error (lower is better; **←** marks the winner).\n\n"
        + text
        + "\n\n"
        + summary
        + "\n"
    )
    args.img.parent.mkdir(parents=True, exist_ok=True)
    heat_map(lon, lat, 128, args.img, 0.1)
    print(f"table: {args.out}\nheat map: {args.img}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
