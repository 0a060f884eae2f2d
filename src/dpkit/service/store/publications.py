"""What a dataset publishes for every analyst: its DP synthetic tables and their ledger.

A dataset's *publication ledger* is the data owner's budget for publications
(its cap is in the configuration, ``publication_epsilon`` / ``publication_delta``):
a :class:`~dpkit.accounting.ledger.Ledger` over the ``publication_charges`` rows
of the dataset, for an :class:`~dpkit.accounting.Accountant`. The transaction that
charges a synthetic table also claims its name (a ``publications`` row, status
``charged``) — under the lock that serialises every writer — so a table is charged
at most once, ever, whatever processes start together: a second charge under a
claimed name raises :class:`~dpkit.service.store.DuplicateRequestError` before any
budget check. The table and its report are then stored (``published``) or the
failure is (``failed``); a claimed name is never made again. Charges are
append-only (database triggers refuse UPDATE and DELETE).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import sqlalchemy as sa

from dpkit.accounting.ledger import NewRow, Row, event_text
from dpkit.errors import InvalidParameterError, LedgerCorruptError
from dpkit.service.store._database import (
    Database,
    DuplicateRequestError,
    _name,
    _publication_charges,
    _publications,
    _text,
)
from dpkit.service.store.grants import _charge

_STATUSES = ("charged", "published", "failed")


class Publication(NamedTuple):
    """A stored synthetic table: its public parameters, status and (once published) result."""

    params: dict[str, Any]
    status: str
    result: dict[str, Any] | None


class Publications(Database):
    """The publications' part of the store."""

    def publication(self, dataset: str, name: str) -> Publication | None:
        """The synthetic table ``name`` of ``dataset`` as stored, or None if never charged."""
        with self._read() as conn:
            row = conn.execute(
                sa.select(
                    _publications.c.params, _publications.c.status, _publications.c.result
                ).where(_publications.c.dataset == dataset, _publications.c.name == name)
            ).first()
        if row is None:
            return None
        try:
            params = json.loads(row.params)
            result = None if row.result is None else json.loads(row.result)
        except ValueError:
            params = None
        if not isinstance(params, dict) or row.status not in _STATUSES:
            raise LedgerCorruptError(
                "the service store holds an unreadable publication; restore the database "
                "from a backup."
            )
        return Publication(params, str(row.status), result)

    def publication_ledger(
        self, dataset: str, name: str | None = None, params: Mapping[str, Any] | None = None
    ) -> PublicationLedger:
        """The dataset's publication ledger; its next charge claims the table ``name``
        (without a name the ledger is for reading: a charge through it is refused)."""
        table = None if name is None else _name(name, "table")
        return PublicationLedger(self, _name(dataset, "dataset"), table, params or {})

    def finish_publication(self, dataset: str, name: str, result: Mapping[str, Any] | None) -> None:
        """Store a claimed table's result (``published``), or None: it failed (``failed``)."""
        status = "failed" if result is None else "published"
        text = None if result is None else json.dumps(dict(result), allow_nan=False)
        with self._write() as conn:
            done = conn.execute(
                _publications.update()
                .where(
                    _publications.c.dataset == dataset,
                    _publications.c.name == name,
                    _publications.c.status == "charged",  # a result is stored once
                )
                .values(status=status, result=text)
            )
            if done.rowcount != 1:
                raise InvalidParameterError(f"no synthetic table {name!r} is being made.")


class PublicationLedger:
    """A dataset's publication charges as a :class:`~dpkit.accounting.ledger.Ledger`.

    Its write transaction refuses, before the budget check, when the table it
    was opened for is claimed already; its append inserts the charge and the
    claim together.
    """

    path: Path | None = None  # no file of its own

    def __init__(
        self, store: Publications, dataset: str, name: str | None, params: Mapping[str, Any]
    ) -> None:
        self._store = store
        self.dataset = dataset
        self.name = name
        self._params = json.dumps(dict(params), sort_keys=True)
        #: whether a charge through this ledger claimed the table (set in its transaction)
        self.claimed = False

    def read(self, after: int) -> list[Row]:
        with self._store._read() as conn:
            return _rows(conn, self.dataset, after)

    @contextlib.contextmanager
    def write(self, after: int) -> Iterator[_Claim]:
        if self.name is None:
            raise InvalidParameterError("this publication ledger is for reading; name a table.")
        # exclusive: serialises the publications of every process (PostgreSQL's advisory
        # lock; SQLite's BEGIN IMMEDIATE serialises every writer)
        with self._store._write(exclusive=True) as conn:
            claimed = conn.execute(
                sa.select(_publications.c.status).where(
                    _publications.c.dataset == self.dataset, _publications.c.name == self.name
                )
            ).first()
            if claimed is not None:
                raise DuplicateRequestError(
                    f"the synthetic table {self.name!r} of {self.dataset!r} was charged "
                    "already; a table is charged once."
                )
            yield _Claim(self, conn, _rows(conn, self.dataset, after))

    def close(self) -> None:
        pass  # the store owns the connections


class _Claim:
    def __init__(self, ledger: PublicationLedger, conn: sa.Connection, rows: list[Row]) -> None:
        self._ledger = ledger
        self._conn = conn
        self.new_rows = rows

    def append(self, rows: Sequence[NewRow]) -> list[Row]:
        ledger, conn, now = self._ledger, self._conn, time.time()
        out = []
        for r in rows:
            rho = r.cost.rho_declared
            result = conn.execute(
                _publication_charges.insert().values(
                    dataset=ledger.dataset,
                    label=r.label,
                    epsilon=_text(r.cost.epsilon_exact),
                    delta=_text(r.cost.delta_exact),
                    rho=None if rho is None else _text(rho),
                    scope_path=json.dumps([list(level) for level in r.path]),
                    created_at=now,
                    event=None if r.event is None else event_text(r.event),
                )
            )
            (row_id,) = result.inserted_primary_key or (0,)
            out.append(Row(int(row_id or 0), r.label, r.cost, r.path, now, r.event))
        conn.execute(
            _publications.insert().values(
                dataset=ledger.dataset,
                name=ledger.name,
                params=ledger._params,
                status="charged",
                result=None,
                created_at=now,
            )
        )
        ledger.claimed = True  # the caller's transaction commits it, or raises
        return out


def _rows(conn: sa.Connection, dataset: str, after: int) -> list[Row]:
    c = _publication_charges.c
    raw = conn.execute(
        sa.select(c.id, c.label, c.epsilon, c.delta, c.rho, c.scope_path, c.created_at, c.event)
        .where(c.dataset == dataset, c.id > after)
        .order_by(c.id)
    ).all()
    return [_charge(tuple(r)) for r in raw]
