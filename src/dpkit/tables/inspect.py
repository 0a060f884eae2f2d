"""What a declared schema makes of a file, for the data owner: NOT private.

:func:`inspect_file` reads a CSV or Parquet file exactly as a query reads it
(:func:`~dpkit.tables.sources.open_table_file`: the strict CSV reader, the
declared ``encoding``; each value converted to its declared type by
:func:`~dpkit.tables.sources.declared_cast`, ``TRY_CAST``) and counts, per
column, what that conversion and the declared bounds and domains will do to
the rows: values missing, values that do not parse (a query reads them as
missing), values that are not finite, values outside the bounds (a query
clips them), values outside the domain. Columns without a declared type are
listed with the type ``--infer-types`` would take for them.

The report describes the rows exactly and quotes some of them: it is for the
data owner, to find problems before a budget is spent or a service started,
and must never be shown to an analyst. No budget is charged because nothing
here is differentially private.
"""

from __future__ import annotations

import codecs
import csv
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dpkit._checks import check_bounds
from dpkit.errors import DataError, InvalidParameterError
from dpkit.tables.sources import (
    _check_types,
    _csv_header,
    _transcoded,
    declared_cast,
    open_table_file,
    read_csv_text,
)

__all__ = ["NOT_PRIVATE", "ColumnReport", "FileReport", "inspect_file"]

#: The first and last line of every report.
NOT_PRIVATE = (
    "NOT PRIVATE: this report describes the rows of the file exactly. It is for the data "
    "owner; do not share it with analysts."
)

#: Example values shown per problem (the report is the owner's; examples help fix the file).
EXAMPLES = 3
_EXAMPLE_CHARS = 40
#: Ragged lines listed by line number.
_RAGGED_SHOWN = 5
_FLOATS = ("DOUBLE", "FLOAT", "REAL")


@dataclass(frozen=True)
class ColumnReport:
    """What the declaration makes of one column (counts of rows)."""

    name: str
    declared: str | None
    inferred: str | None = None
    missing: int = 0
    not_parsing: int = 0
    not_finite: int = 0
    outside_bounds: int | None = None
    unknown_categories: int | None = None
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def problems(self) -> int:
        """Rows whose value a query will not read as written (plus 1 if undeclared)."""
        return (
            self.not_parsing
            + self.not_finite
            + (self.outside_bounds or 0)
            + (self.unknown_categories or 0)
            + (self.declared is None)
        )


@dataclass(frozen=True)
class FileReport:
    """The whole report: the file, its rows, each column, and problems of the file itself."""

    path: str
    format: str
    encoding: str
    rows: int | None
    columns: list[ColumnReport]
    file_problems: list[str]

    @property
    def clean(self) -> bool:
        """No problem found: every column declared, every value read as written."""
        return not self.file_problems and all(c.problems == 0 for c in self.columns)

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-ready values, the notice first."""
        return {"not_private": NOT_PRIVATE, **asdict(self), "clean": self.clean}


def _encoding_problem(path: Path, encoding: str) -> str | None:
    """Where the file first stops being ``encoding`` text (line number), else None."""
    decoder = codecs.getincrementaldecoder(encoding)()
    line = 1
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            try:
                text = decoder.decode(chunk)
            except UnicodeDecodeError as err:
                line += chunk[: err.start].count(b"\n")
                return (
                    f"line {line} is not valid {encoding} text: give the file's encoding with "
                    "--encoding (e.g. latin-1 or cp1252), or convert the file to UTF-8."
                )
            line += text.count("\n")
    return None


def _ragged_lines(path: Path, encoding: str) -> str:
    """The lines whose field count differs from the header's (why the strict reader refused)."""
    names, delimiter = _csv_header_of(path, encoding)
    bad: list[tuple[int, int]] = []
    count = 0
    with path.open(encoding=encoding, newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        next(reader, None)
        for row in reader:
            if row and len(row) != len(names):
                count += 1
                if len(bad) < _RAGGED_SHOWN:
                    bad.append((reader.line_num, len(row)))
    if not count:
        return (
            "DuckDB's strict reader refused the file although every row has as many fields as "
            "the header: check the quoting (an unclosed quote) and the delimiter."
        )
    where = ", ".join(f"line {n} has {k}" for n, k in bad)
    more = f" and {count - len(bad)} more" if count > len(bad) else ""
    return (
        f"{count} ragged row(s): the header has {len(names)} fields; {where}{more}. Queries "
        "refuse the file until every row has as many fields as the header."
    )


def _why_refused(path: Path, encoding: str, err: DataError) -> str:
    """Why the strict reader refused a CSV file: its ragged rows, or its own message."""
    try:
        return _ragged_lines(path, encoding)
    except DataError as header:  # no usable header row: the reader's message says so
        return str(header) or str(err)


def _csv_header_of(path: Path, encoding: str) -> tuple[list[str], str]:
    if encoding.lower().replace("_", "-") in ("utf-8", "utf8"):
        return _csv_header(path, {}, f"CSV file {path.name!r}")
    copy = _transcoded(path, encoding)
    try:
        return _csv_header(copy, {}, f"CSV file {path.name!r}")
    finally:
        copy.unlink(missing_ok=True)


def _sniffed(con: Any, path: Path, read: Mapping[str, Any], encoding: str) -> dict[str, str]:
    """The types ``--infer-types`` would take (DuckDB's sniffer, as ``Session.from_csv``)."""
    import duckdb

    utf8 = encoding.lower().replace("_", "-") in ("utf-8", "utf8")
    source = path if utf8 else _transcoded(path, encoding)
    try:
        rel = con.read_csv(str(source), **read)
        return {str(c): str(t) for c, t in zip(rel.columns, rel.types)}
    except duckdb.Error:
        return {}
    finally:
        if source is not path:
            source.unlink(missing_ok=True)


def _check_declarations(
    types: Mapping[str, str] | None,
    bounds: Mapping[str, tuple[float, float]] | None,
    domains: Mapping[str, Sequence[str]] | None,
) -> tuple[dict[str, str], dict[str, tuple[float, float]], dict[str, list[str]]]:
    declared = _check_types(dict(types or {}), False)
    checked = {c: check_bounds(b, f"--bounds {c}") for c, b in (bounds or {}).items()}
    for what, names in (("--bounds", checked), ("--domain", domains or {})):
        for c in names:
            if c not in declared:
                raise InvalidParameterError(
                    f"{what} names column {c!r}, which has no declared type: give it with "
                    f"--type {c}=TYPE."
                )
    from dpkit.tables.engines.duckdb_engine import _kind

    for c in checked:
        if _kind(declared[c]) != "numeric":
            raise InvalidParameterError(
                f"--bounds applies to numeric columns; {c!r} is declared {declared[c]}."
            )
    return declared, checked, {c: [str(v) for v in vs] for c, vs in (domains or {}).items()}


def inspect_file(
    path: str | Path,
    types: Mapping[str, str] | None = None,
    *,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    domains: Mapping[str, Sequence[str]] | None = None,
    encoding: str = "utf-8",
) -> FileReport:
    """What the declared ``types``, ``bounds`` and ``domains`` make of a CSV or Parquet file.

    NOT differentially private, and charges nothing: the counts and example
    values describe the rows exactly (see the module doc). The file is read
    as a query reads it, so "does not parse" means what a query will read as
    missing. The declarations are checked first (unknown type names, bounds
    on a non-numeric or undeclared column, unknown column names).
    """
    from dpkit.tables.engines.duckdb_engine import connect

    p = Path(path)
    declared, checked, domain = _check_declarations(types, bounds, domains)
    _known(encoding)
    if not p.is_file():
        raise InvalidParameterError(f"table file {str(p)!r} does not exist.")
    parquet = p.suffix.lower() == ".parquet"
    if not parquet:
        problem = _encoding_problem(p, encoding)
        if problem is not None:
            return FileReport(str(p), "CSV", encoding, None, [], [problem])
    con = connect()
    try:
        read: dict[str, Any] = {}
        try:
            if parquet:
                rel = open_table_file(con, p, encoding)
            else:
                rel, read = read_csv_text(con, p, None, encoding)
        except DataError as err:
            why = str(err) if parquet else _why_refused(p, encoding, err)
            return FileReport(str(p), "Parquet" if parquet else "CSV", encoding, None, [], [why])
        names = [str(c) for c in rel.columns]
        unknown = sorted(set(declared) - set(names))
        if unknown:
            raise InvalidParameterError(
                f"--type names columns the file does not have: {', '.join(unknown)}; its "
                f"columns are {', '.join(names)}."
            )
        own = {c: str(t) for c, t in zip(names, rel.types)}
        undeclared = set(names) - set(declared)
        inferred: dict[str, str] = {}
        if undeclared:
            sniffed = own if parquet else _sniffed(con, p, read, encoding)
            inferred = {c: sniffed.get(c, "unknown") for c in undeclared}
        view = "dpkit_inspect"
        rel.create_view(view)
        columns = [
            _column(con, view, c, own[c], declared.get(c), inferred.get(c), checked.get(c),
                    domain.get(c))
            for c in names
        ]  # fmt: skip
        kind = "Parquet" if parquet else "CSV"
        return FileReport(str(p), kind, encoding, _rows(con, view), columns, [])
    finally:
        con.close()


def _known(encoding: str) -> bool:
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise InvalidParameterError(
            f"unknown encoding {encoding!r}: give a Python codec name such as latin-1, cp1252 "
            "or utf-16."
        ) from None
    return True


def _rows(con: Any, view: str) -> int:
    return int(con.execute(f"SELECT count(*) FROM {view}").fetchall()[0][0])


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _column(
    con: Any,
    view: str,
    name: str,
    own: str,
    declared: str | None,
    inferred: str | None,
    bounds: tuple[float, float] | None,
    domain: list[str] | None,
) -> ColumnReport:
    q = _quote(name)
    missing = f"{q} IS NULL"
    if declared is None:
        (n_missing,) = con.execute(f"SELECT count(*) FILTER ({missing}) FROM {view}").fetchall()[0]
        return ColumnReport(name, None, inferred, missing=int(n_missing))
    value = declared_cast(name, own, declared)
    tests: dict[str, tuple[str, list[Any]]] = {
        "missing": (missing, []),
        "not_parsing": (f"{q} IS NOT NULL AND {value} IS NULL", []),
    }
    if declared in _FLOATS:
        tests["not_finite"] = (f"{value} IS NOT NULL AND NOT isfinite({value})", [])
    if bounds is not None:
        number = f"CAST({value} AS DOUBLE)"
        tests["outside_bounds"] = (
            f"isfinite({number}) AND ({number} < ? OR {number} > ?)",
            [bounds[0], bounds[1]],
        )
    if domain is not None:
        marks = ", ".join(f"TRY_CAST(? AS {declared})" for _ in domain) or "NULL"
        tests["unknown_categories"] = (f"{value} IS NOT NULL AND {value} NOT IN ({marks})", domain)
    counts: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for key, (condition, params) in tests.items():
        (n,) = con.execute(f"SELECT count(*) FROM {view} WHERE {condition}", params).fetchall()[0]
        counts[key] = int(n)
        if n and key != "missing":
            shown = con.execute(
                f"SELECT CAST({q} AS VARCHAR) AS v, count(*) AS n FROM {view} WHERE {condition} "
                f"GROUP BY v ORDER BY n DESC, v LIMIT {EXAMPLES}",
                params,
            ).fetchall()
            examples[key] = [_short(v) for v, _ in shown]
    return ColumnReport(name, declared, inferred, examples=examples, **counts)


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= _EXAMPLE_CHARS else text[: _EXAMPLE_CHARS - 1] + "…"
