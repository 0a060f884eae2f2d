"""``dpkit location obfuscate`` and ``dpkit location demo``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dpkit.errors import DataError, InvalidParameterError
from dpkit.local.location.channels import project_km, unproject_km
from dpkit.local.location.planar_laplace import PlanarLaplace


def obfuscate_command(
    table: Path,
    out: Path,
    *,
    epsilon: float,
    area: tuple[float, float, float, float],
    lat: str,
    lon: str,
    keep: list[str],
    step: float | None,
    seed: int | None,
) -> None:
    """Replace each row's location by an ε-geo-indistinguishable report (ε per km).

    ``area`` = (lat_min, lon_min, lat_max, lon_max), declared: the planar
    Laplace runs on the projection to km around the area's centre and reports
    are truncated to it. Each row is one person's location used once; the file
    written holds only the reports and the ``keep`` columns.
    """
    lat0, lon0, lat1, lon1 = (float(v) for v in area)
    if not (-90 <= lat0 < lat1 <= 90 and -180 <= lon0 < lon1 <= 180):
        raise InvalidParameterError(
            "--area must be LAT_MIN LON_MIN LAT_MAX LON_MAX in degrees, minimum before maximum."
        )
    from dpkit.local._cli_survey import read_reports

    frame = read_reports(table, "locations", "naming the latitude and longitude columns")
    missing = [c for c in (lat, lon, *keep) if c not in frame.columns]
    if missing:
        raise InvalidParameterError(f"the file has no column(s) {', '.join(map(repr, missing))}.")
    coords = frame[[lat, lon]].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    if not np.isfinite(coords).all():
        raise DataError("some rows have a missing or non-numeric location: fix or drop them first.")
    origin = ((lat0 + lat1) / 2, (lon0 + lon1) / 2)
    corners = project_km([lat0, lat1], [lon0, lon1], origin=origin)
    mechanism = PlanarLaplace(epsilon=epsilon, area=(*corners[0], *corners[1]), step=step)
    points = project_km(coords[:, 0], coords[:, 1], origin=origin)
    reported = unproject_km(mechanism.perturb(points, rng=seed), origin=origin)
    result = frame[keep].copy() if keep else pd.DataFrame(index=frame.index)
    result[lat] = reported[:, 0]
    result[lon] = reported[:, 1]
    # Atomic (a temporary file, then a rename): a failed write leaves no partial reports.
    from dpkit._cli_output import atomic_write

    atomic_write(Path(out), lambda p: result.to_csv(p, index=False))
    print(
        f"wrote {out}: each location replaced by an {epsilon:g}-per-km geo-indistinguishable "
        f"report; 95% of reports lie within {mechanism.error_radius(0.05):.3g} km of the truth."
    )


def demo_command(data: Path, out: Path, *, participants: int, seed: int) -> None:
    """Run the crowdsensing walk-through and write its figures and table."""
    from dpkit._cli_progress import working
    from dpkit.walkthroughs.location import run_location_demo, write_location_demo

    with working("running the location demo (about a minute)"):
        result = run_location_demo(data, participants=participants, rng=seed)
    print(f"{result.regions.n} regions; inference error and adversary's error by epsilon (per km):")
    print(result.table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    for path in write_location_demo(result, out):
        print(f"wrote {path}")
