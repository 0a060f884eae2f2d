"""Grants, the per-dataset caps, and the ledger of each grant (the charging transaction).

A grant only grows (:meth:`Grants.add_grant` adds to it); amounts are exact
fractions in text ("1/10"), so 0.1 + 0.2 is exactly 3/10. :meth:`Grants.ledger`
is a :class:`~dpkit.accounting.ledger.Ledger` over the charges of one grant, for
:class:`~dpkit.accounting.Accountant`. A charge is one transaction that first
takes an exclusive lock serialising every writer of the grant, in every process
(SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: ``SELECT ... FOR UPDATE`` of the
grant's row), then checks the budget against the committed rows, inserts, and
commits — before the release reads any data. So no two processes overspend a
grant, and a committed charge is durable (SQLite ``synchronous=FULL``;
PostgreSQL's default commit). Charges are append-only (database triggers refuse
UPDATE and DELETE).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import warnings
from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from dpkit._checks import WEAK_EPSILON
from dpkit.accounting.budget import Amount, Budget
from dpkit.accounting.ledger import NewRow, Row, Transaction, level_from_json
from dpkit.errors import InvalidParameterError, LedgerCorruptError, LedgerError, PrivacyWarning
from dpkit.service.store._database import (
    REQUEST_KEY,
    ConflictError,
    Database,
    DuplicateRequestError,
    UnknownAnalystError,
    _amount,
    _charges,
    _grants,
    _name,
    _request_key,
    _text,
)
from dpkit.service.store.audit import audit_row
from dpkit.service.store.keys import analyst_row


def weak_grant_warning(total: Budget) -> str | None:
    """The warning a grant above ε = 10 carries (as a query's epsilon does), else None."""
    if total.epsilon_exact <= WEAK_EPSILON:
        return None
    return (
        f"the grant's epsilon={total.epsilon:g} is above {WEAK_EPSILON:g}: the guarantee is "
        "weak (the analyst's answers together can change the odds of an outcome by a factor "
        f"up to e^{total.epsilon:g}). Grant a smaller epsilon for anything that is published."
    )


class Grants(Database):
    """The grants' and charges' part of the store."""

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
        raises :class:`ConflictError` and changes nothing. A grant that grows above
        ε = 10 warns (:class:`~dpkit.errors.PrivacyWarning`, :func:`weak_grant_warning`).
        """
        _name(analyst, "analyst")
        _name(dataset, "dataset")
        more = Budget(epsilon, delta)
        with self._write(exclusive=True) as conn:
            if analyst_row(conn, analyst) is None:
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
            audit_row(
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
        weak = weak_grant_warning(total)
        if weak is not None:
            warnings.warn(weak, PrivacyWarning, stacklevel=2)
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

    def __init__(self, store: Grants, analyst: str, dataset: str) -> None:
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
