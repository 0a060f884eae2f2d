"""Scoring a fitted boosted model inside DuckDB: the model as SQL (``tables.engines.scoring``).

Post-processing of the released model: no row of the training data is read
and nothing is charged. The rows it scores are another matter: the output has
one row per row of the table it reads, as private as that table; it is the
data owner's tool, not a release (``docs/trees-boosting.md``, "Scoring in the
engine").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from dpkit.errors import InvalidParameterError
from dpkit.tables.engines.base import Coding, GridCoding
from dpkit.tables.engines.scoring import (
    AdditiveModel,
    Columns,
    FeatureScores,
    output_names,
    score_sql,
)
from dpkit.trees.boosting._cyclic import MODEL_UNIT, to_units
from dpkit.trees.boosting._engine_fit import is_session

if TYPE_CHECKING:
    import duckdb

#: Column kinds a numeric feature can be read from (text: a number, else missing).
_READ_AS_NUMBER = ("numeric", "boolean", "text")


def _units(values: Any, what: str) -> Any:
    """The model's values as integer units; refuses values off the model's grid (edited)."""
    array = np.asarray(values, dtype=np.float64)
    units = to_units(array)
    if not np.array_equal(units.astype(np.float64) * MODEL_UNIT, array):
        raise InvalidParameterError(
            f"the model's {what} are not on its grid of 2^-24 units (was the fitted model "
            "edited?); refit it to score it in the engine."
        )
    return units


def additive_model(estimator: Any, columns: Sequence[str] | None) -> AdditiveModel:
    """The fitted estimator's model, feature j read from table column ``columns[j]``."""
    check_is_fitted(estimator, "shapes_")
    grid = estimator.grid_
    names = _feature_columns(estimator, columns)
    features = []
    for j, shape in enumerate(estimator.shapes_):
        units = _units(shape, "shape values")
        values = tuple(tuple(int(v) for v in units[:, k]) for k in range(units.shape[1]))
        features.append(FeatureScores(_coding(grid, j, names[j]), values))
    intercept = tuple(int(v) for v in _units(np.ravel(estimator.intercept_), "intercept"))
    bounds = getattr(estimator, "target_bounds_", None)
    if bounds is not None:
        lo, hi = (float(b) for b in bounds)
        return AdditiveModel(tuple(features), intercept, "identity", target_bounds=(lo, hi))
    classes = tuple(estimator.classes_.tolist())
    if len(classes) < 2:
        raise InvalidParameterError(
            "this model was fitted with one class: it has no probabilities to score."
        )
    if len(intercept) == 1:
        return AdditiveModel(tuple(features), intercept, "logistic", classes=classes)
    return AdditiveModel(tuple(features), intercept, "softmax", classes=classes)


def _coding(grid: Any, j: int, column: str) -> GridCoding | Coding:
    """Feature j's codes on the fitted grid, read from ``column`` (the grid's own numbers)."""
    missing = int(grid.n_bins[j])
    domain = grid.categories[j]
    if domain is not None:
        return Coding(column, missing, categories=tuple(domain))
    lo, hi = float(grid.lows[j]), float(grid.highs[j])
    thresholds = tuple(float(t) for t in grid.thresholds(j))
    step = (hi - lo) / (grid.n_cuts + 1)
    return GridCoding(column, lo, hi, step, thresholds, missing)


def _feature_columns(estimator: Any, columns: Sequence[str] | None) -> list[str]:
    n = int(estimator.n_features_in_)
    if columns is None:
        names = estimator.grid_.names
        if names is None:
            raise InvalidParameterError(
                "this model was fitted on an array without column names: pass columns=[...], "
                f"one table column per feature ({n})."
            )
        return list(names)
    if isinstance(columns, str) or not isinstance(columns, Sequence):
        raise InvalidParameterError(
            f"columns must be a list of column names, one per feature ({n})."
        )
    names = list(columns)
    if len(names) != n or not all(isinstance(c, str) for c in names):
        raise InvalidParameterError(
            f"columns must be a list of column names, one per feature ({n}), in the order "
            "of the fit's features."
        )
    return names


def _engine(data: Any) -> Any:
    """The DuckDB engine that reads ``data`` (a Session's, under its lock; or a relation's)."""
    if is_session(data):
        if not hasattr(data.engine, "scored"):
            raise InvalidParameterError(
                "predict_sql needs a DuckDB session; this session's engine "
                f"({getattr(data.engine, 'name', '?')}) cannot score a model yet."
            )
        return data.guarded_engine
    import duckdb

    from dpkit.tables.engines.duckdb_engine import DuckDBEngine

    if isinstance(data, duckdb.DuckDBPyRelation):
        return DuckDBEngine(None, data)
    raise InvalidParameterError(
        "predict_sql needs a dpkit.Session on DuckDB or a duckdb relation "
        f"(e.g. connection.table('name')), got {type(data).__name__}."
    )


def _check_columns(model: AdditiveModel, kinds: dict[str, str], keep: Sequence[str]) -> None:
    for feature in model.features:
        kind = kinds.get(feature.coding.column)
        if kind is None:
            raise InvalidParameterError(
                f"the table has no column {feature.coding.column!r} (a feature of the model); its "
                f"columns are {sorted(kinds)}. Pass columns=[...] to map features to columns."
            )
        if isinstance(feature.coding, GridCoding) and kind not in _READ_AS_NUMBER:
            raise InvalidParameterError(
                f"column {feature.coding.column!r} is {kind}, but the model reads it as a number."
            )
    if len(set(keep)) != len(keep):
        raise InvalidParameterError("keep lists a column twice.")
    unknown = [c for c in keep if c not in kinds]
    if unknown:
        raise InvalidParameterError(
            f"keep names columns the table does not have: {unknown}; its columns are "
            f"{sorted(kinds)}."
        )
    clash = sorted(set(keep) & set(output_names(model)))
    if clash:
        raise InvalidParameterError(
            f"keep names column(s) {clash} that the scores are called too; leave them out "
            "of keep (or rename them in a view)."
        )


def predict_sql(
    estimator: Any, data: Any, columns: Sequence[str] | None, keep: Sequence[str] | None
) -> duckdb.DuckDBPyRelation:
    """The relation of ``keep`` and the model's outputs (see the estimators' ``predict_sql``)."""
    model = additive_model(estimator, columns)
    engine = _engine(data)
    kinds = dict(engine.column_kinds())
    if keep is None:
        kept = [c for c in kinds if c not in set(output_names(model))]
    elif isinstance(keep, str) or not isinstance(keep, Sequence):
        raise InvalidParameterError("keep must be a list of column names (or None: all).")
    else:
        kept = list(keep)
    _check_columns(model, kinds, kept)
    relation: duckdb.DuckDBPyRelation = engine.scored(model, kept)
    return relation


def expression(
    estimator: Any, output: str | None, columns: Sequence[str] | None, data: Any, dialect: str
) -> str:
    """One SQL expression of ``output`` over the table's columns (``decision_sql``)."""
    if dialect not in ("duckdb", "spark"):
        raise InvalidParameterError(f"dialect must be 'duckdb' or 'spark', got {dialect!r}.")
    if dialect == "spark" and data is not None:
        raise InvalidParameterError(
            "decision_sql(dialect='spark') takes no data=; pass the categories with the "
            "column's type (they are compared as written)."
        )
    model = additive_model(estimator, columns)
    if output is None:
        output = "decision" if model.link == "logistic" else "prediction"
    described = Columns({}, {}, "spark") if dialect == "spark" else None
    if data is not None:
        engine = _engine(data)
        kinds = dict(engine.column_kinds())
        _check_columns(model, kinds, [])
        described = Columns(kinds, dict(engine.column_types()))
    return score_sql(model, output, described)
