"""The DP-applications course report's sparse mobile crowdsensing loop on California's block groups.

The map: a grid of regions over California (public bounds); the "sensed"
value: a block group's median house value (MedHouseVal, $100k). The data has
no time, so the *cycles* of the sensing history are bands of housing age
(HouseAge 0-9, 10-16, ..., 45-52 years): each band gives one map of region
means, and maps of different bands differ in ways that are correlated across
regions, as sensing cycles are. One band is held out as the present: its
region means are the true map, and a few hundred of its block groups are the
participants, each sensing its own value where it is; the other bands are the
history that S1 and S2 learn from. For each ε (per km) and each mechanism — the LP-optimal matrix of
S1, the exponential-mechanism matrix, the planar Laplace — the participants
upload (M1, M2) and the server infers the map (S3); the walk-through reports
the inference error with and without data adjustment, and the Bayesian
adversary's expected distance error (the privacy side). The data must be
public: the output compares with the truth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dpkit.errors import DataError
from dpkit.local.location import (
    ObfuscationMatrix,
    PlanarLaplace,
    Regions,
    bayes_remap,
    exponential_matrix,
    fit_adjustment,
    grid_regions,
    infer_map,
    planar_laplace_channel,
    project_km,
    sensing_matrix,
    upload,
)

#: California's extent in degrees (public geography): lat 32.5-42.0, lon -124.5 to -114.0.
CALIFORNIA = (32.5, -124.5, 42.0, -114.0)
AGE_BANDS = (0, 10, 17, 24, 31, 38, 45, 53)  # HouseAge bands: the history's cycles
EPSILONS = (0.005, 0.01, 0.02, 0.05)  # per km; regions are ~85 km apart
MECHANISMS = ("optimal", "exponential", "planar Laplace")


@dataclass(frozen=True)
class LocationDemo:
    """Everything the walk-through measured (figures are drawn from it)."""

    regions: Regions
    shape: tuple[int, int]
    truth: NDArray[np.float64]
    inferred_plain: NDArray[np.float64]
    inferred_private: NDArray[np.float64]
    private_label: str
    table: pd.DataFrame


def _grid_of(
    values: NDArray[np.float64], regions: Regions, shape: tuple[int, int]
) -> NDArray[np.float64]:
    grid = np.full(shape, np.nan)
    for value, (row, col) in zip(values, regions.names):
        grid[row, col] = value
    return grid


def _region_means(
    index: NDArray[np.int64], values: NDArray[np.float64], n: int
) -> NDArray[np.float64]:
    counts = np.bincount(index, minlength=n).astype(np.float64)
    sums = np.bincount(index, weights=values, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


def run_location_demo(
    data: str | Path,
    *,
    value: str = "MedHouseVal",
    shape: tuple[int, int] = (10, 10),
    cycle_column: str = "HouseAge",
    cycle_edges: tuple[float, ...] = AGE_BANDS,
    present: int = 3,
    participants: int = 400,
    epsilons: tuple[float, ...] = EPSILONS,
    repeats: int = 5,
    extent: tuple[float, float, float, float] = CALIFORNIA,
    rng: int | np.random.Generator = 0,
) -> LocationDemo:
    """Run the loop; see the module docstring. Seeded noise (``rng``): for public data only."""
    frame = pd.read_csv(data)
    for column in ("Latitude", "Longitude", value, cycle_column):
        if column not in frame.columns:
            raise DataError(
                f"the data has no column {column!r}: pass a file with Latitude, Longitude, {value} and {cycle_column}."
            )
    lat0, lon0, lat1, lon1 = extent
    inside = frame["Latitude"].between(lat0, lat1) & frame["Longitude"].between(lon0, lon1)
    frame = frame[inside & frame[value].notna()]
    origin = ((lat0 + lat1) / 2, (lon0 + lon1) / 2)
    corners = project_km([lat0, lat1], [lon0, lon1], origin=origin)
    area = (corners[0, 0], corners[0, 1], corners[1, 0], corners[1, 1])
    points = project_km(frame["Latitude"], frame["Longitude"], origin=origin)
    values = frame[value].to_numpy(dtype=np.float64)
    rng = np.random.default_rng(rng)
    cycle = np.digitize(frame[cycle_column].to_numpy(dtype=np.float64), cycle_edges[1:-1])
    is_history = cycle != present
    grid = grid_regions(area, shape)
    # Regions: the grid cells with history (declared from the public history, not the present).
    kept = np.unique(grid.nearest(points[is_history]))
    regions = grid.subset(kept)
    n = regions.n
    region = regions.nearest(points)
    history = np.column_stack(
        [
            _region_means(region[cycle == c], values[cycle == c], n)
            for c in range(len(cycle_edges) - 1)
            if c != present
        ]
    )
    present = ~is_history
    truth = _region_means(region[present], values[present], n)
    prior = np.bincount(region[is_history], minlength=n) + 1.0  # public: the history's shares
    adjustment = fit_adjustment(history)
    mechanism_pl = {eps: PlanarLaplace(epsilon=eps, area=area) for eps in epsilons}

    def error(map_: NDArray[np.float64]) -> float:
        ok = ~np.isnan(truth)
        return float(np.mean(np.abs(map_[ok] - truth[ok])))

    present_idx = np.flatnonzero(present)
    rows = []
    plain_errors, plain_map = [], np.zeros(n)
    for _rep in range(repeats):
        who = rng.choice(present_idx, size=min(participants, present_idx.size), replace=False)
        plain_map = infer_map(history, region[who], values[who])
        plain_errors.append(error(plain_map))
    rows.append(
        {
            "mechanism": "no obfuscation",
            "epsilon_per_km": math.inf,
            "error_adjusted": float(np.mean(plain_errors)),
            "error_unadjusted": float(np.mean(plain_errors)),
            "adversary_km": 0.0,
        }
    )
    private_map, private_label = plain_map, ""
    mid = epsilons[len(epsilons) // 2]
    for eps in epsilons:
        matrices: dict[str, tuple[ObfuscationMatrix | None, ObfuscationMatrix | None]] = {
            "optimal": (
                sensing_matrix(regions, history, eps, adjustment=adjustment, prior=prior),
                sensing_matrix(regions, history, eps, adjustment=None, prior=prior),
            ),
            "exponential": (exponential_matrix(regions, eps),) * 2,
            "planar Laplace": (None, None),
        }
        for name in MECHANISMS:
            with_adj, without_adj = matrices[name]
            errs: dict[bool, list[float]] = {True: [], False: []}
            for _rep in range(repeats):
                who = rng.choice(
                    present_idx, size=min(participants, present_idx.size), replace=False
                )
                for adjusted, matrix in ((True, with_adj), (False, without_adj)):
                    adj = adjustment if adjusted else None
                    if matrix is None:
                        reported = regions.nearest(mechanism_pl[eps].perturb(points[who], rng))
                        sent = (
                            values[who] if adj is None else adj(region[who], reported, values[who])
                        )
                    else:
                        reported, sent = upload(
                            matrix, region[who], values[who], adjustment=adj, rng=rng
                        )
                    inferred = infer_map(history, reported, sent)
                    errs[adjusted].append(error(inferred))
                    if adjusted and name == "optimal" and eps == mid:
                        private_map, private_label = inferred, f"optimal matrix, ε = {eps:g}/km"
            channel = (
                with_adj.matrix
                if with_adj is not None
                else planar_laplace_channel(mechanism_pl[eps], regions, draws=1000, rng=rng)
            )
            _, adversary = bayes_remap(channel, prior, regions=regions)
            rows.append({"mechanism": name, "epsilon_per_km": eps,
                         "error_adjusted": float(np.mean(errs[True])),
                         "error_unadjusted": float(np.mean(errs[False])),
                         "adversary_km": adversary})  # fmt: skip
    return LocationDemo(
        regions=regions,
        shape=shape,
        truth=truth,
        inferred_plain=plain_map,
        inferred_private=private_map,
        private_label=private_label,
        table=pd.DataFrame(rows),
    )


def _markdown(table: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    for row in table.itertuples(index=False):
        cells = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_location_demo(result: LocationDemo, out: str | Path) -> list[Path]:
    """Heat maps (truth, inferred without and with obfuscation) and the curves vs ε, as PNGs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    maps = [
        ("true map (the held-out age band)", result.truth),
        ("inferred, no obfuscation", result.inferred_plain),
        (f"inferred, {result.private_label}", result.inferred_private),
    ]
    top = np.nanmax([np.nanmax(m) for _, m in maps])
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.4), constrained_layout=True)
    images = []
    for ax, (title, values) in zip(axes, maps):
        images.append(ax.imshow(_grid_of(values, result.regions, result.shape), origin="lower",
                          cmap="viridis", vmin=0, vmax=top))  # fmt: skip
        ax.set_title(title, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(images[0], ax=axes, shrink=0.8, label="median house value ($100k)")
    maps_path = folder / "location_maps.png"
    fig.savefig(maps_path, dpi=110)
    plt.close(fig)

    table = result.table[result.table["mechanism"] != "no obfuscation"]
    baseline = float(
        result.table.loc[result.table["mechanism"] == "no obfuscation", "error_adjusted"].iloc[0]
    )
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), constrained_layout=True)
    for name, group in table.groupby("mechanism"):
        line = left.plot(
            group["epsilon_per_km"], group["error_adjusted"], marker="o", label=f"{name}, adjusted"
        )
        left.plot(group["epsilon_per_km"], group["error_unadjusted"], marker="x", linestyle="--",
                  color=line[0].get_color(), label=f"{name}, not adjusted")  # fmt: skip
        right.plot(group["epsilon_per_km"], group["adversary_km"], marker="o", label=name)
    left.axhline(baseline, color="grey", linewidth=1, label="no obfuscation")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("ε per km")
        ax.legend(fontsize=8)
    left.set_ylabel("inference error (mean |inferred - true|, $100k)")
    right.set_ylabel("adversary's expected distance error (km)")
    curves_path = folder / "location_curves.png"
    fig.savefig(curves_path, dpi=110)
    plt.close(fig)
    table_path = folder / "location_table.md"
    table_path.write_text(_markdown(result.table))
    return [maps_path, curves_path, table_path]
