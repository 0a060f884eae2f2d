"""Boosting through a :class:`dpkit.Session`: every pass is one aggregation inside the engine.

``fit(session, y="label", features=[...])``: the rows never leave the engine.
Every public input is checked here, before the charge (the session's schema,
column kinds, declared categories and classes as values of their columns, the
estimator's parameters); the fit then runs the same loop as the array fit
(``_cyclic.fit_cyclic``) with an :class:`EngineSource`, whose ``code_sums``
sends the current model to the engine as SQL (constant arrays indexed by the
codes) and gets back one row per (feature, code): the exact integer sums of
the loss's g and h (``dpkit.tables.engines.base.BoostingPass``). With
``update="round"`` a round is one such pass for every feature. The fit adds
the code sums up per segment and adds the noise in Python, as the array fit
does: the arithmetic is the array fit's, bit for bit, so on the same rows and
with the same noise both fits give the same model
(``tests/trees/test_boosting_engine.py``). An engine may code the rows once
per fit (DuckDB: a temporary table) and drops them when the fit ends
(:meth:`EngineSource.close`, called whatever happens).

Public metadata: a feature's codes come from the session's schema only: its
declared ``domain`` (categories), else its declared ``bounds`` cut into the
estimator's ``n_cuts`` equally spaced thresholds (the array fit's grid). The
classes come from ``classes=``, else the label column's declared domain; the
regressor's target bounds from ``target_bounds=``, else the label's declared
bounds.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dpkit.errors import InvalidParameterError
from dpkit.tables.engines.base import BoostingPass, Coding, Condition, GridCoding
from dpkit.trees.boosting._cyclic import (
    FULL_GRADIENT,
    GRADIENT_UNIT,
    MAX_FEATURES,
    LogLoss,
    Loss,
    logistic_table,
)
from dpkit.trees.engine._grid import FeatureGrid, check_n_cuts

__all__ = [
    "EngineSource",
    "SessionTable",
    "check_values",
    "is_session",
    "refuse_array_filter",
    "session_table",
]

#: Fit numbers (never 0): the engine keys a fit's coded rows by them.
_FITS = itertools.count(1)


def is_session(value: object) -> bool:
    """Whether ``value`` is a :class:`dpkit.Session` (never imports the tables: if their
    module is not loaded, no Session exists)."""
    module = sys.modules.get("dpkit.tables.session")
    return module is not None and isinstance(value, module.Session)


class SessionTable:
    """A checked session fit's public inputs: the grid, the codings, the label column."""

    def __init__(
        self,
        session: Any,
        label: str,
        grid: FeatureGrid,
        codings: tuple[GridCoding | Coding, ...],
        where: tuple[Condition, ...] = (),
    ) -> None:
        self.session, self.label, self.grid, self.codings = session, label, grid, codings
        self.where = where


def _check_names(session: Any, y: object, features: object) -> tuple[str, list[str]]:
    columns = session.columns
    if not isinstance(y, str) or y not in columns:
        raise InvalidParameterError(
            "fit(session, y=..., features=[...]): y must name the label column of the "
            f"session's table; its columns are {sorted(columns)}."
        )
    if isinstance(features, str) or not isinstance(features, Sequence) or not features:
        raise InvalidParameterError(
            "fit(session, y=..., features=[...]): features must be a non-empty list of column names."
        )
    names = list(features)
    for name in names:
        if not isinstance(name, str) or name not in columns:
            raise InvalidParameterError(
                f"unknown feature column {name!r}; the table's columns are {sorted(columns)}."
            )
    if len(set(names)) != len(names):
        raise InvalidParameterError("features lists a column twice.")
    if y in names:
        raise InvalidParameterError("the label column y cannot also be a feature.")
    if len(names) > MAX_FEATURES:
        raise InvalidParameterError(f"a boosted model takes at most {MAX_FEATURES} features.")
    return y, names


def session_table(
    estimator: Any, session: Any, y: object, features: object, where: object = None
) -> SessionTable:
    """Check everything public about a session fit (before any charge); the grid and codings.

    Refusals (each says what to do): an engine that cannot run a boosting pass
    (DuckDB or Spark); a privacy unit (one person's several rows would move
    a sum by more than one row's bound: not supported yet); ``bounds=`` or
    ``domains=`` on the estimator (the schema is the one source); a feature with
    no declared domain or bounds, or declared with ``nulls="replace"``; another
    accountant than the session's.
    """
    if not hasattr(session.engine, "boosting_sums"):
        raise InvalidParameterError(
            "fit(session, ...) needs an engine that runs boosting passes (DuckDB or Spark); "
            f"this session's engine ({getattr(session.engine, 'name', '?')}) has none. "
            "Fit on arrays, or open the table with a DuckDB or Spark session."
        )
    if session.privacy_unit is not None:
        raise InvalidParameterError(
            "fit(session, ...) does not support a privacy unit yet (a person's several rows "
            "would move each segment sum by more than one row's bound); open a session "
            "without privacy_unit= on a table with one row per person."
        )
    own = estimator.accountant
    if own is not None and own is not session and own is not session.accountant:
        raise InvalidParameterError(
            "fit(session, ...) pays from the session's accountant; create the estimator "
            "without accountant= (or with accountant=session)."
        )
    if estimator.bounds is not None or estimator.domains:
        raise InvalidParameterError(
            "fit(session, ...) reads bounds and domains from the session's schema; create the "
            "estimator without bounds=/domains= and declare them in the schema."
        )
    label, names = _check_names(session, y, features)
    conditions = session.checked_filter(where)  # columns and literals against the schema
    n_cuts = check_n_cuts(estimator.n_cuts)
    kinds = session.column_kinds
    lows = np.full(len(names), np.nan)
    highs = np.full(len(names), np.nan)
    categories: list[tuple[Any, ...] | None] = []
    for j, name in enumerate(names):
        column = session.schema.get(name)
        if column.nulls != "drop":
            raise InvalidParameterError(
                f"feature {name!r} declares nulls='replace'; a boosted model gives missing "
                "values a code of their own instead. Declare it with the default nulls='drop'."
            )
        if column.domain is not None:
            check_values(session, name, column.domain, "domain value")
            categories.append(tuple(column.domain))
        elif column.bounds is not None and kinds.get(name) == "numeric":
            lows[j], highs[j] = (float(b) for b in column.bounds)
            categories.append(None)
        else:
            raise InvalidParameterError(
                f"feature {name!r} has no public codes: declare domain=[...] (categories) or, "
                "for a numeric column, bounds=(lo, hi) in the session's schema."
            )
    grid = FeatureGrid(lows, highs, tuple(categories), n_cuts, tuple(names))
    codings: list[GridCoding | Coding] = []
    for j, name in enumerate(names):
        missing = int(grid.n_bins[j])
        domain = categories[j]
        if domain is not None:
            codings.append(Coding(name, missing, categories=domain))
        else:
            lo, hi = float(lows[j]), float(highs[j])
            coerce = bool(session.schema.get(name).coerce)
            thresholds = tuple(float(t) for t in grid.thresholds(j))
            step = (hi - lo) / (n_cuts + 1)
            # the engines recompute threshold k as lo + k * step: the grid's own arithmetic
            assert thresholds == tuple(lo + float(k) * step for k in range(1, n_cuts + 1))
            codings.append(GridCoding(name, lo, hi, step, thresholds, missing, coerce))
    return SessionTable(session, label, grid, tuple(codings), conditions)


def refuse_array_filter(where: object) -> None:
    """``where=`` filters a session's table; on arrays, the caller filters them."""
    if where is not None:
        raise InvalidParameterError(
            "where= filters the rows of a session's table (fit(session, y=..., features=..., "
            "where=...)); to fit on part of an array, select those rows before calling fit."
        )


def check_values(session: Any, column: str, values: Any, what: str) -> None:
    """Every declared value as a value of ``column``'s type, else an error naming the column.

    The engine compares them by that reading (``tables.values.category_value``),
    where one the column cannot hold (a number for a text column, 0.125 for a
    ``DECIMAL(10,2)``) would match no row: refused here, before the charge.
    """
    from dpkit.tables.values import canonical, numeric_type

    kind, type_name = session.column_kinds[column], session.columns[column]
    for value in values:
        read = canonical(value, column, kind, type_name, what)
        # canonical lets a fraction through for an integer column (it may bound a
        # comparison); as a value to match, it equals no stored integer
        if kind == "numeric" and isinstance(read, float) and not read.is_integer():
            if numeric_type(type_name).family == "integer":
                raise InvalidParameterError(
                    f"a {what} for column {column!r} ({type_name}) is not a whole number, so "
                    "no stored value can equal it; declare the column's own values."
                )


def declared_domain(session: Any, label: str) -> Any:
    """The label column's declared domain, or None."""
    return session.schema.get(label).domain


def declared_bounds(session: Any, label: str) -> Any:
    """The label column's declared bounds, or None."""
    return session.schema.get(label).bounds


class EngineSource:
    """The rows of a session's table: every ``code_sums`` is one engine pass (``boosting_sums``)."""

    def __init__(
        self,
        table: SessionTable,
        loss: Loss,
        *,
        classes: tuple[Any, ...] = (),
        target_bounds: tuple[float, float] | None = None,
    ) -> None:
        self.table, self.loss = table, loss
        self.classes, self.target_bounds = classes, target_bounds
        self.fit = next(_FITS)  # the engine may keep this fit's coded rows until close()
        if isinstance(loss, LogLoss):
            self.kind = "logistic"
            self.drop_missing = False
        else:
            self.kind = "absolute" if loss.absolute else "squared"
            self.drop_missing = True

    def _pass(
        self,
        features: list[int],
        intercept: NDArray[np.int64],
        shapes: list[NDArray[np.int64]],
    ) -> pd.DataFrame:
        p, h = logistic_table() if self.kind == "logistic" else ((), ())
        spec = BoostingPass(
            codings=self.table.codings,
            label=self.table.label,
            loss=self.kind,  # type: ignore[arg-type]
            intercept=int(intercept[0]),
            shapes=tuple(tuple(int(v) for v in s[:, 0]) for s in shapes),
            keys=tuple(features),
            classes=self.classes,
            positive=1 if len(self.classes) == 2 else None,
            target_bounds=self.target_bounds,
            drop_missing=self.drop_missing,
            probabilities=tuple(int(v) for v in p),
            hessians=tuple(int(v) for v in h),
            where=self.table.where,
            fit=self.fit,
            gradient_limit=getattr(self.loss, "gradient_limit", FULL_GRADIENT),
        )
        # The session's lock: a pass sets the model on the connection, then reads it.
        frame: pd.DataFrame = self.table.session.guarded_engine.boosting_sums(spec)
        return frame

    def rows(self) -> int:
        """The rows the fit uses (one pass at the starting model)."""
        n_bins = self.table.grid.n_bins
        zeros = [np.zeros((int(b), 1), dtype=np.int64) for b in n_bins]
        frame = self._pass([0], np.zeros(1, np.int64), zeros)
        return int(frame["n"].sum()) if len(frame) else 0

    def code_sums(
        self,
        features: list[int],
        intercept: NDArray[np.int64],
        shapes: list[NDArray[np.int64]],
    ) -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
        frame = self._pass(features, intercept, shapes)
        feature = frame["feature"].to_numpy(dtype=np.int64)
        code = frame["code"].to_numpy(dtype=np.int64)
        g_units = frame["g"].to_numpy(dtype=np.int64)
        h_units = frame["h"].to_numpy(dtype=np.int64)
        out = []
        for j in features:
            rows = feature == j
            n = int(shapes[j].shape[0])
            g, h = np.zeros((n, 1)), np.zeros((n, 1))
            g[code[rows], 0] = g_units[rows] * GRADIENT_UNIT
            h[code[rows], 0] = h_units[rows] * GRADIENT_UNIT
            out.append((g, h))
        return out

    def moved(self, feature: int, intercept: NDArray[np.int64], shape: NDArray[np.int64]) -> None:
        """Nothing to keep: the next pass sends the whole model."""

    def close(self) -> None:
        """Let the engine drop what it kept for this fit (its coded rows)."""
        engine = self.table.session.guarded_engine
        if hasattr(engine, "boosting_done"):
            engine.boosting_done(self.fit)
