"""The reproduction script in quick mode (generated data, a few epsilons): runs, renders, plots."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpkit.reproduce import regression_paper as rp
from dpkit.reproduce._cli import reproduce_regression_paper


def test_quick_run_renders_table_and_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = rp.main(
        None,
        tmp_path,
        quick=True,
        progress=False,
        methods=["dp_mean", "python_forest", "total_mean_forest", "dpkit_forest"],
        epsilons=(1.0, 8.0),
        folds=2,
        figure2_trees=(1, 3),
        figure2_methods=("total_mean_forest",),
    )
    assert set(results.table) == {"dp_mean", "python_forest", "total_mean_forest", "dpkit_forest"}
    assert set(results.table["dpkit_forest"]) == {1.0, 8.0}
    assert set(results.trees["total_mean_forest"]) == {1, 3}
    assert "dpkit_forest" in results.trees_reference
    for key, scores in results.table.items():
        for mae, std in scores.values():
            assert 0 < mae < 1 and std >= 0, key
    # On generated data the paper's columns and floors are not shown.
    assert not results.paper_data and rp.check_floors(results) == []
    for name in (
        "regression_paper_table.md",
        "regression_paper_results.json",
        "regression_paper_fig1.png",
        "regression_paper_fig2.png",
    ):
        assert (tmp_path / name).stat().st_size > 0
    assert "DPMean" in capsys.readouterr().out


def test_paper_table_constants_match_the_document() -> None:
    assert rp.PAPER_TABLE3[0.25][1] == (0.1915, 0.0309)
    assert rp.PAPER_BEST_DP[64.0] == 0.1151
    assert rp.PAPER_BEST_DP[8.0] == 0.1402


def test_cli_function_refuses_missing_data(tmp_path: Path) -> None:
    from dpkit.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="does not exist"):
        reproduce_regression_paper(tmp_path / "nope.csv", None)


def test_results_round_trip_through_json() -> None:
    results = rp.Results(
        epsilons=[1.0, 2.0],
        folds=3,
        paper_data=True,
        table={
            "dp_mean": {1.0: (0.19, 0.03), 2.0: (0.19, 0.03)},
            "dpkit_forest": {1.0: (0.13, 0.02)},
        },
        trees={"python_forest": {1: (0.12, 0.01)}},
        trees_reference={"dpkit_forest": (0.118, 0.02)},
    )
    again = rp.Results.from_json(results.to_json())
    assert again.table == results.table and again.trees == results.trees
    assert again.trees_reference == results.trees_reference
    report = rp.format_report(again)
    assert "0.1916 (0.0309) / 0.1900 (0.0300)" in report  # paper's DPMean at eps=2 beside ours
    assert "| 1 | 0.2073 |" in report  # the paper's best DP at eps=1
