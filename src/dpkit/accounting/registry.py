"""One budget per dataset: the registry that maps each dataset to its one ledger.

A ledger records the dataset it guards and refuses another one (ledger ->
dataset). The registry closes the other direction (dataset -> ledger): a
dataset that already has a ledger cannot be given a second one, which would be
a second, fresh budget for the same people. Both the command line and the
library (:class:`~dpkit.accounting.Accountant` with ``dataset=``, so every
:class:`~dpkit.tables.Session` built from a file) go through
:meth:`DatasetRegistry.claim` and :meth:`DatasetRegistry.check`; there is no
second mechanism.

What identifies a dataset (see ``docs/accounting.md``, "One budget per dataset"):

* its **name**: the identity string the accountant is given (file
  constructors and the CLI use the file's resolved path);
* when that name is the absolute path of a regular file, also its
  **contents**: the SHA-256 of the file's bytes, so a byte-for-byte copy of a
  file under another name pays from the original's ledger. A file that changes
  keeps its ledger by name, and each new content is recorded against it.

Not covered, stated plainly: a copy that differs in any byte (re-saved,
reordered, one row removed), the same people in another file or format, a
deleted registry or ledger, and a registry directory other than the one in
use (``$DPKIT_LEDGER_DIR``). The owner can always start a second budget on
purpose with ``new_ledger=True`` (``--new-ledger``): the registry records that
decision, and the total privacy loss of the dataset is then the sum of its
ledgers' budgets.

The registry is a SQLite file, ``datasets.sqlite``, in the ledger directory
(``$DPKIT_LEDGER_DIR``, default ``$XDG_DATA_HOME/dpkit/ledgers``, i.e.
``~/.local/share/dpkit/ledgers``). Each claim is one ``BEGIN IMMEDIATE``
transaction, so two processes cannot give one dataset two ledgers at once.
It holds dataset names, ledger paths and content digests (never rows); a
digest lets whoever can read the registry test a guess of a whole file, so
keep the directory as private as the data.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from dpkit.errors import LedgerError

__all__ = ["REGISTRY_NAME", "DatasetRegistry", "ledger_directory"]

REGISTRY_NAME = "datasets.sqlite"
_APPLICATION_ID = 0x64706B72  # "dpkr": marks the file as a dpkit dataset registry
_SCHEMA = f"""
PRAGMA application_id = {_APPLICATION_ID};
CREATE TABLE IF NOT EXISTS ledgers (
    key TEXT PRIMARY KEY NOT NULL,
    dataset TEXT NOT NULL,
    ledger TEXT NOT NULL,
    since REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    dataset TEXT NOT NULL,
    ledger TEXT NOT NULL,
    second_budget INTEGER NOT NULL,
    at REAL NOT NULL
);
"""
_CHUNK = 1 << 20
_digests: dict[tuple[str, int, int], str] = {}
_digests_lock = threading.Lock()


def ledger_directory() -> Path:
    """Where default ledgers and the registry live: ``$DPKIT_LEDGER_DIR``, else the user's data directory."""
    explicit = os.environ.get("DPKIT_LEDGER_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dpkit" / "ledgers"


def _contents_digest(path: Path) -> str | None:
    """SHA-256 of a file's bytes (cached per path, size and mtime); None if unreadable."""
    try:
        stat = path.stat()
        cache_key = (str(path), stat.st_size, stat.st_mtime_ns)
        with _digests_lock:
            if cache_key in _digests:
                return _digests[cache_key]
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(_CHUNK), b""):
                digest.update(chunk)
    except OSError:
        return None
    text = "sha256:" + digest.hexdigest()
    with _digests_lock:
        _digests[cache_key] = text
    return text


def _keys(dataset: str) -> list[str]:
    """The registry keys of a dataset: its name, and its contents when it names a file."""
    keys = ["name:" + dataset]
    path = Path(dataset)
    if path.is_absolute() and path.is_file():
        digest = _contents_digest(path)
        if digest is not None:
            keys.append("contents:" + digest)
    return keys


def _ledger_text(ledger: str | os.PathLike[str]) -> str:
    return str(Path(ledger).resolve())


class DatasetRegistry:
    """The dataset -> ledger map in ``directory`` (default :func:`ledger_directory`)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else ledger_directory()
        self.path = self.directory / REGISTRY_NAME

    # --- reading ------------------------------------------------------------------
    def ledger_of(self, dataset: str) -> Path | None:
        """The ledger registered for the dataset named ``dataset`` (by name), if any."""
        found = self._lookup(["name:" + dataset])
        return Path(found[0][2]) if found else None

    def check(
        self,
        dataset: str,
        ledger: str | os.PathLike[str] | None,
        *,
        new_ledger: bool = False,
    ) -> None:
        """Refuse (:class:`~dpkit.errors.LedgerError`) if ``dataset`` has a ledger other than
        ``ledger`` (``None``: an in-memory budget) and ``new_ledger`` is not set. Writes nothing."""
        if new_ledger or not self.path.exists():
            return
        wanted = None if ledger is None else _ledger_text(ledger)
        for key, registered_for, registered in self._lookup(_keys(dataset)):
            if registered != wanted:
                raise self._refusal(dataset, key, registered_for, registered, ledger is None)

    # --- writing ------------------------------------------------------------------
    def claim(
        self, dataset: str, ledger: str | os.PathLike[str], *, new_ledger: bool = False
    ) -> None:
        """Record ``ledger`` as the ledger of ``dataset``, in one transaction.

        Refused with :class:`~dpkit.errors.LedgerError` (nothing written) when the
        dataset's name or contents already have another ledger, unless
        ``new_ledger`` says the owner starts a second budget on purpose.
        """
        wanted = _ledger_text(ledger)
        keys = _keys(dataset)
        with self._transaction(write=True) as conn:
            current = {key: (str(for_), str(led)) for key, for_, led in self._select(conn, keys)}
            if not new_ledger:
                for key, (registered_for, registered) in current.items():
                    if registered != wanted:
                        raise self._refusal(dataset, key, registered_for, registered, False)
            now = time.time()
            for key in keys:
                if current.get(key, ("", ""))[1] == wanted:
                    continue
                conn.execute(
                    "INSERT OR REPLACE INTO ledgers(key, dataset, ledger, since) VALUES (?, ?, ?, ?)",
                    (key, dataset, wanted, now),
                )
                conn.execute(
                    "INSERT INTO history(key, dataset, ledger, second_budget, at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (key, dataset, wanted, int(key in current), now),
                )

    # --- internals ----------------------------------------------------------------
    def _refusal(
        self, dataset: str, key: str, registered_for: str, ledger: str, in_memory: bool
    ) -> LedgerError:
        if key.startswith("contents:") and registered_for != dataset:
            what = (
                f"the file {dataset!r} has the same contents as the dataset {registered_for!r}, "
                f"whose ledger is {ledger}; a copy of a dataset shares its budget, so query the "
                "original with that ledger."
            )
        else:
            what = (
                f"the dataset {dataset!r} already has a ledger, {ledger}, which holds its "
                "budget; every release on it pays from that ledger (on the command line, "
                f"leave out --ledger; in Python, ledger={ledger!r})."
            )
        budget = "a budget in memory" if in_memory else "a second ledger"
        return LedgerError(
            f"refused: {what} One dataset has one budget: {budget} would give the same people "
            "a second, fresh budget and add to their privacy loss. Only the data owner can "
            "decide that, explicitly, with --new-ledger (new_ledger=True); see "
            "docs/accounting.md, 'One budget per dataset'."
        )

    def _lookup(self, keys: list[str]) -> list[tuple[str, str, str]]:
        try:
            if not self.path.exists() or self.path.stat().st_size == 0:
                return []
        except OSError as err:
            raise self._error(err) from None
        with self._transaction(write=False) as conn:
            return self._select(conn, keys)

    @staticmethod
    def _select(conn: sqlite3.Connection, keys: list[str]) -> list[tuple[str, str, str]]:
        out = []
        for key in keys:
            row = conn.execute(
                "SELECT dataset, ledger FROM ledgers WHERE key = ?", (key,)
            ).fetchone()
            if row is not None:
                out.append((key, str(row[0]), str(row[1])))
        return out

    def _error(self, err: BaseException) -> LedgerError:
        return LedgerError(
            f"the dataset registry {self.path} cannot be used ({err}). It records which ledger "
            "holds each dataset's budget; make its directory writable, or set "
            "DPKIT_LEDGER_DIR to the directory that holds your ledgers' registry."
        )

    @contextlib.contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        try:
            if write:
                self.directory.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        except (OSError, sqlite3.Error) as err:
            raise self._error(err) from None
        try:
            try:
                conn.execute("PRAGMA synchronous = FULL")
                mark = conn.execute("PRAGMA application_id").fetchone()[0]
                if mark == 0 and write:
                    # A new, empty file (never someone else's database) becomes a registry.
                    if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                        raise sqlite3.DatabaseError("not a dpkit dataset registry")
                    conn.executescript(_SCHEMA)
                    mark = conn.execute("PRAGMA application_id").fetchone()[0]
                if mark != _APPLICATION_ID:
                    raise sqlite3.DatabaseError("not a dpkit dataset registry")
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as err:
                raise self._error(err) from None
            try:
                yield conn
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as err:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise self._error(err) from None
        finally:
            conn.close()
