"""Draw every picture the README and docs/accounting.md show, from data dpkit generates.

Run ``make figures`` (or ``python docs/figures/make_figures.py [OUT]``); the PNGs
go to ``docs/img/`` by default. Everything is seeded and synthetic (no
download, no ../shared/data), so the pictures are the same on every machine.
Seeded noise is for pictures only: never publish a seeded release.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "img"
DPI = 100
TYPES = {"age": "DOUBLE", "weight": "DOUBLE", "condition": "BOOLEAN", "district": "VARCHAR"}


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path


def _session(rows: int, epsilon: float, seed: int) -> Any:
    import dpkit
    from dpkit.demo import patients

    return dpkit.Session.from_pandas(patients(rows), types=TYPES, epsilon=epsilon, rng=seed)


def histogram_figure(out: Path, *, rows: int = 5000, seed: int = 1) -> Path:
    """A histogram query's release (value per bin and its 95% interval) as bars with error bars."""
    from matplotlib.figure import Figure

    session = _session(rows, 1.0, seed)
    release = session.histogram("age", bounds=(0, 100), bins=20, epsilon=0.1)
    edges = np.asarray(release.details["edges"])
    values = np.asarray(release.value, dtype=float)
    low, high = (np.asarray(side, dtype=float) for side in release.ci)
    centres, widths = (edges[:-1] + edges[1:]) / 2, np.diff(edges)
    fig = Figure(figsize=(7.5, 3.6), layout="constrained")
    ax = fig.add_subplot()
    ax.bar(centres, values, width=widths * 0.92, color="#56B4E9", label="released count (ε = 0.1)")
    ax.errorbar(centres, values, yerr=[np.maximum(values - low, 0), np.maximum(high - values, 0)],
                fmt="none", ecolor="#333333", capsize=2, linewidth=1,
                label="95% confidence interval")  # fmt: skip
    ax.set_xlabel("age (bins of 5 years over the public bounds 0-100)")
    ax.set_ylabel("people")
    ax.set_title(f"session.histogram('age', bounds=(0, 100), bins=20, epsilon=0.1), {rows} rows",
                 fontsize=10, loc="left")  # fmt: skip
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8)
    return _save(fig, out / "readme_histogram.png")


def budget_figure(out: Path, *, rows: int = 5000, seed: int = 2) -> Path:
    """A session's budget over time: a few queries, then one the budget cannot pay (refused)."""
    from dpkit.accounting import plot_budget
    from dpkit.errors import BudgetExceededError

    s = _session(rows, 1.0, seed)
    s.count(epsilon=0.1)
    s.mean("age", bounds=(0, 120), epsilon=0.1)
    s.median("age", bounds=(0, 120), epsilon=0.1)
    s.mean("weight", bounds=(30, 200), group_by="district",
           keys=["Ba Dinh", "Hoan Kiem", "Dong Da"], epsilon=0.2)  # fmt: skip
    s.histogram("age", bounds=(0, 100), bins=20, epsilon=0.2)
    try:
        s.mean("weight", bounds=(30, 200), epsilon=0.5)  # only 0.3 left: refused, nothing charged
    except BudgetExceededError:
        pass
    s.count(where={"condition": True}, epsilon=0.2)
    return _save(plot_budget(s.accountant), out / "budget_over_time.png")


def shapes_figure(out: Path, *, rows: int = 2000, seed: int = 3) -> Path | None:
    """A boosted model's shape functions with their noise bands (None if this dpkit has none)."""
    from dpkit.demo import patients
    from dpkit.trees import DPGradientBoostingClassifier

    if not hasattr(DPGradientBoostingClassifier, "plot_shapes"):
        return None
    table = patients(rows)
    X = table[["age", "weight"]].to_numpy() / 160
    y = table.condition.to_numpy().astype(int)
    model = DPGradientBoostingClassifier(epsilon=1.0, bounds=(0, 1), classes=[0, 1],
                                         random_state=seed).fit(X, y)  # fmt: skip
    return _save(model.plot_shapes(), out / "boosting_shapes.png")


def location_figure(out: Path, *, people: int = 400, seed: int = 4) -> Path:
    """People's true locations and their planar-Laplace reports (ε = 0.5 per km) on a 60 km square."""
    from matplotlib.figure import Figure

    from dpkit.local.location import PlanarLaplace

    rng = np.random.default_rng(seed)
    towns = np.array([[15.0, 20.0], [42.0, 45.0], [45.0, 12.0]])
    where = towns[rng.integers(0, len(towns), people)] + rng.normal(0, 3.0, (people, 2))
    where = np.clip(where, 0, 60)
    mechanism = PlanarLaplace(epsilon=0.5, area=(0, 0, 60, 60))
    reported = mechanism.perturb(where, rng=seed)
    fig = Figure(figsize=(8.0, 4.0), layout="constrained")
    left, right = fig.subplots(1, 2, sharex=True, sharey=True)
    left.scatter(where[:, 0], where[:, 1], s=6, color="#0072B2")
    left.set_title("true locations (synthetic: three towns)", fontsize=10)
    right.scatter(reported[:, 0], reported[:, 1], s=6, color="#D55E00")
    radius = mechanism.error_radius(0.05)
    right.set_title(f"reports, ε = 0.5 per km (95% within {radius:.0f} km)", fontsize=10)
    for ax in (left, right):
        ax.set_xlim(0, 60)
        ax.set_ylim(0, 60)
        ax.set_aspect("equal")
        ax.set_xlabel("km")
    left.set_ylabel("km")
    return _save(fig, out / "location_reports.png")


FIGURES: dict[str, Callable[[Path], Path | None]] = {
    "histogram": histogram_figure,
    "budget": budget_figure,
    "shapes": shapes_figure,
    "location": location_figure,
}


def main(out: Path = OUT) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    written = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded noise warns: right for releases, noise here
        for name, draw in FIGURES.items():
            start = time.perf_counter()
            path = draw(out)
            took = time.perf_counter() - start
            if path is None:
                print(f"{name}: skipped (this dpkit cannot draw it)")
                continue
            print(f"{name}: {path} ({path.stat().st_size // 1024} KB, {took:.1f} s)")
            written.append(path)
    return written


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
