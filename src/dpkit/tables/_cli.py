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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from dpkit._cli_budget import check_accountant, ledger_options_accountant, planned_payer
from dpkit._cli_options import cli_words
from dpkit._cli_query import QueryOptions
from dpkit.accounting import Accountant, Budget
from dpkit.errors import DPKitError, InvalidParameterError
from dpkit.release import Release
from dpkit.tables.kinds import expected_error
from dpkit.tables.plans import PlannedQuery
from dpkit.tables.results import GroupedRelease
from dpkit.tables.session import Session
from dpkit.tables.sources import UndeclaredTypesError

__all__ = ["declared_types", "query_command"]

#: ``--noise``: the session's noise (:mod:`dpkit.tables.noise`), checked before anything opens.
_NOISES = ("laplace", "gaussian", "auto")


def query_command(
    table: Path,
    query: QueryOptions,
    *,
    source: Mapping[str, Any] | None = None,
    ledger: Mapping[str, Any] | None = None,
    as_json: bool = False,
    out_file: Path | None = None,
    cost: bool = False,
    console: Console | None = None,
) -> int:
    """Run one private query on ``table`` and print it; return the exit code.

    Args:
        table: a CSV or Parquet file.
        query: the query as typed (:class:`~dpkit._cli_query.QueryOptions`):
            its kind, column and options, read against the file's declared
            schema into a :class:`~dpkit.tables.QuerySpec`.
        source: how to open the file (:data:`~dpkit._cli_query.SOURCE`):
            ``types`` (``COLUMN=DUCKDB_TYPE``, one for every column),
            ``infer_types`` (take undeclared types from the file, with a
            ``PrivacyWarning``: they then depend on the data), ``schema`` (a
            JSON/TOML/YAML file: bounds, domains, null policies),
            ``privacy_unit`` and ``max_contributions`` (see Session).
        ledger: which ledger pays (:data:`~dpkit._cli_options.LEDGER`:
            ``ledger``, ``budget``, ``budget_delta``, ``new_ledger`` and
            ``composition``, the ``--accountant`` rule of a new ledger; see
            :mod:`dpkit._cli_budget`). ``source["noise"]`` (``--noise``) is the
            session's noise: laplace, gaussian or auto.
        as_json: print JSON instead of a table.
        cost: only print the query's ledger label and cost as JSON (a dry run:
            nothing is charged or read, no ledger is opened).
        out_file: also save the release, every field, as JSON (checked, with
            every other input, before anything is charged).

    The spec is built and prepared (validated, costed) against the file's
    header before the ledger is opened, so a refused command creates no
    ledger. Errors (bad input, exhausted budget) are printed and give exit
    code 1; their messages never contain data values. A release that cannot
    be saved to ``out_file`` after all is printed in full as JSON, exit code 3.
    """
    from dpkit._cli_output import JSON_SUFFIXES, check_output, deliver

    out = console or Console()
    try:
        check_output(out_file, "--out", JSON_SUFFIXES)
        result = _run(table, query, dict(source or {}), dict(ledger or {}), cost=cost)
    except DPKitError as err:
        message = cli_words(str(err))
        if as_json:
            out.print_json(json.dumps({"error": type(err).__name__, "message": message}))
        else:
            out.print(f"[bold red]{type(err).__name__}:[/] {message}", highlight=False)
        return 1
    if isinstance(result, PlannedQuery):
        planned = {"label": result.label, "epsilon": result.epsilon, "delta": result.delta}
        dry_run = {k: _json_value(v) for k, v in planned.items()}
        dry_run["expected_error"] = expected_error(result.query).to_dict()  # public only
        out.print_json(json.dumps(dry_run))
        return 0
    payload = to_payload(query.kind, query.column, result)
    return deliver(
        payload, console=out, render=lambda: render(payload), out=out_file, as_json=as_json
    )


def _run(
    table: Path,
    query: QueryOptions,
    source: dict[str, Any],
    ledger: dict[str, Any],
    *,
    cost: bool = False,
) -> Release | GroupedRelease | PlannedQuery:
    query.check()
    check_accountant(ledger.get("composition"))
    noise = source.get("noise")
    if noise is not None and noise not in _NOISES:
        raise InvalidParameterError(
            f"--noise must be one of {', '.join(_NOISES[:-1])} or {_NOISES[-1]}; got {noise!r}."
        )
    path = Path(table)
    if not path.is_file():
        raise InvalidParameterError(f"table file {str(path)!r} does not exist.")
    options: dict[str, Any] = dict(
        types=declared_types(source.get("types")),
        infer_types=bool(source.get("infer_types", False)),
        schema=source.get("schema"),
        privacy_unit=source.get("privacy_unit"),
        max_contributions=source.get("max_contributions", 1),
    )
    open_session = Session.from_parquet if path.suffix.lower() == ".parquet" else Session.from_csv
    if source.get("encoding"):
        if open_session is Session.from_parquet:
            raise InvalidParameterError("--encoding applies to CSV files, not Parquet.")
        options["encoding"] = source["encoding"]
    if noise is not None:
        options["noise"] = noise
    # The declaration (types, schema, privacy unit) and the query are checked on the header
    # first, with a throwaway budget, so a refused command creates no ledger and claims no budget.
    stand_in = _stand_in(path, ledger, noise=noise)
    with warnings.catch_warnings():  # announced once, by the real session below
        warnings.simplefilter("ignore")
        try:
            probe = open_session(path, accountant=stand_in, **options)
        except UndeclaredTypesError as err:  # the command line's words, not the library's
            example = " ".join(f"--type {c}=DOUBLE" for c in err.columns[:2])
            raise InvalidParameterError(
                f"columns {err.columns} have no declared type. Column types are public "
                f"metadata the data owner declares: give each with --type COLUMN=TYPE (e.g. "
                f"{example}; or --type a=DOUBLE,b=VARCHAR), or pass --infer-types to take "
                "them from the file (it warns: they are then a function of the data)."
            ) from None
        spec = query.spec(probe.column_kinds)
        planned = probe.prepare(spec)
    if cost:
        return planned
    accountant = ledger_options_accountant(path, ledger)
    return open_session(path, accountant=accountant, **options).answer(spec)


def _stand_in(path: Path, ledger: Mapping[str, Any], *, noise: str | None) -> Accountant:
    """An in-memory accountant with the budget and rule the query will be paid under.

    It costs the query before the real ledger is opened (a Gaussian release's
    cost depends on the payer's δ and rule); nothing is created or charged.
    """
    if noise in (None, "laplace"):
        return Accountant(Budget(1.0))  # a Laplace release costs the same whoever pays
    payer = planned_payer(
        path,
        ledger.get("ledger"),
        ledger.get("budget"),
        ledger.get("budget_delta"),
        ledger.get("composition"),
    )
    if payer is not None:
        total, rule = payer
        if noise == "gaussian" and rule == "basic":
            raise InvalidParameterError(
                "--noise gaussian needs a ledger that composes by zCDP or Renyi DP (--accountant "
                "zcdp or rdp, chosen when the ledger is created); under basic composition every "
                "Gaussian release would be charged its whole (epsilon, delta) and gain nothing. "
                "Use --noise laplace (or auto) with this ledger."
            )
        return Accountant(total, composition=rule)  # type: ignore[arg-type]
    raise InvalidParameterError(
        f"--noise {noise}: the cost of a release with Gaussian noise depends on the ledger's "
        "delta and --accountant, and this file has no ledger yet. Give its total budget "
        "once with --budget, --budget-delta and --accountant zcdp or rdp (e.g. --budget 1 "
        "--budget-delta 1e-6 --accountant rdp)."
    )


def declared_types(items: Sequence[str] | None) -> dict[str, str] | None:
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
        "privacy": result.privacy.to_dict(),
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
