"""Sources: opening files, frames and databases as DuckDB relations, without quoting data.

Every failure to open a source is re-raised with a message that names the
source and never the engine's own text (which can quote file contents).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from os import PathLike
from pathlib import Path
from typing import Any

import pandas as pd

from dpkit.errors import DataError, InvalidParameterError

__all__ = [
    "_as_view",
    "_attach_and_read",
    "_duckdb_build",
    "_guard_read",
    "_load_scanner",
    "_sqlite_fallback",
    "check_sqlite_path",
]


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


def _sqlite_fallback(con: Any, path: Path, table: str) -> Any:
    """Read a SQLite table with the standard library when DuckDB's extension is missing."""
    import sqlite3

    if not path.is_file():
        raise InvalidParameterError(f"SQLite file {str(path)!r} does not exist.")
    quoted = '"' + table.replace('"', '""') + '"'
    frame = None
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
            frame = pd.read_sql_query(f"SELECT * FROM {quoted}", db)
    except (sqlite3.Error, pd.errors.DatabaseError):
        pass  # raised below, outside the handler, so the original is not even chained
    if frame is None:
        raise DataError(
            f"could not read table {table!r} from the SQLite file; check the file and table name."
        )
    return con.from_df(frame)
