"""The publisher registry (dpkit.histograms.methods): one list, one spelling, one contract.

* every registered publisher states its privacy argument (neighbouring relation and
  sensitivity) in its docstring, takes exactly the options the registry lists, runs on a small
  count vector or grid, charges exactly epsilon once and returns a PublishedHistogram or
  PublishedGrid;
* lookups by a wrong name fail before anything runs, with the names and the right spelling;
* the registry is what the Session, the service and the ``dpkit histogram`` CLI accept, and
  ``auto``/``auto2d`` only ever choose registered publishers;
* the worked example of ``docs/architecture.md`` ("how to add a publisher") runs: a toy
  publisher registered by a fixture is reachable through the registry and ``Session.histogram``.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.typing import ArrayLike

from dpkit import histograms
from dpkit.accounting import Accountant, Budget
from dpkit.errors import InvalidParameterError
from dpkit.histograms import methods
from dpkit.histograms.grids import AUTO2D_CHOICES
from dpkit.histograms.methods import PUBLISHERS_1D, PUBLISHERS_2D, Publisher, publisher
from dpkit.histograms.select import AUTO_CHOICES

ALL = [*PUBLISHERS_1D.values(), *PUBLISHERS_2D.values()]
COMMON = {"counts", "epsilon", "rng", "accountant"}
#: Options some publishers need to run (public bounds), by name.
NEEDED: dict[str, dict[str, Any]] = {"structure_first": {"max_count": 50}}


def test_one_spelling_in_display_order() -> None:
    assert list(PUBLISHERS_1D) == [
        "laplace",
        "hierarchical",
        "noise_first",
        "structure_first",
        "hb",
        "ahp",
        "dawa",
        "matrix_mechanism",
        "auto",
    ]
    assert list(PUBLISHERS_2D) == [
        "auto2d", "agrid", "ugrid", "dawa2d", "matrix_mechanism2d", "laplace2d"
    ]  # fmt: skip
    for dims, table in ((1, PUBLISHERS_1D), (2, PUBLISHERS_2D)):
        for name, entry in table.items():
            assert entry.name == name and entry.dims == dims
            assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
            assert entry.summary and "\n" not in entry.summary
    assert not set(PUBLISHERS_1D) & set(PUBLISHERS_2D)
    with pytest.raises(TypeError):
        PUBLISHERS_1D["mine"] = ALL[0]  # type: ignore[index]  # read-only
    assert histograms.publisher is publisher and histograms.methods is methods


@pytest.mark.parametrize("entry", ALL, ids=lambda p: p.name)
def test_every_publisher_states_its_privacy_argument(entry: Publisher) -> None:
    doc = inspect.getdoc(entry.publish) or ""
    privacy = doc[doc.find("Privacy:") :]
    assert "Privacy:" in doc and "epsilon-DP" in privacy, entry.name
    assert re.search(r"one row|add/remove|adding or removing", privacy), entry.name  # relation
    assert "sensitivity" in privacy, entry.name


@pytest.mark.parametrize("entry", ALL, ids=lambda p: p.name)
def test_options_are_the_signature(entry: Publisher) -> None:
    params = inspect.signature(entry.publish).parameters
    assert list(params)[:2] == ["counts", "epsilon"]
    keyword_only = {n for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert {"rng", "accountant"} <= keyword_only
    assert entry.options == set(params) - COMMON


@pytest.mark.parametrize("entry", ALL, ids=lambda p: p.name)
def test_every_publisher_runs_and_charges_epsilon_once(entry: Publisher) -> None:
    rng = np.random.default_rng(7)
    shape = (24,) if entry.dims == 1 else (8, 6)
    counts = rng.integers(0, 20, shape)
    accountant = Accountant(Budget(5.0))
    out = entry.publish(counts, 0.5, rng=1, accountant=accountant, **NEEDED.get(entry.name, {}))
    kind = histograms.PublishedHistogram if entry.dims == 1 else histograms.PublishedGrid
    assert isinstance(out, kind)
    assert np.shape(out.estimates) == shape and np.all(np.isfinite(out.estimates))
    assert out.epsilon == 0.5 and accountant.spent.epsilon == pytest.approx(0.5)
    assert len(accountant.history) == 1


def test_lookups_fail_clearly_before_anything_runs() -> None:
    assert publisher("dawa").publish is histograms.dawa
    assert publisher("agrid", dims=2).publish is histograms.agrid
    names = "'laplace', 'hierarchical', 'noise_first'"
    with pytest.raises(InvalidParameterError, match=f"write 'noise_first'.*{names}"):
        publisher("noise-first")
    with pytest.raises(InvalidParameterError, match="'agrid' is a 2-D method"):
        publisher("agrid")
    with pytest.raises(InvalidParameterError, match=r"'dawa' is a 1-D method.*'auto2d'"):
        publisher("dawa", dims=2)
    for bad in ("nope", "", None, 3):
        with pytest.raises(InvalidParameterError, match="choose one of"):
            publisher(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="dims"):
        publisher("laplace", dims=3)


def test_auto_rules_choose_registered_publishers() -> None:
    chosen = {
        histograms.choose_method(n, eps, records, "ranges")
        for n in (1, 64, 4096)
        for eps in (0.01, 1.0, 100.0)
        for records in (None, 1.0, 1e9)
    }
    assert chosen == set(AUTO_CHOICES) and chosen <= set(PUBLISHERS_1D)
    grid = {
        histograms.choose_grid_method(cells, eps, records)
        for cells in (1, 64, 4096)
        for eps in (0.01, 100.0)
        for records in (1.0, 1e9)
    }
    assert grid == set(AUTO2D_CHOICES) and grid <= set(PUBLISHERS_2D)


# ------------------------------------------------------------ the worked example ("add one")


def clipped(
    counts: ArrayLike,
    epsilon: float,
    *,
    rng: object = None,
    accountant: Any = None,
    edges: ArrayLike | None = None,
) -> histograms.PublishedHistogram:
    """Laplace counts with the negative ones set to 0.

    Privacy: epsilon-DP for add/remove one row: one unit count changes by 1 (l1
    sensitivity 1), as for :func:`dpkit.histograms.laplace`; clipping is post-processing.
    """
    published = histograms.laplace(counts, epsilon, rng=rng, accountant=accountant, edges=edges)
    return dataclasses.replace(published, estimates=np.maximum(published.estimates, 0.0))


CLIPPED = Publisher("clipped", 1, __name__, frozenset({"edges"}), "Laplace, negatives set to 0")


@pytest.fixture
def toy() -> Iterator[Publisher]:
    """``clipped`` registered as a 1-D publisher for this test only (the one registry line)."""
    entry = methods.register(CLIPPED)
    try:
        yield entry
    finally:
        methods.unregister(CLIPPED.name)


def test_a_new_publisher_is_one_function_and_one_line(toy: Publisher) -> None:
    assert list(PUBLISHERS_1D)[-1] == "clipped" and publisher("clipped") is toy
    counts = np.array([0, 0, 5, 9, 0, 1])
    out = publisher("clipped").publish(counts, 1.0, rng=3)
    reference = histograms.laplace(counts, 1.0, rng=3)
    assert np.array_equal(out.estimates, np.maximum(reference.estimates, 0.0))
    test_every_publisher_states_its_privacy_argument(toy)
    test_options_are_the_signature(toy)
    test_every_publisher_runs_and_charges_epsilon_once(toy)


def _session() -> Any:
    from dpkit import Session

    gen = np.random.default_rng(0)
    frame = pd.DataFrame({"x": gen.uniform(0, 100, 300), "y": gen.uniform(0, 100, 300)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Session.from_pandas(frame, types={"x": "DOUBLE", "y": "DOUBLE"}, epsilon=100.0)


def test_session_runs_a_registered_toy_publisher() -> None:
    session = _session()  # the tables are loaded before the publisher is registered
    session.histogram("x", epsilon=1.0, bins=8, bounds=(0, 100), method="laplace")
    methods.register(CLIPPED)
    try:
        result = session.histogram("x", epsilon=1.0, bins=8, bounds=(0, 100), method="clipped")
    finally:
        methods.unregister(CLIPPED.name)
    assert np.all(np.asarray(result.value) >= 0) and len(result.value) == 8
    with pytest.raises(InvalidParameterError, match="method must be one of"):
        session.histogram("x", epsilon=1.0, bins=8, bounds=(0, 100), method="clipped")


def test_register_refuses_a_taken_or_misspelled_name() -> None:
    for bad in ("laplace", "noise-first", "agrid"):
        with pytest.raises(InvalidParameterError, match="new snake_case name"):
            methods.register(Publisher(bad, 1, __name__, frozenset(), "x"))
    with pytest.raises(InvalidParameterError, match="built-in"):
        methods.unregister("laplace")


# ---------------------------------------------- the registry is what every front door accepts


def test_session_accepts_every_registered_name_and_no_other() -> None:
    s = _session()
    for name in PUBLISHERS_1D:
        result = s.histogram(
            "x", epsilon=0.5, bins=8, bounds=(0, 100), method=name, **NEEDED.get(name, {})
        )
        assert len(result.value) == 8, name
    for name in PUBLISHERS_2D:
        grid = s.histogram2d(
            "x", "y", epsilon=0.5, bins=4, bounds=((0, 100), (0, 100)), method=name
        )
        assert np.shape(grid.value) == (4, 4), name
    for wrong in ("noise-first", "agrid", "nope"):
        with pytest.raises(InvalidParameterError):
            s.histogram("x", epsilon=0.5, bins=8, bounds=(0, 100), method=wrong, max_count=5)
    for wrong in ("dawa", "Auto2d", "nope"):
        with pytest.raises(InvalidParameterError):
            s.histogram2d("x", "y", epsilon=0.5, bins=4, bounds=((0, 100), (0, 100)), method=wrong)


def test_the_service_accepts_every_registered_name_and_no_other(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from dpkit.service.app import create_app
    from dpkit.service.demo import build_demo
    from dpkit.tables.specs import QuerySpec

    config, keys = build_demo(tmp_path, rows=200)
    headers = {"Authorization": f"Bearer {keys['alice']}"}

    def dry_run(kind: str, name: str, **params: Any) -> int:
        spec = QuerySpec(kind, "age", epsilon=0.1, method=name, **params).to_dict()
        response = client.post(
            "/api/v1/datasets/patients/dry-run", json={"query": spec}, headers=headers
        )
        return int(response.status_code)

    one = {"bins": 8, "bounds": (0, 120), "max_count": 500}
    two = {"y_column": "weight", "bins": 4, "bounds": ((0, 120), (0, 300))}
    with TestClient(create_app(config)) as client:
        for name in PUBLISHERS_1D:
            params = one if name in ("structure_first", "auto") else {**one, "max_count": None}
            assert dry_run("histogram", name, **params) == 200, name
        for name in PUBLISHERS_2D:
            assert dry_run("histogram2d", name, **two) == 200, name
        assert dry_run("histogram", "noise-first", **{**one, "max_count": None}) != 200
        assert dry_run("histogram2d", "dawa", **two) != 200


@pytest.fixture
def table(tmp_path: Path) -> Path:
    gen = np.random.default_rng(0)
    path = tmp_path / "people.csv"
    rows = [f"{a:.1f},{b:.1f}" for a, b in gen.uniform(0, 90, (150, 2))]
    path.write_text("age,weight\n" + "\n".join(rows) + "\n")
    return path


def test_the_cli_runs_every_registered_name(table: Path) -> None:
    from rich.console import Console

    from dpkit.histograms._cli import histogram_command
    from dpkit.histograms._cli_grid import histogram2d_command

    payer = Accountant(Budget(100.0))
    for name in PUBLISHERS_1D:
        h = histogram_command(
            table, "age", name, 1.0, bounds=(0, 90), units=9, max_count=200, seed=1,
            console=Console(record=True), accountant=payer, column_type="DOUBLE",
        )  # fmt: skip
        assert isinstance(h, histograms.PublishedHistogram) and h.n_units == 9, name
    for name in PUBLISHERS_2D:
        g = histogram2d_command(
            table, "age", "weight", method=name, epsilon=1.0, x_bounds=(0, 90), y_bounds=(0, 90),
            units=(3, 3), seed=1, console=Console(record=True), accountant=payer,
            types={"age": "DOUBLE", "weight": "DOUBLE"},
        )  # fmt: skip
        assert isinstance(g, histograms.PublishedGrid), name


@pytest.mark.parametrize(
    ("command", "table_"), [("histogram", PUBLISHERS_1D), ("histogram2d", PUBLISHERS_2D)]
)
def test_cli_help_lists_the_registry(command: str, table_: Any) -> None:
    from typer.testing import CliRunner

    from dpkit.cli import app

    result = CliRunner().invoke(
        app, [command, "--help"], env={"COLUMNS": "400"}, terminal_width=400
    )
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for name in table_:
        assert re.search(rf"\b{name}\b", text), name
