"""The resource settings of the configuration file: defaults, the example, and errors by line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpkit.service.config import ConfigError, Limits, parse_config

TEXT = """\
[service]
store = "state.db"
max_work_seconds = 5
max_answer_bytes = 100000
workers = 2
max_waiting = 0

[datasets.patients]
source = "patients.csv"
types = { age = "DOUBLE" }
rows = 2000

[datasets.patients.columns.age]
bounds = [0, 120]
"""


@pytest.fixture
def base(tmp_path: Path) -> Path:
    (tmp_path / "patients.csv").write_text("age\n30\n40\n")
    return tmp_path


def test_the_settings_parse(base: Path) -> None:
    cfg = parse_config(TEXT, base=base, name="service.toml")
    assert cfg.limits.max_work_seconds == 5.0 and cfg.limits.max_answer_bytes == 100_000
    assert cfg.limits.workers == 2 and cfg.limits.max_waiting == 0
    assert cfg.datasets["patients"].rows == 2000


def test_the_defaults_are_finite(base: Path) -> None:
    text = "\n".join(
        line for line in TEXT.splitlines() if not re.match(r"(max_|workers|rows)", line)
    )
    cfg = parse_config(text, base=base, name="service.toml")
    assert cfg.limits == Limits() and cfg.datasets["patients"].rows is None
    assert 0 < cfg.limits.max_work_seconds < cfg.limits.query_timeout_seconds
    assert cfg.limits.workers >= 1 and cfg.limits.max_answer_bytes < 2**30


@pytest.mark.parametrize(
    ("edit", "line", "hint"),
    [
        (("max_work_seconds = 5", "max_work_seconds = 0"), 3, "max_work_seconds must be"),
        (("max_work_seconds = 5", 'max_work_seconds = "5"'), 3, "max_work_seconds must be"),
        (("max_answer_bytes = 100000", "max_answer_bytes = 10"), 4, "max_answer_bytes must"),
        (("workers = 2", "workers = 0"), 5, "workers must be an integer >= 1"),
        (("max_waiting = 0", "max_waiting = -1"), 6, "max_waiting must be"),
        (("rows = 2000", "rows = 0"), 11, "rows must be an integer >= 1"),
        (("rows = 2000", "rows = 1.5"), 11, "rows must be an integer"),
    ],
)
def test_every_mistake_names_its_line(
    base: Path, edit: tuple[str, str], line: int, hint: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(TEXT.replace(*edit), base=base, name="service.toml")
    message = str(err.value)
    assert message.startswith(f"service.toml, line {line}: "), message
    assert hint in message
