"""The service's configuration file: a good file parses; every mistake names its line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpkit.service.config import ConfigError, load_config, parse_config

HASH = "Ab3dE5gH:" + "0" * 64

GOOD = f"""\
[service]
store = "state.db"
admin_key_hash = "{HASH}"
requests_per_minute = 120

[datasets.patients]
description = "demo"
source = "patients.csv"
types = {{ age = "DOUBLE", district = "VARCHAR" }}

[datasets.patients.columns.age]
bounds = [0, 120]

[datasets.patients.columns.district]
domain = ["A", "B"]

[analysts.alice]

[analysts.bob]
key_hash = "{HASH}"

[[grants]]
analyst = "alice"
dataset = "patients"
epsilon = 1.0
delta = 1e-6
"""


@pytest.fixture
def base(tmp_path: Path) -> Path:
    (tmp_path / "patients.csv").write_text("age,district\n30,A\n40,B\n")
    return tmp_path


def _line(message: str) -> int:
    found = re.search(r"line (\d+)", message)
    assert found, message
    return int(found.group(1))


def test_a_good_file_parses(base: Path) -> None:
    cfg = parse_config(GOOD, base=base)
    assert cfg.store == f"sqlite:///{(base / 'state.db').resolve()}"
    assert cfg.datasets["patients"].schema.columns["age"].bounds == (0, 120)
    assert cfg.datasets["patients"].format == "csv"
    assert cfg.analysts == {"alice": None, "bob": HASH}
    assert cfg.grants[0].epsilon == 1.0 and cfg.grants[0].delta == 1e-6
    assert cfg.limits.requests_per_minute == 120
    assert cfg.datasets["patients"].line == 6


def test_the_example_in_the_repository_parses(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "service.toml"
    text = example.read_text()
    for name in re.findall(r'source = "([^"]+\.csv)"', text):
        (tmp_path / name).write_text("age,weight,condition,district\n30,70,true,Ba Dinh\n")
    for name in re.findall(r'schema = "([^"]+)"', text):
        (tmp_path / name).write_text((example.parent / name).read_text())
    cfg = parse_config(text, base=tmp_path, name="service.toml")
    assert cfg.datasets and cfg.grants


@pytest.mark.parametrize(
    ("edit", "line", "hint"),
    [
        (('source = "patients.csv"', 'source = "missing.csv"'), 8, "does not exist"),
        (('analyst = "alice"', 'analyst = "carol"'), 23, "[analysts.NAME]"),
        (('dataset = "patients"', 'dataset = "nope"'), 24, "unknown dataset"),
        (("epsilon = 1.0", "epsilon = -1.0"), 25, "epsilon must be"),
        (("delta = 1e-6", "delta = 1.5"), 26, "delta must be below 1"),
        (("requests_per_minute = 120", "requests_per_minute = 0"), 4, "requests_per_minute"),
        (("requests_per_minute = 120", "colour = 1"), 4, "unknown setting"),
        (("bounds = [0, 120]", "bounds = [120, 0]"), 6, "bounds"),
        ((f'key_hash = "{HASH}"', 'key_hash = "plain-text-key"'), 20, "hash-key"),
    ],
)
def test_every_mistake_names_its_line(
    base: Path, edit: tuple[str, str], line: int, hint: str
) -> None:
    text = GOOD.replace(*edit)
    with pytest.raises(ConfigError) as err:
        parse_config(text, base=base, name="service.toml")
    message = str(err.value)
    assert message.startswith("service.toml"), message
    assert hint in message
    assert _line(message) == line


def test_toml_syntax_errors_carry_toml_line(base: Path) -> None:
    with pytest.raises(ConfigError, match="line 2"):
        parse_config("[service]\nstore = \n", base=base)


def test_schema_column_without_declared_type_is_refused(base: Path) -> None:
    text = GOOD.replace(
        'types = { age = "DOUBLE", district = "VARCHAR" }', 'types = { age = "DOUBLE" }'
    )
    with pytest.raises(ConfigError, match="district") as err:
        parse_config(text, base=base)
    assert _line(str(err.value)) == 9


def test_missing_file_and_no_datasets(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no configuration file"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="no datasets"):
        parse_config("[service]\n", base=tmp_path)


def test_a_second_grant_for_the_same_pair_is_refused(base: Path) -> None:
    text = GOOD + '\n[[grants]]\nanalyst = "alice"\ndataset = "patients"\nepsilon = 2.0\n'
    with pytest.raises(ConfigError, match="second grant") as err:
        parse_config(text, base=base)
    assert _line(str(err.value)) == 28


def test_grants_above_the_dataset_cap_are_refused(base: Path) -> None:
    capped = GOOD.replace('description = "demo"', 'description = "demo"\nmax_epsilon = 0.5')
    with pytest.raises(ConfigError, match="cap") as err:
        parse_config(capped, base=base)
    assert _line(str(err.value)) == 23  # the [[grants]] table that passes it
    fits = GOOD.replace(
        'description = "demo"', 'description = "demo"\nmax_epsilon = 2\nmax_delta = 1e-5'
    )
    assert parse_config(fits, base=base).datasets["patients"].max_epsilon == 2
