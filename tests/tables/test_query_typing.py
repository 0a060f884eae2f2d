"""Static types of the query methods (issue 28): mypy reads Release without group_by.

Runs mypy (the project's config) on snippets written to tmp_path. The snippet
calls every registered kind, so a kind added without a static declaration fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dpkit.tables.kinds import REGISTRY

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.filterwarnings("ignore")


HEADER = (
    "from dpkit import Session\n"
    "from dpkit.client import RemoteDataset\n"
    "from dpkit.release import Release\n"
    "from dpkit.tables.results import GroupedRelease\n\n"
    "def use(s: Session, r: RemoteDataset) -> None:\n"
)


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """mypy's messages per snippet: one run for every snippet (uses the project's cache)."""
    folder = tmp_path_factory.mktemp("typing")
    for name, body in SNIPPETS.items():
        lines = "".join(f"    {line}\n" for line in body().splitlines())
        (folder / f"{name}.py").write_text(HEADER + lines)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            *(str(folder / f"{name}.py") for name in SNIPPETS),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 2: mypy itself failed
    return {
        name: "\n".join(line for line in done.stdout.splitlines() if f"{name}.py:" in line)
        for name in SNIPPETS
    }


def _call(kind: str, receiver: str = "s", grouped: bool = False) -> str:
    args = {"quantile": '"x", 0.5, ', "histogram2d": '"x", "y", '}.get(kind, '"x", ')
    group = ", group_by='g'" if grouped else ""
    return f"{receiver}.{kind}({args}epsilon=0.1{group})"


def _right() -> str:
    lines = ["x: float = s.count(epsilon=0.1).value"]
    for kind in REGISTRY:
        for receiver in ("s", "r"):
            lines.append(f"a_{kind}_{receiver}: Release = {_call(kind, receiver)}")
            if kind != "histogram2d":
                call = _call(kind, receiver, grouped=True)
                lines.append(f"g_{kind}_{receiver}: GroupedRelease = {call}")
    lines.append("maybe: str | None = None")
    lines.append("either: Release | GroupedRelease = s.mean('x', epsilon=0.1, group_by=maybe)")
    return "\n".join(lines)


def _wrong() -> str:
    return (
        "g: Release = s.count(epsilon=0.1, group_by='sex')\n"
        "y: float = s.mean('x', epsilon=0.1, group_by='g').value\n"
        "s.count()\n"
    )


SNIPPETS = {"right": _right, "wrong": _wrong}


def test_a_query_without_group_by_is_a_release_and_with_it_a_grouped_release(
    mypy_output: dict[str, str],
) -> None:
    assert mypy_output["right"] == ""


def test_a_wrong_use_is_a_type_error(mypy_output: dict[str, str]) -> None:
    out = mypy_output["wrong"]
    assert 'Incompatible types in assignment (expression has type "GroupedRelease"' in out
    assert '"dict[Any, Any]", variable has type "float"' in out
    assert "wrong.py:9" in out  # the call without epsilon
    assert out.count("error:") == 3, out
