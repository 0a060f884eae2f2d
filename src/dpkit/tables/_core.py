"""Validation and execution of table queries (the private half of :class:`~dpkit.tables.Session`).

Each query is *prepared* first: public parameters are validated and the cost
is fixed, with no data read. The prepared query holds a ``run`` closure that
makes exactly one engine pass (two with ``bounds="private"``: one release for
the bounds, one for the answer), adds noise through :mod:`dpkit.mechanisms`
and assembles the result. The session charges the accountant between the two
steps, so a refused query never reaches the engine.
"""

from __future__ import annotations

import itertools
import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from dpkit._checks import check_bounds, check_delta, check_epsilon, check_level, exact
from dpkit.errors import DataError, InvalidParameterError
from dpkit.release import Release
from dpkit.tables import queries as Q
from dpkit.tables.batch import Parallel, Query, _Prepared
from dpkit.tables.engines.base import ColumnKind, Condition, Contribution, Engine, Rows, Value
from dpkit.tables.filters import parse_where
from dpkit.tables.results import GroupedRelease
from dpkit.tables.schema import Column, Schema

#: ``histogram(method=...)`` values delegated to :mod:`dpkit.histograms`.
HISTOGRAM_METHODS = ("laplace", "hierarchical", "noise_first", "structure_first")

QUERY_KINDS = (
    "count",
    "sum",
    "mean",
    "variance",
    "std",
    "quantile",
    "median",
    "min",
    "max",
    "mode",
    "histogram",
)

Result = Release | GroupedRelease
Bounds = tuple[float, float] | str | None


@dataclass(frozen=True)
class _Grouping:
    columns: tuple[str, ...]
    values: tuple[Value, ...]
    keys: tuple[tuple[Any, ...], ...] | None  # None: private partition selection

    @property
    def private(self) -> bool:
        return self.keys is None


def _key_out(key: tuple[Any, ...]) -> Any:
    return key[0] if len(key) == 1 else key


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _selection_split(grouping: _Grouping | None, epsilon: float) -> tuple[float, float]:
    """(epsilon for private partition selection, epsilon for the answers).

    Keys found privately pay ``SELECTION_FRACTION`` of epsilon for the noisy
    counts that decide which keys are released; public keys pay nothing.
    """
    if grouping is not None and grouping.private:
        first, second = Q.split_epsilon(epsilon, [Q.SELECTION_FRACTION, 1 - Q.SELECTION_FRACTION])
        return first, second
    return 0.0, epsilon


class _SessionCore:
    """State and private machinery shared by every query of a session."""

    _engine: Engine
    _kinds: dict[str, ColumnKind]
    _schema: Schema
    _level: float
    _k: int
    _rng: Any
    _contribution: Contribution | None
    _accountant: Any

    def _execute(self, prepared: _Prepared) -> Result:
        from dpkit.accounting import Budget

        self._accountant.charge(Budget(prepared.epsilon, prepared.delta), prepared.label)
        return _with_remaining(prepared.run(self._rng), self._accountant.remaining)

    def _prepare_query(self, query: Query) -> _Prepared:
        if not isinstance(query, Query):
            raise InvalidParameterError("expected a Query.")
        return self._prepare(query.kind, query.column, dict(query.params))

    def _prepare_parallel(self, group: Parallel) -> tuple[_Prepared, ...]:
        if self._contribution is not None:
            raise InvalidParameterError(
                "Parallel needs a row-level session: with a privacy unit one person's rows can "
                "match several filters. Use group_by instead; it bounds each person's rows "
                "across all groups at once."
            )
        if len(group.queries) < 2:
            raise InvalidParameterError("Parallel needs at least two queries.")
        prepared = tuple(self._prepare_query(q) for q in group.queries)
        conds = [parse_where(q.params.get("where"), self._kinds) for q in group.queries]
        if any(q.params.get("keys") == "private" for q in group.queries):
            raise InvalidParameterError("Parallel members cannot use private keys.")
        self._check_disjoint(conds)
        return prepared

    @staticmethod
    def _check_disjoint(conds: Sequence[tuple[Condition, ...]]) -> None:
        """Find a column every member restricts to a value set, pairwise disjoint."""

        def value_sets(cs: tuple[Condition, ...]) -> dict[str, set[Any]]:
            out: dict[str, set[Any]] = {}
            for c in cs:
                vals = {c.value} if c.op == "==" else set(c.value) if c.op == "in" else None
                if vals is not None:
                    out[c.column] = out[c.column] & vals if c.column in out else vals
            return out

        sets = [value_sets(cs) for cs in conds]
        shared = set.intersection(*(set(s) for s in sets)) if sets else set()
        for column in sorted(shared):
            members = [s[column] for s in sets]
            if all(not (a & b) for a, b in itertools.combinations(members, 2)):
                return
        raise InvalidParameterError(
            "Parallel queries must filter the same column by equality or membership with no "
            "value in common (e.g. where={'district': 'A'} and where={'district': 'B'}); "
            "these filters could overlap, so they would compose sequentially."
        )

    def _prepare(self, kind: str, column: str | None, params: dict[str, Any]) -> _Prepared:
        if kind not in QUERY_KINDS:
            raise InvalidParameterError(
                f"unknown query {kind!r}; use one of {', '.join(QUERY_KINDS)}."
            )
        if kind in ("median", "min", "max"):
            default_q = {"median": 0.5, "min": Q.MIN_QUANTILE, "max": Q.MAX_QUANTILE}[kind]
            if kind == "median" and "q" in params:
                raise InvalidParameterError("median() takes no q; use quantile(column, q).")
            params = {"q": params.pop("q", default_q), **params}
            kind_impl = "quantile"
        else:
            kind_impl = kind
        allowed = _PARAMS[kind_impl]
        unknown = set(params) - allowed
        if unknown:
            raise InvalidParameterError(
                f"{kind}() got unexpected argument(s) {sorted(unknown)}; it takes {sorted(allowed)}."
            )
        if "epsilon" not in params:
            raise InvalidParameterError(
                f"{kind}() needs epsilon=, the privacy budget this query spends."
            )
        epsilon = check_epsilon(params["epsilon"])
        level = self._level if params.get("level") is None else check_level(params["level"])
        if column is None and kind != "count":
            raise InvalidParameterError(f"{kind}() needs a column.")
        if column is not None:
            self._check_column(column)
        where = parse_where(params.get("where"), self._kinds)
        grouping = self._grouping(params.get("group_by"), params.get("keys"), column)
        delta = params.get("delta", 0.0) or 0.0
        check_delta(delta)
        if grouping is not None and grouping.private:
            check_delta(delta, allow_zero=False, name="delta (needed by keys='private')")
        elif delta:
            raise InvalidParameterError(
                f"{kind}() spends no delta unless keys='private' (partition selection); drop delta=."
            )
        builder = getattr(self, f"_build_{kind_impl}")
        label = _label(kind, column, params, where, grouping)
        run = builder(
            column=column,
            epsilon=epsilon,
            delta=float(delta),
            level=level,
            rows=Rows(where=where, contribution=self._contribution),
            grouping=grouping,
            params=params,
        )
        return _Prepared(label=label, epsilon=epsilon, delta=float(delta), run=run)

    # -- internals: validation ----------------------------------------------------------

    def _load_schema(
        self, schema: Schema | Mapping[str, Any] | str | PathLike[str] | None
    ) -> Schema:
        if schema is None:
            out = Schema()
        elif isinstance(schema, Schema):
            out = schema
        elif isinstance(schema, Mapping):
            out = Schema.from_dict(schema)
        elif isinstance(schema, str | PathLike):
            out = Schema.load(schema)
        else:
            raise InvalidParameterError(
                "schema must be a Schema, a mapping or a path to a schema file."
            )
        for name in out.columns:
            self._check_column(name, "the schema")
        return out

    def _check_column(self, name: object, where: str = "the query") -> str:
        if not isinstance(name, str) or name not in self._kinds:
            raise InvalidParameterError(
                f"unknown column {name!r} in {where}; the table's columns are {sorted(self._kinds)}."
            )
        return name

    def _numeric_value(self, column: str, bounds: tuple[float, float] | None) -> Value:
        spec = self._schema.get(column)
        kind = self._kinds[column]
        if kind == "text" and not spec.coerce:
            raise DataError(
                f"column {column!r} is stored as text ({self._engine.column_types()[column]}), so it "
                "has no numbers to aggregate. Clean the source, or declare coerce=True for it in "
                "the schema to read entries that are not numbers as missing (handled by its null "
                "policy)."
            )
        if kind not in ("numeric", "boolean", "text"):
            raise DataError(
                f"column {column!r} has type {self._engine.column_types()[column]}, which is not "
                "numeric; numeric queries need numbers or booleans."
            )
        if spec.nulls == "replace" and not isinstance(spec.replacement, int | float):
            raise InvalidParameterError(
                f"the replacement for missing values of numeric column {column!r} must be a number."
            )
        return Value(
            column,
            numeric=True,
            nulls=spec.nulls,
            replacement=float(spec.replacement) if spec.nulls == "replace" else None,
            coerce=spec.coerce and kind == "text",
            bounds=bounds,
        )

    def _category_value(self, column: str) -> Value:
        spec = self._schema.get(column)
        return Value(column, numeric=False, nulls=spec.nulls, replacement=spec.replacement)

    def _wants_private_bounds(self, bounds: Bounds, *, allow_private: bool) -> bool:
        """True for ``bounds="private"`` (where allowed); any other string is an error."""
        if not isinstance(bounds, str):
            return False
        if bounds != "private" or not allow_private:
            accepted = "(lo, hi) or 'private'" if allow_private else "(lo, hi)"
            hint = (
                ""
                if allow_private
                else " bounds='private' is accepted by sum, mean, variance and std."
            )
            raise InvalidParameterError(f"bounds must be {accepted}, got {bounds!r}.{hint}")
        return True

    def _bounds(
        self, column: str, bounds: Bounds, *, allow_private: bool = False
    ) -> tuple[float, float]:
        """Public clipping bounds: the argument, else the schema's, else a how-to error."""
        if isinstance(bounds, str):
            self._wants_private_bounds(bounds, allow_private=False)  # raises: explains the options
        if bounds is not None:
            return check_bounds(bounds)
        declared = self._schema.get(column).bounds
        if declared is not None:
            return declared
        private_hint = (
            ", or pass bounds='private' to spend part of epsilon finding them"
            if allow_private
            else ""
        )
        raise InvalidParameterError(
            f"column {column!r} has no public bounds. dpkit never takes bounds from the data "
            f"(that would leak it): pass bounds=(lo, hi) to the query, declare them in the "
            f"schema (Column({column!r}, bounds=(lo, hi))){private_hint}."
        )

    def _domain(self, column: str, domain: Sequence[Any] | None, what: str) -> tuple[Any, ...]:
        if domain is not None:
            return Column(column, domain=tuple(domain)).domain  # type: ignore[return-value]
        declared = self._schema.get(column).domain
        if declared is None:
            raise InvalidParameterError(
                f"{what} needs the public list of values of column {column!r}: pass domain=[...] "
                f"or declare it in the schema (Column({column!r}, domain=[...])). It cannot be read "
                "from the data: a rare value's presence would leak."
            )
        return declared

    def _grouping(self, group_by: Any, keys: Any, column: str | None) -> _Grouping | None:
        if group_by is None:
            if keys is not None:
                raise InvalidParameterError("keys= needs group_by=.")
            return None
        cols = (group_by,) if isinstance(group_by, str) else tuple(group_by)
        if not cols:
            raise InvalidParameterError("group_by must name at least one column.")
        for c in cols:
            self._check_column(c, "group_by")
        if len(set(cols)) != len(cols):
            raise InvalidParameterError("group_by lists a column twice.")
        values = tuple(self._category_value(c) for c in cols)
        if isinstance(keys, str):
            if keys != "private":
                raise InvalidParameterError(
                    "keys must be a list of group keys, 'private' (partition selection), or omitted "
                    "(the schema's domains)."
                )
            return _Grouping(cols, values, None)
        if keys is None:
            domains = [self._schema.get(c).domain for c in cols]
            if any(d is None for d in domains):
                missing = [c for c, d in zip(cols, domains) if d is None]
                raise InvalidParameterError(
                    f"group_by needs the public keys of {missing}: pass keys=[...], declare a domain "
                    "in the schema, or pass keys='private' with delta=... to select keys by DP "
                    "partition selection."
                )
            key_list = list(itertools.product(*domains))  # type: ignore[arg-type]
        else:
            if isinstance(keys, str | bytes) or not isinstance(keys, Sequence | set | frozenset):
                raise InvalidParameterError("keys must be a list of group keys.")
            key_list = []
            for k in keys:
                key = tuple(k) if isinstance(k, tuple | list) else (k,)
                if len(key) != len(cols):
                    raise InvalidParameterError(
                        f"each key must have {len(cols)} part(s), one per group_by column."
                    )
                key_list.append(key)
            if not key_list:
                raise InvalidParameterError("keys is empty.")
            if len(set(key_list)) != len(key_list):
                raise InvalidParameterError("keys lists a key twice.")
        return _Grouping(cols, values, tuple(key_list))

    # -- internals: randomness ------------------------------------------------------------

    @staticmethod
    def _make_rng(rng: object) -> Any:
        if rng is None or isinstance(rng, np.random.Generator):
            return rng
        if isinstance(rng, int | np.integer) and not isinstance(rng, bool):
            return np.random.default_rng(int(rng))
        from dpkit.mechanisms import as_source

        return as_source(rng)

    def _draw_salt(self) -> int:
        if self._rng is None:
            return secrets.randbits(62)
        if isinstance(self._rng, np.random.Generator):
            return int(self._rng.integers(0, 2**62))
        return int(self._rng.generator().integers(0, 2**62))

    # -- internals: shared steps ----------------------------------------------------------

    def _group_rows(self, rows: Rows, grouping: _Grouping | None) -> Rows:
        """Push public keys into the filter (smaller results); only for drop-null group columns."""
        if grouping is None or grouping.keys is None:
            return rows
        extra = []
        for i, value in enumerate(grouping.values):
            if value.nulls == "drop":
                vals = tuple(dict.fromkeys(_plain(k[i]) for k in grouping.keys))
                extra.append(Condition(value.column, "in", vals))
        return Rows(where=rows.where + tuple(extra), contribution=rows.contribution)

    def _frame_by_key(
        self, frame: pd.DataFrame, grouping: _Grouping, columns: Sequence[str]
    ) -> tuple[list[tuple[Any, ...]], dict[str, NDArray[Any]]]:
        """Aggregates aligned to keys: the public keys (absent ones as 0) or the observed ones."""
        gcols = [f"_g{i}" for i in range(len(grouping.columns))]
        if grouping.keys is not None:
            keys = list(grouping.keys)
            index = (
                pd.MultiIndex.from_tuples(keys)
                if len(gcols) > 1
                else pd.Index([k[0] for k in keys])
            )
            indexed = frame.set_index(gcols if len(gcols) > 1 else gcols[0])
            aligned = indexed.reindex(index)
            out = {c: aligned[c].fillna(0).to_numpy() for c in columns}
            return keys, out
        observed = [
            tuple(_plain(v) for v in row) for row in frame[gcols].itertuples(index=False, name=None)
        ]
        order = _sorted_order(observed)
        return [observed[i] for i in order], {c: frame[c].to_numpy()[order] for c in columns}

    def _select(
        self, counts: NDArray[Any], epsilon: float, delta: float, level: float
    ) -> tuple[NDArray[np.bool_], NDArray[np.int64], float]:
        """DP partition selection: noisy counts (geometric, ε, sensitivity k) ≥ threshold."""
        from dpkit.mechanisms import Geometric

        counts_i = np.asarray(counts, dtype=np.int64)
        threshold = Q.partition_threshold(epsilon, delta, self._k)
        if counts_i.size == 0:
            return np.zeros(0, dtype=bool), counts_i, 0.0
        mech = Geometric(epsilon=epsilon, sensitivity=self._k, size=counts_i.size)
        noisy = np.asarray(mech.randomise(counts_i, rng=self._rng), dtype=np.int64).reshape(-1)
        return noisy >= threshold, noisy, mech.half_width(level)

    def _private_bounds(self, column: str, rows: Rows, epsilon: float) -> tuple[float, float]:
        """Estimate clipping bounds from a noisy histogram over a public coarse grid (ε-DP).

        One pass counts the values by coarse bin (``±2**j`` edges, or the
        schema's ``coarse_range``); each row is in one bin, so geometric
        noise of scale ``k/ε`` makes the counts ε-DP, and the bounds
        (:func:`~dpkit.tables.queries.private_bounds`) are post-processing.
        """
        from dpkit.mechanisms import Geometric

        grid = Q.coarse_grid(self._schema.get(column).coarse_range)
        value = self._numeric_value(column, (float(grid[0]), float(grid[-1])))
        frame = self._engine.bin_counts(rows, value, (), list(grid))
        counts = np.zeros(grid.size - 1, dtype=np.int64)
        counts[frame["bin"].to_numpy(dtype=np.int64)] = frame["n"].to_numpy(dtype=np.int64)
        mech = Geometric(epsilon=epsilon, sensitivity=self._k, size=counts.size)
        noisy = np.asarray(mech.randomise(counts, rng=self._rng)).reshape(-1)
        threshold = Q.private_bounds_threshold(epsilon, counts.size, self._k)
        return Q.private_bounds(noisy, grid, threshold)

    def _resolve_clip(
        self, column: str, params: Mapping[str, Any], epsilon: float
    ) -> tuple[float, float]:
        """Validate bounds now; return (epsilon for private bounds or 0, epsilon for the query)."""
        self._numeric_value(column, None)  # type checks before any charge
        if self._wants_private_bounds(params.get("bounds"), allow_private=True):
            eps_bounds, eps_rest = Q.split_epsilon(
                epsilon, [Q.PRIVATE_BOUNDS_FRACTION, 1 - Q.PRIVATE_BOUNDS_FRACTION]
            )
            return eps_bounds, eps_rest
        self._bounds(column, params.get("bounds"), allow_private=True)
        return 0.0, epsilon

    # -- internals: builders (validate now, return a runner) -----------------------------

    def _build_count(
        self,
        *,
        column: str | None,
        epsilon: float,
        delta: float,
        level: float,
        rows: Rows,
        grouping: _Grouping | None,
        params: Mapping[str, Any],
    ) -> Callable[[Any], Result]:
        value = None
        if column is not None:
            spec = self._schema.get(column)
            numeric = self._kinds[column] in ("numeric",)
            value = Value(
                column,
                numeric=numeric,
                nulls=spec.nulls,
                replacement=(
                    float(spec.replacement)
                    if numeric and spec.nulls == "replace"
                    else spec.replacement
                ),
            )

        def run(_: Any) -> Result:
            from dpkit.mechanisms import Geometric

            frame = self._engine.moments(
                self._group_rows(rows, grouping), value, grouping.values if grouping else ()
            )
            if grouping is None:
                keys: list[tuple[Any, ...]] = [()]
                counts = np.array([int(frame["n"].iloc[0]) if len(frame) else 0], dtype=np.int64)
            else:
                keys, cols = self._frame_by_key(frame, grouping, ["n"])
                counts = cols["n"].astype(np.int64)
            details: dict[str, Any] = {"sensitivity": self._k}
            if grouping is not None and grouping.private:
                keep, noisy, h = self._select(counts, epsilon, delta, level)
                details["threshold"] = Q.partition_threshold(epsilon, delta, self._k)
            else:
                mech = Geometric(epsilon=epsilon, sensitivity=self._k, size=max(counts.size, 1))
                noisy = np.asarray(mech.randomise(counts, rng=self._rng), dtype=np.int64).reshape(
                    -1
                )
                h = mech.half_width(level)
                keep = np.ones(counts.size, dtype=bool)
                details["scale"] = mech.scale
            details["half_width"] = h
            values = [int(v) for v in noisy[keep]]
            cis = [(max(v - h, 0.0), v + h) for v in values]
            if grouping is None:
                return Release(
                    value=values[0],
                    epsilon=epsilon,
                    ci=cis[0],
                    level=level,
                    mechanism="geometric",
                    details=details,
                )
            kept = [key for key, ok in zip(keys, keep) if ok]
            return _grouped(
                grouping, kept, values, cis, epsilon, delta, level, "geometric", details
            )

        return run

    def _build_sum(self, **kw: Any) -> Callable[[Any], Result]:
        return self._build_moments("sum", **kw)

    def _build_mean(self, **kw: Any) -> Callable[[Any], Result]:
        return self._build_moments("mean", **kw)

    def _build_variance(self, **kw: Any) -> Callable[[Any], Result]:
        return self._build_moments("variance", **kw)

    def _build_std(self, **kw: Any) -> Callable[[Any], Result]:
        return self._build_moments("std", **kw)

    def _build_moments(
        self,
        kind: str,
        *,
        column: str,
        epsilon: float,
        delta: float,
        level: float,
        rows: Rows,
        grouping: _Grouping | None,
        params: Mapping[str, Any],
    ) -> Callable[[Any], Result]:
        eps_bounds, eps_query = self._resolve_clip(column, params, epsilon)
        private_bounds = eps_bounds > 0
        private_keys = grouping is not None and grouping.private
        k = self._k
        power = {"sum": 1, "mean": 1, "variance": 2, "std": 2}[kind]
        if not private_bounds:  # checked now, before anything is charged
            _check_moment_range(self._bounds(column, params.get("bounds")), kind, power)

        def run(_: Any) -> Result:
            from dpkit.mechanisms import Geometric, Laplace

            if private_bounds:
                bounds = self._private_bounds(column, rows, eps_bounds)
            else:
                bounds = self._bounds(column, params.get("bounds"))
            lo, hi = bounds
            value = self._numeric_value(column, (lo, hi))
            center, radius = _moment_scale(bounds, kind)
            # Per-row values are summed as integers on a 2**-j grid (exact); a row's
            # rounded term is at most radius**p + grid/2 in absolute value.
            grids = [Q.sum_grid(radius**p) for p in range(1, power + 1)]
            bound = [radius**p + g / 2 for p, g in zip(range(1, power + 1), grids)]
            frame = self._engine.moments(
                self._group_rows(rows, grouping),
                value,
                grouping.values if grouping else (),
                center,
                grids,
            )
            if grouping is None:
                keys: list[tuple[Any, ...]] = [()]
                cols = {
                    c: frame[c].to_numpy()[:1] if len(frame) else np.zeros(1)
                    for c in ["n", *[f"s{p}" for p in range(1, power + 1)]]
                }
            else:
                keys, cols = self._frame_by_key(
                    frame, grouping, ["n", *[f"s{p}" for p in range(1, power + 1)]]
                )
            n = cols["n"].astype(np.int64)
            for p, g in enumerate(grids, start=1):
                cols[f"s{p}"] = cols[f"s{p}"].astype(np.float64) * g  # exact: g is a power of 2
            size = max(len(keys), 1)
            details: dict[str, Any] = {"bounds": (lo, hi), "sensitivity_factor": k}
            if private_bounds:
                details["bounds_epsilon"] = eps_bounds
            keep = np.ones(len(keys), dtype=bool)

            if kind == "sum":
                eps_sel, eps_sum = _selection_split(grouping, eps_query)
                if private_keys:
                    keep, _, _ = self._select(n, eps_sel, delta, level)
                    details["threshold"] = Q.partition_threshold(eps_sel, delta, k)
                mech = Laplace(epsilon=eps_sum, sensitivity=k * bound[0], size=size)
                noisy = np.asarray(
                    mech.randomise(cols["s1"].astype(np.float64), rng=self._rng)
                ).reshape(-1)
                h = mech.half_width(level)
                values = noisy
                cis = [(float(v) - h, float(v) + h) for v in noisy]
                details.update(half_width=h, scale=mech.scale)
                mechanism = "laplace"
            elif kind == "mean":
                eps_sum, eps_count = Q.mean_split(eps_query)
                c_mech = Geometric(epsilon=eps_count, sensitivity=k, size=size)
                noisy_n = np.asarray(c_mech.randomise(n, rng=self._rng), dtype=np.float64).reshape(
                    -1
                )
                if private_keys:
                    threshold = Q.partition_threshold(eps_count, delta, k)
                    keep = noisy_n >= threshold
                    details["threshold"] = threshold
                s_mech = Laplace(epsilon=eps_sum, sensitivity=k * bound[0], size=size)
                noisy_s = np.asarray(
                    s_mech.randomise(cols["s1"].astype(np.float64), rng=self._rng)
                ).reshape(-1)
                part = 1 - (1 - level) / 2
                h_s, h_n = s_mech.half_width(part), c_mech.half_width(part)
                values = Q.mean_estimate(noisy_s, noisy_n, (lo, hi))
                ci_lo, ci_hi = Q.mean_interval(noisy_s, noisy_n, h_s, h_n, (lo, hi))
                cis = list(zip(ci_lo.tolist(), ci_hi.tolist()))
                details["epsilon_split"] = {"sum": eps_sum, "count": eps_count}
                if grouping is None:
                    details["noisy_count"] = float(noisy_n[0])
                mechanism = "laplace+geometric"
            else:
                eps_q, eps_s, eps_c = Q.variance_split(eps_query)
                c_mech = Geometric(epsilon=eps_c, sensitivity=k, size=size)
                noisy_n = np.asarray(c_mech.randomise(n, rng=self._rng), dtype=np.float64).reshape(
                    -1
                )
                if private_keys:
                    threshold = Q.partition_threshold(eps_c, delta, k)
                    keep = noisy_n >= threshold
                    details["threshold"] = threshold
                s_mech = Laplace(epsilon=eps_s, sensitivity=k * bound[0], size=size)
                q_mech = Laplace(epsilon=eps_q, sensitivity=k * bound[1], size=size)
                noisy_s = np.asarray(
                    s_mech.randomise(cols["s1"].astype(np.float64), rng=self._rng)
                ).reshape(-1)
                noisy_q = np.asarray(
                    q_mech.randomise(cols["s2"].astype(np.float64), rng=self._rng)
                ).reshape(-1)
                part = 1 - (1 - level) / 3
                hq, hs, hn = (
                    q_mech.half_width(part),
                    s_mech.half_width(part),
                    c_mech.half_width(part),
                )
                values = Q.variance_estimate(noisy_q, noisy_s, noisy_n, (lo, hi))
                v_lo, v_hi = Q.variance_interval(noisy_q, noisy_s, noisy_n, hq, hs, hn, (lo, hi))
                if kind == "std":
                    values, v_lo, v_hi = np.sqrt(values), np.sqrt(v_lo), np.sqrt(v_hi)
                cis = list(zip(v_lo.tolist(), v_hi.tolist()))
                details.update(epsilon_split={"squares": eps_q, "sum": eps_s, "count": eps_c})
                mechanism = "laplace+geometric"
            if grouping is None:
                return Release(
                    value=float(values[0]),
                    epsilon=epsilon,
                    ci=cis[0],
                    level=level,
                    mechanism=mechanism,
                    details=details,
                )
            return _grouped(
                grouping,
                [key for key, ok in zip(keys, keep) if ok],
                [float(v) for v, ok in zip(values, keep) if ok],
                [c for c, ok in zip(cis, keep) if ok],
                epsilon,
                delta,
                level,
                mechanism,
                details,
            )

        return run

    def _build_quantile(
        self,
        *,
        column: str,
        epsilon: float,
        delta: float,
        level: float,
        rows: Rows,
        grouping: _Grouping | None,
        params: Mapping[str, Any],
    ) -> Callable[[Any], Result]:
        q = params.get("q")
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0 <= float(q) <= 1:
            raise InvalidParameterError(f"q must be a number in [0, 1], got {q!r}.")
        q = float(q)
        # One row moves both utility terms by at most max(q, 1 - q) (queries.quantile_utilities).
        sensitivity = self._k * max(q, 1.0 - q)
        lo, hi = self._bounds(column, params.get("bounds"))
        grid_size = params.get("grid_size")
        if grid_size is None:
            grid_size = Q.QUANTILE_GRID if grouping is None else Q.GROUPED_QUANTILE_GRID
        grid = Q.uniform_grid((lo, hi), grid_size)
        step = (hi - lo) / (grid.size - 1)
        value = self._numeric_value(column, (lo, hi))
        k = self._k
        private_keys = grouping is not None and grouping.private
        eps_sel, eps_em = _selection_split(grouping, epsilon)

        def run(_: Any) -> Result:
            from dpkit.mechanisms import permute_and_flip

            frame = self._engine.grid_counts(
                self._group_rows(rows, grouping),
                value,
                grouping.values if grouping else (),
                lo,
                step,
                grid.size,
            )
            n_codes = 2 * grid.size - 1
            keys, matrix = self._matrix(frame, grouping, "code", n_codes)
            details: dict[str, Any] = {
                "q": q,
                "bounds": (lo, hi),
                "resolution": step,
                "rank_error": Q.em_rank_error(eps_em, sensitivity, grid.size, level),
            }
            keep = np.ones(len(keys), dtype=bool)
            if private_keys:
                keep, _, _ = self._select(matrix.sum(axis=1), eps_sel, delta, level)
                details["threshold"] = Q.partition_threshold(eps_sel, delta, k)
                keys = [key for key, ok in zip(keys, keep) if ok]
                matrix = matrix[keep]
            if matrix.shape[0] == 0:
                return _grouped(grouping, [], [], [], epsilon, delta, level, _PF, details)
            utilities = Q.quantile_utilities(matrix, q)
            # Permute-and-flip: ε-DP like the exponential mechanism, never a worse
            # expected utility, one pass whatever the data (McKenna & Sheldon 2020).
            chosen = np.atleast_1d(
                permute_and_flip(utilities, epsilon=eps_em, sensitivity=sensitivity, rng=self._rng)
            )
            values = grid[chosen]
            if grouping is None:
                return Release(
                    value=float(values[0]),
                    epsilon=epsilon,
                    ci=None,
                    level=level,
                    mechanism=_PF,
                    details=details,
                )
            return _grouped(
                grouping,
                keys,
                [float(v) for v in values],
                [None] * len(keys),
                epsilon,
                delta,
                level,
                _PF,
                details,
            )

        return run

    def _matrix(
        self, frame: pd.DataFrame, grouping: _Grouping | None, column: str, width: int
    ) -> tuple[list[tuple[Any, ...]], NDArray[np.float64]]:
        """Counts as a (groups × width) matrix; one row of zeros per absent public key."""
        idx = frame[column].to_numpy(dtype=np.int64)
        counts = frame["n"].to_numpy(dtype=np.float64)
        if grouping is None:
            matrix = np.zeros((1, width))
            matrix[0, idx] = counts
            return [()], matrix
        gcols = [f"_g{i}" for i in range(len(grouping.columns))]
        observed = [
            tuple(_plain(v) for v in row) for row in frame[gcols].itertuples(index=False, name=None)
        ]
        if grouping.keys is not None:
            keys = list(grouping.keys)
        else:
            distinct = list(dict.fromkeys(observed))
            keys = [distinct[i] for i in _sorted_order(distinct)]
        position = {key: i for i, key in enumerate(keys)}
        rows_ix = np.array([position.get(key, -1) for key in observed], dtype=np.int64)
        present = rows_ix >= 0
        matrix = np.zeros((len(keys), width))
        matrix[rows_ix[present], idx[present]] = counts[present]
        return keys, matrix

    def _build_mode(
        self,
        *,
        column: str,
        epsilon: float,
        delta: float,
        level: float,
        rows: Rows,
        grouping: _Grouping | None,
        params: Mapping[str, Any],
    ) -> Callable[[Any], Result]:
        domain = self._domain(column, params.get("domain"), "mode()")
        value = self._category_value(column)
        k = self._k
        private_keys = grouping is not None and grouping.private
        eps_sel, eps_em = _selection_split(grouping, epsilon)

        def run(_: Any) -> Result:
            from dpkit.mechanisms import exponential

            frame = self._engine.value_counts(
                self._group_rows(rows, grouping), value, grouping.values if grouping else (), domain
            )
            frame = frame.assign(slot=_positions(frame["value"], domain))
            keys, matrix = self._matrix(frame, grouping, "slot", len(domain))
            # Monotonic utilities: P ∝ exp(ε u / Δ); P[u <= OPT - (Δ/ε)(ln|D| + t)] <= e^-t.
            details: dict[str, Any] = {
                "domain": domain,
                "count_error": k / eps_em * math.log(len(domain) / (1 - level)),
            }
            if private_keys:
                keep, _, _ = self._select(matrix.sum(axis=1), eps_sel, delta, level)
                details["threshold"] = Q.partition_threshold(eps_sel, delta, k)
                keys = [key for key, ok in zip(keys, keep) if ok]
                matrix = matrix[keep]
            if matrix.shape[0] == 0:
                return _grouped(grouping, [], [], [], epsilon, delta, level, "exponential", details)
            chosen = np.atleast_1d(
                exponential(matrix, epsilon=eps_em, sensitivity=k, monotonic=True, rng=self._rng)
            )
            labels = [domain[i] for i in chosen]
            if grouping is None:
                return Release(
                    value=labels[0],
                    epsilon=epsilon,
                    ci=None,
                    level=level,
                    mechanism="exponential",
                    details=details,
                )
            return _grouped(
                grouping,
                keys,
                labels,
                [None] * len(keys),
                epsilon,
                delta,
                level,
                "exponential",
                details,
            )

        return run

    def _build_histogram(
        self,
        *,
        column: str,
        epsilon: float,
        delta: float,
        level: float,
        rows: Rows,
        grouping: _Grouping | None,
        params: Mapping[str, Any],
    ) -> Callable[[Any], Result]:
        method = params.get("method")
        if method is not None and method not in HISTOGRAM_METHODS:
            raise InvalidParameterError(
                f"method must be one of {HISTOGRAM_METHODS} or None, got {method!r}."
            )
        edges_arg, bins, bounds_arg, domain_arg = (
            params.get("edges"),
            params.get("bins"),
            params.get("bounds"),
            params.get("domain"),
        )
        spec = self._schema.get(column)
        categorical = domain_arg is not None or (
            edges_arg is None
            and bins is None
            and bounds_arg is None
            and spec.domain is not None
            and spec.edges is None
        )
        k = self._k
        domain: tuple[Any, ...] | None = None
        edges: tuple[float, ...] | None = None
        if categorical:
            if edges_arg is not None or bins is not None or bounds_arg is not None:
                raise InvalidParameterError(
                    "give either domain= (categories) or edges=/bins= (numbers), not both."
                )
            domain = self._domain(column, domain_arg, "histogram()")
            value = self._category_value(column)
        else:
            if edges_arg is not None:
                if bins is not None or bounds_arg is not None:
                    raise InvalidParameterError("give edges=, or bins= with bounds=, not both.")
                edges = Column(column, edges=tuple(edges_arg)).edges
            elif bins is not None:
                if isinstance(bins, bool) or not isinstance(bins, int | np.integer) or bins < 1:
                    raise InvalidParameterError(f"bins must be an integer >= 1, got {bins!r}.")
                lo, hi = self._bounds(column, bounds_arg)
                edges = tuple(np.linspace(lo, hi, int(bins) + 1).tolist())
            elif spec.edges is not None:
                edges = spec.edges
            else:
                raise InvalidParameterError(
                    f"histogram() of {column!r} needs public bins: edges=[...], bins= with bounds=(lo, hi), "
                    "domain=[...] for categories, or edges/domain declared in the schema."
                )
            assert edges is not None
            value = self._numeric_value(column, (edges[0], edges[-1]))
        private_keys = grouping is not None and grouping.private
        eps_sel, eps_hist = _selection_split(grouping, epsilon)
        if method is not None:
            import importlib

            try:
                publish = getattr(importlib.import_module("dpkit.histograms"), method)
            except (ImportError, AttributeError):
                raise InvalidParameterError(
                    f"histogram method {method!r} needs dpkit.histograms, which is not available."
                ) from None

        def run(_: Any) -> Result:
            from dpkit.mechanisms import Geometric

            g_values = grouping.values if grouping else ()
            g_rows = self._group_rows(rows, grouping)
            if domain is not None:
                frame = self._engine.value_counts(g_rows, value, g_values, domain)
                frame = frame.assign(slot=_positions(frame["value"], domain))
                width = len(domain)
                details: dict[str, Any] = {"labels": list(domain)}
            else:
                assert edges is not None
                frame = self._engine.bin_counts(g_rows, value, g_values, edges).rename(
                    columns={"bin": "slot"}
                )
                width = len(edges) - 1
                details = {"edges": list(edges)}
            keys, matrix = self._matrix(frame, grouping, "slot", width)
            if private_keys:
                keep, _, _ = self._select(matrix.sum(axis=1), eps_sel, delta, level)
                details["threshold"] = Q.partition_threshold(eps_sel, delta, k)
                keys = [key for key, ok in zip(keys, keep) if ok]
                matrix = matrix[keep]
            counts = matrix.astype(np.int64)
            values: list[Any] = []
            cis: list[Any] = []
            if method is not None:
                eps_unit = float(exact(eps_hist) / k)  # group privacy: k-row changes
                for row in counts:
                    kwargs = {"rng": self._rng}
                    if edges is not None:
                        kwargs["edges"] = np.asarray(edges)
                    published = publish(row, eps_unit, **kwargs)
                    values.append(np.asarray(published.estimates))
                    cis.append(None)
                details.update(
                    method=method, published=published if grouping is None and values else None
                )
                mechanism = method
            elif counts.shape[0]:
                mech = Geometric(epsilon=eps_hist, sensitivity=k, size=counts.size)
                noisy = np.asarray(
                    mech.randomise(counts.reshape(-1), rng=self._rng), dtype=np.int64
                ).reshape(counts.shape)
                h = mech.half_width(level)
                for row in noisy:
                    values.append(row)
                    cis.append((np.maximum(row - h, 0.0), row + h))
                details.update(half_width=h, scale=mech.scale)
                mechanism = "geometric"
            else:
                mechanism = "geometric"
            if grouping is None:
                return Release(
                    value=values[0],
                    epsilon=epsilon,
                    ci=cis[0],
                    level=level,
                    mechanism=mechanism,
                    details=details,
                )
            return _grouped(grouping, keys, values, cis, epsilon, delta, level, mechanism, details)

        return run


# ----------------------------------------------------------------------------- helpers

_PF = "permute-and-flip"
_COMMON = {"epsilon", "where", "group_by", "keys", "delta", "level"}
_PARAMS: dict[str, set[str]] = {
    "count": _COMMON,
    "sum": _COMMON | {"bounds"},
    "mean": _COMMON | {"bounds"},
    "variance": _COMMON | {"bounds"},
    "std": _COMMON | {"bounds"},
    "quantile": _COMMON | {"bounds", "q", "grid_size"},
    "mode": _COMMON | {"domain"},
    "histogram": _COMMON | {"edges", "bins", "bounds", "domain", "method"},
}


def _moment_scale(bounds: tuple[float, float], kind: str) -> tuple[float, float]:
    """(center, radius) of a moment's terms: a sum is centred at 0, the others at the middle."""
    lo, hi = bounds
    center = 0.0 if kind == "sum" else (lo + hi) / 2
    return center, max(abs(lo - center), abs(hi - center))


def _check_moment_range(bounds: tuple[float, float], kind: str, power: int) -> None:
    """Refuse bounds whose terms overflow or underflow the sums' grid (before any charge)."""
    lo, hi = bounds
    center, radius = _moment_scale(bounds, kind)
    try:
        # sum_grid(v) is about v / 2**20 and the engines scale by its inverse: keep both normal.
        ok = math.isfinite(center) and all(
            math.isfinite(radius**p) and radius**p >= 2.0**-1000 for p in range(1, power + 1)
        )
    except OverflowError:
        ok = False
    if not ok:
        raise InvalidParameterError(
            f"bounds ({lo!r}, {hi!r}) are out of range for a {kind}: the clipped values"
            f"{' or their squares' if power == 2 else ''} overflow or underflow a double. "
            "Declare bounds in other units (e.g. thousands, or millionths)."
        )


def _sorted_order(keys: Sequence[tuple[Any, ...]]) -> list[int]:
    """Indices that sort observed keys (engines return groups in no fixed order)."""
    try:
        return sorted(range(len(keys)), key=lambda i: keys[i])
    except TypeError:  # mixed types: order by their text
        return sorted(range(len(keys)), key=lambda i: repr(keys[i]))


def _positions(values: pd.Series, domain: Sequence[Any]) -> NDArray[np.int64]:
    """Index of each (observed) value in the public domain."""
    lookup = {v: i for i, v in enumerate(domain)}
    return np.array([lookup[_plain(v)] for v in values], dtype=np.int64)


def _grouped(
    grouping: _Grouping | None,
    keys: Sequence[tuple[Any, ...]],
    values: Sequence[Any],
    cis: Sequence[Any],
    epsilon: float,
    delta: float,
    level: float,
    mechanism: str,
    details: dict[str, Any],
) -> GroupedRelease:
    assert grouping is not None
    out_keys = tuple(_key_out(k) for k in keys)
    return GroupedRelease(
        group_by=grouping.columns,
        keys=out_keys,
        value=dict(zip(out_keys, values)),
        ci=dict(zip(out_keys, cis)),
        epsilon=epsilon,
        delta=delta,
        level=level,
        mechanism=mechanism,
        details={**details, "groups": len(out_keys), "composition": "parallel"},
    )


def _with_remaining(result: Result, remaining: Any) -> Result:
    from dataclasses import replace

    return replace(result, remaining=remaining)


def _label(
    kind: str,
    column: str | None,
    params: Mapping[str, Any],
    where: tuple[Condition, ...],
    grouping: _Grouping | None,
) -> str:
    """A ledger label from public parameters only."""
    text = f"{kind}({column or '*'})"
    if "q" in params and kind == "quantile":
        text = f"quantile({column}, q={params['q']})"
    if where:
        text += " where " + " and ".join(
            f"{c.column} {c.op}" + ("" if c.value is None else f" {c.value!r}") for c in where
        )
    if grouping is not None:
        text += f" by {', '.join(grouping.columns)}"
        text += (
            " (private keys)"
            if grouping.private
            else f" ({len(grouping.keys or ())} groups, parallel)"
        )
    return text
