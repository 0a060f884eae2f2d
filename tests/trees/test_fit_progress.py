"""Large fits show a bar on stderr when it is a terminal; stdout stays empty; small fits are silent."""

from __future__ import annotations

import numpy as np
import pytest
from rich.console import Console

from dpkit.trees import DPGradientBoostingClassifier
from dpkit.trees.engine import _feedback


def _fit(max_iter: int) -> None:
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (120, 5))
    y = (X[:, 0] > 0.5).astype(int)
    DPGradientBoostingClassifier(
        epsilon=1.0, bounds=(0, 1), classes=[0, 1], max_iter=max_iter, random_state=0
    ).fit(X, y)


def _terminal(monkeypatch: pytest.MonkeyPatch, is_terminal: bool) -> None:
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: is_terminal))
    monkeypatch.setattr(_feedback, "PROGRESS_MIN_WORK", 50)  # keep the test fast: 10 x 5 is large


def test_a_large_fit_shows_its_rounds_on_a_terminal_stderr_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _terminal(monkeypatch, True)
    _fit(max_iter=10)  # 10 rounds x 5 features
    out, err = capsys.readouterr()
    assert out == ""
    assert "DPGradientBoostingClassifier.fit: boosting rounds" in err


def test_a_large_fit_is_silent_when_stderr_is_not_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _terminal(monkeypatch, False)
    _fit(max_iter=10)
    assert capsys.readouterr() == ("", "")


def test_a_small_fit_is_silent_even_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _terminal(monkeypatch, True)
    _fit(max_iter=9)  # 9 x 5 < 50
    assert capsys.readouterr() == ("", "")


def test_the_bar_counts_every_round(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, str, int]] = []

    from contextlib import contextmanager

    @contextmanager
    def fake_steps(total: int, message: str, *, transient: bool = False):  # type: ignore[no-untyped-def]
        advanced = [0]
        yield lambda n=1: advanced.__setitem__(0, advanced[0] + n)
        seen.append((total, message, advanced[0]))

    monkeypatch.setattr(_feedback, "steps", fake_steps)
    _fit(max_iter=_feedback.PROGRESS_MIN_WORK // 5)  # the real threshold: 100 rounds x 5
    assert seen == [(100, "DPGradientBoostingClassifier.fit: boosting rounds", 100)]
