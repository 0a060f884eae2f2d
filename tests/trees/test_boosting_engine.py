"""Boosting through a Session (DuckDB): same model as the array fit, same transcript on neighbours.

* exactness: ``fit(session, y=, features=)`` and the array fit on the same rows with the
  same seed give the same model, bit for bit (classifier, both regression losses,
  several seeds, hostile values: NaN / None / ±inf / huge features, values on
  thresholds, labels outside the declared classes, scores driven far past the
  logistic table's range);
* transcript: a dataset and its neighbour with one hostile row, noise fixed, show
  the same ledger, charge, warnings, report and engine calls;
* refusals: every public problem is refused before the charge, with no engine read;
* memory: the engine is only asked for aggregations, each returning one row per
  (feature, code) of the pass.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpkit import Session
from dpkit.errors import (
    BudgetExceededError,
    DataError,
    InvalidParameterError,
    PrivacyWarning,
    ReleaseFailedError,
)
from dpkit.tables.engines.duckdb_engine import DuckDBEngine
from dpkit.trees import DPGradientBoostingClassifier, DPGradientBoostingRegressor

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.errors.PrivacyWarning")

FEATURES = ["a", "b", "k"]
TYPES = {"a": "DOUBLE", "b": "DOUBLE", "k": "VARCHAR", "lab": "BIGINT", "t": "DOUBLE"}
BOUNDS = {"a": (-4.0, 4.0), "b": (-3.0, 7.3)}
DOMAINS = {"k": ["x", "y", "z"]}
SCHEMA = {
    "columns": {
        "a": {"bounds": [-4, 4]},
        "b": {"bounds": [-3.0, 7.3]},
        "k": {"domain": ["x", "y", "z"]},
        "lab": {"domain": [0, 1]},
        "t": {"bounds": [-10, 40]},
    }
}
N_CUTS = 14
#: The codes of FEATURES: two numeric grids (N_CUTS + 1 bins and a missing code each),
#: three categories and a missing code: the most rows a pass can return.
CODES = 2 * (N_CUTS + 2) + 4


def table(n: int = 600, seed: int = 0) -> pd.DataFrame:
    """A table with hostile entries: missing, infinite, huge, on-threshold, undeclared."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "a": rng.normal(size=n) * 2,
            "b": rng.uniform(0, 10, n),
            "k": rng.choice(["x", "y", "z"], n).astype(object),
        }
    )
    frame["lab"] = (frame.a + (frame.k == "x") + rng.normal(size=n) > 0).astype(np.int64)
    frame["t"] = frame.b * 3 + frame.a + rng.normal(size=n)
    # on every threshold of the grid (lo + k step) and one ulp either side: where the
    # grid's arithmetic guess is off by one (both ways, with these bounds) and its
    # exact fix-ups decide
    for column, (lo, hi), first in (("b", BOUNDS["b"], 40), ("a", BOUNDS["a"], 100)):
        step = (hi - lo) / (N_CUTS + 1)
        on = np.array([lo + float(k) * step for k in range(1, N_CUTS + 1)])
        edges = np.concatenate([on, np.nextafter(on, np.inf), np.nextafter(on, -np.inf)])
        frame.loc[first : first + edges.size - 1, column] = edges
    frame.loc[20, "a"] = np.nan
    frame.loc[21, "a"] = np.inf
    frame.loc[22, "a"] = -np.inf
    frame.loc[23, "a"] = 1e300
    frame.loc[24, "b"] = -1e300
    frame.loc[25, "k"] = None
    frame.loc[26, "k"] = "w"  # not in the declared domain
    frame.loc[27, "lab"] = 7  # not a declared class
    frame.loc[28, "t"] = np.nan
    frame.loc[29, "t"] = 1e300
    frame.loc[30, "t"] = -np.inf
    return frame


def session(frame: pd.DataFrame, **options: Any) -> Session:
    options.setdefault("epsilon", 100.0)
    options.setdefault("delta", 1e-6)
    options.setdefault("accountant", "zcdp")
    return Session.from_pandas(frame, types=TYPES, schema=SCHEMA, **options)


def same_model(one: Any, other: Any) -> bool:
    return np.array_equal(one.intercept_, other.intercept_) and all(
        np.array_equal(x, y) for x, y in zip(one.shapes_, other.shapes_, strict=True)
    )


@pytest.mark.parametrize(("seed", "update"), [(0, "round"), (1, "round"), (2, "cyclic")])
def test_the_engine_fit_is_the_array_fit_exactly_for_the_classifier(seed: int, update: str) -> None:
    frame = table(seed=seed)
    params = {
        "epsilon": 1.0,
        "max_iter": 4,
        "max_leaf_nodes": 4,
        "n_cuts": N_CUTS,
        "update": update,
    }
    engine = DPGradientBoostingClassifier(**params, random_state=seed)
    engine.fit(session(frame), y="lab", features=FEATURES)
    arrays = DPGradientBoostingClassifier(
        **params, random_state=seed, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1]
    ).fit(frame[FEATURES], frame["lab"])
    assert same_model(engine, arrays)
    assert not all(np.all(s == 0) for s in engine.shapes_)  # a model that moved
    clean = frame[FEATURES].iloc[32:]  # predict refuses infinities (the caller's own data)
    assert np.array_equal(engine.predict_proba(clean), arrays.predict_proba(clean))


@pytest.mark.parametrize(
    ("seed", "loss"), [(0, "squared_error"), (1, "absolute_error"), (2, "squared_error")]
)
def test_the_engine_fit_is_the_array_fit_exactly_for_the_regressor(seed: int, loss: str) -> None:
    frame = table(seed=seed)
    params = {"epsilon": 1.0, "max_iter": 4, "n_cuts": N_CUTS, "loss": loss}
    engine = DPGradientBoostingRegressor(**params, random_state=seed)
    engine.fit(session(frame), y="t", features=FEATURES)
    arrays = DPGradientBoostingRegressor(
        **params, random_state=seed, bounds=BOUNDS, domains=DOMAINS, target_bounds=(-10, 40)
    ).fit(frame[FEATURES], frame["t"])
    assert same_model(engine, arrays)
    assert not all(np.all(s == 0) for s in engine.shapes_)


@pytest.mark.parametrize(("update", "passes"), [("round", 3), ("cyclic", 3 * len(FEATURES))])
def test_a_round_is_one_engine_pass(
    monkeypatch: pytest.MonkeyPatch, update: str, passes: int
) -> None:
    """update="round": one scan per round, summing every feature's codes (one grouping
    set each); "cyclic": one scan per feature and round."""
    keys: list[tuple[int, ...]] = []
    original = DuckDBEngine.boosting_sums

    def counted(engine: DuckDBEngine, spec: Any) -> Any:
        keys.append(spec.keys)
        return original(engine, spec)

    monkeypatch.setattr(DuckDBEngine, "boosting_sums", counted)
    model = DPGradientBoostingClassifier(
        epsilon=1.0, max_iter=3, max_leaf_nodes=4, n_cuts=N_CUTS, update=update, random_state=0
    )
    model.fit(session(table()), y="lab", features=FEATURES)
    assert len(keys) == passes
    every = sorted(range(len(FEATURES)))
    assert (
        all(sorted(k) == every for k in keys)
        if update == "round"
        else all(len(k) == 1 for k in keys)
    )


def test_a_filtered_fit_is_the_array_fit_on_the_rows_the_filter_keeps() -> None:
    """where= keeps the rows a query with that filter would count (NULLs fail a comparison)."""
    frame = table(seed=4)
    where = {"k": ["x", "y"], "t": (">", 5.0)}
    kept = frame[frame["k"].isin(["x", "y"]) & (frame["t"] > 5.0)]  # NaN and None fail both
    params = {"epsilon": 1.0, "max_iter": 3, "max_leaf_nodes": 4, "n_cuts": N_CUTS}
    engine = DPGradientBoostingClassifier(**params, random_state=4)
    engine.fit(session(frame), y="lab", features=FEATURES, where=where)
    arrays = DPGradientBoostingClassifier(
        **params, random_state=4, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1]
    ).fit(kept[FEATURES], kept["lab"])
    assert same_model(engine, arrays)
    unfiltered = DPGradientBoostingClassifier(**params, random_state=4)
    unfiltered.fit(session(frame), y="lab", features=FEATURES)
    assert not same_model(engine, unfiltered)  # the filter changed the rows used


def coded_tables(s: Session) -> int:
    """The temporary tables of coded rows that boosting fits left on the session's engine."""
    frame = s.engine._fetch(
        "SELECT count(*) AS n FROM duckdb_tables() WHERE table_name LIKE '__dpkit_boost_rows%'",
        "counting",
    )
    return int(frame["n"][0])


def test_a_fit_codes_the_rows_once_and_drops_them_when_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = session(table())
    created: list[str] = []
    original = DuckDBEngine._run

    def watched(engine: DuckDBEngine, sql: str) -> None:
        created.extend([sql] if sql.startswith("CREATE TEMPORARY TABLE __dpkit_boost_rows") else [])
        original(engine, sql)

    monkeypatch.setattr(DuckDBEngine, "_run", watched)
    model = DPGradientBoostingClassifier(epsilon=1.0, max_iter=4, n_cuts=N_CUTS, random_state=0)
    model.fit(s, y="lab", features=FEATURES)
    assert len(created) == 1 and coded_tables(s) == 0
    # a fit that fails after the charge drops them too (the engine fails on the 2nd pass)
    passes = DuckDBEngine._fetch
    calls: list[int] = []

    def failing(engine: DuckDBEngine, sql: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise DataError("the engine failed")
        return passes(engine, sql, *args, **kwargs)

    monkeypatch.setattr(DuckDBEngine, "_fetch", failing)
    with pytest.raises(ReleaseFailedError):  # the one generic error after a charge
        DPGradientBoostingClassifier(epsilon=1.0, max_iter=4, n_cuts=N_CUTS).fit(
            s, y="lab", features=FEATURES
        )
    monkeypatch.setattr(DuckDBEngine, "_fetch", passes)
    assert len(created) == 2 and coded_tables(s) == 0


def test_concurrent_fits_keep_their_own_coded_rows() -> None:
    """Two fits on one session interleave their passes; each keeps (and drops) its own rows."""
    s = session(table())
    params = {"epsilon": 1.0, "max_iter": 3, "n_cuts": N_CUTS, "random_state": 0}
    alone = DPGradientBoostingClassifier(**params).fit(s, y="lab", features=FEATURES)
    models = [DPGradientBoostingClassifier(**params) for _ in range(2)]
    errors: list[BaseException] = []

    def fit(model: Any) -> None:
        try:
            model.fit(s, y="lab", features=FEATURES)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=fit, args=(m,)) for m in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and all(same_model(m, alone) for m in models)
    assert coded_tables(s) == 0


def test_scores_far_past_the_logistic_table_agree_too() -> None:
    """A huge step (learning rate 10, tiny ridge) drives scores to +-MODEL_LIMIT and the table's ends."""
    frame = table(seed=5)
    params = {
        "epsilon": 50.0,
        "max_iter": 3,
        "max_leaf_nodes": 8,
        "n_cuts": N_CUTS,
        "learning_rate": 10.0,
        "l2_regularization": 1e-9,
    }
    engine = DPGradientBoostingClassifier(**params, random_state=9)
    engine.fit(session(frame), y="lab", features=FEATURES)
    arrays = DPGradientBoostingClassifier(
        **params, random_state=9, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1]
    ).fit(frame[FEATURES], frame["lab"])
    assert same_model(engine, arrays)
    assert max(float(np.abs(s).max()) for s in engine.shapes_) > 16.0  # past the table


def test_auto_shapes_count_the_rows_in_the_engine_as_the_array_fit_does() -> None:
    frame = table(seed=3)
    engine = DPGradientBoostingClassifier(epsilon=1.0, n_cuts=N_CUTS, random_state=4)
    engine.fit(session(frame), y="lab", features=FEATURES)
    arrays = DPGradientBoostingClassifier(
        epsilon=1.0, n_cuts=N_CUTS, random_state=4, bounds=BOUNDS, domains=DOMAINS, classes=[0, 1]
    ).fit(frame[FEATURES], frame["lab"])
    assert engine.privacy_.uses == arrays.privacy_.uses
    assert same_model(engine, arrays)


class Calls:
    """Every SQL statement the engine runs for a fit, and how many rows each returned."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sql: list[str] = []
        self.sizes: list[int] = []
        fetch = DuckDBEngine._fetch

        def spy(engine: DuckDBEngine, sql: str, *args: Any, **kwargs: Any) -> Any:
            out = fetch(engine, sql, *args, **kwargs)
            self.sql.append(sql)
            self.sizes.append(len(out))
            return out

        monkeypatch.setattr(DuckDBEngine, "_fetch", spy)


def transcript(
    frame: pd.DataFrame, monkeypatch: pytest.MonkeyPatch, make: Any, y: str, where: Any = None
) -> dict[str, Any]:
    s = session(frame, epsilon=5.0)
    calls = Calls(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model = make().fit(s, y=y, features=FEATURES, where=where)
            outcome: Any = model.privacy_
        except Exception as err:
            outcome = (type(err).__name__, str(err))
    history = [(r.label, r.cost, r.event) for r in s.accountant.history]
    return {
        "outcome": outcome,
        "ledger": history,
        "spent": s.spent,
        "warnings": [(type(w.message).__name__, str(w.message)) for w in caught],
        "calls": len(calls.sql),
        "sizes_bound": max(calls.sizes, default=0) <= CODES,
    }


HOSTILE_ROWS = [
    {"a": np.nan, "b": np.inf, "k": None, "lab": 1, "t": 3.0},
    {"a": 1e308, "b": -1e308, "k": "w", "lab": 9, "t": 1e308},
    {"a": None, "b": 5.0, "k": "x", "lab": 0, "t": np.nan},
]


@pytest.mark.parametrize("where", [None, {"b": ("<", 8.0), "k": ["x", "w"]}])
@pytest.mark.parametrize("row", HOSTILE_ROWS)
@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_a_neighbour_with_one_hostile_row_shows_the_same_transcript(
    row: dict[str, Any], kind: str, where: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = table(n=300, seed=7)
    neighbour = pd.concat([frame, pd.DataFrame([row])], ignore_index=True)
    neighbour["lab"] = neighbour["lab"].astype(np.int64)

    def make() -> Any:
        if kind == "classifier":
            return DPGradientBoostingClassifier(
                epsilon=1.0, max_iter=3, n_cuts=N_CUTS, random_state=1
            )
        return DPGradientBoostingRegressor(epsilon=1.0, max_iter=3, n_cuts=N_CUTS, random_state=1)

    y = "lab" if kind == "classifier" else "t"
    one, other = (
        transcript(frame, monkeypatch, make, y, where),
        transcript(neighbour, monkeypatch, make, y, where),
    )
    assert one == other
    assert one["calls"] > 0 and one["sizes_bound"]


def test_the_engine_is_only_asked_for_small_aggregations(monkeypatch: pytest.MonkeyPatch) -> None:
    s = session(table(n=2000, seed=2))
    calls = Calls(monkeypatch)
    model = DPGradientBoostingClassifier(epsilon=1.0, max_iter=3, max_leaf_nodes=4, n_cuts=N_CUTS)
    model.fit(s, y="lab", features=FEATURES)
    assert len(calls.sql) == 3  # one pass per round
    assert all("GROUPING SETS" in sql for sql in calls.sql)
    # one row per (feature, code) at most: the segments are summed outside the engine
    assert max(calls.sizes) <= CODES


def test_every_pass_holds_the_session_lock() -> None:
    """A pass sets the model on the connection and then reads it: concurrent callers of one
    session must not interleave there, so each pass runs under the session's lock."""
    s = session(table(n=300, seed=4))
    engine, held = s.engine, []
    original = engine.boosting_sums  # type: ignore[attr-defined]

    def watched(spec: Any) -> Any:
        held.append(s._lock._is_owned())  # type: ignore[attr-defined]
        return original(spec)

    engine.boosting_sums = watched  # type: ignore[attr-defined]
    try:
        model = DPGradientBoostingClassifier(epsilon=1.0, max_iter=2, n_cuts=N_CUTS)
        model.fit(s, y="lab", features=FEATURES)
    finally:
        del engine.boosting_sums  # type: ignore[attr-defined]
    assert held and all(held)


def refusing(make: Any, s: Session, **fit: Any) -> str:
    before = s.spent
    reads: list[Any] = []
    engine = s.engine
    original = engine.boosting_sums  # type: ignore[attr-defined]
    engine.boosting_sums = lambda spec: reads.append(spec) or original(spec)  # type: ignore[attr-defined]
    try:
        with pytest.raises((InvalidParameterError, BudgetExceededError)) as refused:
            make().fit(s, **fit)
    finally:
        del engine.boosting_sums  # type: ignore[attr-defined]
    assert s.spent == before
    assert s.accountant.history == ()
    assert reads == []
    return str(refused.value)


def test_public_problems_are_refused_before_the_charge_and_any_read() -> None:
    frame = table(n=200)
    s = session(frame)
    clf = DPGradientBoostingClassifier
    fit = {"y": "lab", "features": FEATURES}
    assert "privacy unit" in refusing(
        clf,
        Session.from_pandas(
            frame.assign(pid=1),
            types={**TYPES, "pid": "BIGINT"},
            schema=SCHEMA,
            epsilon=1.0,
            privacy_unit="pid",
        ),
        **fit,
    )
    assert "two classes" in refusing(lambda: clf(classes=[0, 1, 7]), s, **fit)
    # classes the label column cannot hold would match no row: refused, column named
    assert "'lab'" in refusing(lambda: clf(classes=["no", "yes"]), s, **fit)
    assert "'lab'" in refusing(lambda: clf(classes=[0.5, 1]), s, **fit)
    assert "missing='separate'" in refusing(lambda: clf(missing="error"), s, **fit)
    assert "schema" in refusing(lambda: clf(bounds=(0, 1)), s, **fit)
    assert "unknown feature" in refusing(clf, s, y="lab", features=["a", "nope"])
    assert "label column" in refusing(clf, s, y="nope", features=FEATURES)
    assert "twice" in refusing(clf, s, y="lab", features=["a", "a"])
    # a filter is checked against the schema like a query's: column names, literal types
    assert "unknown column" in refusing(clf, s, **fit, where={"nope": 1})
    assert "'k'" in refusing(clf, s, **fit, where={"k": 3})
    assert "accountant" in refusing(lambda: clf(accountant=object()), s, **fit)
    undeclared = Session.from_pandas(
        frame, types=TYPES, schema={"columns": {"lab": {"domain": [0, 1]}}}, epsilon=1.0
    )
    assert "no public codes" in refusing(clf, undeclared, **fit)
    replaced = Session.from_pandas(
        frame,
        types=TYPES,
        schema={
            "columns": {
                **SCHEMA["columns"],
                "a": {"bounds": [-4, 4], "nulls": "replace", "replacement": 0},
            }
        },
        epsilon=1.0,
    )
    assert "nulls='replace'" in refusing(clf, replaced, **fit)
    assert "numeric" in refusing(DPGradientBoostingRegressor, s, y="k", features=["a", "b"])


def test_a_fit_the_budget_cannot_pay_is_refused_before_any_read() -> None:
    s = session(table(n=200), epsilon=0.5)
    message = refusing(
        lambda: DPGradientBoostingClassifier(epsilon=1.0, max_iter=2), s, y="lab", features=FEATURES
    )
    assert message


def test_the_session_pays_once_and_the_ledger_records_the_fit() -> None:
    s = session(table(n=300), epsilon=3.0)
    model = DPGradientBoostingClassifier(epsilon=1.0, max_iter=2, n_cuts=N_CUTS, random_state=0)
    model.fit(s, y="lab", features=FEATURES)
    history = s.accountant.history
    assert [r.label for r in history] == ["DPGradientBoostingClassifier.fit"]
    assert history[0].cost.epsilon == pytest.approx(1.0)
    assert model.privacy_.remaining is not None
    assert list(model.feature_names_in_) == FEATURES
    with pytest.warns(PrivacyWarning):  # the seeded noise is said to be for tests only
        DPGradientBoostingClassifier(epsilon=1.0, max_iter=1, random_state=0).fit(
            s, y="lab", features=FEATURES
        )
