"""The query service's state: analysts and their hashed keys, grants, the per-grant
privacy ledger, stored answers and the audit log, in SQLite or PostgreSQL.

One database rather than one ledger file per grant, so that the admin's changes,
the charges and the answers share one set of transactions and one backup.
SQLAlchemy Core, one schema for both engines: ``sqlite:///path/to/file.db``
(zero set-up) or ``postgresql+psycopg://user@host/dbname``.

Guarantees:

* A key is ``dpk_<key id>_<secret>``; the store keeps the key id and the
  SHA-256 of the secret only, so a copy of the database lets nobody in. A key
  is shown once, when it is made. :meth:`Store.authenticate` compares digests
  in constant time, and also when the key id is unknown, so its timing does
  not tell whether a key id exists. A revoked analyst stays revoked.
* A grant only grows (:meth:`Store.add_grant` adds to it); amounts are exact
  fractions in text ("1/10"), so 0.1 + 0.2 is exactly 3/10.
* :meth:`Store.ledger` is a :class:`~dpkit.accounting.ledger.Ledger` over the
  charges of one grant, for :class:`~dpkit.accounting.Accountant`. A charge is
  one transaction that first takes an exclusive lock serialising every writer
  of the grant, in every process (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL:
  ``SELECT ... FOR UPDATE`` of the grant's row), then checks the budget against
  the committed rows, inserts, and commits — before the release reads any
  data. So no two processes overspend a grant, and a committed charge is
  durable (SQLite ``synchronous=FULL``; PostgreSQL's default commit).
* Charges and the audit log are append-only (database triggers refuse UPDATE
  and DELETE).
* Every database failure is a :class:`~dpkit.errors.LedgerError` (a
  :class:`~dpkit.errors.LedgerLockedError` after waiting ``timeout`` seconds
  for a lock) whose message names neither SQL nor its parameters.

A :class:`Store` is used by one process (its threads share it); another
process opens its own on the same URL.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import json
import math
import re
import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc

from dpkit.accounting.budget import Amount, Budget
from dpkit.accounting.ledger import NewRow, Row, Transaction, level_from_json
from dpkit.errors import (
    DPKitError,
    InvalidParameterError,
    LedgerCorruptError,
    LedgerError,
    LedgerLockedError,
)

__all__ = [
    "REQUEST_KEY",
    "REQUEST_TIME",
    "Analyst",
    "ConflictError",
    "DuplicateRequestError",
    "GrantLedger",
    "RequestTime",
    "Store",
    "UnknownAnalystError",
    "hash_key",
    "key_id",
    "make_key",
]

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
_KEY = re.compile(r"dpk_([A-Za-z0-9_-]{8})_([A-Za-z0-9_-]{32,128})")
_KEY_HASH = re.compile(r"([A-Za-z0-9_-]{8}):([0-9a-f]{64})")
_AMOUNT = re.compile(r"[0-9]{1,4000}(/[0-9]{1,4000})?")
_STATUSES = ("answered", "failed", "timeout")
# Compared against when a key id is unknown, so that a miss costs what a hit costs.
_DUMMY_DIGEST = hashlib.sha256(b"dpkit: no analyst has this key").hexdigest()
_PG_SCHEMA_LOCK = 0x64706B73  # "dpks": serialises concurrent Store.create() on PostgreSQL
_PG_REGISTRY_LOCK = 0x64706B72  # "dpkr": serialises new analysts and grants across processes


# ---------------------------------------------------------------------------------
# Errors and records
# ---------------------------------------------------------------------------------
class ConflictError(DPKitError):
    """An admin change that contradicts the store: the analyst exists, or is revoked."""


class DuplicateRequestError(LedgerError):
    """A charge under a request key that was charged already (raised before any budget check)."""


class UnknownAnalystError(ConflictError):
    """No analyst of that name."""


@dataclass(frozen=True)
class Analyst:
    """An analyst as the service shows it: never the key or its hash."""

    name: str
    active: bool
    created_at: float


# ---------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------
def make_key() -> str:
    """A fresh key ``dpk_<8-char key id>_<43-char secret>`` (about 256 bits of secret)."""
    return f"dpk_{secrets.token_urlsafe(6)}_{secrets.token_urlsafe(32)}"


def _parse_key(key: object) -> tuple[str, str] | None:
    if not isinstance(key, str):
        return None
    found = _KEY.fullmatch(key)
    return None if found is None else (found.group(1), found.group(2))


def key_id(key: object) -> str | None:
    """The public id of a well-formed key (``dpk_<key id>_...``), else None: what a log
    may name, never the secret."""
    parsed = _parse_key(key)
    return None if parsed is None else parsed[0]


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def hash_key(key: str) -> str:
    """``"<key id>:<sha256 hex of the secret>"``: what a config file holds instead of a key."""
    parsed = _parse_key(key)
    if parsed is None:
        raise InvalidParameterError(
            "a key looks like dpk_XXXXXXXX_ followed by its secret; this is not one "
            "(`dpkit admin hash-key` makes a new key)."
        )
    return f"{parsed[0]}:{_digest(parsed[1])}"


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

#: Columns added after a store's first release (nullable): create() adds them to old stores.
_ADDED_COLUMNS = {"answers": ("visible_at",)}

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
for _table in (_charges, _audit):
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


# ---------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------
class Store:
    """The service's database: ``Store(url)``, then :meth:`create` once per start.

    ``url`` is ``sqlite:///path/to/file.db`` or ``postgresql+psycopg://...``
    (a unix-socket host goes in the query: ``...@/dbname?host=/run/postgresql``).
    ``timeout`` is how many seconds a writer waits for another one's lock
    before :class:`~dpkit.errors.LedgerLockedError`.
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

    def _audit_row(self, conn: sa.Connection, actor: str, action: str, detail: object) -> None:
        conn.execute(
            _audit.insert().values(
                created_at=time.time(),
                actor=str(actor)[:64],
                action=str(action)[:64],
                detail=json.dumps(detail, sort_keys=True, default=str),
            )
        )

    # --- analysts -----------------------------------------------------------------
    def authenticate(self, key: str) -> Analyst | None:
        """The active analyst holding ``key``, else None (also for a malformed key)."""
        parsed = _parse_key(key)
        if parsed is None:
            return None
        key_id, secret = parsed
        given = _digest(secret)
        with self._read() as conn:
            row = conn.execute(
                sa.select(
                    _analysts.c.name,
                    _analysts.c.key_hash,
                    _analysts.c.active,
                    _analysts.c.created_at,
                ).where(_analysts.c.key_id == key_id)
            ).first()
        stored = row.key_hash if row is not None and row.key_hash else _DUMMY_DIGEST
        same = hmac.compare_digest(given.encode(), str(stored).encode())
        if row is None or not same or not row.active:
            return None
        return Analyst(row.name, True, float(row.created_at))

    def _analyst_row(self, conn: sa.Connection, name: str) -> Any:
        return conn.execute(
            sa.select(_analysts.c.active, _analysts.c.key_id).where(_analysts.c.name == name)
        ).first()

    def add_analyst(self, name: str, actor: str) -> str:
        """Register a new analyst and return their key (shown once; only its hash is kept)."""
        _name(name, "analyst")
        key = make_key()
        key_id, digest = hash_key(key).split(":")
        taken = ConflictError(f"the analyst {name!r} exists already.")
        with self._write(exclusive=True) as conn:
            if self._analyst_row(conn, name) is not None:
                raise taken
            try:
                conn.execute(
                    _analysts.insert().values(
                        name=name,
                        key_id=key_id,
                        key_hash=digest,
                        active=True,
                        created_at=time.time(),
                    )
                )
            except exc.IntegrityError:  # another process added it in between (PostgreSQL)
                raise taken from None
            self._audit_row(conn, actor, "add_analyst", {"analyst": name})
        return key

    def ensure_analyst(self, name: str, key_hash: str | None = None) -> None:
        """Register an analyst declared in the service's config, unless already known.

        ``key_hash`` is what :func:`hash_key` prints. An analyst already in the
        store keeps their key (rotating goes through :meth:`rotate_key`, so that
        a restart never brings back a replaced key), except that one declared
        without a key gets this one.
        """
        _name(name, "analyst")
        key_id = digest = None
        if key_hash is not None:
            found = _KEY_HASH.fullmatch(key_hash) if isinstance(key_hash, str) else None
            if found is None:
                raise InvalidParameterError(
                    "key_hash must be what `dpkit admin hash-key` prints (KEYID:SHA256HEX)."
                )
            key_id, digest = found.group(1), found.group(2)
        with self._write(exclusive=True) as conn:
            row = self._analyst_row(conn, name)
            try:
                if row is None:
                    conn.execute(
                        _analysts.insert().values(
                            name=name,
                            key_id=key_id,
                            key_hash=digest,
                            active=True,
                            created_at=time.time(),
                        )
                    )
                    self._audit_row(conn, "config", "add_analyst", {"analyst": name})
                elif row.key_id is None and key_id is not None and row.active:
                    conn.execute(
                        _analysts.update()
                        .where(_analysts.c.name == name)
                        .values(key_id=key_id, key_hash=digest)
                    )
                    self._audit_row(conn, "config", "set_key", {"analyst": name})
            except exc.IntegrityError:
                raise ConflictError(
                    f"the analyst {name!r} was given a key another analyst holds (or was "
                    "added by another process at the same time); give each analyst a key "
                    "of their own."
                ) from None

    def rotate_key(self, name: str, actor: str) -> str:
        """A new key for the analyst (returned once); the old one stops working now."""
        _name(name, "analyst")
        key = make_key()
        key_id, digest = hash_key(key).split(":")
        with self._write() as conn:
            row = self._analyst_row(conn, name)
            if row is None:
                raise UnknownAnalystError(f"there is no analyst {name!r}.")
            if not row.active:
                raise ConflictError(
                    f"the analyst {name!r} is revoked, for good; register a new analyst instead."
                )
            conn.execute(
                _analysts.update()
                .where(_analysts.c.name == name)
                .values(key_id=key_id, key_hash=digest)
            )
            self._audit_row(conn, actor, "rotate_key", {"analyst": name})
        return key

    def revoke(self, name: str, actor: str) -> None:
        """The analyst's key stops working, for good (their grants and charges stay)."""
        _name(name, "analyst")
        with self._write() as conn:
            if self._analyst_row(conn, name) is None:
                raise UnknownAnalystError(f"there is no analyst {name!r}.")
            conn.execute(_analysts.update().where(_analysts.c.name == name).values(active=False))
            self._audit_row(conn, actor, "revoke", {"analyst": name})

    def analysts(self) -> list[Analyst]:
        """Every analyst, by name (never a key or its hash)."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(_analysts.c.name, _analysts.c.active, _analysts.c.created_at).order_by(
                    _analysts.c.name
                )
            ).all()
        return [Analyst(r.name, bool(r.active), float(r.created_at)) for r in rows]

    # --- grants -------------------------------------------------------------------
    def _grant_row(self, conn: sa.Connection, analyst: str, dataset: str, *, lock: bool) -> Any:
        query = sa.select(_grants.c.epsilon, _grants.c.delta, _grants.c.version).where(
            _grants.c.analyst == analyst, _grants.c.dataset == dataset
        )
        if lock:  # PostgreSQL's row lock; SQLite's BEGIN IMMEDIATE already holds the file
            query = query.with_for_update()
        return conn.execute(query).first()

    def add_grant(
        self,
        analyst: str,
        dataset: str,
        epsilon: Amount,
        delta: Amount,
        actor: str,
        *,
        at_least: bool = False,
        cap: Budget | None = None,
    ) -> Budget:
        """Add (ε, δ) to the analyst's grant on the dataset (created if absent); the new total.

        With ``at_least=True``, raise the grant to at least (ε, δ) instead (the service's
        config at start-up: read and raise in one transaction, so two processes starting
        together raise it once). A grant never shrinks: spent budget stays spent, and what
        is given stays given. ``cap`` bounds the sum of every analyst's grant on the
        dataset (analysts who pool their answers compose): a grant that would pass it
        raises :class:`ConflictError` and changes nothing.
        """
        _name(analyst, "analyst")
        _name(dataset, "dataset")
        more = Budget(epsilon, delta)
        with self._write(exclusive=True) as conn:
            if self._analyst_row(conn, analyst) is None:
                raise UnknownAnalystError(f"there is no analyst {analyst!r}.")
            row = self._grant_row(conn, analyst, dataset, lock=True)
            now = time.time()
            if row is None:
                total = more
                if total.epsilon_exact <= 0:
                    raise InvalidParameterError("a new grant needs an epsilon > 0.")
                self._check_cap(conn, dataset, more, cap)
                conn.execute(
                    _grants.insert().values(
                        analyst=analyst,
                        dataset=dataset,
                        epsilon=_text(total.epsilon_exact),
                        delta=_text(total.delta_exact),
                        version=1,
                        created_at=now,
                        updated_at=now,
                    )
                )
            else:
                have = Budget(_amount(row.epsilon, "a grant"), _amount(row.delta, "a grant"))
                if at_least:
                    more = Budget(
                        max(more.epsilon_exact - have.epsilon_exact, Fraction(0)),
                        max(more.delta_exact - have.delta_exact, Fraction(0)),
                    )
                if more.is_zero:
                    return have
                total = have + more  # refuses a delta reaching 1
                self._check_cap(conn, dataset, more, cap)
                conn.execute(
                    _grants.update()
                    .where(_grants.c.analyst == analyst, _grants.c.dataset == dataset)
                    .values(
                        epsilon=_text(total.epsilon_exact),
                        delta=_text(total.delta_exact),
                        version=_grants.c.version + 1,
                        updated_at=now,
                    )
                )
            self._audit_row(
                conn,
                actor,
                "add_grant",
                {
                    "analyst": analyst,
                    "dataset": dataset,
                    "epsilon": more.epsilon,
                    "delta": more.delta,
                    "total_epsilon": total.epsilon,
                    "total_delta": total.delta,
                },
            )
        return total

    def _granted(self, conn: sa.Connection, dataset: str) -> Budget:
        rows = conn.execute(
            sa.select(_grants.c.epsilon, _grants.c.delta).where(_grants.c.dataset == dataset)
        ).all()
        eps = sum((_amount(r.epsilon, "a grant") for r in rows), Fraction(0))
        delta = sum((_amount(r.delta, "a grant") for r in rows), Fraction(0))
        return Budget._of(eps, delta, None)  # deltas of several grants may sum past any one

    def _check_cap(
        self, conn: sa.Connection, dataset: str, more: Budget, cap: Budget | None
    ) -> None:
        if cap is None:
            return
        now = self._granted(conn, dataset)
        after_eps = now.epsilon_exact + more.epsilon_exact
        after_delta = now.delta_exact + more.delta_exact
        if after_eps > cap.epsilon_exact or after_delta > cap.delta_exact:
            raise ConflictError(
                f"this grant would bring the budgets granted on {dataset!r} to ε={float(after_eps):g}, "
                f"δ={float(after_delta):g}, above the dataset's cap {cap} (analysts who pool "
                "their answers compose, so the data owner caps the sum). Grant less, or raise the "
                "cap in the configuration."
            )

    def granted(self, dataset: str) -> Budget:
        """The sum of every analyst's grant on the dataset (the owner's total exposure)."""
        with self._read() as conn:
            return self._granted(conn, dataset)

    def grant(self, analyst: str, dataset: str) -> Budget | None:
        """The analyst's budget on the dataset, or None without a grant."""
        with self._read() as conn:
            row = self._grant_row(conn, analyst, dataset, lock=False)
        if row is None:
            return None
        return Budget(_amount(row.epsilon, "a grant"), _amount(row.delta, "a grant"))

    def grants(self, analyst: str) -> dict[str, Budget]:
        """Every grant of the analyst: dataset -> budget, by dataset name."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(_grants.c.dataset, _grants.c.epsilon, _grants.c.delta)
                .where(_grants.c.analyst == analyst)
                .order_by(_grants.c.dataset)
            ).all()
        return {
            r.dataset: Budget(_amount(r.epsilon, "a grant"), _amount(r.delta, "a grant"))
            for r in rows
        }

    def ledger(self, analyst: str, dataset: str) -> GrantLedger:
        """The privacy ledger of the analyst's grant on the dataset (for an Accountant)."""
        _name(analyst, "analyst")
        _name(dataset, "dataset")
        if self.grant(analyst, dataset) is None:
            raise LedgerError(
                f"the analyst {analyst!r} holds no grant on the dataset {dataset!r}; "
                "add one (add_grant) before charging it."
            )
        return GrantLedger(self, analyst, dataset)

    # --- answers ------------------------------------------------------------------
    def save_answer(
        self,
        analyst: str,
        request_key: str,
        *,
        dataset: str,
        query: Mapping[str, Any],
        status: str,
        response: Mapping[str, Any] | None,
        epsilon: Amount,
        delta: Amount,
    ) -> None:
        """Store what a request produced. An answer is never replaced by a failure;
        a failure or timeout is replaced by the answer that arrives after it.

        Within a request (:data:`REQUEST_TIME` set) the row is dated at the request's
        arrival and hidden until its deadline, so neither its date nor when it appears
        tells how long the work took; outside one, both are now.
        """
        _request_key(request_key)
        now = time.time()
        when = REQUEST_TIME.get() or RequestTime(now, now)
        if status not in _STATUSES:
            raise InvalidParameterError(f"status must be one of {', '.join(_STATUSES)}.")
        cost = Budget(epsilon, delta)
        values = {
            "dataset": _name(dataset, "dataset"),
            "query": json.dumps(dict(query), sort_keys=True),
            "status": status,
            "response": None if response is None else json.dumps(dict(response)),
            "charge_epsilon": _text(cost.epsilon_exact),
            "charge_delta": _text(cost.delta_exact),
            "created_at": when.received,
            "visible_at": when.deadline,
        }
        where = (_answers.c.analyst == analyst, _answers.c.request_key == request_key)
        with self._write() as conn:
            have = conn.execute(sa.select(_answers.c.status).where(*where)).first()
            if have is None:
                conn.execute(
                    _answers.insert().values(analyst=analyst, request_key=request_key, **values)
                )
            elif status == "answered" and have.status != "answered":
                conn.execute(_answers.update().where(*where).values(**values))

    def find_answer(self, analyst: str, request_key: str) -> dict[str, Any] | None:
        """The stored outcome of the analyst's request with this key, or None (also
        before the request's deadline: a replay must not show when the work ended)."""
        with self._read() as conn:
            row = conn.execute(
                _answers.select().where(
                    _answers.c.analyst == analyst,
                    _answers.c.request_key == request_key,
                    _visible(),
                )
            ).first()
        return None if row is None else _answer_json(row)

    def history(
        self, analyst: str, dataset: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The analyst's stored requests (optionally on one dataset), newest first by
        arrival; each is shown from its deadline on, dated to the whole second."""
        query = _answers.select().where(_answers.c.analyst == analyst, _visible())
        if dataset is not None:
            query = query.where(_answers.c.dataset == dataset)
        query = query.order_by(_answers.c.created_at.desc(), _answers.c.request_key).limit(
            _limit(limit)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [_answer_json(r) for r in rows]

    def charge_label(self, analyst: str, request_key: str) -> str | None:
        """The label of the charge made for this request, or None if none was made."""
        with self._read() as conn:
            row = conn.execute(
                sa.select(_charges.c.label).where(
                    _charges.c.analyst == analyst, _charges.c.request_key == request_key
                )
            ).first()
        return None if row is None else str(row.label)

    def charge_for_request(self, analyst: str, request_key: str) -> bool:
        """Whether a charge was committed for this request."""
        return self.charge_label(analyst, request_key) is not None

    # --- audit --------------------------------------------------------------------
    def audit(self, actor: str, action: str, **detail: Any) -> None:
        """Append an event to the audit log (give it public facts only: names, never keys)."""
        with self._write() as conn:
            self._audit_row(conn, actor, action, detail)

    def audit_log(self, limit: int = 100) -> list[dict[str, Any]]:
        """The latest audit events, newest first."""
        with self._read() as conn:
            rows = conn.execute(
                _audit.select().order_by(_audit.c.id.desc()).limit(_limit(limit))
            ).all()
        return [
            {
                "id": r.id,
                "created_at": r.created_at,
                "actor": r.actor,
                "action": r.action,
                "detail": json.loads(r.detail),
            }
            for r in rows
        ]


def _visible() -> sa.ColumnElement[bool]:
    return sa.or_(_answers.c.visible_at.is_(None), _answers.c.visible_at <= time.time())


def _answer_json(row: Any) -> dict[str, Any]:
    return {
        "query_id": row.request_key,
        "dataset": row.dataset,
        "query": json.loads(row.query),
        "status": row.status,
        "response": None if row.response is None else json.loads(row.response),
        "epsilon": float(_amount(row.charge_epsilon, "an answer's epsilon")),
        "delta": float(_amount(row.charge_delta, "an answer's delta")),
        # the arrival, to the second: finer digits would only carry the server's jitter
        "created_at": float(math.floor(row.created_at)),
    }


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


# ---------------------------------------------------------------------------------
# The ledger of one grant
# ---------------------------------------------------------------------------------
_CHARGE_COLUMNS = (
    _charges.c.id,
    _charges.c.label,
    _charges.c.epsilon,
    _charges.c.delta,
    _charges.c.rho,
    _charges.c.scope_path,
    _charges.c.created_at,
)


class GrantLedger:
    """The charges of one grant as a :class:`~dpkit.accounting.ledger.Ledger`.

    ``Accountant(grant_budget, ledger=store.ledger(analyst, dataset))`` then
    charges this grant with the guarantees of the module docstring: the check
    and the insert are one transaction under a lock that serialises every
    writer of the grant across processes. Row ids are the charges table's
    (increasing within a grant; shared with the other grants). The request
    key of a new charge is :data:`REQUEST_KEY`'s value.
    """

    path: Path | None = None  # no file of its own

    def __init__(self, store: Store, analyst: str, dataset: str) -> None:
        self._store = store
        self.analyst = analyst
        self.dataset = dataset

    def _mine(self, after: int) -> sa.Select[Any]:
        return (
            sa.select(*_CHARGE_COLUMNS)
            .where(
                _charges.c.analyst == self.analyst,
                _charges.c.dataset == self.dataset,
                _charges.c.id > after,
            )
            .order_by(_charges.c.id)
        )

    def read(self, after: int) -> list[Row]:
        with self._store._read() as conn:
            raw = conn.execute(self._mine(after)).all()
        return [_charge(tuple(r)) for r in raw]

    @contextlib.contextmanager
    def write(self, after: int) -> Iterator[Transaction]:
        with self._store._write() as conn:
            if self._store._grant_row(conn, self.analyst, self.dataset, lock=True) is None:
                raise LedgerError(
                    f"the analyst {self.analyst!r} holds no grant on the dataset "
                    f"{self.dataset!r}; nothing was charged."
                )
            request_key = REQUEST_KEY.get()
            if request_key is not None:
                # Before the accountant checks the budget: a retry of a charged request
                # must learn that it was charged (its answer can be replayed), not that
                # the budget is now too low.
                _request_key(request_key)
                seen = conn.execute(
                    sa.select(_charges.c.id).where(
                        _charges.c.analyst == self.analyst, _charges.c.request_key == request_key
                    )
                ).first()
                if seen is not None:
                    raise DuplicateRequestError(
                        "this request was charged already; a request key is charged once. "
                        "Retry with the same key for its answer, or send a new key."
                    )
            rows = [_charge(tuple(r)) for r in conn.execute(self._mine(after)).all()]
            yield _GrantTransaction(self, conn, rows)

    def close(self) -> None:
        pass  # the store owns the connections

    def __repr__(self) -> str:
        return f"GrantLedger(analyst={self.analyst!r}, dataset={self.dataset!r})"


class _GrantTransaction:
    def __init__(self, ledger: GrantLedger, conn: sa.Connection, rows: list[Row]) -> None:
        self._ledger = ledger
        self._conn = conn
        self.new_rows = rows

    def append(self, rows: Sequence[NewRow]) -> list[Row]:
        ledger, conn = self._ledger, self._conn
        request_key = REQUEST_KEY.get()  # checked for reuse when the transaction began
        out = []
        now = time.time()
        for i, r in enumerate(rows):
            rho = r.cost.rho_declared
            result = conn.execute(
                _charges.insert().values(
                    analyst=ledger.analyst,
                    dataset=ledger.dataset,
                    label=r.label,
                    epsilon=_text(r.cost.epsilon_exact),
                    delta=_text(r.cost.delta_exact),
                    rho=None if rho is None else _text(rho),
                    scope_path=json.dumps([list(level) for level in r.path]),
                    created_at=now,
                    # one charge of several rows (parallel parts) names its request once
                    request_key=request_key if i == 0 else None,
                )
            )
            (row_id,) = result.inserted_primary_key or (None,)
            if not isinstance(row_id, int):  # pragma: no cover - both engines return it
                raise LedgerError("the service store did not return the id of a new charge.")
            out.append(Row(row_id, r.label, r.cost, r.path, now))
        return out


def _charge(raw: tuple[Any, ...]) -> Row:
    """A charges row as the accountant reads it; anything unreadable is corruption."""
    row_id, label, eps, delta, rho, path_text, created = raw
    where = f"charge #{row_id}"
    try:
        levels = json.loads(path_text)
        path = tuple(level_from_json(x) for x in levels)
        if not isinstance(levels, list) or len(path) > 64:
            raise ValueError(where)
        if not isinstance(label, str) or not math.isfinite(float(created)):
            raise ValueError(where)
        e, d = _amount(eps, where), _amount(delta, where)
        r = None if rho is None else _amount(rho, where)
        cost = Budget(e, d, rho=r)
    except (ValueError, TypeError, RecursionError, OverflowError, InvalidParameterError):
        raise LedgerCorruptError(
            f"the service store's {where} is unreadable. dpkit never repairs its ledger, "
            "since forgetting spent budget would break the privacy guarantee: restore the "
            "database from a backup."
        ) from None
    return Row(int(row_id), label, cost, path, float(created))
