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

The parts, one module each over one shared engine and schema
(:mod:`~dpkit.service.store._database`): :mod:`~dpkit.service.store.keys`
(analysts, key hashes, rotation, revocation), :mod:`~dpkit.service.store.grants`
(grants, the per-dataset caps, the ledger and its charging transaction),
:mod:`~dpkit.service.store.answers` (stored answers and when they are shown),
:mod:`~dpkit.service.store.audit` (the audit log) and
:mod:`~dpkit.service.store.publications` (each dataset's synthetic tables and the
publication ledger they are charged to). :class:`Store` composes them.
"""

from __future__ import annotations

from dpkit.service.store._database import (
    REQUEST_KEY,
    REQUEST_TIME,
    ConflictError,
    DuplicateRequestError,
    RequestTime,
    UnknownAnalystError,
)
from dpkit.service.store.answers import Answers
from dpkit.service.store.audit import Audit
from dpkit.service.store.grants import GrantLedger, Grants
from dpkit.service.store.keys import Analyst, Keys, hash_key, key_id, make_key
from dpkit.service.store.publications import Publication, PublicationLedger, Publications

__all__ = [
    "REQUEST_KEY",
    "REQUEST_TIME",
    "Analyst",
    "ConflictError",
    "DuplicateRequestError",
    "GrantLedger",
    "Publication",
    "PublicationLedger",
    "RequestTime",
    "Store",
    "UnknownAnalystError",
    "hash_key",
    "key_id",
    "make_key",
]


class Store(Keys, Grants, Answers, Audit, Publications):
    """The service's database: ``Store(url)``, then :meth:`create` once per start.

    ``url`` is ``sqlite:///path/to/file.db`` or ``postgresql+psycopg://...``
    (a unix-socket host goes in the query: ``...@/dbname?host=/run/postgresql``).
    ``timeout`` is how many seconds a writer waits for another one's lock
    before :class:`~dpkit.errors.LedgerLockedError`. Its methods come from the
    parts: keys, grants and their ledgers, stored answers, the audit log.
    """
