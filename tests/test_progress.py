"""Long work shows progress on stderr, only when stderr is a terminal; stdout carries only results."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from dpkit import _cli_progress, _progress
from dpkit._progress import steps, working
from dpkit.local.location.matrices import optimal_matrix
from dpkit.local.location.regions import grid_regions
from dpkit.reproduce import regression_paper as rp

_SMALL = {
    "methods": ["dp_mean"],
    "epsilons": (1.0,),
    "folds": 2,
    "figure2_methods": (),
}


def _bar_drawn(text: str) -> bool:
    # Rich's bar: the task description, "n/m" and box-drawing characters.
    return "dp_mean eps=1" in text or "━" in text or "1/1" in text


def test_reproduce_draws_its_bar_on_a_terminal_stderr_not_on_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # both streams look like terminals to Rich
    rp.run(None, quick=True, progress=True, **_SMALL)  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert not _bar_drawn(out)
    assert _bar_drawn(err)


def test_reproduce_draws_no_bar_when_stderr_is_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("TTY_COMPATIBLE", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    rp.main(None, tmp_path, quick=True, progress=True, **_SMALL)
    out, err = capsys.readouterr()
    assert "DPMean" in out and not _bar_drawn(out)
    assert err == ""


def test_the_location_demo_shows_it_is_working_on_stderr_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The demo runs about a minute: a terminal sees a spinner on stderr; stdout the table alone."""
    import pandas as pd

    from dpkit.local.location._cli import demo_command
    from dpkit.walkthroughs import location

    fake = SimpleNamespace(regions=SimpleNamespace(n=4), table=pd.DataFrame({"epsilon": [0.5]}))
    monkeypatch.setattr(location, "run_location_demo", lambda *a, **k: fake)
    monkeypatch.setattr(location, "write_location_demo", lambda *a, **k: [])
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    demo_command(tmp_path / "ca.csv", tmp_path, participants=10, seed=0)
    out, err = capsys.readouterr()
    assert "running the location demo" in err
    assert "running the location demo" not in out and "4 regions" in out
    monkeypatch.setenv("TTY_COMPATIBLE", "0")  # not a terminal: nothing on stderr
    demo_command(tmp_path / "ca.csv", tmp_path, participants=10, seed=0)
    assert capsys.readouterr().err == ""


def test_tqdm_is_not_a_dependency() -> None:
    """It was declared and never imported; progress is drawn with Rich."""
    import tomllib

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    assert not any(d.startswith("tqdm") for d in dependencies)


# The shared helpers (dpkit._progress) and the LP solves that use them. A fake terminal
# (Rich's Console.is_terminal patched to True) stands in for a TTY.


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr looks like a wide terminal to Rich."""
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    monkeypatch.setenv("COLUMNS", "200")


def test_working_shows_a_spinner_on_a_terminal_stderr_only(
    terminal: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with working("crunching public numbers"):
        pass
    out, err = capsys.readouterr()
    assert "crunching public numbers" in err
    assert out == ""


def test_nothing_is_shown_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with working("crunching public numbers"), steps(3, "counting") as advance:
        advance(3)
    assert capsys.readouterr() == ("", "")


def test_steps_counts_on_a_terminal(terminal: None, capsys: pytest.CaptureFixture[str]) -> None:
    with steps(4, "fitting trees") as advance:
        for _ in range(4):
            advance(1)
    out, err = capsys.readouterr()
    assert "fitting trees" in err
    assert "4/4" in err
    assert out == ""


def test_displays_nest_instead_of_failing(
    terminal: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Rich allows one live display at a time: a nested one would raise LiveError.
    with working("the outer command"):
        with steps(2, "an inner loop") as advance:
            advance(2)
        with working("an inner solve", transient=True):
            pass
    out, err = capsys.readouterr()
    assert "the outer command" in err and "an inner loop" in err and "an inner solve" in err
    assert out == ""
    assert _progress._active == []


def test_the_cli_module_re_exports_the_helpers() -> None:
    assert _cli_progress.working is working
    assert _cli_progress.steps is steps


@pytest.mark.parametrize("method", ["mixture", "constraints"])
def test_an_lp_solve_shows_a_spinner_on_stderr(
    method: str, terminal: None, capsys: pytest.CaptureFixture[str]
) -> None:
    regions = grid_regions((0, 0, 3, 3), (3, 3))
    optimal_matrix(regions, 1.0, method=method)
    out, err = capsys.readouterr()
    assert f"solving the optimal obfuscation LP ({method}, 9 regions)" in err
    assert out == ""


def test_an_lp_solve_is_silent_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    optimal_matrix(grid_regions((0, 0, 3, 3), (3, 3)), 1.0)
    assert capsys.readouterr() == ("", "")


def _audit_recipe() -> list[str]:
    """The pytest arguments of the Makefile's ``audit`` target."""
    import shlex

    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    recipe = makefile.split("\naudit:", 1)[1].split("\n")[1]
    args = shlex.split(recipe)
    return args[args.index("pytest") + 1 :]


def test_make_audit_names_each_audit_as_it_runs_and_how_long_it_took(tmp_path: Path) -> None:
    """``make audit`` runs for minutes: a user sees which audit runs, how far along, and durations."""
    import subprocess
    import sys

    args = _audit_recipe()
    assert "-q" not in args and args[-1] == "tests"
    (tmp_path / "test_fake_audit.py").write_text(
        "import time\nimport pytest\n\n\n@pytest.mark.audit\n"
        "def test_a_slow_audit():\n    print('lower bound 0.9')\n    time.sleep(1.05)\n\n\n"
        "def test_not_an_audit():\n    raise AssertionError\n"
    )
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(pyproject),
            "-p",
            "no:cacheprovider",
            *args[:-1],
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "test_fake_audit.py::test_a_slow_audit lower bound 0.9\nPASSED" in run.stdout
    assert "[100%]" in run.stdout
    assert "slowest durations" in run.stdout and "call     test_fake_audit.py" in run.stdout
