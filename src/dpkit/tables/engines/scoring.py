"""A fitted additive model as SQL: every row of a DuckDB table scored inside the engine.

The model (``dpkit.trees.boosting``) is F(x) = intercept + sum_j f_j(code_j(x)),
with every value an integer in units of 2^-MODEL_BITS. A feature's code: a
missing value (NULL; for numbers also NaN and ±inf) has the missing code; a
number the number of thresholds strictly below it (``x <= t_k`` is code
``<= k - 1``: bins are closed on the right, and values beyond the bounds fall
in the end bins); a category its position in the domain (a value outside the
domain: the missing code). A code with no value (a missing value for a model
without a missing code) makes the row's score NULL.

Two forms: :func:`scored_select`, the engine's (codes computed as a boosting
pass computes them, ``DuckDBEngine._boost_codes``, then one list look-up per
feature: fast), and :func:`score_sql`, one self-contained expression for any
query (a binary tree of exact comparisons with the thresholds, written as
exact doubles, per feature: about ten times slower in DuckDB).

The score is summed as BIGINT units (exact in any order: |F| < 2^53 units) and
turned into a DOUBLE by one multiplication by 2^-MODEL_BITS (exact), so it is
bit for bit NumPy's ``intercept + sum_j shape_j[code_j]``. The model is public
(a DP release); the rows it scores are not: the output is as private as the
table it reads (``docs/trees-boosting.md``, "Scoring in the engine").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dpkit.errors import InvalidParameterError
from dpkit.tables.engines import _sql
from dpkit.tables.engines.base import MODEL_BITS, Coding, GridCoding

__all__ = [
    "NUMBER_KINDS",
    "AdditiveModel",
    "Columns",
    "FeatureScores",
    "category_code",
    "output_names",
    "score_sql",
    "scored_select",
]

#: Column kinds read as numbers with a cast; any other is read with TRY_CAST (text that is
#: no number: missing).
NUMBER_KINDS = ("numeric", "boolean")

#: The DOUBLE of one model unit, 2^-MODEL_BITS (a power of two: multiplying by it is exact).
_UNIT = _sql.literal(2.0**-MODEL_BITS)


@dataclass(frozen=True)
class FeatureScores:
    """One feature of an additive model: how its column becomes a code, and each code's values.

    ``coding``: a :class:`GridCoding` (numbers) or a :class:`Coding` with
    ``categories``; its ``missing`` is the code of a missing value or of a
    category outside the domain. ``values[k][c]``: output k's value at code c
    (integer units; a code past the end has no value).
    """

    coding: GridCoding | Coding
    values: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Columns:
    """The table's column kinds (``ColumnKind``) and storage types, by name, and the SQL
    dialect to write (``"spark"``: Spark SQL, for ``pyspark.sql.functions.expr``)."""

    kinds: Mapping[str, str]
    types: Mapping[str, str]
    dialect: Literal["duckdb", "spark"] = "duckdb"


def _ident(column: str, columns: Columns) -> str:
    if columns.dialect == "spark":
        return "`" + column.replace("`", "``") + "`"
    return _sql.quote(column)


def _finite(x: str, columns: Columns) -> str:
    """True for a finite number; NULL for NULL; false for NaN and ±inf."""
    if columns.dialect == "spark":
        # Spark has no isfinite; NaN compares above +inf there, so it fails too.
        return f"(abs({x}) < CAST('Infinity' AS DOUBLE))"
    return f"isfinite({x})"


@dataclass(frozen=True)
class AdditiveModel:
    """A fitted additive model and what its outputs mean.

    ``link``: "logistic" (two classes: ``decision`` is the log-odds of
    ``classes[1]``), "softmax" (one score per class) or "identity" (a regressor:
    the score on [0, 1] mapped to ``target_bounds``).
    """

    features: tuple[FeatureScores, ...]
    intercept: tuple[int, ...]
    link: Literal["logistic", "softmax", "identity"]
    classes: tuple[Any, ...] = ()
    target_bounds: tuple[float, float] | None = None


def _number(column: str, columns: Columns) -> str:
    """The column as a DOUBLE: a cast for numbers and booleans; text that is no number is NULL."""
    col = _ident(column, columns)
    if columns.kinds.get(column) in NUMBER_KINDS:
        return f"CAST({col} AS DOUBLE)"
    return f"TRY_CAST({col} AS DOUBLE)"


def _runs(values: Sequence[int]) -> list[tuple[int, int]]:
    """(first code, value) of every run of equal values: the tree needs only their borders."""
    runs = [(0, int(values[0]))]
    for code in range(1, len(values)):
        if int(values[code]) != runs[-1][1]:
            runs.append((code, int(values[code])))
    return runs


def _tree(x: str, thresholds: Sequence[float], runs: Sequence[tuple[int, int]]) -> str:
    """Nested CASE over the runs: x <= threshold[first code of run r - 1] sends it left."""
    if len(runs) == 1:
        return str(runs[0][1])
    mid = len(runs) // 2
    border = _sql.literal(float(thresholds[runs[mid][0] - 1]))
    left, right = _tree(x, thresholds, runs[:mid]), _tree(x, thresholds, runs[mid:])
    return f"(CASE WHEN {x} <= {border} THEN {left} ELSE {right} END)"


def _value_at(values: Sequence[int], code: int) -> str:
    return str(int(values[code])) if code < len(values) else "NULL"


def _feature_term(feature: FeatureScores, output: int, x: str, columns: Columns) -> str:
    """The SQL of f_j(x) for one output, in BIGINT units, as one expression."""
    values = feature.values[output]
    coding = feature.coding
    missing = _value_at(values, coding.missing)
    if isinstance(coding, GridCoding):
        ordered = values[: len(coding.thresholds) + 1]
        body = _tree(x, coding.thresholds, _runs(ordered))
        # NULL, NaN and ±inf all go to ELSE.
        return f"(CASE WHEN {_finite(x, columns)} THEN {body} ELSE {missing} END)"
    whens = _category_whens(coding, x, columns, [_value_at(values, c) for c in range(len(values))])
    return f"(CASE {' '.join(whens)} ELSE {missing} END)" if whens else missing


def _category_whens(coding: Coding, x: str, columns: Columns, results: Sequence[str]) -> list[str]:
    """``WHEN x = category THEN result`` for every category the column can equal."""
    whens = []
    for code, value in enumerate(coding.categories or ()):
        item = _category_literal(value, coding.column, columns)
        if item is not None and code < len(results):
            whens.append(f"WHEN {x} = {item} THEN {results[code]}")
    return whens


def category_code(coding: Coding, x: str, columns: Columns) -> str:
    """The code of a categorical column ``x``: its position in the domain, else missing."""
    codes = [str(c) for c in range(len(coding.categories or ()))]
    whens = _category_whens(coding, x, columns, codes)
    missing = str(int(coding.missing))
    return f"(CASE {' '.join(whens)} ELSE {missing} END)" if whens else missing


def _category_literal(value: Any, column: str, columns: Columns) -> str | None:
    """The category as a literal the column can equal, or None (it equals no value of it).

    As pandas compares: text equals text only, a number a number, a boolean a boolean.
    """
    item = value.item() if hasattr(value, "item") else value
    kind = columns.kinds.get(column)
    if isinstance(item, bool):
        ok = kind in (None, "boolean")
    elif isinstance(item, int | float):
        ok = kind in (None, "numeric")
    elif isinstance(item, str):
        ok = kind in (None, "text")
    else:
        ok = kind in (None, "temporal", "other")
    if not ok:
        return None
    type_name = columns.types.get(column) if kind == "numeric" else None
    items = _sql.in_list([item], column, type_name)
    return items[0] if items else None


def _unit_sums(model: AdditiveModel, xs: Sequence[str], columns: Columns) -> list[str]:
    """Per output, the BIGINT sum of units (left to right from a BIGINT intercept)."""
    sums = []
    for k, intercept in enumerate(model.intercept):
        terms = [f"CAST({int(intercept)} AS BIGINT)"]
        terms += [_feature_term(f, k, x, columns) for f, x in zip(model.features, xs)]
        sums.append(" + ".join(terms))
    return sums


def _label(value: Any) -> str:
    item = value.item() if hasattr(value, "item") else value
    return _sql.literal(item)


def _outputs(model: AdditiveModel, scores: Sequence[str]) -> dict[str, str]:
    """Output name -> SQL over the DOUBLE scores ``scores`` (names or expressions).

    Probabilities as scipy computes them (``expit``: 1 / (1 + exp(-F)), the other
    class 1 - p; ``softmax``: exp(F_k - max) / their sum, left to right); the label
    from the scores: two classes, ``classes[1]`` iff F > 0 (the same as NumPy's
    argmax of (1 - p, p) for every F on the model's grid: F = 0 gives p = 1/2 in
    both, |F| >= 2^-MODEL_BITS moves p off 1/2 by far more than a rounding);
    several, the first class whose score is the largest (softmax keeps the order,
    and ties are equal scores).
    """
    if model.link == "identity":
        assert model.target_bounds is not None
        lo, hi = (float(b) for b in model.target_bounds)
        f = scores[0]
        clipped = f"(CASE WHEN {f} < 0.0 THEN 0.0 WHEN {f} > 1.0 THEN 1.0 ELSE {f} END)"
        lo_sql, width = _sql.literal(lo), _sql.literal(hi - lo)
        return {"prediction": f"({lo_sql} + {clipped} * {width})"}
    labels = [_label(c) for c in model.classes]
    if model.link == "logistic":
        f = scores[0]
        p = f"(1.0 / (1.0 + exp(-{f})))"
        return {
            "decision": f,
            "proba_0": f"(1.0 - {p})",
            "proba_1": p,
            "prediction": f"(CASE WHEN {f} > 0.0 THEN {labels[1]} WHEN {f} <= 0.0 THEN {labels[0]} END)",
        }
    top = f"greatest({', '.join(scores)})"
    shifted = [f"exp({s} - {top})" for s in scores]
    total = " + ".join(shifted)
    out = {f"decision_{k}": s for k, s in enumerate(scores)}
    out.update({f"proba_{k}": f"({e} / ({total}))" for k, e in enumerate(shifted)})
    whens = " ".join(f"WHEN {s} = {top} THEN {labels[k]}" for k, s in enumerate(scores))
    out["prediction"] = f"(CASE {whens} END)"
    return out


def score_sql(model: AdditiveModel, output: str, columns: Columns | None = None) -> str:
    """One self-contained SQL expression of ``output`` over the table's own columns.

    ``output``: a name :func:`output_names` gives ("decision", "proba_1",
    "prediction", ...). Every feature's expression is written out where a score
    is used (no subquery), so the text works in any SELECT over the table.
    ``columns``: the table's column kinds and types (without them, numbers are
    read with ``TRY_CAST`` and categories compared as written) and the dialect:
    Spark SQL writes the same expression with Spark's identifiers and its own
    test for a finite number.
    """
    columns = columns or Columns({}, {})
    xs = [
        _number(f.coding.column, columns)
        if isinstance(f.coding, GridCoding)
        else _ident(f.coding.column, columns)
        for f in model.features
    ]
    scores = [f"(CAST({s} AS DOUBLE) * {_UNIT})" for s in _unit_sums(model, xs, columns)]
    outputs = _outputs(model, scores)
    if output not in outputs:
        raise InvalidParameterError(
            f"unknown output {output!r}; this model gives {sorted(outputs)}."
        )
    return outputs[output]


def output_names(model: AdditiveModel) -> list[str]:
    """The output columns :func:`scored_select` adds, in order."""
    return list(_outputs(model, [f"f{k}" for k in range(len(model.intercept))]))


def scored_select(model: AdditiveModel, codes: str, keep: Sequence[tuple[str, str]]) -> str:
    """A SELECT of the kept columns and every output over ``codes`` (SQL text).

    ``codes``: a subquery with every feature's code ``c0, c1, ...`` and the kept
    columns (``keep``: (name in ``codes``, output name) pairs). Per output, the
    BIGINT sum of one list look-up per feature (a code past the list is NULL),
    then the outputs: two levels, so nothing is computed twice.
    """
    carried = [name for name, _ in keep]
    sums = []
    for k, intercept in enumerate(model.intercept):
        terms = [f"CAST({int(intercept)} AS BIGINT)"]
        for j, feature in enumerate(model.features):
            values = ", ".join(str(int(v)) for v in feature.values[k])
            terms.append(f"(CAST([{values}] AS BIGINT[]))[c{j} + 1]")
        sums.append(" + ".join(terms))
    names = [f"__dpkit_f{k}" for k in range(len(sums))]
    doubles = [f"CAST({s} AS DOUBLE) * {_UNIT} AS {n}" for s, n in zip(sums, names)]
    second = f"SELECT {', '.join([*carried, *doubles])} FROM ({codes})"
    kept = [f"{name} AS {_sql.quote(out)}" for name, out in keep]
    outputs = [f"{sql} AS {_sql.quote(name)}" for name, sql in _outputs(model, names).items()]
    return f"SELECT {', '.join([*kept, *outputs])} FROM ({second})"
