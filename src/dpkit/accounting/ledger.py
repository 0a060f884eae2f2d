"""Where an accountant records what was spent: in memory, or in a SQLite file.

The file ledger is what makes "when the budget is spent, access is gone for
good" true across restarts: every charge is a row committed in a SQLite
transaction taken with ``BEGIN IMMEDIATE`` (one writer at a time, readers never
see half a charge), so concurrent threads and processes never overspend and
never lose a charge. Amounts are stored as exact fractions in text ("1/10"); a
charge's privacy event (:mod:`dpkit.accounting.events`), when one was given, as
its JSON text.

A ledger is never repaired or overwritten: a file that is not a dpkit ledger,
is damaged, or holds an unreadable amount raises
:class:`~dpkit.errors.LedgerCorruptError`; restore it from a backup.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Protocol

from dpkit.accounting.budget import Budget
from dpkit.accounting.events import PrivacyEvent, as_event, event_from_json
from dpkit.accounting.registry import DatasetRegistry
from dpkit.errors import InvalidParameterError, LedgerCorruptError, LedgerError, LedgerLockedError

#: One level of nesting of a charge: (scope id, scope label, part key or None).
#: ``None`` as part key means "a part of its own" (keyed by the row id).
Level = tuple[str, str, str | None]

_APPLICATION_ID = 0x64706B6C  # "dpkl": marks the file as a dpkit ledger
SCHEMA_VERSION = 2
_FORMAT = "dpkit-ledger"
_AMOUNT = re.compile(r"[0-9]+(/[0-9]+)?")
# Version 1 (dpkit before privacy events) lacks the last column, "event"; such a
# ledger is read as it is (its charges' events are their budgets) and gains the
# column, nullable, at its first new charge (see ``_upgrade``).
_COLUMNS_V1 = ("id", "label", "epsilon", "delta", "rho", "scope_path", "created_at")
_COLUMNS = (*_COLUMNS_V1, "event")
_MAX_EVENT_TEXT = 1_000_000  # a composed event of thousands of releases fits
_MAX_AMOUNT_TEXT = 4000  # Python refuses int() of longer digit strings; no real amount is near it
_MAX_DEPTH = 64  # parallel scopes nested deeper than this are not something dpkit writes

_SCHEMA = f"""
PRAGMA application_id = {_APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
CREATE TABLE charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    label TEXT NOT NULL,
    epsilon TEXT NOT NULL,
    delta TEXT NOT NULL,
    rho TEXT,
    scope_path TEXT NOT NULL,
    created_at REAL NOT NULL,
    event TEXT
);
CREATE TRIGGER charges_no_update BEFORE UPDATE ON charges
BEGIN SELECT RAISE(ABORT, 'a dpkit ledger is append-only'); END;
CREATE TRIGGER charges_no_delete BEFORE DELETE ON charges
BEGIN SELECT RAISE(ABORT, 'a dpkit ledger is append-only'); END;
"""


@dataclass(frozen=True)
class Row:
    """One committed charge as stored in a ledger.

    ``event`` is the privacy event recorded with the charge, or None when the
    charge was made with a bare budget (its event is then ``as_event(cost)``).
    """

    id: int
    label: str
    cost: Budget
    path: tuple[Level, ...]
    timestamp: float
    event: PrivacyEvent | None = None


@dataclass(frozen=True)
class NewRow:
    """A charge about to be written (``event``: its privacy event, if the caller gave one)."""

    label: str
    cost: Budget
    path: tuple[Level, ...]
    event: PrivacyEvent | None = None


class Transaction(Protocol):
    """An exclusive write transaction: the rows others committed, and a way to append."""

    new_rows: list[Row]

    def append(self, rows: Sequence[NewRow]) -> list[Row]: ...


class Ledger(Protocol):
    """What an accountant needs from a ledger."""

    @property
    def path(self) -> Path | None: ...

    def read(self, after: int) -> list[Row]: ...

    def write(self, after: int) -> contextlib.AbstractContextManager[Transaction]: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------------------------
# In memory
# ---------------------------------------------------------------------------------
class _MemoryTransaction:
    def __init__(self, ledger: MemoryLedger, after: int) -> None:
        self._ledger = ledger
        self.new_rows = ledger.rows[after:]
        self.pending: list[Row] = []

    def append(self, rows: Sequence[NewRow]) -> list[Row]:
        next_id = (self._ledger.rows[-1].id if self._ledger.rows else 0) + len(self.pending) + 1
        now = time.time()
        out = [Row(next_id + i, r.label, r.cost, r.path, now, r.event) for i, r in enumerate(rows)]
        self.pending.extend(out)
        return out


class MemoryLedger:
    """A ledger that lives as long as its accountant (the default)."""

    path: Path | None = None

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self._lock = threading.Lock()

    def read(self, after: int) -> list[Row]:
        # Ids are 1, 2, 3, ... in list order, so the rows after id ``after`` are a
        # slice: O(new rows), not O(history), per charge.
        with self._lock:
            return self.rows[after:]

    @contextlib.contextmanager
    def write(self, after: int) -> Iterator[Transaction]:
        with self._lock:
            txn = _MemoryTransaction(self, after)
            yield txn
            self.rows.extend(txn.pending)  # only reached when the block did not raise

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------
# SQLite
# ---------------------------------------------------------------------------------
def _text(q: Fraction) -> str:
    return str(q)


class SqliteLedger:
    """A ledger in a SQLite file, shared safely by threads and processes.

    Guarantees:

    * A charge is one transaction begun with ``BEGIN IMMEDIATE``: the check
      against the budget and the insert happen under the database's write lock,
      so concurrent writers are serialised and never overspend; a committed
      charge is durable (SQLite's rollback journal, ``synchronous=FULL``).
    * The file records the budget and composition rule it was created with;
      opening it with others raises :class:`~dpkit.errors.LedgerError`.
    * Waiting for the lock longer than ``timeout`` seconds raises
      :class:`~dpkit.errors.LedgerLockedError`; nothing is written.
    * A file that is not a dpkit ledger, fails SQLite's integrity check, has
      the wrong schema or an unreadable or negative amount raises
      :class:`~dpkit.errors.LedgerCorruptError` — whatever SQLite or the parser
      would have raised (``sqlite3`` errors, ``ValueError`` on a huge number,
      ``RecursionError`` on a deeply nested scope) is reported as that one
      error. The file is never modified then.
    * The file records the identity of the dataset it guards (``dataset``,
      when given): opening it for another dataset raises
      :class:`~dpkit.errors.LedgerError` naming both. A ledger made before
      identities were recorded gets the identity of the first dataset that
      opens it with one (the only migration: one header row added).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        budget: Budget | None,
        composition: str | None,
        timeout: float,
        dataset: str | None = None,
        new_ledger: bool = False,
    ) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        if self.path.is_dir():
            raise LedgerError(f"the ledger path {self.path} is a directory; give a file path.")
        if not self.path.exists():
            if budget is None or composition is None:
                raise LedgerError(
                    f"there is no ledger at {self.path}; create one by giving a budget."
                )
            self._create(budget, composition, dataset, new_ledger)
        self.budget, self.composition, self.dataset = self._validate()
        if budget is not None and not _same_budget(budget, self.budget):
            self.close()
            raise LedgerError(
                f"the ledger {self.path} was created for the budget {self.budget}, not {budget}. "
                "A budget is fixed when its ledger is created and cannot be changed by "
                "reopening it; open it with the budget it records (Accountant.from_ledger)."
            )
        if composition is not None and composition != self.composition:
            self.close()
            raise LedgerError(
                f"the ledger {self.path} uses composition={self.composition!r}, not "
                f"{composition!r}; a ledger keeps the rule it was created with."
            )
        if dataset is not None:
            # Both directions: this ledger guards one dataset, and the dataset has one ledger
            # (checked before this ledger records the identity, then recorded in the registry).
            try:
                registry = DatasetRegistry()
                registry.check(dataset, self.path, new_ledger=new_ledger)
                self._claim(dataset)
                registry.claim(dataset, self.path, new_ledger=new_ledger)
            except BaseException:
                self.close()
                raise

    def _claim(self, dataset: str) -> None:
        """Check (or, for an old ledger without one, record) the dataset this ledger guards."""
        if self.dataset is None:
            with self._guarded(), self._transaction("BEGIN IMMEDIATE") as conn:
                row = conn.execute("SELECT value FROM meta WHERE key = 'dataset'").fetchone()
                if row is None:
                    conn.execute("INSERT INTO meta(key, value) VALUES ('dataset', ?)", (dataset,))
                    self.dataset = dataset
                else:
                    self.dataset = str(row[0])
        if self.dataset != dataset:
            self.close()
            raise LedgerError(
                f"the ledger {self.path} guards the dataset {self.dataset!r}, not {dataset!r}. "
                "One ledger records the spending on one dataset, and one dataset has one "
                "ledger: use the ledger made for this dataset."
            )

    # --- errors -------------------------------------------------------------------
    def _corrupt(self, what: str) -> LedgerCorruptError:
        return LedgerCorruptError(
            f"the privacy ledger {self.path} is corrupt or not a dpkit ledger ({what}). "
            "dpkit never repairs or overwrites a ledger, since forgetting spent budget would "
            "break the privacy guarantee: restore the file from a backup, or start a new "
            "ledger at another path for a new dataset."
        )

    @contextlib.contextmanager
    def _translate(self) -> Iterator[None]:
        """Turn sqlite3 errors into dpkit's ledger errors."""
        try:
            yield
        except sqlite3.Error as err:
            code = getattr(err, "sqlite_errorname", "") or ""
            if code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                raise LedgerLockedError(
                    f"the ledger {self.path} is locked: another process or connection has held "
                    f"it for more than timeout={self.timeout} s. Wait for it to finish and try "
                    "again, or pass a larger timeout; dpkit never breaks the lock."
                ) from None
            if code.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
                raise self._corrupt(f"SQLite reports: {err}") from None
            raise LedgerError(f"the ledger {self.path} cannot be used: {err}.") from None

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        """Whatever reading the file raises becomes one of dpkit's ledger errors."""
        try:
            with self._translate():
                yield
        except (ValueError, TypeError, KeyError, IndexError, RecursionError, OverflowError):
            raise self._corrupt("its contents cannot be read") from None

    # --- connection ---------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        # A connection must not cross fork(): a child process opens its own.
        if self._conn is None or self._pid != os.getpid():
            uri = self.path.resolve().as_uri() + "?mode=rw"  # never create a file here
            with self._translate():
                conn = sqlite3.connect(
                    uri,
                    uri=True,
                    timeout=self.timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
                conn.execute("PRAGMA synchronous = FULL")
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    @contextlib.contextmanager
    def _transaction(self, kind: str) -> Iterator[sqlite3.Connection]:
        conn = self._connection()
        with self._translate():
            conn.execute(kind)
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        with self._translate():
            try:
                conn.execute("COMMIT")
            except sqlite3.Error:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise

    # --- creation and validation --------------------------------------------------
    def _create(
        self, budget: Budget, composition: str, dataset: str | None, new_ledger: bool
    ) -> None:
        """Create the file atomically: build it aside, then hard-link it into place.

        ``os.link`` fails if the path exists, so two processes creating the same
        ledger at once cannot clobber each other, and no process ever sees a
        half-initialised file. For a ``dataset``, the registry's claim (one
        budget per dataset) is made just before the link: a refused claim
        leaves no file, and a path that cannot be created leaves no claim.
        """
        directory = self.path.parent
        if not directory.is_dir():
            raise LedgerError(
                f"cannot create the ledger {self.path}: the directory {directory} does not exist."
            )
        # A fresh name (not mkstemp, whose 0600 mode would lock out other users of a
        # shared ledger): the file gets the usual permissions from the umask.
        tmp = directory / f".{self.path.name}.{uuid.uuid4().hex}.new"
        try:
            open(tmp, "x").close()
        except OSError as err:
            raise LedgerError(f"cannot create the ledger {self.path}: {err}.") from None
        try:
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.executescript(_SCHEMA)
                meta = {
                    "format": _FORMAT,
                    "schema_version": str(SCHEMA_VERSION),
                    "budget_epsilon": _text(budget.epsilon_exact),
                    "budget_delta": _text(budget.delta_exact),
                    "budget_rho": "" if budget.rho_declared is None else _text(budget.rho_declared),
                    "composition": composition,
                    "created_at": datetime.now(UTC).isoformat(),
                }
                if dataset is not None:
                    meta["dataset"] = dataset
                conn.execute("BEGIN")
                conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", meta.items())
                conn.execute("COMMIT")
            finally:
                conn.close()
            if dataset is not None:
                DatasetRegistry().claim(dataset, self.path, new_ledger=new_ledger)
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass  # another process created it first; validation checks its budget
            except OSError:
                # Filesystems without hard links: rename, with a tiny race window.
                if not self.path.exists():
                    os.replace(tmp, self.path)
        except sqlite3.Error as err:
            raise LedgerError(f"cannot create the ledger {self.path}: {err}.") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _validate(self) -> tuple[Budget, str, str | None]:
        with self._guarded(), self._transaction("BEGIN") as conn:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if app_id != _APPLICATION_ID:
                raise self._corrupt("it does not carry the dpkit ledger mark")
            expected = self._columns(version)
            columns = tuple(r[1] for r in conn.execute("PRAGMA table_info(charges)"))
            if columns != expected:
                raise self._corrupt("the charges table has the wrong columns")
            if tuple(r[1] for r in conn.execute("PRAGMA table_info(meta)")) != ("key", "value"):
                raise self._corrupt("the meta table has the wrong columns")
            check = conn.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                raise self._corrupt("SQLite's integrity check failed")
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("format") != _FORMAT or meta.get("schema_version") != str(version):
            raise self._corrupt("its header is missing or wrong")
        try:
            eps = self._amount(meta["budget_epsilon"], "the budget's epsilon")
            delta = self._amount(meta["budget_delta"], "the budget's delta")
            rho_text = meta["budget_rho"]
            rho = None if rho_text == "" else self._amount(rho_text, "the budget's rho")
            composition = meta["composition"]
        except KeyError:
            raise self._corrupt("its header is incomplete") from None
        if delta >= 1 or eps == 0:
            raise self._corrupt("the recorded budget is out of range")
        dataset = meta.get("dataset")
        if dataset is not None and not isinstance(dataset, str):
            raise self._corrupt("its dataset identity is not text")
        with self._guarded():
            return Budget._of(eps, delta, rho), composition, dataset

    def _columns(self, version: object) -> tuple[str, ...]:
        """The charges table's columns in a file of schema ``version`` (1 or 2)."""
        if isinstance(version, int) and version > SCHEMA_VERSION:
            raise LedgerError(
                f"the ledger {self.path} has schema version {version}, written by a newer "
                f"dpkit (this one reads version {SCHEMA_VERSION}); upgrade dpkit."
            )
        if version == SCHEMA_VERSION:
            return _COLUMNS
        if version == 1:
            return _COLUMNS_V1
        raise self._corrupt(f"unknown schema version {version}")

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """Version 1 -> 2 inside the caller's write transaction: add the nullable event column.

        Old charges keep a NULL event (read as their budget). The file stays
        readable by this dpkit only from then on (an older one asks to be
        upgraded); nothing recorded is changed or lost.
        """
        conn.execute("ALTER TABLE charges ADD COLUMN event TEXT")
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
        )
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _select(self, conn: sqlite3.Connection, after: int) -> tuple[int, list[tuple[object, ...]]]:
        """The schema version and the raw charges after id ``after`` (event None in version 1)."""
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        columns = self._columns(version)
        missing = (None,) * (len(_COLUMNS) - len(columns))
        raw = conn.execute(
            f"SELECT {', '.join(columns)} FROM charges WHERE id > ? ORDER BY id", (after,)
        ).fetchall()
        return version, [(*r, *missing) for r in raw]

    def _event(self, text: object, cost: Budget, where: str) -> PrivacyEvent | None:
        if text is None:
            return None
        if not isinstance(text, str) or len(text) > _MAX_EVENT_TEXT:
            raise self._corrupt(f"the event of {where} is not JSON text of a plausible size")
        try:
            event = event_from_json(json.loads(text))
            matches = event.budget() == cost
        except (ValueError, TypeError, RecursionError):  # InvalidParameterError is a ValueError
            raise self._corrupt(f"the event of {where} is unreadable") from None
        if not matches:
            raise self._corrupt(f"the event of {where} does not match its charged budget")
        return event

    def _amount(self, text: object, what: str) -> Fraction:
        if not isinstance(text, str) or not _AMOUNT.fullmatch(text):
            raise self._corrupt(f"{what} is not a non-negative fraction")
        if len(text) > _MAX_AMOUNT_TEXT:
            raise self._corrupt(f"{what} is implausibly long")
        _, _, denominator = text.partition("/")
        if denominator and int(denominator) == 0:
            raise self._corrupt(f"{what} has a zero denominator")
        return Fraction(text)

    # --- rows ---------------------------------------------------------------------
    def _parse(self, raw: tuple[object, ...]) -> Row:
        row_id, label, eps, delta, rho, path_text, created, event_text = raw
        if not isinstance(row_id, int) or not isinstance(label, str):
            raise self._corrupt("a charge has a malformed id or label")
        where = f"charge #{row_id}"
        e = self._amount(eps, f"the epsilon of {where}")
        d = self._amount(delta, f"the delta of {where}")
        r = None if rho is None else self._amount(rho, f"the rho of {where}")
        if d >= 1:
            raise self._corrupt(f"the delta of {where} is not below 1")
        if not isinstance(created, int | float) or not math.isfinite(created):
            raise self._corrupt(f"the time of {where} is not a number")
        try:
            levels = json.loads(path_text) if isinstance(path_text, str) else None
            path = tuple(level_from_json(x) for x in levels) if isinstance(levels, list) else None
        except (ValueError, TypeError, RecursionError):
            path = None
        if path is not None and len(path) > _MAX_DEPTH:
            path = None
        if path is None:
            raise self._corrupt(f"the scope of {where} is unreadable")
        cost = Budget._of(e, d, r)
        event = self._event(event_text, cost, where)
        return Row(row_id, label, cost, path, float(created), event)

    def read(self, after: int) -> list[Row]:
        with self._guarded():
            with self._transaction("BEGIN") as conn:
                _, raw = self._select(conn, after)
            return [self._parse(r) for r in raw]

    @contextlib.contextmanager
    def write(self, after: int) -> Iterator[Transaction]:
        with self._transaction("BEGIN IMMEDIATE") as conn:
            with self._guarded():
                version, raw = self._select(conn, after)
                rows = [self._parse(r) for r in raw]
            yield _SqliteTransaction(self, conn, rows, version)


def level_from_json(x: object) -> Level:
    """One stored scope level (a JSON list) back as a :data:`Level`; ValueError if malformed."""
    if (
        isinstance(x, list)
        and len(x) == 3
        and isinstance(x[0], str)
        and isinstance(x[1], str)
        and (x[2] is None or isinstance(x[2], str))
    ):
        return (x[0], x[1], x[2])
    raise ValueError("bad scope level")


class _SqliteTransaction:
    def __init__(
        self, ledger: SqliteLedger, conn: sqlite3.Connection, rows: list[Row], version: int
    ) -> None:
        self._ledger = ledger
        self._conn = conn
        self.new_rows = rows
        self._version = version

    def append(self, rows: Sequence[NewRow]) -> list[Row]:
        out = []
        now = time.time()
        with self._ledger._translate():
            if self._version != SCHEMA_VERSION:
                self._ledger._upgrade(self._conn)
                self._version = SCHEMA_VERSION
            for r in rows:
                rho = r.cost.rho_declared
                cur = self._conn.execute(
                    "INSERT INTO charges(label, epsilon, delta, rho, scope_path, created_at, "
                    "event) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        r.label,
                        _text(r.cost.epsilon_exact),
                        _text(r.cost.delta_exact),
                        None if rho is None else _text(rho),
                        json.dumps([list(level) for level in r.path]),
                        now,
                        None if r.event is None else event_text(r.event),
                    ),
                )
                row_id = cur.lastrowid
                if row_id is None:  # pragma: no cover - sqlite always sets it for INSERT
                    raise LedgerError("the ledger did not return the id of a new charge.")
                out.append(Row(row_id, r.label, r.cost, r.path, now, r.event))
        return out


def event_text(event: PrivacyEvent) -> str:
    """The JSON text a ledger stores for ``event`` (compact, keys sorted: one text per event)."""
    return json.dumps(event.to_json(), sort_keys=True, separators=(",", ":"))


def row_event(row: Row) -> PrivacyEvent:
    """The privacy event of a stored charge: the recorded one, else ``as_event(row.cost)``."""
    return row.event if row.event is not None else as_event(row.cost)


def _same_budget(a: Budget, b: Budget) -> bool:
    return (
        a.epsilon_exact == b.epsilon_exact
        and a.delta_exact == b.delta_exact
        and a.rho_declared == b.rho_declared
    )


def open_ledger(
    ledger: str | os.PathLike[str] | Ledger | None,
    budget: Budget,
    composition: str,
    timeout: float,
    dataset: str | None = None,
    new_ledger: bool = False,
) -> Ledger:
    """A MemoryLedger for None, the SQLite ledger at a path (created if absent), or a
    :class:`Ledger` object as is (e.g. the query service's per-grant ledger).

    With a ``dataset``, a path or None goes through the dataset registry
    (:mod:`dpkit.accounting.registry`): a dataset that already has a ledger is
    refused any other one, in memory or in a file, unless ``new_ledger``.
    """
    if ledger is None:
        if dataset is not None:
            DatasetRegistry().check(dataset, None, new_ledger=new_ledger)
        return MemoryLedger()
    if isinstance(ledger, str | os.PathLike):
        return SqliteLedger(ledger, budget, composition, timeout, dataset, new_ledger)
    if all(callable(getattr(ledger, name, None)) for name in ("read", "write", "close")):
        guards = getattr(ledger, "dataset", None)
        if dataset is not None and guards is not None and guards != dataset:
            raise LedgerError(
                f"this ledger guards the dataset {guards!r}, not {dataset!r}; use the "
                "ledger made for this dataset."
            )
        return ledger
    raise InvalidParameterError(
        "ledger must be a file path or None, or an object with read, write and close (a "
        f"Ledger); got an object of type {type(ledger).__name__}."
    )
