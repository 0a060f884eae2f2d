"""The store's shared plumbing: the request context, the errors, the checks of public
input, the schema (one for SQLite and PostgreSQL) and :class:`Database`, the engine with
its read and write transactions. Every database failure leaves here as a
:class:`~dpkit.errors.LedgerError` whose message names neither SQL nor its parameters.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc

from dpkit.errors import (
    DPKitError,
    InvalidParameterError,
    LedgerCorruptError,
    LedgerError,
    LedgerLockedError,
)

#: The request a charge is made for: the service sets it around each charge (the
#: ledger protocol's rows have no room for it); the charge row records it.
REQUEST_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "dpkit_request_key", default=None
)


@dataclass(frozen=True)
class RequestTime:
    """When a request arrived and when its response may be sent (the padded deadline),
    both wall-clock seconds: what the analyst sees, whatever the work took."""

    received: float
    deadline: float


#: The request an answer is stored for: the service sets it when a request arrives. A
#: stored answer is dated at its request's arrival (never at its completion, which would
#: tell how long the work took) and is shown only from its request's deadline on.
REQUEST_TIME: contextvars.ContextVar[RequestTime | None] = contextvars.ContextVar(
    "dpkit_request_time", default=None
)


_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_REQUEST = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_AMOUNT = re.compile(r"[0-9]{1,4000}(/[0-9]{1,4000})?")
_PG_SCHEMA_LOCK = 0x64706B73  # "dpks": serialises concurrent Store.create() on PostgreSQL
_PG_REGISTRY_LOCK = 0x64706B72  # "dpkr": serialises new analysts and grants across processes


# ---------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------
class ConflictError(DPKitError):
    """An admin change that contradicts the store: the analyst exists, or is revoked."""


class DuplicateRequestError(LedgerError):
    """A charge under a request key that was charged already (raised before any budget check)."""


class UnknownAnalystError(ConflictError):
    """No analyst of that name."""


# ---------------------------------------------------------------------------------
# Checks of public input
# ---------------------------------------------------------------------------------
def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidParameterError(
            f"{what} names are 1-64 letters, digits, '_', '.' or '-'; got an invalid one."
        )
    return value


def _request_key(value: object) -> str:
    if not isinstance(value, str) or not _REQUEST.fullmatch(value):
        raise InvalidParameterError(
            "a request key (Idempotency-Key) is 1-128 letters, digits or '_.:-'."
        )
    return value


def _limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
        raise InvalidParameterError("limit must be an integer from 1 to 10000.")
    return value


def _text(q: Fraction) -> str:
    return str(q)


def _amount(text: object, what: str) -> Fraction:
    if not isinstance(text, str) or not _AMOUNT.fullmatch(text):
        raise LedgerCorruptError(
            f"the service store holds an unreadable amount ({what}). dpkit never repairs "
            "its ledger, since forgetting spent budget would break the privacy guarantee: "
            "restore the database from a backup."
        )
    _, _, denominator = text.partition("/")
    if denominator and int(denominator) == 0:
        raise LedgerCorruptError(f"the service store holds a zero denominator ({what}).")
    return Fraction(text)


# ---------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------
_metadata = sa.MetaData()
_NAME_TYPE = sa.String(64)
_REQUEST_TYPE = sa.String(128)

_analysts = sa.Table(
    "analysts",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", _NAME_TYPE, nullable=False, unique=True),
    sa.Column("key_id", sa.String(8), unique=True),  # NULL: declared without a key yet
    sa.Column("key_hash", sa.String(64)),
    sa.Column("active", sa.Boolean, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

_grants = sa.Table(
    "grants",
    _metadata,
    sa.Column("analyst", _NAME_TYPE, sa.ForeignKey("analysts.name"), nullable=False),
    sa.Column("dataset", _NAME_TYPE, nullable=False),
    sa.Column("epsilon", sa.Text, nullable=False),
    sa.Column("delta", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    # the grant's composition rule, fixed when it is created (NULL: "basic", older stores)
    sa.Column("composition", sa.String(16)),
    # the noise of its queries' additive steps (NULL: "laplace"); the admin may change it
    sa.Column("noise", sa.String(16)),
    sa.PrimaryKeyConstraint("analyst", "dataset"),
)

_charges = sa.Table(
    "charges",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("analyst", _NAME_TYPE, nullable=False),
    sa.Column("dataset", _NAME_TYPE, nullable=False),
    sa.Column("label", sa.Text, nullable=False),
    sa.Column("epsilon", sa.Text, nullable=False),
    sa.Column("delta", sa.Text, nullable=False),
    sa.Column("rho", sa.Text),
    sa.Column("scope_path", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("request_key", _REQUEST_TYPE),
    sa.Column("event", sa.Text),  # the privacy event's JSON (NULL: the cost is the event)
    sa.ForeignKeyConstraint(["analyst", "dataset"], ["grants.analyst", "grants.dataset"]),
    sa.UniqueConstraint("analyst", "request_key"),
    sa.Index("charges_by_grant", "analyst", "dataset", "id"),
    sqlite_autoincrement=True,  # ids are never reused
)

_answers = sa.Table(
    "answers",
    _metadata,
    sa.Column("analyst", _NAME_TYPE, sa.ForeignKey("analysts.name"), nullable=False),
    sa.Column("request_key", _REQUEST_TYPE, nullable=False),
    sa.Column("dataset", _NAME_TYPE, nullable=False),
    sa.Column("query", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("response", sa.Text),
    sa.Column("charge_epsilon", sa.Text, nullable=False),
    sa.Column("charge_delta", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),  # when the request arrived
    sa.Column("visible_at", sa.Float),  # from when it is shown (its padded deadline)
    sa.PrimaryKeyConstraint("analyst", "request_key"),
    sa.Index("answers_by_analyst", "analyst", "created_at"),
)

#: The synthetic tables each dataset publishes, one row per (dataset, name): claimed
#: ("charged") in the transaction that charges the publication ledger, then "published"
#: (with the table and its report) or "failed". Never made twice under one name.
_publications = sa.Table(
    "publications",
    _metadata,
    sa.Column("dataset", _NAME_TYPE, nullable=False),
    sa.Column("name", _NAME_TYPE, nullable=False),
    sa.Column("params", sa.Text, nullable=False),  # the public parameters, JSON
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("result", sa.Text),  # the table and its report, JSON, once published
    sa.Column("created_at", sa.Float, nullable=False),
    sa.PrimaryKeyConstraint("dataset", "name"),
)

#: The publication ledger of each dataset: what its synthetic tables were charged.
_publication_charges = sa.Table(
    "publication_charges",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("dataset", _NAME_TYPE, nullable=False),
    sa.Column("label", sa.Text, nullable=False),
    sa.Column("epsilon", sa.Text, nullable=False),
    sa.Column("delta", sa.Text, nullable=False),
    sa.Column("rho", sa.Text),
    sa.Column("scope_path", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("event", sa.Text),
    sa.Index("publication_charges_by_dataset", "dataset", "id"),
    sqlite_autoincrement=True,
)

#: Columns added after a store's first release (nullable): create() adds them to old stores.
_ADDED_COLUMNS = {
    "answers": ("visible_at",),
    "grants": ("composition", "noise"),
    "charges": ("event",),
}

_audit = sa.Table(
    "audit",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("actor", sa.String(64), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
    sqlite_autoincrement=True,
)

# Append-only tables: the database itself refuses to change or drop their rows.
for _table in (_charges, _audit, _publication_charges):
    _t = _table.name
    sa.event.listen(
        _table,
        "after_create",
        sa.DDL(
            f"CREATE TRIGGER {_t}_append_only_update BEFORE UPDATE ON {_t} "
            f"BEGIN SELECT RAISE(ABORT, 'the {_t} table is append-only'); END"
        ).execute_if(dialect="sqlite"),
    )
    sa.event.listen(
        _table,
        "after_create",
        sa.DDL(
            f"CREATE TRIGGER {_t}_append_only_delete BEFORE DELETE ON {_t} "
            f"BEGIN SELECT RAISE(ABORT, 'the {_t} table is append-only'); END"
        ).execute_if(dialect="sqlite"),
    )
    sa.event.listen(
        _table,
        "after_create",
        sa.DDL(
            "CREATE OR REPLACE FUNCTION dpkit_append_only() RETURNS trigger "
            "LANGUAGE plpgsql AS $$ BEGIN "
            "RAISE EXCEPTION 'dpkit: this table is append-only'; END $$"
        ).execute_if(dialect="postgresql"),
    )
    sa.event.listen(
        _table,
        "after_create",
        sa.DDL(
            f"CREATE TRIGGER {_t}_append_only BEFORE UPDATE OR DELETE ON {_t} "
            "FOR EACH ROW EXECUTE FUNCTION dpkit_append_only()"
        ).execute_if(dialect="postgresql"),
    )


class Database:
    """The engine of a service store, its transactions and its schema; the parts of
    :class:`~dpkit.service.store.Store` (keys, grants, answers, audit) share one.

    ``url`` and ``timeout`` are :class:`~dpkit.service.store.Store`'s.
    """

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        if not isinstance(url, str) or "://" not in url:
            raise InvalidParameterError(
                "the store is a SQLAlchemy URL: sqlite:///path/to/service.db or "
                "postgresql+psycopg://user@host/dbname."
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout:
            raise InvalidParameterError("timeout must be a positive number of seconds.")
        self.timeout = float(timeout)
        try:
            parsed = sa.make_url(url)
        except exc.ArgumentError:
            raise InvalidParameterError("the store URL cannot be parsed.") from None
        kind = parsed.get_backend_name()
        if kind == "sqlite":
            engine = sa.create_engine(
                parsed, connect_args={"timeout": self.timeout, "check_same_thread": False}
            )
            sa.event.listen(engine, "connect", _sqlite_connect)
            sa.event.listen(engine, "begin", _sqlite_begin)
        elif kind == "postgresql":
            engine = sa.create_engine(
                parsed,
                pool_pre_ping=True,
                connect_args={"connect_timeout": max(1, math.ceil(self.timeout))},
            )
        else:
            raise InvalidParameterError(
                "the store runs on SQLite (sqlite:///...) or PostgreSQL "
                "(postgresql+psycopg://...), not on this database."
            )
        self.dialect = kind
        self._engine = engine
        # Writers: BEGIN IMMEDIATE on SQLite (see _sqlite_begin); the same pool.
        self._writer = engine.execution_options(dpkit_write=True)

    # --- plumbing -----------------------------------------------------------------
    @contextlib.contextmanager
    def _translate(self) -> Iterator[None]:
        """Database errors become LedgerError, with no SQL and no parameters in the message."""
        try:
            yield
        except exc.SQLAlchemyError as err:
            raise self._error(err) from None

    def _error(self, err: exc.SQLAlchemyError) -> LedgerError:
        orig = getattr(err, "orig", None)
        code = str(getattr(orig, "sqlite_errorname", "") or getattr(orig, "sqlstate", "") or "")
        kind = type(orig if orig is not None else err).__name__
        if code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED", "55P03")) or (
            code == "" and "database is locked" in str(orig)
        ):
            return LedgerLockedError(
                f"the service store is locked: another writer held it for more than "
                f"timeout={self.timeout} s. Retry later, or give the store a larger timeout."
            )
        return LedgerError(
            f"the service store cannot be used ({kind}{', ' + code if code else ''}): check "
            "that its database is reachable and was created by Store.create()."
        )

    @contextlib.contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        with self._translate(), self._engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def _write(self, *, exclusive: bool = False) -> Iterator[sa.Connection]:
        """One write transaction; committed if the block does not raise, else rolled back.

        ``exclusive`` serialises it with every other exclusive writer (PostgreSQL: an
        advisory lock; SQLite's ``BEGIN IMMEDIATE`` serialises all writers anyway), so that
        read-then-insert steps (a new analyst, a new grant) cannot race between processes.
        """
        with self._translate(), self._writer.begin() as conn:
            if self.dialect == "postgresql":
                # a row lock held longer than this is reported, not waited for forever
                conn.execute(sa.text(f"SET LOCAL lock_timeout = {int(self.timeout * 1000)}"))
                if exclusive:
                    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_REGISTRY_LOCK)))
            yield conn

    def close(self) -> None:
        """Close the store's connections (a later call opens new ones)."""
        self._engine.dispose()

    # --- schema -------------------------------------------------------------------
    def create(self) -> None:
        """Create the tables that are missing; safe when several processes start at once."""
        with self._write() as conn:
            if self.dialect == "postgresql":
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_SCHEMA_LOCK)))
            # SQLite: BEGIN IMMEDIATE already excludes the other processes.
            _metadata.create_all(conn, checkfirst=True)
            inspector = sa.inspect(conn)
            for table in _metadata.sorted_tables:
                have = {c["name"] for c in inspector.get_columns(table.name)}
                for added in _ADDED_COLUMNS.get(table.name, ()):
                    if added not in have:
                        kind = table.c[added].type.compile(dialect=conn.dialect)
                        conn.execute(sa.text(f"ALTER TABLE {table.name} ADD COLUMN {added} {kind}"))
                        have.add(added)
                missing = sorted(c.name for c in table.columns if c.name not in have)
                if missing:
                    raise LedgerError(
                        f"this database is not a dpkit service store: its table "
                        f"{table.name!r} lacks the columns {missing}. Give the service a "
                        "database of its own."
                    )
        if self.dialect == "sqlite":
            # WAL (readers never wait for the writer) is a property of the file: set once,
            # outside any transaction, and only on a file that is a store.
            with self._translate():
                raw = self._engine.raw_connection()
                try:
                    raw.cursor().execute("PRAGMA journal_mode = WAL")
                finally:
                    raw.close()


# SQLAlchemy's documented pysqlite recipe: the driver emits no BEGIN of its own, we do.
def _sqlite_connect(dbapi_connection: Any, connection_record: Any) -> None:
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA synchronous = FULL")  # a committed charge survives power loss
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    # A writer takes the database's write lock at BEGIN, before it reads anything.
    write = conn.get_execution_options().get("dpkit_write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
