"""``dpkit inspect FILE --type ...``: what the declared schema makes of a file (NOT private).

For the data owner: the report of :func:`dpkit.tables.inspect.inspect_file` as a
Rich table (or JSON with ``--json``), its first and last line saying that it
is not private. Exit code 0 when nothing was found, 1 when the report lists
problems (so a script can stop before it serves the file), 2 for a bad
command line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from dpkit._cli_options import numbers
from dpkit.errors import InvalidParameterError
from dpkit.tables._cli import declared_types
from dpkit.tables.inspect import NOT_PRIVATE, ColumnReport, FileReport, inspect_file

__all__ = ["inspect_command", "parse_bounds", "parse_domains"]

#: Exit code of a report that lists problems.
PROBLEMS = 1


def parse_bounds(items: Sequence[str] | None) -> dict[str, tuple[float, float]]:
    """``["age=0,120"]`` as ``{"age": (0.0, 120.0)}`` (checked by the report)."""
    out: dict[str, tuple[float, float]] = {}
    for item in items or ():
        name, sep, rest = item.partition("=")
        values = numbers(rest, "--bounds") if sep and name.strip() else []
        if len(values) != 2:
            raise InvalidParameterError("--bounds takes COLUMN=LO,HI, e.g. --bounds age=0,120.")
        out[name.strip()] = (values[0], values[1])
    return out


def parse_domains(items: Sequence[str] | None) -> dict[str, list[str]]:
    """``["sex=f,m"]`` as ``{"sex": ["f", "m"]}``."""
    out: dict[str, list[str]] = {}
    for item in items or ():
        name, sep, rest = item.partition("=")
        if not sep or not name.strip() or not rest:
            raise InvalidParameterError(
                "--domain takes COLUMN=A,B,..., e.g. --domain district=north,south."
            )
        out[name.strip()] = rest.split(",")
    return out


def inspect_command(
    table: Path,
    types: Sequence[str] | None,
    bounds: Sequence[str] | None,
    domains: Sequence[str] | None,
    encoding: str,
    as_json: bool,
    console: Any = None,
) -> int:
    """Print the report; the exit code (0 clean, :data:`PROBLEMS` otherwise)."""
    from rich.console import Console

    report = inspect_file(
        table,
        declared_types(types),
        bounds=parse_bounds(bounds),
        domains=parse_domains(domains),
        encoding=encoding,
    )
    if as_json:
        typer.secho(NOT_PRIVATE, fg=typer.colors.RED, err=True)
        typer.echo(json.dumps(report.to_dict(), indent=2))
        typer.secho(NOT_PRIVATE, fg=typer.colors.RED, err=True)
    else:
        out = console if console is not None else Console()
        out.print(NOT_PRIVATE, style="bold red", highlight=False)
        if report.columns:
            out.print(render(report))
        else:
            out.print(f"{Path(report.path).name}: {report.format}, {report.encoding}: not read.")
        for line in advice(report):
            out.print(line, highlight=False)
        out.print(NOT_PRIVATE, style="bold red", highlight=False)
    return 0 if report.clean else PROBLEMS


def _count(n: int | None, column: ColumnReport, key: str) -> str:
    if n is None:
        return "-"
    shown = column.examples.get(key)
    return f"{n:,}" + (f" (e.g. {', '.join(repr(v) for v in shown)})" if shown else "")


def render(report: FileReport) -> Any:
    """The report's columns as a Rich table."""
    from rich.table import Table

    rows = "rows unknown" if report.rows is None else f"{report.rows:,} rows"
    table = Table(
        title=f"{Path(report.path).name}: {report.format}, {report.encoding}, {rows}",
        caption=(
            "Queries read values that do not parse, and values that are not finite, as "
            "missing; they clip values outside --bounds; values outside --domain are left "
            "out of its categories."
        ),
    )
    for name in ("column", "declared type", "missing", "does not parse", "not finite",
                 "outside --bounds", "not in --domain"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("column", "declared type") else "right")
    for c in report.columns:
        if c.declared is None:
            table.add_row(c.name, f"none (--infer-types: {c.inferred})", f"{c.missing:,}",
                          "-", "-", "-", "-")  # fmt: skip
            continue
        table.add_row(
            c.name,
            c.declared,
            f"{c.missing:,}",
            _count(c.not_parsing, c, "not_parsing"),
            _count(c.not_finite, c, "not_finite") if c.declared in ("DOUBLE", "FLOAT") else "-",
            _count(c.outside_bounds, c, "outside_bounds"),
            _count(c.unknown_categories, c, "unknown_categories"),
        )
    return table


def advice(report: FileReport) -> list[str]:
    """What to do about the problems found, one line each."""
    lines = [f"problem: {p}" for p in report.file_problems]
    undeclared = [c for c in report.columns if c.declared is None]
    if undeclared:
        types = ",".join(f"{c.name}={c.inferred}" for c in undeclared)
        lines.append(
            f"{len(undeclared)} column(s) have no declared type, so queries refuse the file: "
            f"declare every column, e.g. --type {types} (what --infer-types would take from "
            "the rows: check each)."
        )
    if report.clean:
        lines.append(
            "no problems found: every column is declared and every value reads as written."
        )
    return lines
