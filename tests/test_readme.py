"""The README's tour runs as written: every ```python block, in order, in a temp dir."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.parametrize("doc", ["README.md"])
def test_the_python_blocks_run_as_written(doc: str, tmp_path: Path, monkeypatch) -> None:
    blocks = _python_blocks(ROOT / doc)
    assert blocks, f"{doc} has no python block"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for code in blocks:
        exec(compile(code, f"{doc} block", "exec"), namespace)  # our own docs
    assert (tmp_path / "patients.ledger").exists()
