"""The DPBench grid runner in pieces (benchmarks/histograms_dpbench.py --jsonl / --report).

A grid run in several invocations, interrupted mid-write, must hold every run
once and give the numbers of the grid run at once.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "histograms_dpbench.py"


@pytest.fixture(scope="module")
def dpbench() -> Any:
    spec = importlib.util.spec_from_file_location("histograms_dpbench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    shape = np.random.default_rng(0).dirichlet(np.ones(64))
    module.shapes = lambda data_dir, domain: {"toy": shape, "other": shape[::-1].copy()}
    return module


def _fill(dpbench: Any, path: Path, reps: int, workloads: tuple[str, ...]) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return int(
            dpbench.run_pieces(
                Path("."), 64, (500,), reps, ["toy"], (1.0,), workloads, path, chunk=2
            )
        )


def test_pieces_resume_and_equal_the_grid_run_at_once(dpbench: Any, tmp_path: Path) -> None:
    path = tmp_path / "grid.jsonl"
    assert _fill(dpbench, path, 3, ("ranges",)) == 3  # runs 0..2 of one cell
    with path.open("a") as out:
        out.write('{"domain": 64, "shape": "toy", "runs": [3')  # a write cut short
    assert _fill(dpbench, path, 5, ("ranges", "prefixes")) == 2 + 5  # only what is missing
    assert _fill(dpbench, path, 5, ("ranges", "prefixes")) == 0
    merged = dpbench.merge_records(dpbench.read_records(path))
    cell = merged[(64, "toy", 500, 1.0, "ranges")]
    assert cell["runs"] == [0, 1, 2, 3, 4]
    shape = dpbench.shapes(None, 64)["toy"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        at_once = dpbench.run_cell(shape, 64, 500, 1.0, "ranges", [0, 1, 2, 3, 4])
    assert cell["errors"] == at_once["errors"]
    assert cell["picks"] == at_once["picks"]
    lines = [json.loads(x) for x in path.read_text().splitlines()[:1]]
    assert lines[0]["runs"] == [0, 1]  # chunks of 2


def test_report_counts_what_is_in_and_replaces_its_section(dpbench: Any, tmp_path: Path) -> None:
    path = tmp_path / "grid.jsonl"
    _fill(dpbench, path, 2, ("ranges",))
    selection = (("toy", "other"), (500,), (1.0,), ("ranges", "prefixes"))
    text = dpbench.report(path, 64, 2, 50.0, selection)
    assert "1 of 4 cells in (1 with all 2 runs); 2 of 8 runs" in text
    assert "| toy | 5e+02 | 1 | ranges | 2 |" in text
    out = tmp_path / "results.md"
    out.write_text("| the 1,024 table |\n")
    dpbench.write_section(out, 64, text)
    dpbench.write_section(out, 64, text.replace("1 of 4", "one of four"))
    written = out.read_text()
    assert written.startswith("| the 1,024 table |\n")
    assert written.count("begin -->") == 1 and "one of four" in written
