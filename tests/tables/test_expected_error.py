"""Each query kind's error bar, said before spending (``expected_error``): public parameters only.

Checked here: the bar equals what the release states afterwards (same
mechanism, same level); it is computed without touching the engine; it is the
same on a table and its neighbour (hostile rows included); the mean's
``per_row / n`` bar holds in seeded runs; the local CLI's dry run (``--cost``)
and the service's (``POST .../dry-run``) return it.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from typer.testing import CliRunner

from dpkit.cli import app
from dpkit.tables import Query, Session
from dpkit.tables.kinds import REGISTRY, ExpectedError, expected_error

from ._neighbours import CSV_TYPES, SCHEMA, Pair, frame, neighbours

TYPES = {"age": "DOUBLE", "g": "VARCHAR"}
GROUPS = ["a", "b", "c"]


#: (spec, the release's ``details`` key stating the same bar, unit)
STATED_AFTER = [
    (Query("count", epsilon=0.5), "half_width", "value"),
    (Query("count", "age", epsilon=0.3, group_by="g", keys=GROUPS, level=0.9), "half_width", "value"),
    (Query("sum", "age", epsilon=0.5, bounds=(0, 100)), "half_width", "value"),
    (Query("sum", "age", epsilon=0.5, bounds=(-5, 100), group_by="g", keys=GROUPS), "half_width", "value"),
    (Query("median", "age", epsilon=0.5, bounds=(0, 100)), "rank_error", "rows"),
    (Query("quantile", "age", q=0.9, epsilon=0.5, bounds=(0, 100), grid_size=101), "rank_error", "rows"),
    (Query("min", "age", epsilon=0.5, bounds=(0, 100), level=0.99), "rank_error", "rows"),
    (Query("mode", "g", epsilon=0.5, domain=GROUPS), "count_error", "count"),
    (Query("histogram", "age", epsilon=0.5, bins=5, bounds=(0, 100)), "half_width", "value"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "key", "unit"), STATED_AFTER, ids=lambda x: str(x)[:60])
@pytest.mark.parametrize("k", [1, 3])
def test_the_bar_said_before_is_the_bar_the_release_states(
    spec: Query, key: str, unit: str, k: int
) -> None:
    session = _session(k)
    before = expected_error(session.prepare(spec).query)
    release = session.answer(spec)
    assert before.half_width == pytest.approx(release.details[key], rel=1e-12)
    assert before.unit == unit and before.level == release.level
    assert f"({before.level:.0%})" in before.text


def test_every_kind_has_a_bar_or_says_why_not() -> None:
    """Every registered kind answers ``expected_error``; data-adaptive methods say there is none."""
    session = _session()
    specs = {
        "mean": Query("mean", "age", epsilon=0.5, bounds=(0, 100)),
        "variance": Query("variance", "age", epsilon=0.5, bounds=(0, 100)),
        "std": Query("std", "age", epsilon=0.5, bounds=(0, 100)),
        "max": Query("max", "age", epsilon=0.5, bounds=(0, 100)),
        "histogram2d": Query("histogram2d", "age", y_column="age2", epsilon=0.5, bins=4,
                             bounds=((0, 100), (0, 100))),
    }  # fmt: skip
    specs.update({str(s.kind): s for s, _, _ in STATED_AFTER})
    assert set(specs) == set(REGISTRY)
    for name, spec in specs.items():
        bar = REGISTRY[name].expected_error(session.prepare(spec).query)
        assert isinstance(bar, ExpectedError) and bar.text, name
        assert bar.to_dict()["text"] == bar.text
    mean = expected_error(session.prepare(specs["mean"]).query, level=0.9)
    assert mean.level == 0.9 and mean.per_row is not None and "/n for n rows (90%)" in mean.text
    adaptive = Query("histogram", "age", epsilon=0.5, bins=5, bounds=(0, 100), method="auto")
    bar = expected_error(session.prepare(adaptive).query)
    assert bar.half_width is None and bar.per_row is None and "no public bar" in bar.text


def test_the_bar_is_computed_without_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any use of the engine while the bar is computed fails the test: it reads no data."""
    session = _session()
    planned = [session.prepare(spec).query for spec, _, _ in STATED_AFTER]
    engine_type = type(session.engine)

    def poisoned(self: Any, name: str) -> Any:
        raise AssertionError(f"the engine was used ({name})")

    monkeypatch.setattr(engine_type, "__getattribute__", poisoned)
    bars = [expected_error(query) for query in planned]
    monkeypatch.undo()
    assert all(bar.half_width is not None for bar in bars)


MEAN_SPEC = Query("mean", "age", epsilon=0.2, bounds=(0, 100))


def test_the_mean_bar_holds_in_seeded_runs() -> None:
    """``|noisy mean - clipped mean| <= per_row / n`` in at least ``level`` of seeded runs.

    With ``per_row`` halved (a deliberately wrong bar) it fails: the check has teeth.
    """
    n = 400
    session = _session_rows(n)
    truth = float(np.clip(session_frame(n)["age"], 0, 100).mean())
    bar = expected_error(session.prepare(MEAN_SPEC).query)
    assert bar.per_row is not None
    errors = np.array([abs(session.answer(MEAN_SPEC).value - truth) for _ in range(60)])
    assert np.mean(errors <= bar.per_row / n) >= bar.level
    assert np.mean(errors <= bar.per_row / n / 4) < bar.level  # a bar 4x too small is caught


@settings(max_examples=15, deadline=None, derandomize=True, database=None)
@given(pair=neighbours())
def test_the_bar_is_the_same_on_neighbouring_tables(pair: Pair) -> None:
    """Hostile neighbours (NaN, ±inf, 1e308, new groups, wrong types) leave the bar unchanged."""
    specs = [
        Query("count", "x", epsilon=0.5),
        Query("sum", "x", epsilon=0.5, bounds=(-10, 10), group_by="g"),
        Query("mean", "cnt", epsilon=0.5, bounds=(0, 50)),
        Query("std", "x", epsilon=0.5, bounds="private"),
        Query("median", "x", epsilon=0.5, bounds=(-10, 10), group_by="g", keys="private",
              delta=1e-6),
        Query("mode", "g", epsilon=0.5),
        Query("histogram", "x", epsilon=0.5, edges=[-10, 0, 10]),
    ]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sides = [
            Session.from_pandas(frame(rows), types=CSV_TYPES, schema=SCHEMA, epsilon=10.0)
            for rows in (pair.smaller, pair.bigger)
        ]
    small, big = (
        [expected_error(side.prepare(spec).query).to_dict() for spec in specs] for side in sides
    )
    assert small == big


def session_frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "pid": np.arange(n),
            "age": rng.uniform(0, 100, n),
            "age2": rng.uniform(0, 100, n),
            "g": rng.choice(GROUPS, n),
        }
    )


def _session_rows(n: int) -> Session:
    return Session.from_pandas(session_frame(n), epsilon=1000.0, types=TYPES_ALL, rng=1)


TYPES_ALL = {**TYPES, "pid": "BIGINT", "age2": "DOUBLE"}


def _session(k: int = 1) -> Session:
    df = session_frame(300)
    df["pid"] = df["pid"] // k
    unit = {"privacy_unit": "pid", "max_contributions": k} if k > 1 else {}
    return Session.from_pandas(df, epsilon=1000.0, types=TYPES_ALL, rng=1, **unit)


def test_the_local_dry_run_prints_the_bar(tmp_path: Path) -> None:
    """``dpkit query FILE ... --cost`` prints ``expected_error``, the same on a neighbour's file."""
    outputs = []
    for extra in ([], [{"age": 1e308, "g": "zz"}]):
        path = tmp_path / f"t{len(extra)}.csv"
        rows = [{"age": 30.0, "g": "a"}, {"age": 40.0, "g": "b"}, *extra]
        pd.DataFrame(rows).to_csv(path, index=False)
        result = CliRunner().invoke(
            app,
            ["query", str(path), "mean", "age", "--type", "age=DOUBLE,g=VARCHAR",
             "--epsilon", "0.5", "--bounds", "0,100", "--cost"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        outputs.append(json.loads(result.stdout))
    assert outputs[0] == outputs[1]
    assert outputs[0]["expected_error"]["per_row"] > 0
    assert "/n for n rows (95%)" in outputs[0]["expected_error"]["text"]
