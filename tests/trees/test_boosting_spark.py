"""Boosting through a Spark session: the same model as the array fit and the DuckDB fit, bit for bit.

* exactness: ``fit(session, y=, features=)`` on Spark, on DuckDB and on arrays, same rows,
  same seed, give the same ``intercept_`` and ``shapes_`` (classifier, both regression
  losses) on the hostile table of ``test_boosting_engine`` (NaN / None / ±inf / huge
  values, values on thresholds and one ulp either side, undeclared labels and categories);
* ``SparkEngine.boosting_sums`` returns DuckDB's frame, integer for integer (several keys: the
  grouping sets; one key);
* transcript: a dataset and its neighbour with one hostile row, noise fixed, show the same
  ledger, charge, report and warnings on Spark;
* a Spark job that fails during a pass is the one generic error, after the charge.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tests.tables import conftest as tables_conftest
from tests.tables.conftest import SECRET
from tests.trees.test_boosting_engine import (
    BOUNDS,
    DOMAINS,
    FEATURES,
    N_CUTS,
    SCHEMA,
    TYPES,
    same_model,
    session,
    table,
)

from dpkit import Session
from dpkit.errors import DataError, ReleaseFailedError
from dpkit.tables.engines.base import BoostingPass
from dpkit.trees import DPGradientBoostingClassifier, DPGradientBoostingRegressor
from dpkit.trees.boosting._cyclic import logistic_table
from dpkit.trees.boosting._engine_fit import session_table

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::dpkit.errors.PrivacyWarning"),
]

spark = tables_conftest.spark  # the one local Spark session of the module (start-up ~10 s)

SPARK_TYPES = "a double, b double, k string, lab bigint, t double"
#: used by both fits (every value present, clipped at the bounds), so the model moves
HOSTILE_ROW = {"a": 1e308, "b": -1e308, "k": "y", "lab": 1, "t": 1e308}


def spark_session(spark: Any, frame: pd.DataFrame, **options: Any) -> Session:
    """The rows of ``frame`` (NaN kept as NaN, None as NULL) as a Spark session."""
    options.setdefault("epsilon", 100.0)
    options.setdefault("delta", 1e-6)
    options.setdefault("accountant", "zcdp")
    rows = [
        tuple(None if v is None or v is pd.NA else v for v in row)
        for row in frame[["a", "b", "k", "lab", "t"]].astype(object).itertuples(index=False)
    ]
    rows = [
        (
            _float(a),
            _float(b),
            k if isinstance(k, str) else None,
            None if lab is None else int(lab),
            _float(t),
        )
        for a, b, k, lab, t in rows
    ]
    df = spark.createDataFrame(rows, SPARK_TYPES)
    return Session.from_spark(df, types=TYPES, schema=SCHEMA, **options)


def _float(v: Any) -> float | None:
    """A float cell: None (NULL) stays None; NaN stays NaN (pandas writes both as NaN)."""
    return None if v is None else float(v)


def _hostile() -> pd.DataFrame:
    """The hostile table, with a true NULL beside the NaN in each float column."""
    frame = table(n=400, seed=3).astype({"a": object, "b": object, "t": object})
    frame.loc[31, "a"] = None
    frame.loc[32, "b"] = None
    frame.loc[33, "t"] = None
    frame.loc[34, "b"] = math.nan
    return frame


def _numeric(frame: pd.DataFrame) -> pd.DataFrame:
    """The same rows for DuckDB and the array fit (a NULL read as NaN: both are missing)."""
    return frame.astype({"a": float, "b": float, "t": float})


def test_the_spark_fit_is_the_array_and_duckdb_fit_for_the_classifier(spark: Any) -> None:
    frame = _hostile()
    params = {"epsilon": 1.0, "max_iter": 3, "max_leaf_nodes": 4, "n_cuts": N_CUTS}
    on_spark = DPGradientBoostingClassifier(**params, random_state=2)
    on_spark.fit(spark_session(spark, frame), y="lab", features=FEATURES)
    on_duckdb = DPGradientBoostingClassifier(**params, random_state=2)
    on_duckdb.fit(session(_numeric(frame)), y="lab", features=FEATURES)
    arrays = DPGradientBoostingClassifier(
        **params, random_state=2, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1]
    ).fit(_numeric(frame)[FEATURES], frame["lab"])
    assert same_model(on_spark, arrays) and same_model(on_spark, on_duckdb)
    assert not all(np.all(s == 0) for s in on_spark.shapes_)  # a model that moved


@pytest.mark.parametrize("loss", ["squared_error", "absolute_error"])
def test_the_spark_fit_is_the_array_and_duckdb_fit_for_the_regressor(
    spark: Any,
    loss: str,
) -> None:
    frame = _hostile()
    params = {"epsilon": 1.0, "max_iter": 3, "n_cuts": N_CUTS, "loss": loss}
    on_spark = DPGradientBoostingRegressor(**params, random_state=1)
    on_spark.fit(spark_session(spark, frame), y="t", features=FEATURES)
    on_duckdb = DPGradientBoostingRegressor(**params, random_state=1)
    on_duckdb.fit(session(_numeric(frame)), y="t", features=FEATURES)
    arrays = DPGradientBoostingRegressor(
        **params, random_state=1, bounds=BOUNDS, domains=DOMAINS, target_bounds=(-10, 40)
    ).fit(_numeric(frame)[FEATURES], _numeric(frame)["t"])
    assert same_model(on_spark, arrays) and same_model(on_spark, on_duckdb)
    assert not all(np.all(s == 0) for s in on_spark.shapes_)


def _spec(codings: Any, loss: str, keys: tuple[int, ...], rng: np.random.Generator) -> BoostingPass:
    """A pass at a random model large enough to reach both ends of the logistic table."""
    shapes = tuple(
        tuple(int(v) for v in rng.integers(-(2**28), 2**28, int(c.missing) + 1)) for c in codings
    )
    p, h = logistic_table() if loss == "logistic" else ((), ())
    return BoostingPass(
        codings=codings,
        label="lab" if loss == "logistic" else "t",
        loss=loss,  # type: ignore[arg-type]
        intercept=int(rng.integers(-(2**26), 2**26)),
        shapes=shapes,
        keys=keys,
        classes=(0, 1) if loss == "logistic" else (),
        positive=1 if loss == "logistic" else None,
        target_bounds=None if loss == "logistic" else (-10.0, 40.0),
        drop_missing=loss != "logistic",
        probabilities=tuple(int(v) for v in p),
        hessians=tuple(int(v) for v in h),
    )


def _sorted(frame: pd.DataFrame) -> list[tuple[int, ...]]:
    return sorted(tuple(int(v) for v in row) for row in frame.to_numpy().tolist())


@pytest.mark.parametrize("loss", ["logistic", "squared", "absolute"])
def test_boosting_sums_are_duckdbs_for_several_keys_and_one(spark: Any, loss: str) -> None:
    frame = _hostile()
    on_spark, on_duckdb = spark_session(spark, frame), session(_numeric(frame))
    model = DPGradientBoostingClassifier(n_cuts=N_CUTS)
    codings = session_table(model, on_duckdb, "lab", FEATURES).codings
    rng = np.random.default_rng(11)
    for keys in ((0, 1, 2), (2, 0), (1,)):
        spec = _spec(codings, loss, keys, rng)
        expected = on_duckdb.engine.boosting_sums(spec)  # type: ignore[attr-defined]
        got = on_spark.engine.boosting_sums(spec)  # type: ignore[attr-defined]
        assert list(got.columns) == ["feature", "code", "g", "h", "n"]
        assert _sorted(got) == _sorted(expected)
        assert len(got) <= sum(int(codings[k].missing) + 1 for k in keys)


def _transcript(spark: Any, frame: pd.DataFrame, make: Any, y: str) -> dict[str, Any]:
    s = spark_session(spark, frame, epsilon=5.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = make().fit(s, y=y, features=FEATURES)
    return {
        "model": (model.intercept_.tolist(), [x.tolist() for x in model.shapes_]),
        "report": model.privacy_,
        "ledger": [(r.label, r.cost, r.event) for r in s.accountant.history],
        "spent": s.spent,
        "warnings": [(type(w.message).__name__, str(w.message)) for w in caught],
    }


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_a_neighbour_with_one_hostile_row_shows_the_same_transcript_on_spark(
    spark: Any,
    kind: str,
) -> None:
    frame = table(n=200, seed=7)
    neighbour = pd.concat([frame, pd.DataFrame([HOSTILE_ROW])], ignore_index=True)
    neighbour["lab"] = neighbour["lab"].astype(np.int64)

    def make() -> Any:
        params = {"epsilon": 1.0, "max_iter": 2, "n_cuts": N_CUTS, "random_state": 1}
        if kind == "classifier":
            return DPGradientBoostingClassifier(**params)
        return DPGradientBoostingRegressor(**params)

    y = "lab" if kind == "classifier" else "t"
    one, other = _transcript(spark, frame, make, y), _transcript(spark, neighbour, make, y)
    assert one.pop("model") != other.pop("model")  # only the released values differ
    assert one == other


def _leaky(spark: Any, rows: int) -> Any:
    """Rows whose third makes any Spark job that reads feature ``a`` fail, quoting "data"."""
    from pyspark.sql import functions as F

    row = F.col("id")
    return spark.range(rows).select(
        F.when(row == 2, F.raise_error(F.lit(f"x={SECRET}")))
        .otherwise(row.cast("double"))
        .alias("a"),
        (row * 0.5).alias("b"),
        F.lit("x").alias("k"),
        (row % 2).alias("lab"),
        (row * 1.0).alias("t"),
    )


def test_a_failing_spark_job_is_the_generic_error_after_the_charge(spark: Any) -> None:
    from dpkit.tables.engines.spark_engine import SparkEngine

    sessions = [
        Session.from_spark(_leaky(spark, rows), types=TYPES, schema=SCHEMA, epsilon=5.0, delta=1e-6)
        for rows in (2, 3)
    ]
    model = DPGradientBoostingClassifier(epsilon=1.0, max_iter=1, n_cuts=N_CUTS, random_state=0)
    model.fit(sessions[0], y="lab", features=FEATURES)  # the leak's row is absent: fits
    with pytest.raises(ReleaseFailedError) as failed:
        model.fit(sessions[1], y="lab", features=FEATURES)
    assert SECRET not in str(failed.value) and failed.value.__context__ is None
    assert len(sessions[1].accountant.history) == 1  # the charge stands
    engine = sessions[1].engine
    assert isinstance(engine, SparkEngine)
    codings = session_table(model, sessions[1], "lab", FEATURES).codings
    spec = _spec(codings, "logistic", (0,), np.random.default_rng(0))
    with pytest.raises(DataError) as raw:
        engine.boosting_sums(spec)
    assert SECRET not in str(raw.value) and raw.value.__context__ is None


def test_a_fit_persists_its_coded_rows_once_and_unpersists_them(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The codes are computed once per fit (persisted), and released when the fit ends."""
    from dpkit.tables.engines.spark_engine import SparkEngine

    persistent = spark.sparkContext._jsc.getPersistentRDDs
    before = persistent().size()
    kept: list[int] = []
    done = SparkEngine.boosting_done

    def watched(engine: SparkEngine, fit: int) -> None:
        kept.append(len(engine._row_frames))
        done(engine, fit)

    monkeypatch.setattr(SparkEngine, "boosting_done", watched)
    s = spark_session(spark, table(n=200, seed=3))
    model = DPGradientBoostingClassifier(epsilon=1.0, max_iter=3, n_cuts=N_CUTS, random_state=0)
    model.fit(s, y="lab", features=FEATURES)
    assert kept == [1]  # one persisted frame served every pass of the fit
    assert s.engine._row_frames == {}  # type: ignore[attr-defined]
    assert persistent().size() == before


def test_a_filtered_spark_fit_is_the_duckdb_fit(spark: Any) -> None:
    """where= keeps the same rows on Spark as on DuckDB (a query's filter rules)."""
    frame = _hostile()
    where = {"k": ["x", "z"], "b": ("<=", 6.0)}
    params = {"epsilon": 1.0, "max_iter": 3, "max_leaf_nodes": 4, "n_cuts": N_CUTS}
    on_spark = DPGradientBoostingClassifier(**params, random_state=5)
    on_spark.fit(spark_session(spark, frame), y="lab", features=FEATURES, where=where)
    on_duckdb = DPGradientBoostingClassifier(**params, random_state=5)
    on_duckdb.fit(session(_numeric(frame)), y="lab", features=FEATURES, where=where)
    unfiltered = DPGradientBoostingClassifier(**params, random_state=5)
    unfiltered.fit(session(_numeric(frame)), y="lab", features=FEATURES)
    assert same_model(on_spark, on_duckdb) and not same_model(on_spark, unfiltered)
