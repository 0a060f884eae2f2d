"""``dpkit synth FILE --rows N --epsilon E --out table.parquet``: a DP synthetic table of a file.

A plain function, wired into the Typer app by ``dpkit/cli.py``. It opens the
file as ``dpkit query`` does (the same ``--type``, ``--schema``,
``--infer-types`` and ``--encoding``; per-column ``--bounds COLUMN=LO,HI`` and
``--domain COLUMN=A,B`` as ``dpkit inspect`` reads them), pays from the file's
ledger as every verb does (:mod:`dpkit._cli_budget`) and calls
:meth:`dpkit.tables.Session.synthesize`.

The order is the guarantee's structure. Everything that can be checked
without the rows is checked first, and a refusal opens no ledger and spends
nothing: the outputs (kind, directory, an existing file without ``--force``),
the ledger options, then the whole call — columns, declared domains, rows,
ε/ρ, workload, the ``synth`` extra — by running ``Session.synthesize`` over
the file's header with a stand-in payer that stops it at the charge
(:class:`_StopAtCharge`). Only then is the ledger opened and the real call
made: charge, measure, fit, sample. After the charge the table and its report
are written (atomically); what is printed depends only on public parameters
and released values.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from dpkit._cli_budget import (
    check_accountant,
    default_ledger,
    ledger_options_accountant,
    open_cli_accountant,
    planned_payer,
)
from dpkit._cli_output import NOT_SAVED, atomic_write, check_output, json_safe
from dpkit._cli_query import kinds_of_types
from dpkit.accounting import Accountant, Budget
from dpkit.errors import BudgetExceededError, DPKitError, InvalidParameterError
from dpkit.tables import Session
from dpkit.tables._cli import declared_types
from dpkit.tables._cli_inspect import parse_bounds, parse_domains
from dpkit.tables.schema import Schema
from dpkit.tables.sources import UndeclaredTypesError

__all__ = [
    "SYNTH_WORDS",
    "TABLE_SUFFIXES",
    "report_dict",
    "report_path",
    "synth_command",
    "synth_words",
]

#: What ``--out`` can write (by suffix).
TABLE_SUFFIXES = (".parquet", ".csv")


def report_path(out: Path) -> Path:
    """Where the report of ``out`` goes: ``NAME.report.json`` beside it."""
    return out.with_suffix(".report.json")


class _Charged(Exception):
    """Raised by :class:`_StopAtCharge` at the charge: the checks passed (nothing was read)."""

    def __init__(self, cost: Budget, label: str) -> None:
        super().__init__(label)
        self.cost = cost
        self.label = label


class _StopAtCharge(Accountant):
    """An in-memory payer with the real one's budget and rule that stops the call at its charge.

    ``Session.synthesize`` validates every public input before it charges and
    reads the rows only after: run against this payer it refuses what it would
    refuse, or reaches the charge and stops there, having read nothing.
    """

    def charge(self, cost: Any, label: str, *, event: Any = None) -> Any:
        raise _Charged(Budget.coerce(cost, "cost"), label)


#: ``Session.synthesize``'s advice in Python words and this verb's flags for it (applied before
#: the words every verb shares, :func:`dpkit._cli_options.cli_words`).
SYNTH_WORDS: tuple[tuple[str, str], ...] = (
    (r"declare domain=\[\.\.\.\] \(categories\) or bounds=\(lo, hi\) \(numbers\) for it in the "
     r"schema, or leave it out with columns=\[\.\.\.\]",
     "declare --domain COLUMN=A,B (categories) or --bounds COLUMN=LO,HI (numbers) for it, or "
     "in a --schema file, or leave it out by naming the other columns with --column"),
    (r"with domain=\[\.\.\.\] instead", "with --domain COLUMN=A,B instead"),
    (r"coerce=True to read", '"coerce": true in a --schema file to read'),
    (r"give exactly one of epsilon= \(with delta=, an \(ε, δ\) guarantee\) or rho= \(ρ-zCDP\)",
     "give exactly one of --epsilon (with --delta) or --rho"),
    (r"give delta= \(e\.g\. 1e-9\), or open the session with a budget delta > 0",
     "give --delta (e.g. 1e-9), or pay from a ledger created with --budget-delta"),
    (r"use method='aim' to give a workload", "use --method aim to give a --workload"),
    (r"^(rows|rho|method|workload|bins) ", r"--\1 "),
    (r"^columns must be a list of column names \(or None: all\)",
     "--column must name columns (or leave it out: all)"),
    (r"^columns lists", "--column lists"),
    (r"each workload entry", "each --workload entry"),
    (r"a larger rho \(or epsilon\)", "a larger --rho (or --epsilon)"),
)  # fmt: skip


def synth_words(message: str) -> str:
    """``message`` with ``Session.synthesize``'s Python advice in this verb's flags."""
    import re

    for pattern, flag in SYNTH_WORDS:
        message = re.sub(pattern, flag, message)
    return message


def synth_command(
    table: Path,
    *,
    out: Path,
    rows: int,
    method: str = "mst",
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    columns: Sequence[str] | None = None,
    bins: int = 16,
    workload: Sequence[str] | None = None,
    force: bool = False,
    source: Mapping[str, Any] | None = None,
    declared: Mapping[str, Any] | None = None,
    ledger: Mapping[str, Any] | None = None,
    seed: int | None = None,
    cost: bool = False,
) -> int:
    """Write a DP synthetic table of ``table`` to ``out`` and its report beside it; the exit code.

    Guarantee: that of :meth:`dpkit.tables.Session.synthesize` (ρ-zCDP under
    add/remove one row, charged once to the file's ledger as its (ε, δ)
    conversion); the progress lines and the report on stderr are public
    parameters and released values only. Refusals raise
    :class:`~dpkit.errors.DPKitError` before any ledger is opened.
    ``cost=True`` prints the charge as JSON and stops (nothing opened or read).
    """
    try:
        return _synth(
            table, out=out, rows=rows, method=method, epsilon=epsilon, delta=delta, rho=rho,
            columns=columns, bins=bins, workload=workload, force=force, source=source,
            declared=declared, ledger=ledger, seed=seed, cost=cost,
        )  # fmt: skip
    except DPKitError as err:  # in this verb's words (the message is public input only)
        raise type(err)(synth_words(str(err))) from None


def _synth(
    table: Path,
    *,
    out: Path,
    rows: int,
    method: str,
    epsilon: float | None,
    delta: float | None,
    rho: float | None,
    columns: Sequence[str] | None,
    bins: int,
    workload: Sequence[str] | None,
    force: bool,
    source: Mapping[str, Any] | None,
    declared: Mapping[str, Any] | None,
    ledger: Mapping[str, Any] | None,
    seed: int | None,
    cost: bool,
) -> int:
    source, declared, ledger = dict(source or {}), dict(declared or {}), dict(ledger or {})
    check_accountant(ledger.get("composition"))
    out = Path(out)
    report_file = report_path(out)
    if not cost:
        _check_outputs(out, report_file, force)
    path = Path(table)
    if not path.is_file():
        raise InvalidParameterError(f"table file {str(path)!r} does not exist.")
    options = _session_options(path, source, declared)
    call: dict[str, Any] = dict(
        rows=rows,
        epsilon=epsilon,
        delta=delta,
        rho=rho,
        columns=_names(columns),
        bins=bins,
        workload=_workload(workload),
    )
    charge, label = _check_call(path, method, options, call, ledger, cost=cost)
    if cost:
        typer.echo(json.dumps({"label": label, **_budget(charge)}))
        return 0
    accountant = ledger_options_accountant(path, ledger)
    try:
        session = _open(path, options, accountant)
        typer.echo(
            f"dpkit synth: {method}, {rows:,} rows, charging ε={charge.epsilon:g}, "
            f"δ={charge.delta:g} to {accountant.ledger_path or 'the ledger'}",
            err=True,
        )
        result = session.synthesize(method, rng=seed, progress=_Progress(), **call)
    finally:
        accountant.close()
    report = report_dict(result)
    _print_report(report)
    return _write(result.table, out, report, report_file)


def _check_outputs(out: Path, report_file: Path, force: bool) -> None:
    check_output(out, "--out", TABLE_SUFFIXES)
    check_output(report_file, "--out (its report)", None)
    for target in (out, report_file):
        if target.exists() and not force:
            raise InvalidParameterError(
                f"{str(target)!r} exists; give --force to overwrite it, or another --out."
            )


def _names(columns: Sequence[str] | None) -> list[str] | None:
    """``--column a --column b,c`` as ``["a", "b", "c"]`` (None: every column)."""
    if not columns:
        return None
    return [c.strip() for given in columns for c in given.split(",") if c.strip()]


def _workload(items: Sequence[str] | None) -> list[tuple[str, ...]] | None:
    """``--workload a,b --workload c`` as ``[("a", "b"), ("c",)]`` (None: AIM's default)."""
    if not items:
        return None
    return [tuple(c.strip() for c in item.split(",")) for item in items]


def _session_options(
    path: Path, source: Mapping[str, Any], declared: Mapping[str, Any]
) -> dict[str, Any]:
    """How to open the file: the declared types and schema, ``--bounds`` and ``--domain`` in it."""
    types = declared_types(source.get("types"))
    schema = Schema.load(source["schema"]) if source.get("schema") else Schema()
    for name, bounds in parse_bounds(declared.get("bounds")).items():
        schema = schema.updated(name, bounds=bounds)
    kinds = kinds_of_types(types or {})
    for name, values in parse_domains(declared.get("domains")).items():
        schema = schema.updated(name, domain=[_value(v, kinds.get(name)) for v in values])
    options: dict[str, Any] = dict(
        types=types, infer_types=bool(source.get("infer_types", False)), schema=schema
    )
    if source.get("encoding"):
        if path.suffix.lower() == ".parquet":
            raise InvalidParameterError("--encoding applies to CSV files, not Parquet.")
        options["encoding"] = source["encoding"]
    return options


def _value(text: str, kind: str | None) -> Any:
    """A ``--domain`` category read by its column's declared kind."""
    if kind == "boolean":
        return text.strip().lower() == "true"
    if kind != "numeric":
        return text
    try:
        number = float(text)
    except ValueError:
        raise InvalidParameterError(
            "--domain values of a numeric column must be numbers."
        ) from None
    return int(number) if number.is_integer() and "." not in text else number


def _open(path: Path, options: Mapping[str, Any], accountant: Accountant) -> Session:
    opener = Session.from_parquet if path.suffix.lower() == ".parquet" else Session.from_csv
    try:
        return opener(path, accountant=accountant, **options)
    except UndeclaredTypesError as err:  # the command line's words, not the library's
        example = " ".join(f"--type {c}=DOUBLE" for c in err.columns[:2])
        raise InvalidParameterError(
            f"columns {err.columns} have no declared type. Give each with --type COLUMN=TYPE "
            f"(e.g. {example}), or pass --infer-types to take them from the file (it warns)."
        ) from None


def _check_call(
    path: Path,
    method: str,
    options: Mapping[str, Any],
    call: Mapping[str, Any],
    ledger: Mapping[str, Any],
    *,
    cost: bool = False,
) -> tuple[Budget, str]:
    """Run the call up to its charge against a stand-in payer: its cost, or its refusal.

    With ``cost`` (a dry run) and ``--delta``, a file without a ledger is costed too: the
    charge then depends on nothing the ledger holds.
    """
    payer = planned_payer(
        path,
        ledger.get("ledger"),
        ledger.get("budget"),
        ledger.get("budget_delta"),
        ledger.get("composition"),
    )
    # Without a payer yet, the call is still checked (against a stand-in budget) so that its own
    # mistakes are reported first; then the missing ledger is, unless a dry run with --delta
    # needs nothing from it.
    total, rule = payer if payer is not None else (Budget(1.0, 1e-6), "basic")
    stand_in = _StopAtCharge(total, composition=rule)  # type: ignore[arg-type]
    with warnings.catch_warnings():  # announced once, by the real session
        warnings.simplefilter("ignore")
        probe = _open(path, options, stand_in)
        try:
            probe.synthesize(method, **call)
        except _Charged as charged:
            if payer is None and not (cost and call.get("delta") is not None):
                # no ledger and no --budget: this refuses, saying how to create one
                open_cli_accountant(path, ledger.get("ledger"), None, None)
                raise InvalidParameterError("this file has no ledger: give --budget.") from None
            if payer is not None and rule == "basic" and not cost:
                _check_affordable(path, ledger.get("ledger"), total, charged.cost)
            return charged.cost, charged.label
    raise AssertionError("Session.synthesize returned without charging")  # pragma: no cover


def _check_affordable(path: Path, ledger: Path | None, total: Budget, cost: Budget) -> None:
    """Under basic composition, refuse a charge the ledger would refuse, before it is opened.

    (Advisory, as :meth:`Accountant.can_afford`: the charge itself is the authority.)
    """
    where = Path(ledger) if ledger is not None else default_ledger(path)
    payer = Accountant.from_ledger(where) if where.exists() else Accountant(total)
    try:
        if not payer.can_afford(cost):
            raise BudgetExceededError(
                f"this synthetic table costs epsilon={float(cost.epsilon):.6g}, "
                f"delta={float(cost.delta):.3g}; the ledger has epsilon="
                f"{float(payer.remaining.epsilon):.6g}, delta={float(payer.remaining.delta):.3g} "
                "left (a synthetic table spends delta > 0: a ledger needs --budget-delta).",
                requested=cost,
                remaining=payer.remaining,
            )
    finally:
        payer.close()


def _budget(cost: Budget) -> dict[str, float]:
    return {"epsilon": float(cost.epsilon), "delta": float(cost.delta)}


class _Progress:
    """Each step's start and end on stderr, with its count and time (public parameters only).

    AIM's rounds are shown one by one (each refits the model: the slow part).
    """

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, step: str, done: int, total: int) -> None:
        if done == 0:
            self.started = time.monotonic()
            bound = " (at most)" if step == "rounds" else ""
            typer.echo(f"  {step}: {total}{bound} ...", err=True)
        elif step == "rounds" or done == total:
            seconds = time.monotonic() - self.started
            typer.echo(f"  {step}: {done}/{total} done ({seconds:.1f} s)", err=True)


def report_dict(result: Any) -> dict[str, Any]:
    """The report of a synthetic table as JSON-ready values (public parameters, released values)."""
    report = result.report
    errors = [
        {"columns": list(columns), "expected_l1_error": error}
        for columns, error in report.errors.items()
    ]
    known = [e["expected_l1_error"] for e in errors if e["expected_l1_error"] is not None]
    return json_safe(
        {
            "method": report.method,
            "rows": report.rows,
            "columns": list(result.table.columns),
            "privacy": result.privacy.to_dict(),
            "rho_by_step": dict(report.steps),
            "marginals": [
                {
                    "columns": list(m.columns),
                    "sigma": m.sigma,
                    "rho": m.rho,
                    "counts": m.counts,
                    "merges": {c: list(v) for c, v in m.merges.items()},
                }
                for m in report.marginals
            ],
            "selected": [list(s) for s in report.selected],
            "selection_epsilons": list(report.selection_epsilons)
            or [report.selection_epsilon] * len(report.selected),
            "workload_errors": errors,
            "mean_expected_l1_error": sum(known) / len(known) if known else None,
            "cells": {name: list(labels) for name, labels in report.cells.items()},
            "edges": {name: list(edges) for name, edges in report.edges.items()},
        }
    )


def _print_report(report: Mapping[str, Any]) -> None:
    privacy = report["privacy"]
    lines = [
        f"method: {report['method']}; {report['rows']:,} rows of {', '.join(report['columns'])}",
        f"guarantee: rho={privacy['rho']:.6g}-zCDP, i.e. (epsilon={privacy['epsilon']:.6g}, "
        f"delta={privacy['delta']:.3g})-DP, {privacy['neighbouring']}",
        f"marginals measured ({len(report['marginals'])}, discrete Gaussian noise):",
    ]
    for m in report["marginals"]:
        lines.append(f"  {' x '.join(m['columns'])}: sigma={m['sigma']:.4g} (rho={m['rho']:.3g})")
    if report["selected"]:
        chosen = "; ".join(" x ".join(s) for s in report["selected"])
        lines.append(f"selected privately: {chosen}")
    mean = report["mean_expected_l1_error"]
    if mean is not None:
        covered = sum(e["expected_l1_error"] is not None for e in report["workload_errors"])
        lines.append(
            f"workload: mean expected L1 error {mean:.4g} counts over the {covered} of "
            f"{len(report['workload_errors'])} marginals a measurement covers"
        )
    left = privacy["remaining"]
    if left is not None:
        lines.append(f"budget left: epsilon={left['epsilon']:.6g}, delta={left['delta']:.3g}")
    typer.echo("\n".join(lines), err=True)


def _write(frame: Any, out: Path, report: Mapping[str, Any], report_file: Path) -> int:
    """Write the paid table and its report; if the disk fails, print them (exit code 3)."""
    text = json.dumps(report, indent=2, allow_nan=False)
    try:
        if out.suffix.lower() == ".parquet":
            atomic_write(out, lambda p: frame.to_parquet(p, index=False))
        else:
            atomic_write(out, lambda p: frame.to_csv(p, index=False))
        atomic_write(report_file, lambda p: p.write_text(text + "\n", encoding="utf-8"))
    except OSError as err:
        typer.echo(
            f"error: cannot write {out} ({err.strerror or err}); the table was made and is "
            "printed in full (CSV, then its report).",
            err=True,
        )
        typer.echo(frame.to_csv(index=False))
        typer.echo(text)
        return NOT_SAVED
    typer.echo(f"{out}\n{report_file}")
    return 0
