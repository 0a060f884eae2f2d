"""Speed and quality of the optimal obfuscation matrices (issue 13).

    .venv/bin/python benchmarks/location_lp.py            # about 6 minutes on 2 cores
    .venv/bin/python benchmarks/location_lp.py --quick    # smoke test

Square grids over a 10 x 10 area (units: km), ε per km in {0.1, 0.5, 1, 3},
uniform prior and a skewed one (seeded), distance as the loss. For each cell:
seconds and expected loss of

* ``mixture``: ``optimal_matrix(method="mixture")``, the default;
* ``spanner``: ``optimal_matrix(method="constraints")``, Bordenabe et al.'s
  LP on the 8-neighbour + Delaunay spanner (ε divided by its dilation), up to
  ``--spanner-max`` regions (it takes about two minutes at 225);
* ``exact``: the same LP with every pair constrained, up to ``--exact-max``;
* ``exponential``: ``exponential_matrix``, the closed-form baseline.

Every matrix is certified (realised ε <= ε over all n^3 triples) before it is
timed as done. Losses are reported as ratios to the best LP in the cell.
Writes ``--out`` (JSON) and the same table as Markdown next to it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpkit.local.location import exponential_matrix, grid_regions, optimal_matrix

ROOT = Path(__file__).resolve().parent.parent
EPSILONS = (0.1, 0.5, 1.0, 3.0)


def _timed(build: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    matrix = build()
    return time.perf_counter() - start, matrix


def run(sides: list[int], spanner_max: int, exact_max: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for side in sides:
        regions = grid_regions((0.0, 0.0, 10.0, 10.0), (side, side))
        n = regions.n
        skewed = np.random.default_rng(side).random(n) ** 2 + 0.05
        for prior_name, prior in (("uniform", None), ("skewed", skewed)):
            for eps in EPSILONS:
                builds: dict[str, Any] = {
                    "mixture": lambda r=regions, e=eps, p=prior: optimal_matrix(r, e, prior=p),
                    "exponential": lambda r=regions, e=eps: exponential_matrix(r, e),
                }
                if n <= spanner_max:
                    builds["spanner"] = lambda r=regions, e=eps, p=prior: optimal_matrix(
                        r, e, prior=p, method="constraints"
                    )
                if n <= exact_max:
                    builds["exact"] = lambda r=regions, e=eps, p=prior: optimal_matrix(
                        r, e, prior=p, method="constraints", neighbours=None
                    )
                row: dict[str, Any] = {"regions": n, "prior": prior_name, "epsilon": eps}
                for name, build in builds.items():
                    seconds, matrix = _timed(build)
                    assert matrix.epsilon_realised <= eps
                    row[name] = {"seconds": seconds, "loss": matrix.expected_loss(prior)}
                rows.append(row)
                print(_line(row), flush=True)
    return rows


def _line(row: dict[str, Any]) -> str:
    parts = [f"{row['regions']:>4} {row['prior']:<7} ε={row['epsilon']:<4}"]
    for name in ("mixture", "spanner", "exact", "exponential"):
        if name in row:
            parts.append(f"{name} {row[name]['seconds']:7.2f}s {row[name]['loss']:.4f}")
    return " | ".join(parts)


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| regions | prior | ε | mixture s | spanner s | exact s | "
        "mixture / best LP | spanner / best LP | exponential / best LP |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for row in rows:
        best = min(row[k]["loss"] for k in ("mixture", "spanner", "exact") if k in row)

        def cell(name: str, key: str, row: dict[str, Any] = row, best: float = best) -> str:
            if name not in row:
                return "—"
            value = row[name][key]
            return f"{value:.2f}" if key == "seconds" else f"{value / best:.3f}"

        lines.append(
            f"| {row['regions']} | {row['prior']} | {row['epsilon']:g} | "
            f"{cell('mixture', 'seconds')} | {cell('spanner', 'seconds')} | "
            f"{cell('exact', 'seconds')} | {cell('mixture', 'loss')} | "
            f"{cell('spanner', 'loss')} | {cell('exponential', 'loss')} |"
        )
    worst = max(row["mixture"]["seconds"] for row in rows)
    return (
        "# Optimal obfuscation matrices: speed and expected loss\n\n"
        "Command: `.venv/bin/python benchmarks/location_lp.py`. Square grids over 10 x 10 km, "
        "distance loss; seconds include certification (all n^3 triples). Losses are ratios "
        "to the best LP run in the cell (the exact LP where it ran).\n\n"
        + head
        + "\n".join(lines)
        + f"\n\nSlowest mixture LP: {worst:.2f} s.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grids only (smoke test)")
    parser.add_argument("--spanner-max", type=int, default=100)
    parser.add_argument("--exact-max", type=int, default=49)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/location_lp.json")
    args = parser.parse_args()
    sides = [5, 7] if args.quick else [5, 7, 10, 15, 20, 24]
    rows = run(sides, args.spanner_max, args.exact_max)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1))
    args.out.with_suffix(".md").write_text(markdown(rows))
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
