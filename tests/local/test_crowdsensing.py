"""The DP-applications course report's sparse mobile crowdsensing loop (S1, S2, M1, M2, S3), its demo and CLI verbs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from dpkit.cli import app
from dpkit.errors import DataError, InvalidParameterError
from dpkit.local.location import (
    exponential_matrix,
    fit_adjustment,
    grid_regions,
    infer_map,
    quality_loss,
    realised_epsilon,
    sensing_matrix,
    upload,
)
from dpkit.walkthroughs.location import run_location_demo, write_location_demo

REGIONS = grid_regions((0, 0, 50, 50), (5, 5))


def _history(cycles: int = 12, seed: int = 0) -> np.ndarray:
    """Region maps that are a mean plus one shared pattern times a per-cycle weight."""
    rng = np.random.default_rng(seed)
    base = np.linspace(1.0, 3.0, REGIONS.n)
    pattern = np.sin(np.arange(REGIONS.n))
    return base[:, None] + np.outer(pattern, rng.normal(0, 1, cycles))


def test_adjustment_recovers_linear_relations_between_regions() -> None:
    h = _history()
    adj = fit_adjustment(h)
    i, j = 2, 7  # h_j - m_j = (p_j / p_i)(h_i - m_i) exactly
    moved = adj(np.full(h.shape[1], i), np.full(h.shape[1], j), h[i])
    assert np.allclose(moved, h[j])
    assert np.allclose(adj([3], [3], [9.5]), [9.5])  # f_{i->i} is the identity
    raw = quality_loss(h)
    adjusted = quality_loss(h, adj)
    assert np.allclose(np.diag(adjusted), 0)
    # Region 0 never varies (sin 0 = 0): it predicts nothing, so only its row keeps a loss.
    assert adjusted[1:].max() < 1e-9 < raw[1:].max() and adjusted[0, 1:].min() > 0


def test_short_overlaps_keep_the_shift_and_missing_cycles_are_allowed() -> None:
    h = _history(cycles=4)
    h[0, 1:] = np.nan  # region 0 seen in one cycle only
    adj = fit_adjustment(h)
    assert adj.slopes[0, 5] == 0.0 and adj.slopes[5, 0] == 0.0
    assert np.isfinite(quality_loss(h, adj)).all()
    for bad in (
        np.full((REGIONS.n, 3), np.nan),
        np.ones((REGIONS.n, 0)),
        np.full((REGIONS.n, 2), np.inf),
    ):
        with pytest.raises(InvalidParameterError):
            fit_adjustment(bad)


def test_sensing_matrix_is_certified_and_beats_the_exponential_matrix_on_quality() -> None:
    h = _history()
    adj = fit_adjustment(h)
    for adjustment in (None, adj):
        loss = quality_loss(h, adjustment)
        m = sensing_matrix(REGIONS, h, 0.2, adjustment=adjustment)
        assert realised_epsilon(m.matrix, REGIONS.distances) <= 0.2
        assert m.expected_loss(loss=loss) <= exponential_matrix(REGIONS, 0.2).expected_loss(
            loss=loss
        )


def test_upload_and_inference_recover_a_map_in_the_history_span() -> None:
    h = _history()
    adj = fit_adjustment(h)
    truth = h[:, 0] * 0 + (np.linspace(1.0, 3.0, REGIONS.n) + 0.8 * np.sin(np.arange(REGIONS.n)))
    matrix = sensing_matrix(REGIONS, h, 0.3, adjustment=adj)
    rng = np.random.default_rng(1)
    true_regions = rng.integers(0, REGIONS.n, 300)
    reported, sent = upload(matrix, true_regions, truth[true_regions], adjustment=adj, rng=2)
    # Adjusted readings fit the region they are reported under.
    assert np.allclose(sent, truth[reported])
    inferred = infer_map(h, reported, sent, ridge=1e-6)
    assert np.abs(inferred - truth).max() < 0.05
    plain_reported, plain_sent = upload(matrix, true_regions, truth[true_regions], rng=2)
    assert np.array_equal(plain_sent, truth[true_regions])
    unadjusted = infer_map(h, plain_reported, plain_sent)
    assert np.abs(unadjusted - truth).mean() > np.abs(inferred - truth).mean()


def test_bad_uploads_are_refused() -> None:
    h = _history()
    matrix = exponential_matrix(REGIONS, 0.5)
    with pytest.raises(DataError):
        upload(matrix, [0, 1], [1.0])
    with pytest.raises(DataError):
        upload(matrix, [0, 1], [1.0, np.nan])
    with pytest.raises(DataError, match="no uploads"):
        infer_map(h, np.array([], dtype=int), np.array([]))
    with pytest.raises(DataError):
        infer_map(h, np.array([REGIONS.n]), np.array([1.0]))
    with pytest.raises(InvalidParameterError):
        sensing_matrix(REGIONS, h[:-1], 0.5)


def _synthetic_california(path: Path, rows: int = 3_000) -> Path:
    rng = np.random.default_rng(0)
    lat = rng.uniform(32.6, 41.9, rows)
    lon = rng.uniform(-124.3, -114.2, rows)
    age = rng.integers(1, 53, rows)
    value = 1 + (lat - 32) / 5 + age / 40 + rng.normal(0, 0.2, rows)
    pd.DataFrame({"Latitude": lat, "Longitude": lon, "HouseAge": age, "MedHouseVal": value}).to_csv(
        path, index=False
    )
    return path


def test_demo_runs_end_to_end_and_writes_its_figures(tmp_path: Path) -> None:
    data = _synthetic_california(tmp_path / "ca.csv")
    result = run_location_demo(
        data, shape=(4, 4), epsilons=(0.01, 0.05), repeats=1, participants=150
    )
    table = result.table
    assert (
        list(table["mechanism"])
        == ["no obfuscation"] + ["optimal", "exponential", "planar Laplace"] * 2
    )
    assert (table["error_adjusted"] > 0).all()
    private = table[table["mechanism"] != "no obfuscation"]
    for _, group in private.groupby("mechanism"):  # less privacy, a closer adversary
        assert group["adversary_km"].iloc[0] > group["adversary_km"].iloc[1]
    paths = write_location_demo(result, tmp_path / "out")
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)
    assert "| mechanism |" in (tmp_path / "out" / "location_table.md").read_text()


def test_cli_verbs(tmp_path: Path) -> None:
    runner = CliRunner()
    data = _synthetic_california(tmp_path / "ca.csv", rows=500)
    out = tmp_path / "reports.csv"
    result = runner.invoke(app, ["location", "obfuscate", str(data), "--out", str(out), "--epsilon", "0.5",
                                 "--area", "32.5", "-124.5", "42", "-114", "--keep", "HouseAge", "--seed", "1"])  # fmt: skip
    assert result.exit_code == 0, result.output
    reports = pd.read_csv(out)
    assert list(reports.columns) == ["HouseAge", "Latitude", "Longitude"] and len(reports) == 500
    assert (
        reports["Latitude"].between(32.5, 42).all()
        and reports["Longitude"].between(-124.5, -114).all()
    )
    assert "95% of reports lie within" in result.output
    outside = runner.invoke(app, ["location", "obfuscate", str(data), "--out", str(out), "--epsilon", "0.5",
                                  "--area", "35", "-124.5", "42", "-114"])  # fmt: skip
    assert outside.exit_code == 2 and "outside the declared area" in outside.output
    refused = runner.invoke(
        app, ["location", "demo", "--data", str(data), "--out", str(tmp_path / "d")]
    )
    assert refused.exit_code == 2 and "--public-data" in refused.output
