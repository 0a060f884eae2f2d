"""docs/architecture.md's worked examples run as written: a new query kind, publisher and criterion.

Each ``python`` block is executed in order in one namespace (the page builds on
its earlier blocks); what the blocks register is removed afterwards so that no
other test sees it.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_page_has_the_three_worked_examples() -> None:
    text = DOC.read_text(encoding="utf-8")
    for heading in (
        "How to add a query kind",
        "How to add a histogram publisher",
        "How to add an estimator",
    ):
        assert f"## {heading}" in text
    assert len(_blocks()) == 3


def test_the_worked_examples_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpkit.histograms import methods
    from dpkit.tables import kinds
    from dpkit.trees import CRITERIA

    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "architecture_doc"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the examples' seeded sources warn, as they should
            for code in _blocks():
                exec(compile(code, str(DOC), "exec", dont_inherit=True), namespace)  # our own docs
    finally:
        if "rows_in" in kinds.REGISTRY:
            kinds.unregister("rows_in")
        if "clipped" in methods.PUBLISHERS_1D:
            methods.unregister("clipped")
        if "misclassified" in CRITERIA.accepted:
            CRITERIA.unregister("misclassified")
    # what each block registered was really used
    assert namespace["answer"].privacy.mechanisms == ("geometric",)  # type: ignore[attr-defined]
    assert namespace["model"].criterion == "misclassified"  # type: ignore[attr-defined]
    assert "rows_in" not in kinds.REGISTRY and "clipped" not in methods.PUBLISHERS_1D
