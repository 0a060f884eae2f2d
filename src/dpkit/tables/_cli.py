"""``dpkit query TABLE QUERY [COLUMN]``: one private query from the command line.

A plain function, wired into the Typer app by ``dpkit/cli.py``. It opens the
table with DuckDB (``.parquet`` files as Parquet, anything else as CSV), runs
one query through a :class:`~dpkit.tables.Session` and prints the answers with
their confidence intervals as a Rich table, or as JSON with ``as_json``.

Bounds, domains and keys come from the command line or a schema file, never
from the data. Every query pays from a ledger (``--ledger``, or the file's
default ledger), created once with an explicit ``--budget``: see
:mod:`dpkit._cli_budget` for the policy. Column types are declared with
``--type COLUMN=TYPE``, one for every column; ``--infer-types`` takes
undeclared ones from the file instead, with a ``PrivacyWarning``.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from dpkit._cli_budget import open_cli_accountant
from dpkit.accounting import Accountant, Budget
from dpkit.errors import DPKitError, InvalidParameterError
from dpkit.release import Release
from dpkit.tables.filters import parse_where_text
from dpkit.tables.results import GroupedRelease
from dpkit.tables.session import QUERY_KINDS, Session
from dpkit.tables.sources import UndeclaredTypesError

__all__ = ["query_command"]


def query_command(
    table: Path,
    query: str,
    column: str | None = None,
    *,
    epsilon: float,
    bounds: tuple[float, float] | None = None,
    schema: Path | None = None,
    group_by: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    where: Sequence[str] | None = None,
    q: float | None = None,
    bins: int | None = None,
    domain: Sequence[str] | None = None,
    delta: float = 0.0,
    budget: float | None = None,
    budget_delta: float | None = None,
    ledger: Path | None = None,
    privacy_unit: str | None = None,
    max_contributions: int = 1,
    level: float = 0.95,
    as_json: bool = False,
    console: Console | None = None,
    types: Sequence[str] | None = None,
    infer_types: bool = False,
    out_file: Path | None = None,
    new_ledger: bool = False,
) -> int:
    """Run one private query on ``table`` and print it; return the exit code.

    Args:
        table: a CSV or Parquet file.
        query: one of count, sum, mean, variance, std, quantile, median, min,
            max, mode, histogram.
        column: the column (optional for count).
        epsilon: what this query spends.
        bounds: public ``(lo, hi)`` for numeric queries (or in ``schema``).
        schema: a JSON/TOML/YAML schema file (bounds, domains, null policies).
        group_by: group-by columns; ``keys`` lists public keys as text (one
            column: ``A``; several: ``A|x``), or ``["private"]`` for DP
            partition selection (needs ``delta``).
        where: filters such as ``district=A``, ``age>=18``, ``region=N,S``.
        q: the quantile for ``quantile`` (and an optional override for
            ``min``/``max``).
        bins: number of equal-width histogram bins over ``bounds``.
        domain: public categories for ``mode`` / ``histogram``.
        delta: δ this query spends (only with private keys).
        budget, budget_delta: the dataset's total budget, needed once, when its
            ledger is created (see module doc).
        ledger: the ledger file that records spending (default: the file's own).
        types: declared column types, ``COLUMN=DUCKDB_TYPE``, one for every column.
        infer_types: take undeclared columns' types from the file (a
            ``PrivacyWarning``: they then depend on the data).
        privacy_unit, max_contributions: per-person privacy (see Session).
        level: confidence level of the intervals.
        as_json: print JSON instead of a table.
        out_file: also save the release, every field, as JSON (checked, with
            every other input, before anything is charged).
        new_ledger: the owner's explicit decision to give a dataset that has a
            ledger a second one (see :mod:`dpkit._cli_budget`).

    Errors (bad input, exhausted budget) are printed and give exit code 1;
    their messages never contain data values. A release that cannot be saved
    to ``out_file`` after all is printed in full as JSON, exit code 3.
    """
    from dpkit._cli_output import JSON_SUFFIXES, check_output, deliver

    out = console or Console()
    try:
        check_output(out_file, "--out", JSON_SUFFIXES)
        result, _session = _run(
            table,
            query,
            column,
            epsilon=epsilon,
            bounds=bounds,
            schema=schema,
            group_by=group_by,
            keys=keys,
            where=where,
            q=q,
            bins=bins,
            domain=domain,
            delta=delta,
            budget=budget,
            budget_delta=budget_delta,
            ledger=ledger,
            privacy_unit=privacy_unit,
            max_contributions=max_contributions,
            level=level,
            types=types,
            infer_types=infer_types,
            new_ledger=new_ledger,
        )
    except DPKitError as err:
        if as_json:
            out.print_json(json.dumps({"error": type(err).__name__, "message": str(err)}))
        else:
            out.print(f"[bold red]{type(err).__name__}:[/] {err}", highlight=False)
        return 1
    payload = to_payload(query, column, result)
    return deliver(
        payload, console=out, render=lambda: render(payload), out=out_file, as_json=as_json
    )


def _run(
    table: Path,
    query: str,
    column: str | None,
    *,
    epsilon: float,
    bounds: tuple[float, float] | None,
    schema: Path | None,
    group_by: Sequence[str] | None,
    keys: Sequence[str] | None,
    where: Sequence[str] | None,
    q: float | None,
    bins: int | None,
    domain: Sequence[str] | None,
    delta: float,
    budget: float | None,
    budget_delta: float | None,
    ledger: Path | None,
    privacy_unit: str | None,
    max_contributions: int,
    level: float,
    types: Sequence[str] | None = None,
    infer_types: bool = False,
    new_ledger: bool = False,
) -> tuple[Release | GroupedRelease, Session]:
    if query not in QUERY_KINDS:
        raise InvalidParameterError(
            f"unknown query {query!r}; use one of {', '.join(QUERY_KINDS)}."
        )
    path = Path(table)
    if not path.is_file():
        raise InvalidParameterError(f"table file {str(path)!r} does not exist.")
    options: dict[str, Any] = dict(
        types=_types(types),
        infer_types=infer_types,
        schema=schema,
        privacy_unit=privacy_unit,
        max_contributions=max_contributions,
        level=level,
    )
    open_session = Session.from_parquet if path.suffix.lower() == ".parquet" else Session.from_csv
    # The declaration (types, schema, privacy unit) is checked on the header first, with a
    # throwaway budget, so a refused command creates no ledger and claims no budget.
    with warnings.catch_warnings():  # announced once, by the real session below
        warnings.simplefilter("ignore")
        try:
            open_session(path, accountant=Accountant(Budget(1.0)), **options)
        except UndeclaredTypesError as err:  # the command line's words, not the library's
            example = " ".join(f"--type {c}=DOUBLE" for c in err.columns[:2])
            raise InvalidParameterError(
                f"columns {err.columns} have no declared type. Column types are public "
                f"metadata the data owner declares: give each with --type COLUMN=TYPE (e.g. "
                f"{example}; or --type a=DOUBLE,b=VARCHAR), or pass --infer-types to take "
                "them from the file (it warns: they are then a function of the data)."
            ) from None
    accountant = open_cli_accountant(path, ledger, budget, budget_delta, new_ledger)
    session = open_session(path, accountant=accountant, **options)
    kinds = session.column_kinds
    params: dict[str, Any] = {"epsilon": epsilon}
    if where:
        params["where"] = parse_where_text(where, kinds)
    if group_by:
        params["group_by"] = list(group_by)
        if keys:
            params["keys"] = (
                "private" if list(keys) == ["private"] else _keys(keys, group_by, kinds)
            )
        if delta:
            params["delta"] = delta
    elif keys:
        raise InvalidParameterError("--keys needs --group-by.")
    if bounds is not None and query not in ("count", "mode"):
        params["bounds"] = tuple(bounds)
    if q is not None:
        if query not in ("quantile", "min", "max"):
            raise InvalidParameterError("--q applies to quantile, min and max only.")
        params["q"] = q
    elif query == "quantile":
        raise InvalidParameterError("quantile needs --q, e.g. --q 0.9 (or use median).")
    if bins is not None:
        if query != "histogram":
            raise InvalidParameterError("--bins applies to histogram only.")
        params["bins"] = bins
    if domain:
        if query not in ("mode", "histogram"):
            raise InvalidParameterError("--domain applies to mode and histogram only.")
        col_kind = kinds.get(column or "", "text")
        params["domain"] = [_convert(v, column or "", col_kind) for v in domain]
    method = getattr(session, query)
    if query == "count":
        result = method(column, **params)
    else:
        if column is None:
            raise InvalidParameterError(f"{query} needs a column.")
        result = method(column, **params)
    return result, session


def _types(items: Sequence[str] | None) -> dict[str, str] | None:
    """``["age=DOUBLE", "day=DATE,n=DECIMAL(10,2)"]`` as a mapping (declared column types).

    One ``--type`` may list several columns, separated by commas outside parentheses.
    """
    if not items:
        return None
    out: dict[str, str] = {}
    for item in (part for given in items for part in re.split(r",(?![^(]*\))", given)):
        name, sep, type_name = item.strip().partition("=")
        if not sep or not name or not type_name:
            raise InvalidParameterError("--type takes COLUMN=TYPE, e.g. --type age=DOUBLE.")
        out[name] = type_name
    return out


def _convert(raw: str, column: str, kind: str) -> Any:
    if kind == "numeric":
        try:
            number = float(raw)
        except ValueError:
            raise InvalidParameterError(
                f"values for numeric column {column!r} must be numbers."
            ) from None
        return int(number) if number.is_integer() and "." not in raw else number
    if kind == "boolean":
        return raw.lower() == "true"
    return raw


def _keys(keys: Sequence[str], group_by: Sequence[str], kinds: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for text in keys:
        parts = text.split("|")
        if len(parts) != len(group_by):
            raise InvalidParameterError(
                f"key {text!r} must have {len(group_by)} part(s) separated by '|', one per group-by column."
            )
        converted = [_convert(p, c, kinds.get(c, "text")) for p, c in zip(parts, group_by)]
        out.append(converted[0] if len(converted) == 1 else tuple(converted))
    return out


def _json_value(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return [_json_value(v) for v in x.tolist()]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, list | tuple):
        return [_json_value(v) for v in x]
    return x


def to_payload(query: str, column: str | None, result: Release | GroupedRelease) -> dict[str, Any]:
    """A JSON-ready summary of a release (all fields are public)."""
    remaining = result.remaining
    rows: list[dict[str, Any]] = []
    if isinstance(result, GroupedRelease):
        for key in result.keys:
            parts = key if isinstance(key, tuple) else (key,)
            ci = result.ci.get(key)
            rows.append(
                {
                    "group": dict(zip(result.group_by, [_json_value(p) for p in parts])),
                    "value": _json_value(result.value[key]),
                    "ci": None if ci is None else [_json_value(ci[0]), _json_value(ci[1])],
                }
            )
    else:
        ci = result.ci
        rows.append(
            {
                "group": None,
                "value": _json_value(result.value),
                "ci": None if ci is None else [_json_value(ci[0]), _json_value(ci[1])],
            }
        )
    details = {
        k: _json_value(v)
        for k, v in result.details.items()
        if isinstance(v, int | float | str | list | tuple | np.ndarray | np.generic)
        and k != "published"
    }
    return {
        "query": query,
        "column": column,
        "epsilon": result.epsilon,
        "delta": result.delta,
        "level": result.level,
        "mechanism": result.mechanism,
        "remaining": None
        if remaining is None
        else {"epsilon": remaining.epsilon, "delta": remaining.delta},
        "results": rows,
        "details": details,
    }


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:,.4g}" if abs(x) < 1e6 else f"{x:,.0f}"
    if isinstance(x, list):
        return "[" + ", ".join(_fmt(v) for v in x) + "]"
    return str(x)


def render(payload: dict[str, Any]) -> Group:
    """A Rich table of the answers with their intervals and the budget left."""
    title = f"{payload['query']}({payload['column'] or '*'})"
    table = Table(title=title, title_justify="left")
    rows = payload["results"]
    group_cols = list(rows[0]["group"]) if rows and rows[0]["group"] else []
    histogram = payload["query"] == "histogram"
    for c in group_cols:
        table.add_column(c)
    if histogram:
        table.add_column("bin")
    table.add_column("value", justify="right")
    table.add_column(f"{payload['level']:.0%} interval", justify="right")
    labels = _bin_labels(payload["details"]) if histogram else []
    for row in rows:
        prefix = [str(row["group"][c]) for c in group_cols]
        if histogram:
            values = row["value"]
            ci = row["ci"]
            for i, v in enumerate(values):
                interval = "" if ci is None else f"[{_fmt(ci[0][i])}, {_fmt(ci[1][i])}]"
                table.add_row(*prefix, labels[i] if i < len(labels) else str(i), _fmt(v), interval)
        else:
            ci = row["ci"]
            interval = "" if ci is None else f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"
            table.add_row(*prefix, _fmt(row["value"]), interval)
    notes = [
        f"spent ε={payload['epsilon']:g}"
        + (f", δ={payload['delta']:g}" if payload["delta"] else "")
    ]
    rem = payload["remaining"]
    if rem is not None:
        notes.append(f"remaining ε={rem['epsilon']:g}, δ={rem['delta']:g}")
    details = payload["details"]
    if "rank_error" in details:
        notes.append(
            f"rank error ≤ {details['rank_error']:.0f} rows at {payload['level']:.0%} "
            f"(grid step {details['resolution']:g})"
        )
    if "count_error" in details:
        notes.append(
            f"the chosen value's count is within {details['count_error']:.0f} of the mode's"
        )
    if "threshold" in details:
        notes.append(f"keys released when the noisy count ≥ {details['threshold']}")
    if "bounds" in details:
        lo, hi = details["bounds"]
        notes.append(f"values clipped to [{_fmt(lo)}, {_fmt(hi)}]")
    return Group(table, Text("\n".join(notes), style="dim"))


def _bin_labels(details: dict[str, Any]) -> list[str]:
    if "labels" in details:
        return [str(v) for v in details["labels"]]
    edges = details.get("edges") or []
    return [f"[{_fmt(a)}, {_fmt(b)})" for a, b in itertools.pairwise(edges)]
