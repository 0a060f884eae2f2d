"""Boosted models scored inside DuckDB (``predict_sql``, ``decision_sql``) agree with the array path.

* scores (``decision``) and regression predictions: equal bit for bit to
  ``decision_function`` / ``predict`` (the model's values are integers in 2^-24
  units, summed exactly in BIGINT, then scaled by a power of two);
* labels: equal (two classes: F > 0, the same as NumPy's argmax of (1 - p, p)
  for every score on the grid; several: the first largest score);
* probabilities: DuckDB's ``exp`` against SciPy's: within 1e-15 (a different
  libm may round exp differently in the last bit);
* hostile rows: NULL, NaN, ±inf, beyond the bounds, on a threshold and one ulp
  either side, a category outside the domain, NULL categories; where the array
  path refuses a row (a model without a missing bin), the engine gives NULL;
* no charge: scoring a session's table spends nothing.
"""

from __future__ import annotations

import warnings
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkit import Session
from dpkit.errors import InvalidParameterError
from dpkit.trees import DPGradientBoostingClassifier, DPGradientBoostingRegressor

pytestmark = pytest.mark.filterwarnings("ignore::dpkit.errors.PrivacyWarning")

BOUNDS = {"a": (-4.0, 4.0), "b": (-3.0, 7.3)}
DOMAINS = {"k": ["x", "y", "z"]}
N_CUTS = 14
FEATURES = ["a", "b", "k"]


def training(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "a": rng.normal(size=n) * 2,
            "b": rng.uniform(-3, 7.3, n),
            "k": rng.choice(["x", "y", "z"], n).astype(object),
        }
    )
    frame["lab"] = (frame.a + (frame.k == "x") + rng.normal(size=n) > 0).astype(np.int64)
    frame["three"] = np.digitize(frame.a + frame.b / 3 + rng.normal(size=n), [-1.0, 1.5])
    frame["t"] = frame.b * 3 + frame.a + rng.normal(size=n)
    return frame


def edges(column: str) -> list[float]:
    """Every threshold of the column's grid and one ulp either side."""
    lo, hi = BOUNDS[column]
    step = (hi - lo) / (N_CUTS + 1)
    on = np.array([lo + float(k) * step for k in range(1, N_CUTS + 1)])
    return [float(v) for v in (*on, *np.nextafter(on, np.inf), *np.nextafter(on, -np.inf))]


HOSTILE_A = ["NULL", "'NaN'::DOUBLE", "'inf'::DOUBLE", "'-inf'::DOUBLE", "1e300", "-1e300"]
HOSTILE_K = ["NULL", "'w'", "''", "'X'"]


def scoring_table(con: duckdb.DuckDBPyConnection, seed: int = 1) -> duckdb.DuckDBPyRelation:
    """Ordinary rows, every threshold (± an ulp), and hostile values (real NULLs and NaNs)."""
    frame = training(200, seed)[FEATURES]
    con.register("ordinary", frame)
    con.execute(
        "CREATE OR REPLACE TABLE scored (id BIGINT, a DOUBLE, b DOUBLE, k VARCHAR); "
        "INSERT INTO scored SELECT row_number() OVER () AS id, a, b, k FROM ordinary"
    )
    rows = [(f"CAST('{v!r}' AS DOUBLE)", "1.0", "'x'") for v in edges("a")]
    rows += [("0.5", f"CAST('{v!r}' AS DOUBLE)", "'y'") for v in edges("b")]
    rows += [(a, b, k) for a in HOSTILE_A for b in ("2.0", "NULL", "100.0") for k in HOSTILE_K]
    values = ", ".join(f"({1000 + i}, {a}, {b}, {k})" for i, (a, b, k) in enumerate(rows))
    con.execute(f"INSERT INTO scored VALUES {values}")
    return con.table("scored")


def as_frame(relation: duckdb.DuckDBPyRelation) -> pd.DataFrame:
    """The table as the array path sees it (NULL and NaN both NaN / None)."""
    out = relation.order("id").df()
    out["k"] = out["k"].astype(object).where(out["k"].notna(), None)
    return out


def fitted_classifier(target: str = "lab", **params: Any) -> DPGradientBoostingClassifier:
    frame = training()
    classes = sorted(frame[target].unique().tolist())
    model = DPGradientBoostingClassifier(
        epsilon=2.0,
        max_iter=4,
        max_leaf_nodes=4,
        n_cuts=N_CUTS,
        bounds=BOUNDS,
        domains=DOMAINS,
        classes=classes,
        random_state=3,
        **params,
    )
    return model.fit(frame[FEATURES], frame[target])


def fitted_regressor() -> DPGradientBoostingRegressor:
    frame = training()
    model = DPGradientBoostingRegressor(
        epsilon=2.0,
        max_iter=4,
        n_cuts=N_CUTS,
        bounds=BOUNDS,
        domains=DOMAINS,
        target_bounds=(-10.0, 40.0),
        random_state=3,
    )
    return model.fit(frame[FEATURES], frame["t"])


def check_classifier(
    model: DPGradientBoostingClassifier, scored: pd.DataFrame, rows: pd.DataFrame
) -> None:
    X = rows[FEATURES]
    decision = model.decision_function(X)
    if decision.ndim == 1:
        assert np.array_equal(scored["decision"].to_numpy(), decision)  # bit for bit
    else:
        got = scored[[f"decision_{k}" for k in range(decision.shape[1])]].to_numpy()
        assert np.array_equal(got, decision)
    proba = model.predict_proba(X)
    got_p = scored[[f"proba_{k}" for k in range(proba.shape[1])]].to_numpy()
    np.testing.assert_allclose(got_p, proba, rtol=0, atol=1e-15)
    assert np.array_equal(scored["prediction"].to_numpy(), model.predict(X))


@pytest.mark.parametrize("target", ["lab", "three"])
def test_a_classifier_fitted_on_arrays_scores_every_row_as_on_arrays(target: str) -> None:
    model = fitted_classifier(target)
    con = duckdb.connect()
    table = scoring_table(con)
    scored = model.predict_sql(table).order("id").df()
    rows = as_frame(table)
    assert list(scored.columns[:4]) == ["id", "a", "b", "k"]
    assert (
        len(scored) == len(rows) and scored.drop(columns=["a", "b", "k", "id"]).notna().all().all()
    )
    check_classifier(model, scored, rows)
    assert model.decision_function(rows[FEATURES]).std() > 0  # a model that moved


def test_null_and_nan_are_both_the_missing_bin() -> None:
    model = fitted_classifier()
    con = duckdb.connect()
    out = (
        model.predict_sql(
            con.sql(
                "SELECT * FROM (VALUES (1, NULL, 1.0, 'x'), (2, 'NaN'::DOUBLE, 1.0, 'x'), "
                "(3, 'inf'::DOUBLE, 1.0, 'x')) t(id, a, b, k)"
            ),
            keep=["id"],
        )
        .order("id")
        .df()
    )
    assert list(out.columns) == ["id", "decision", "proba_0", "proba_1", "prediction"]
    assert out["decision"].nunique() == 1
    missing = model.decision_function(pd.DataFrame({"a": [np.nan], "b": [1.0], "k": ["x"]}))
    assert out["decision"].iloc[0] == missing[0]


def test_a_regressor_scores_exactly_and_refused_rows_are_null() -> None:
    model = fitted_regressor()
    con = duckdb.connect()
    table = scoring_table(con)
    scored = model.predict_sql(table, keep=["id"]).order("id").df()
    rows = as_frame(table)
    usable = rows.a.map(np.isfinite) & rows.b.map(np.isfinite) & rows.k.isin(DOMAINS["k"])
    assert usable.sum() > 200 and (~usable).sum() > 50
    expected = model.predict(rows.loc[usable, FEATURES])
    assert np.array_equal(scored.loc[usable.to_numpy(), "prediction"].to_numpy(), expected)
    assert scored.loc[~usable.to_numpy(), "prediction"].isna().all()  # predict refuses these
    assert np.unique(expected).size > 5


def test_missing_error_models_give_null_where_predict_refuses() -> None:
    model = fitted_classifier(missing="error")
    con = duckdb.connect()
    table = scoring_table(con)
    scored = model.predict_sql(table, keep=["id"]).order("id").df()
    rows = as_frame(table)
    usable = (
        rows.a.map(np.isfinite) & rows.b.map(np.isfinite) & rows.k.isin(DOMAINS["k"])
    ).to_numpy()
    check_classifier(model, scored[usable].reset_index(drop=True), rows[usable])
    assert scored.loc[~usable, ["decision", "proba_1", "prediction"]].isna().all().all()


SCHEMA = {
    "columns": {
        "a": {"bounds": [-4, 4]},
        "b": {"bounds": [-3.0, 7.3]},
        "k": {"domain": ["x", "y", "z"]},
        "lab": {"domain": [0, 1]},
        "t": {"bounds": [-10, 40]},
    }
}
TYPES = {"a": "DOUBLE", "b": "DOUBLE", "k": "VARCHAR", "lab": "BIGINT", "t": "DOUBLE"}


def session(frame: pd.DataFrame) -> Session:
    return Session.from_pandas(
        frame, types=TYPES, schema=SCHEMA, epsilon=50.0, delta=1e-6, accountant="zcdp"
    )


def test_models_fitted_on_a_session_score_its_table_for_free() -> None:
    frame = training(500, 4)[["a", "b", "k", "lab", "t"]]
    frame.loc[3, "a"] = np.nan
    frame.loc[4, "k"] = None
    frame.loc[5, "k"] = "w"
    frame.loc[6, "b"] = 99.0
    s = session(frame)
    params = {"epsilon": 2.0, "max_iter": 3, "n_cuts": N_CUTS, "random_state": 1}
    classifier = DPGradientBoostingClassifier(**params).fit(s, y="lab", features=FEATURES)
    regressor = DPGradientBoostingRegressor(**params).fit(s, y="t", features=FEATURES)
    spent = s.spent
    history = len(s.accountant.history)
    scored = classifier.predict_sql(s).df()  # the session's row order: the frame's
    check_classifier(classifier, scored, frame)
    predicted = regressor.predict_sql(s, keep=[]).df()
    usable = np.ones(len(frame), dtype=bool)
    usable[[3, 4, 5]] = False
    assert np.array_equal(
        predicted["prediction"].to_numpy()[usable], regressor.predict(frame[FEATURES][usable])
    )
    assert predicted["prediction"].isna().to_numpy()[~usable].all()
    assert s.spent == spent and len(s.accountant.history) == history  # post-processing


def test_decision_sql_is_the_same_expression_in_any_query() -> None:
    model = fitted_classifier()
    con = duckdb.connect()
    table = scoring_table(con)
    text = model.decision_sql(data=table)
    plain = con.sql(f"SELECT id, {text} AS f FROM scored ORDER BY id").df()
    assert np.array_equal(plain["f"].to_numpy(), model.decision_function(as_frame(table)[FEATURES]))
    label = con.sql(f"SELECT id, {model.decision_sql('prediction')} AS p FROM scored ORDER BY id")
    assert np.array_equal(label.df()["p"].to_numpy(), model.predict(as_frame(table)[FEATURES]))
    regressor = fitted_regressor()
    assert "CASE" in regressor.decision_sql()  # the regressor's default: its prediction


def test_a_model_fitted_on_an_array_maps_features_to_columns() -> None:
    frame = training()
    X = frame[["a", "b"]].to_numpy()
    model = DPGradientBoostingClassifier(
        epsilon=2.0,
        max_iter=3,
        n_cuts=N_CUTS,
        bounds=([-4.0, -3.0], [4.0, 7.3]),
        classes=[0, 1],
        random_state=0,
    ).fit(X, frame["lab"])
    con = duckdb.connect()
    table = scoring_table(con)
    with pytest.raises(InvalidParameterError, match="columns="):
        model.predict_sql(table)
    scored = model.predict_sql(table, columns=["a", "b"], keep=["id"]).order("id").df()
    rows = as_frame(table)[["a", "b"]].to_numpy()
    assert np.array_equal(scored["decision"].to_numpy(), model.decision_function(rows))


def test_integer_and_boolean_columns_are_read_as_numbers() -> None:
    model = fitted_classifier()
    con = duckdb.connect()
    rel = con.sql(
        "SELECT * FROM (VALUES (1, -5::INTEGER, TRUE, 'x'), (2, 2::INTEGER, FALSE, 'z'), "
        "(3, 9223372036854775807::BIGINT, NULL, 'y')) t(id, a, b, k)"
    )
    out = model.predict_sql(rel, keep=["id"]).order("id").df()
    X = pd.DataFrame(
        {"a": [-5.0, 2.0, 9.223372036854776e18], "b": [1.0, 0.0, np.nan], "k": ["x", "z", "y"]}
    )
    assert np.array_equal(out["decision"].to_numpy(), model.decision_function(X))


def test_refusals_say_what_to_do() -> None:
    model = fitted_classifier()
    con = duckdb.connect()
    table = scoring_table(con)
    with pytest.raises(InvalidParameterError, match="one per feature"):
        model.predict_sql(table, columns=["a", "b"])
    with pytest.raises(InvalidParameterError, match="no column 'nope'"):
        model.predict_sql(table, columns=["a", "nope", "k"])
    with pytest.raises(InvalidParameterError, match="keep names columns the table does not"):
        model.predict_sql(table, keep=["id", "zz"])
    with pytest.raises(InvalidParameterError, match="twice"):
        model.predict_sql(table, keep=["id", "id"])
    with pytest.raises(InvalidParameterError, match="duckdb relation"):
        model.predict_sql(pd.DataFrame({"a": [1.0]}))
    clash = con.sql("SELECT a, b, k, 1 AS prediction FROM scored")
    with pytest.raises(InvalidParameterError, match="scores are called too"):
        model.predict_sql(clash, keep=["prediction"])
    assert "prediction" not in model.predict_sql(clash).columns[:3]  # default keep leaves it out
    dates = con.sql("SELECT DATE '2020-01-01' AS a, b, k FROM scored")
    with pytest.raises(InvalidParameterError, match="reads it as a number"):
        model.predict_sql(dates)
    with pytest.raises(InvalidParameterError, match="unknown output"):
        model.decision_sql("proba_7")
    edited = fitted_classifier()
    edited.shapes_[0] = edited.shapes_[0] + 1e-9
    with pytest.raises(InvalidParameterError, match="grid"):
        edited.predict_sql(table)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    scale=st.sampled_from([1e-6, 1.0, 30.0, 2.0**16]),
    classes=st.sampled_from([2, 3]),
)
def test_random_models_on_random_rows_agree(seed: int, scale: float, classes: int) -> None:
    """Any model on the grid (values up to the +-2^16 limit) and any rows, hostile ones too."""
    rng = np.random.default_rng(seed)
    model = BASE[classes]
    model = _with_random_values(model, rng, scale)
    n = 40
    a = rng.choice([*edges("a"), np.nan, np.inf, -np.inf, 1e300, -7.0, 0.0], n)
    b = rng.uniform(-5, 9, n)
    k = rng.choice(np.array(["x", "y", "z", "w", None], dtype=object), n)
    frame = pd.DataFrame({"id": np.arange(n), "a": a, "b": b, "k": k})
    con = duckdb.connect()
    con.register("f", frame)
    con.execute(
        "CREATE TABLE t AS SELECT id, CASE WHEN a IS NULL THEN 'NaN'::DOUBLE ELSE a END AS a, b, k FROM f"
    )
    scored = model.predict_sql(con.table("t"), keep=["id"]).order("id").df()
    check_classifier(model, scored, frame)


def _with_random_values(model: Any, rng: np.random.Generator, scale: float) -> Any:
    import copy

    out = copy.deepcopy(model)
    unit = 2.0**-24
    limit = 2**40

    def on_grid(shape: tuple[int, ...]) -> np.ndarray:
        units = np.clip(np.rint(rng.normal(size=shape) * scale / unit), -limit, limit)
        return units * unit

    out.shapes_ = [on_grid(s.shape) for s in model.shapes_]
    out.intercept_ = on_grid(model.intercept_.shape)
    if rng.random() < 0.3:  # ties between codes and classes
        out.shapes_[0][:] = out.shapes_[0][0]
    return out


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    BASE = {2: fitted_classifier("lab"), 3: fitted_classifier("three")}


def test_infinities_are_missing_on_arrays_with_categorical_columns_too() -> None:
    """The array path's own rule (NaN and ±inf are missing), which the engine follows:
    a frame with a categorical column used to be refused on ±inf instead."""
    model = fitted_classifier()
    X = pd.DataFrame({"a": [np.inf, -np.inf, np.nan], "b": [1.0, 1.0, 1.0], "k": ["x", "x", "x"]})
    scores = model.decision_function(X)
    assert scores[0] == scores[1] == scores[2]


@pytest.mark.parametrize("which", ["lab", "three", "regressor"])
def test_every_output_of_decision_sql_equals_predict_sql(which: str) -> None:
    """The one-expression form (a CASE tree per feature) and the engine's (the grid's
    arithmetic, then list look-ups) give the same values on every hostile row."""
    model: Any = fitted_regressor() if which == "regressor" else fitted_classifier(which)
    con = duckdb.connect()
    table = scoring_table(con)
    scored = model.predict_sql(table, keep=["id"]).order("id").df()
    outputs = [c for c in scored.columns if c != "id"]
    texts = ", ".join(f"{model.decision_sql(o, data=table)} AS {o}" for o in outputs)
    plain = con.sql(f"SELECT id, {texts} FROM scored ORDER BY id").df()
    pd.testing.assert_frame_equal(plain, scored, check_exact=True)


def test_text_columns_are_numbers_when_they_read_as_one() -> None:
    model = fitted_classifier()
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE txt AS SELECT * FROM (VALUES (1, '1.5', '2', 'x'), (2, 'abc', '2', 'x'), "
        "(3, NULL, '2', 'x'), (4, '-1e300', 'inf', 'y')) t(id, a, b, k)"
    )
    rel = con.table("txt")
    out = model.predict_sql(rel, keep=["id"]).order("id").df()
    X = pd.DataFrame({"a": [1.5, np.nan, np.nan, -1e300], "b": [2.0, 2.0, 2.0, np.inf]})
    X["k"] = ["x", "x", "x", "y"]
    assert np.array_equal(out["decision"].to_numpy(), model.decision_function(X))
    text = con.sql(f"SELECT {model.decision_sql(data=rel)} AS f FROM txt ORDER BY id")
    assert np.array_equal(text.df()["f"].to_numpy(), out["decision"].to_numpy())


def test_integer_categories_compare_as_the_column_s_type() -> None:
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"a": rng.uniform(0, 1, 300), "g": rng.choice([10, 20, 30], 300)})
    y = ((frame.g == 20) ^ (frame.a > 0.5)).astype(int)
    model = DPGradientBoostingClassifier(
        epsilon=5.0,
        max_iter=4,
        n_cuts=7,
        bounds={"a": (0, 1)},
        domains={"g": [10, 20, 30]},
        classes=[0, 1],
        random_state=0,
    ).fit(frame, y)
    con = duckdb.connect()
    for type_name in ("BIGINT", "SMALLINT", "DOUBLE", "VARCHAR"):
        rel = con.sql(
            f"SELECT * FROM (VALUES (0.2, CAST(10 AS {type_name})), (0.7, CAST(20 AS {type_name})), "
            f"(0.7, CAST(25 AS {type_name})), (0.1, NULL)) t(a, g)"
        )
        out = model.predict_sql(rel).df()
        g = [10, 20, 25, None] if type_name != "VARCHAR" else ["10", "20", "25", None]
        X = pd.DataFrame({"a": [0.2, 0.7, 0.7, 0.1], "g": pd.Series(g, dtype=object)})
        assert np.array_equal(out["decision"].to_numpy(), model.decision_function(X)), type_name
    decision = out["decision"].to_numpy()
    assert decision[1] == decision[2]  # text "20" equals no integer category: missing, as "25"


@pytest.fixture(scope="module")
def spark() -> Any:
    """A local Spark session (start-up ~10 s); skipped without PySpark or Java."""
    import os
    import shutil

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for PySpark")
    pyspark_sql = pytest.importorskip("pyspark.sql")
    session = (
        pyspark_sql.SparkSession.builder.master("local[1]")
        .appName("dpkit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.mark.spark
@pytest.mark.slow  # ~20 s of Spark start-up and ~20 s for one select on a shared 2-core machine
def test_spark_columns_score_as_duckdb_does(spark: Any) -> None:
    """decision_sql(dialect="spark") in pyspark's expr: the same scores and labels, bit for
    bit, on every hostile row (NULL, NaN, ±inf, thresholds ± an ulp, unknown categories);
    probabilities within 1e-15 (the JVM's exp)."""
    from pyspark.sql import functions as F

    con = duckdb.connect()
    rows = as_frame(scoring_table(con))
    frame = spark.createDataFrame(
        [
            (
                int(r.id),
                None if pd.isna(r.a) else float(r.a),
                None if pd.isna(r.b) else float(r.b),
                r.k,
            )
            for r in rows.itertuples()
        ],
        "id long, a double, b double, k string",
    )
    # real NaNs and infinities in Spark (createDataFrame keeps float('nan') as NaN)
    frame = frame.union(
        spark.createDataFrame(
            [(9001, float("nan"), 1.0, "x"), (9002, float("inf"), float("-inf"), "y")],
            "id long, a double, b double, k string",
        )
    )
    extra = pd.DataFrame(
        {"id": [9001, 9002], "a": [np.nan, np.inf], "b": [1.0, -np.inf], "k": ["x", "y"]}
    )
    rows = pd.concat([rows, extra], ignore_index=True)
    # one model, every output: the dialect differs only in identifiers and the finite test,
    # which every model uses (the rest of the text is DuckDB's, tested above); Spark is slow
    for model in (fitted_classifier(),):
        names = [c for c in model.predict_sql(con.table("scored"), keep=[]).columns]
        picked = [F.expr(model.decision_sql(o, dialect="spark")).alias(o) for o in names]
        got = frame.select("id", *picked).orderBy("id").toPandas()
        expected = model.predict_sql(con.from_df(rows), keep=["id"]).order("id").df()
        for name in names:
            if name.startswith("proba"):
                np.testing.assert_allclose(
                    got[name].to_numpy(dtype=float),
                    expected[name].to_numpy(dtype=float),
                    atol=1e-15,
                )
            else:
                pd.testing.assert_series_equal(
                    got[name],
                    expected[name],
                    check_dtype=False,
                    check_names=False,
                    check_exact=True,
                )


def test_values_outside_a_declared_domain_are_refused_where_the_model_has_no_branch() -> None:
    """On arrays, as in the engine (NULL there): a clear DataError, not an IndexError."""
    from dpkit.errors import DataError
    from dpkit.trees.boosting import DPGradientBoostingClassifier, DPGradientBoostingRegressor

    X = pd.DataFrame({"a": np.linspace(0, 1, 200), "c": np.where(np.arange(200) % 2, "x", "y")})
    y = np.linspace(0, 1, 200)
    unknown = pd.DataFrame({"a": [0.5], "c": ["z"]})
    common = {"epsilon": 1.0, "bounds": {"a": (0, 1)}, "domains": {"c": ["x", "y"]}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = DPGradientBoostingRegressor(**common, target_bounds=(0, 1), random_state=0).fit(X, y)
        labels = (y > 0.5).astype(int)
        strict = DPGradientBoostingClassifier(
            **common, classes=[0, 1], missing="error", random_state=0
        ).fit(X, labels)
        lenient = DPGradientBoostingClassifier(
            **common, classes=[0, 1], missing="separate", random_state=0
        ).fit(X, labels)
    for model in (reg, strict):
        with pytest.raises(DataError, match=r"outside the declared domain of column\(s\) \['c'\]"):
            model.predict(unknown)
    assert lenient.predict(unknown).shape == (1,)
