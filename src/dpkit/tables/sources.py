"""Sources: opening files, frames and databases as DuckDB relations, without quoting data.

Every failure to open a source is re-raised with a message that names the
source and never the engine's own text (which can quote file contents).

Column types are public metadata, so they come from the data owner's
declaration (``types=``), never from the rows: every source is projected
through one per-value conversion to the declared types (:func:`_as_declared`,
:func:`_spark_as_declared`), where a value that does not fit is missing (SQL
NULL, then the column's null policy) instead of an error at query time, which
could happen on one neighbour only, after the charge. Types taken from the
source itself are an explicit opt-in (``infer_types=True``), announced with a
:class:`~dpkit.errors.PrivacyWarning`.
"""

from __future__ import annotations

import math
import os
import secrets
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import pandas as pd

from dpkit.errors import DataError, InvalidParameterError, PrivacyWarning


class UndeclaredTypesError(InvalidParameterError):
    """Columns of a source have no declared type (``columns`` names them; they are public)."""

    def __init__(self, columns: Sequence[str], message: str) -> None:
        super().__init__(message)
        self.columns = list(columns)


__all__ = [
    "UndeclaredTypesError",
    "_as_declared",
    "_as_view",
    "_attach_and_read",
    "_check_types",
    "_duckdb_build",
    "_guard_read",
    "_load_scanner",
    "_pandas_without_inference",
    "_spark_as_declared",
    "_sqlite_fallback",
    "_sqlite_types",
    "canonical_types",
    "check_sqlite_path",
    "declared_cast",
    "open_table_file",
    "read_csv_text",
]

_TYPE_EXAMPLES = "e.g. 'DOUBLE', 'BIGINT', 'VARCHAR', 'DATE', 'BOOLEAN', 'DECIMAL(10,2)'"


def _check_types(types: object, infer_types: object) -> dict[str, str]:
    """The declared column types, each as DuckDB's canonical type name (no data read).

    Type names are parsed by DuckDB itself (``"TEXT"`` is ``VARCHAR``, ``"int"``
    ``INTEGER``), so the name dpkit publishes is the type the engine computes in.
    """
    import duckdb

    if not isinstance(infer_types, bool):
        raise InvalidParameterError("infer_types must be True or False.")
    if types is None:
        return {}
    if not isinstance(types, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in types.items()
    ):
        raise InvalidParameterError(
            f"types must map column names to DuckDB type names ({_TYPE_EXAMPLES})."
        )
    canonical: dict[str, str] = {}
    for column, name in types.items():
        parsed = None
        try:
            parsed = str(duckdb.sqltype(name))
        except (duckdb.Error, ValueError, TypeError):
            pass  # refused below, outside the handler
        if parsed is None or parsed in ("NULL", "ANY", "INVALID", "UNKNOWN"):
            raise InvalidParameterError(
                f"types declares column {column!r} as {name!r}, which is not a DuckDB type "
                f"name; use one ({_TYPE_EXAMPLES})."
            )
        canonical[column] = parsed
    return canonical


def _resolve_types(
    columns: Sequence[str],
    declared: Mapping[str, str],
    infer_types: bool,
    source_types: Callable[[], Mapping[str, str]],
    what: str,
    trusted: str,
    stacklevel: int,
) -> dict[str, str]:
    """Each column's type: declared, or (opt-in, announced) the source's own.

    Column names are public metadata (a header, a schema), types are not: a
    column without a declared type is refused unless ``infer_types``.
    """
    unknown = sorted(set(declared) - set(columns))
    if unknown:
        raise InvalidParameterError(
            f"types names columns the {what} does not have: {unknown}; its columns are "
            f"{sorted(columns)}."
        )
    undeclared = [c for c in columns if c not in declared]
    if not undeclared:
        return {c: declared[c] for c in columns}
    if not infer_types:
        example = ", ".join(f"{c!r}: ..." for c in undeclared[:3])
        raise UndeclaredTypesError(
            undeclared,
            f"columns {undeclared} of the {what} have no declared type. Column types are "
            f"public metadata the data owner declares: pass types={{{example}}} with DuckDB "
            f"type names ({_TYPE_EXAMPLES}) for every column (values that do not fit the "
            "declared type are read as missing). To take the types from the source instead, "
            "pass infer_types=True (it warns: they are then a function of what the source "
            "holds, not a declaration).",
        )
    found = source_types()
    warnings.warn(
        f"the types of columns {undeclared} were taken from the {what} (infer_types=True): "
        f"{trusted}. dpkit treats them as public; declare them with types={{...}} instead.",
        PrivacyWarning,
        stacklevel=stacklevel,
    )
    return {c: declared.get(c, found[c]) for c in columns}


def _as_declared(
    rel: Any,
    types: Mapping[str, str],
    infer_types: bool,
    what: str,
    *,
    trusted: str,
    inferred: Callable[[], Mapping[str, str]] | None = None,
    stacklevel: int = 4,
) -> Any:
    """``rel`` projected to the declared types, converting value by value (``TRY_CAST``).

    ``types`` comes from :func:`_check_types`. Every column is cast, even one
    whose source type already matches, so the published type is always the
    declared one; ``TRY_CAST`` makes a value that does not fit (text in a
    number column, a number beyond the type's range, an impossible date, a
    BLOB) a NULL, never an error. Undeclared columns take ``inferred()`` (by
    default the relation's own types) only with ``infer_types``.
    """
    from dpkit.tables.engines._sql import quote

    columns = [str(c) for c in rel.columns]
    own = {c: str(t) for c, t in zip(columns, rel.types)}
    final = _resolve_types(
        columns, types, infer_types, inferred or (lambda: own), what, trusted, stacklevel
    )
    exprs = [f"{declared_cast(c, own[c], final[c])} AS {quote(c)}" for c in columns]
    return _guard_read(lambda: rel.project(", ".join(exprs)), what)


def declared_cast(column: str, source_type: str, declared: str) -> str:
    """The SQL expression that converts ``column`` to its ``declared`` type, value by value.

    The one conversion of every source (:func:`_as_declared`): ``TRY_CAST``, so a
    value that does not fit is NULL, never an error. ``dpkit inspect`` counts the
    values it makes NULL with this very expression.
    """
    from dpkit.tables.engines._sql import quote

    # A text source goes through concat(x, '') so that DuckDB does not push the cast into
    # a reader as a strict cast (its CSV reader then fails on the value, quoting it); the
    # CASE keeps NULL a NULL (concat reads it as ''). `x || ''` is folded away: no use.
    # Text declared as text converts nothing (and concat would copy every string).
    q = quote(column)
    value = (
        f"CASE WHEN {q} IS NULL THEN NULL ELSE concat({q}, '') END"
        if source_type == "VARCHAR" and declared != "VARCHAR"
        else q
    )
    return f"TRY_CAST({value} AS {declared})"


def canonical_types(types: Mapping[str, str]) -> dict[str, str]:
    """Declared column types (``--type``) as DuckDB's canonical type names; no data read."""
    return _check_types(types, False)


def open_table_file(con: Any, path: Path, encoding: str = "utf-8") -> Any:
    """A CSV or Parquet file as a DuckDB relation, opened as ``dpkit query`` opens it.

    ``.parquet`` is read by DuckDB's Parquet reader (its schema's types); any
    other file as CSV by :func:`read_csv_text` (every column text, named by the
    header row, ragged rows refused, ``encoding`` converted). Nothing is cast:
    :func:`declared_cast` does that.
    """
    path = Path(path)
    if not path.is_file():
        raise InvalidParameterError(f"table file {str(path)!r} does not exist.")
    if path.suffix.lower() == ".parquet":
        if encoding.lower().replace("_", "-") not in ("utf-8", "utf8"):
            raise InvalidParameterError("--encoding applies to CSV files, not Parquet.")
        return _guard_read(lambda: con.read_parquet(str(path)), "Parquet file")
    rel, _ = read_csv_text(con, path, None, encoding)
    return rel


# DuckDB type names (as declared) -> Spark SQL type names.
_SPARK_TYPES = {
    "BOOLEAN": "boolean",
    "TINYINT": "tinyint",
    "SMALLINT": "smallint",
    "INTEGER": "int",
    "BIGINT": "bigint",
    "FLOAT": "float",
    "DOUBLE": "double",
    "VARCHAR": "string",
    "DATE": "date",
    "TIMESTAMP": "timestamp_ntz",
    "TIMESTAMP WITH TIME ZONE": "timestamp",
}


def _spark_type(column: str, name: str) -> str:
    if name in _SPARK_TYPES:
        return _SPARK_TYPES[name]
    if name.startswith("DECIMAL(") and name.endswith(")"):
        return name.lower()
    raise InvalidParameterError(
        f"types declares column {column!r} as {name}, which the Spark engine does not map; "
        f"use one of {sorted(_SPARK_TYPES)} or DECIMAL(p,s)."
    )


def _spark_as_declared(frame: Any, types: Mapping[str, str], infer_types: bool) -> Any:
    """A Spark DataFrame projected to the declared types with ``try_cast`` (never ANSI ``CAST``).

    Spark's ANSI mode makes ``CAST`` raise on a value that does not fit, which
    would fail a query on one neighbour only, after the charge; ``try_cast``
    gives NULL in every mode.
    """
    spark_types = {c: _spark_type(c, t) for c, t in types.items()}
    columns = [str(c) for c in frame.columns]
    own = {str(c): str(t) for c, t in frame.dtypes}
    final = _resolve_types(
        columns,
        spark_types,
        infer_types,
        lambda: own,
        "Spark DataFrame",
        "the DataFrame's schema, which Spark's readers infer from the rows unless given one",
        4,  # the warning points at the caller of Session.from_spark
    )
    quoted = {c: "`" + c.replace("`", "``") + "`" for c in columns}
    return frame.selectExpr(
        *[f"try_cast({quoted[c]} AS {final[c]}) AS {quoted[c]}" for c in columns]
    )


def _text(value: Any) -> str | None:
    """One stored value as text, by its own Python type (never by its neighbours').

    Missing values (``None``, NaN, ``pd.NA``, ``NaT``) are NULL; bytes are
    UTF-8 text or NULL; booleans are ``true``/``false``; floats use Python's
    shortest round-trip spelling (``inf``, ``nan`` included), which DuckDB
    parses back exactly.
    """
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isnan(value):
        return None
    try:
        return str(value)
    except Exception:  # a hostile __str__: the value is unreadable, so missing
        return None


def _text_array(values: Iterable[Any]) -> Any:
    import pyarrow as pa

    return pa.array([_text(v) for v in values], type=pa.string())


def _pandas_without_inference(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its ``object`` columns as text, value by value.

    DuckDB types an ``object`` column from a sample of its values and then
    fails on a later value that does not fit: a type and an error that depend
    on the rows. As text (one rule per value) the column is cast to its
    declared type like any other source.
    """
    objects = [c for c, t in df.dtypes.items() if pd.api.types.is_object_dtype(t)]
    if not objects:
        return df
    return df.assign(
        **{
            str(c): pd.Series(
                pd.arrays.ArrowExtensionArray(_text_array(df[c].tolist())), index=df.index
            )
            for c in objects
        }
    )


def check_sqlite_path(database: str | PathLike[str]) -> Path:
    """The SQLite file a session will read, refused if its name could open another file.

    SQLite (and DuckDB's scanner) read ``?`` and ``#`` in a name as the start of
    URI parameters, so ``"data.db?x=1"`` would open ``data.db``, not the file
    named: such names are refused rather than reinterpreted.
    """
    text = str(database)
    if "?" in text or "#" in text or text.startswith("file:"):
        raise InvalidParameterError(
            "the SQLite path contains '?' or '#' or starts with 'file:', which SQLite reads as "
            "URI parameters (it would open a different file than the one named); rename the "
            "file or give a plain path."
        )
    path = Path(text).resolve()
    if not path.is_file():
        raise InvalidParameterError(f"SQLite file {text!r} does not exist.")
    return path


def _guard_read(action: Callable[[], Any], what: str) -> Any:
    """Open a source; DuckDB's message can quote file contents, so it is withheld."""
    import duckdb

    try:
        return action()
    except duckdb.Error:
        pass  # raised below, outside the handler, so the original is not even chained
    raise DataError(
        f"DuckDB could not open the {what}. Its message is withheld because it can quote "
        "data; check the path, the format and any read options."
    )


_CSV_SHAPE = (
    "every row must have exactly as many fields as the header row (the first line, naming "
    "the columns); rows with more or fewer fields are refused, never read with made-up "
    "column names"
)
_DELIMITER_KEYS = ("delimiter", "delim", "sep")


def _not_utf8(what: str) -> DataError:
    return DataError(
        f"the {what} is not UTF-8 text. Give its encoding: --encoding latin-1 (command line) "
        "or encoding='latin-1' (Python), or convert it to UTF-8."
    )


def _csv_header(path: Path, read: Mapping[str, Any], what: str) -> tuple[list[str], str]:
    """The header row's column names and the delimiter (declared, or taken from the header)."""
    import csv

    try:
        with path.open(encoding="utf-8", newline="") as handle:
            first = handle.readline()
    except UnicodeDecodeError:
        with path.open("rb") as handle:
            if handle.read(4) == b"PAR1":  # Parquet's magic number, under another suffix
                raise DataError(
                    f"the {what} is a Parquet file, not CSV text: rename it to end in "
                    ".parquet (the suffix chooses the reader)."
                ) from None
        raise _not_utf8(what) from None
    declared = next((read[k] for k in _DELIMITER_KEYS if k in read), None)
    if declared is None:
        try:
            declared = csv.Sniffer().sniff(first, delimiters=",;\t|").delimiter
        except csv.Error:
            declared = ","  # one column
    names = next(csv.reader([first], delimiter=str(declared)), [])
    if not names or any(not n.strip() for n in names) or len(set(names)) < len(names):
        raise DataError(
            f"the {what} needs a header row naming every column once "
            f"(distinct, non-empty names); {_CSV_SHAPE}."
        )
    return names, str(declared)


def read_csv_text(
    con: Any, path: Path, read_options: Mapping[str, Any] | None, encoding: str = "utf-8"
) -> tuple[Any, dict[str, Any]]:
    """A CSV file as text columns named by its header row, and the read options used.

    The header is parsed here and DuckDB reads every row in strict mode with
    those names, so a ragged row (more or fewer fields than the header) fails
    now, at opening, in one full scan, never after a charge; no row is skipped
    as a "header" and no column is named ``column0``. ``encoding`` other than
    UTF-8 is converted by Python into a temporary UTF-8 copy, loaded once.
    """
    import duckdb

    read = {k: v for k, v in dict(read_options or {}).items() if k not in _DELIMITER_KEYS}
    source = path
    if encoding.lower().replace("_", "-") not in ("utf-8", "utf8"):
        source = _transcoded(path, encoding)
    what = f"CSV file {path.name!r}"
    try:
        names, delimiter = _csv_header(source, read_options or {}, what)
        read.update(
            header=True, delimiter=delimiter, skiprows=0, strict_mode=True, null_padding=False
        )
        rel = con.read_csv(str(source), columns=dict.fromkeys(names, "VARCHAR"), **read)
        rel.aggregate("count(*)").fetchall()  # every row parsed now, not at query time
        if source is not path:  # load the copy before it is removed
            rel = rel.to_arrow_table()
            rel = con.from_arrow(rel)
    except duckdb.Error as err:
        not_utf8 = "invalid unicode" in str(err).lower()  # DuckDB's own diagnosis
    else:
        return rel, read
    finally:
        if source is not path:
            source.unlink(missing_ok=True)
    if not_utf8:
        raise _not_utf8(what)
    raise DataError(
        f"DuckDB could not read the {what}: {_CSV_SHAPE}. Its message is withheld because it "
        "can quote data; check the delimiter, the quoting and any read options."
    )


def _transcoded(path: Path, encoding: str) -> Path:
    """A temporary UTF-8 copy of a text file in ``encoding`` (removed by the caller)."""
    import codecs
    import tempfile

    try:
        codecs.lookup(encoding)
    except LookupError:
        raise InvalidParameterError(
            f"unknown encoding {encoding!r}: give a Python codec name such as latin-1, cp1252 "
            "or utf-16."
        ) from None
    handle, name = tempfile.mkstemp(suffix=".csv")
    os.close(handle)
    out = Path(name)
    try:
        with (
            path.open(encoding=encoding, newline="") as src,
            out.open("w", encoding="utf-8", newline="") as dst,
        ):
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    except UnicodeDecodeError:
        out.unlink(missing_ok=True)
        raise DataError(
            f"the CSV file {path.name!r} is not valid {encoding} text; give its encoding "
            "with --encoding (command line) or encoding= (Python)."
        ) from None
    return out


def _is_select(text: str) -> bool:
    """Whether ``text`` is a SQL query for :meth:`Session.from_duckdb` (else a table name).

    DuckDB's own parser decides: one ``SELECT`` statement is a query; a text it
    cannot parse is a table or view name when it is one word, and refused
    otherwise; any other statement (``CREATE``, ``INSERT``, several) is refused
    before it runs, so reading a source never changes a database.
    """
    import duckdb

    try:
        statements = duckdb.extract_statements(text)
    except duckdb.Error:
        if text.strip() and not any(c.isspace() for c in text.strip()):
            return False  # a table or view name
        raise InvalidParameterError(
            "from_duckdb could not parse the text as a SQL SELECT query (DuckDB's message is "
            "withheld); pass a table or view name, one SELECT query, or a duckdb relation."
        ) from None
    if len(statements) == 1 and statements[0].type == duckdb.StatementType.SELECT:
        return True
    raise InvalidParameterError(
        f"from_duckdb reads one SQL SELECT query, got {len(statements)} statement(s) of "
        f"type {', '.join(st.type.name for st in statements)}; nothing was run. Run other "
        "statements on the connection first and pass the SELECT (or the table name)."
    )


def _collect_lazy(frame: Any) -> Any:
    """A polars LazyFrame collected once; its error can quote data, so it is withheld."""
    try:
        return frame.collect()
    except Exception:  # polars raises many types; none of their messages may reach the analyst
        pass  # raised below, outside the handler, so the original is not even chained
    raise DataError(
        "polars could not collect the LazyFrame. Its message is withheld because it can "
        "quote data; run frame.collect() yourself to see it, then fix the plan."
    )


def _as_view(con: Any, rel: Any, *, materialize: bool = False) -> str:
    """Register a relation under a fresh name on its connection (a table if ``materialize``)."""
    name = f"dpkit_table_{secrets.token_hex(6)}"
    if materialize:
        _guard_read(lambda: rel.create(name), "source")
    else:
        _guard_read(lambda: rel.create_view(name), "source")
    return name


def _duckdb_build(con: Any) -> tuple[str, str]:
    """DuckDB's version and platform (where it looks for extensions), for messages."""
    import duckdb

    try:
        platform = str(con.execute("PRAGMA platform").fetchone()[0])
    except (duckdb.Error, TypeError):
        platform = "<platform>"
    return str(duckdb.__version__), platform


def _try_load(con: Any, kind: str, directory: str | None) -> bool:
    """``LOAD`` an extension (never ``INSTALL``), from ``directory`` when given."""
    import duckdb

    try:
        if directory is not None:
            con.execute("SET extension_directory = ?", [directory])
        con.execute(f"LOAD {kind}")
    except duckdb.Error:
        return False
    return True


def _load_scanner(con: Any, kind: str, extension_directory: str | PathLike[str] | None) -> bool:
    """Load the ``sqlite``/``postgres`` scanner from a local directory; ``False`` if absent.

    With ``extension_directory`` only that directory is tried (and failing is
    an error, since the caller asked for it); otherwise DuckDB's default
    directory, then the ``duckdb_ext`` package's. Autoinstall stays off.
    """
    if extension_directory is not None:
        directory = Path(extension_directory)
        if not directory.is_dir():
            raise InvalidParameterError(
                f"extension_directory {str(directory)!r} is not a directory."
            )
        if _try_load(con, kind, str(directory)):
            return True
        version, platform = _duckdb_build(con)
        raise InvalidParameterError(
            f"DuckDB {version} could not load its {kind} extension from extension_directory "
            f"{str(directory)!r}: it needs v{version}/{platform}/{kind}_scanner.duckdb_extension "
            "there, built for this DuckDB version."
        )
    if _try_load(con, kind, None):
        return True
    try:
        import duckdb_ext
    except ImportError:
        return False
    return _try_load(con, kind, str(duckdb_ext.get_extension_dir()))


def _attach_and_read(con: Any, database: str | PathLike[str], table: str, kind: str) -> Any:
    """Attach the database read-only as ``dpkit_source`` and select the table from it.

    The scanners' messages can quote data and are withheld. They raise
    ``duckdb.Error`` and, for some failures (a file that is not a SQLite
    database), a plain ``RuntimeError``.
    """
    import duckdb

    from dpkit.tables.engines._sql import literal, quote

    source = "SQLite file" if kind == "sqlite" else "PostgreSQL database"
    attach_type = "SQLITE" if kind == "sqlite" else "POSTGRES"
    attached = False
    rel = None
    try:
        if kind == "sqlite":
            # Every stored value as text: the scanner otherwise types a column by its declared
            # type and fails at query time on a value of another storage class; the caller
            # casts the text to the declared types, value by value.
            con.execute("SET sqlite_all_varchar = true")
        con.execute(
            f"ATTACH {literal(str(database))} AS dpkit_source (TYPE {attach_type}, READ_ONLY)"
        )
        attached = True
        rel = con.sql(f"SELECT * FROM dpkit_source.{quote(table)}")
    except (duckdb.Error, RuntimeError):
        pass  # raised below, outside the handler, so the original is not even chained
    if not attached:
        raise DataError(
            f"DuckDB could not open the {source}. Its message is withheld because it can quote "
            "data; check the path or connection string."
        )
    if rel is None:
        hint = " and that the file is a SQLite database" if kind == "sqlite" else ""
        raise DataError(
            f"could not read table {table!r} from the {source}; check the table name{hint}."
        )
    return rel


def _sqlite_affinity(declared: str) -> str:
    """The DuckDB type of a SQLite column's declared type, by SQLite's affinity rules."""
    text = declared.upper()
    if "INT" in text:
        return "BIGINT"
    if any(k in text for k in ("CHAR", "CLOB", "TEXT")) or not text or "BLOB" in text:
        return "VARCHAR"
    return "DOUBLE"  # REAL, FLOA, DOUB and NUMERIC affinities


def _sqlite_types(path: Path, table: str) -> dict[str, str]:
    """A SQLite table's column types by their declared affinity (schema metadata, no rows)."""
    import sqlite3

    quoted = '"' + table.replace('"', '""') + '"'
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
            info = db.execute(f"PRAGMA table_info({quoted})").fetchall()
    except sqlite3.Error:
        info = []
    return {str(r[1]): _sqlite_affinity(str(r[2] or "")) for r in info}


def _sqlite_fallback(con: Any, path: Path, table: str) -> Any:
    """A SQLite table read with the standard library when DuckDB's extension is missing.

    Every stored value becomes text by its own storage class (:func:`_text`),
    with no inference over the rows (pandas would type a column from its
    values: one NULL or one text cell would change it); the caller casts the
    all-text relation to the declared types.
    """
    import sqlite3

    import pyarrow as pa

    if not path.is_file():
        raise InvalidParameterError(f"SQLite file {str(path)!r} does not exist.")
    quoted = '"' + table.replace('"', '""') + '"'
    arrow = None
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
            cursor = db.execute(f"SELECT * FROM {quoted}")
            names = [str(d[0]) for d in cursor.description]
            rows = cursor.fetchall()
            arrow = pa.table({n: _text_array(row[i] for row in rows) for i, n in enumerate(names)})
    except sqlite3.Error:
        pass  # raised below, outside the handler, so the original is not even chained
    if arrow is None:
        raise DataError(
            f"could not read table {table!r} from the SQLite file; check the file and table name."
        )
    return _guard_read(lambda: con.from_arrow(arrow), "SQLite file")
