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
from typing import Any, NamedTuple

import sqlalchemy as sa

from dpkit._checks import WEAK_EPSILON
from dpkit.accounting.budget import Amount, Budget
from dpkit.accounting.events import PrivacyEvent, event_from_json
from dpkit.accounting.ledger import NewRow, Row, Transaction, event_text, level_from_json
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
from dpkit.tables.noise import GAUSSIAN_RULES, NOISES, check_noise

#: The composition rules a grant may use: those valid when each query is chosen after
#: seeing the earlier answers (the service is interactive; docs/accounting.md).
GRANT_RULES = ("basic", "zcdp", "rdp")
_MAX_EVENT_TEXT = 1_000_000  # as the file ledger's


def check_grant_rule(rule: object) -> str:
    """A grant's composition rule (:data:`GRANT_RULES`), else a clear error."""
    if rule in ("pld", "tightest"):
        raise InvalidParameterError(
            f"a grant's accountant {rule!r} is valid only for queries whose noise is fixed "
            "before the first answer (a script); an analyst chooses each query after seeing "
            "the earlier answers, so a grant uses 'basic', 'zcdp' or 'rdp'. Use 'rdp', the "
            "tightest rule that stays valid for adaptively chosen queries."
        )
    if not isinstance(rule, str) or rule not in GRANT_RULES:
        raise InvalidParameterError(
            f"a grant's accountant is one of {', '.join(map(repr, GRANT_RULES))}."
        )
    return rule


def check_grant_noise(noise: object, rule: str) -> str:
    """A grant's noise (:data:`~dpkit.tables.noise.NOISES`) for its composition rule, else a clear error."""
    try:
        kind = check_noise(noise)
    except InvalidParameterError:
        raise InvalidParameterError(
            f"a grant's noise is one of {', '.join(map(repr, NOISES))}."
        ) from None
    if kind == "gaussian" and rule not in GAUSSIAN_RULES:
        raise InvalidParameterError(
            f"a grant with noise 'gaussian' needs accountant 'zcdp' or 'rdp' (they compose "
            f"Gaussian noise tightly); this grant's accountant is {rule!r}, which would charge "
            "every Gaussian answer its full (epsilon, delta). Give the grant accountant 'rdp', "
            "or noise 'laplace' or 'auto'."
        )
    return kind


class GrantTerms(NamedTuple):
    """What the store says about a grant: its budget, composition rule and noise."""

    budget: Budget
    composition: str
    noise: str


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
        query = sa.select(
            _grants.c.epsilon,
            _grants.c.delta,
            _grants.c.version,
            _grants.c.composition,
            _grants.c.noise,
        ).where(_grants.c.analyst == analyst, _grants.c.dataset == dataset)
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
        composition: str | None = None,
        noise: str | None = None,
    ) -> Budget:
        """Add (ε, δ) to the analyst's grant on the dataset (created if absent); the new total.

        With ``at_least=True``, raise the grant to at least (ε, δ) instead (the service's
        config at start-up: read and raise in one transaction, so two processes starting
        together raise it once). A grant never shrinks: spent budget stays spent, and what
        is given stays given. ``cap`` bounds the sum of every analyst's grant on the
        dataset (analysts who pool their answers compose): a grant that would pass it
        raises :class:`ConflictError` and changes nothing. A grant that grows above
        ε = 10 warns (:class:`~dpkit.errors.PrivacyWarning`, :func:`weak_grant_warning`).

        ``composition`` is the grant's accountant rule (:data:`GRANT_RULES`), fixed
        when the grant is created (default ``"basic"``); a later call naming
        another rule for the same grant raises :class:`ConflictError`: a budget
        keeps the rule its charges were admitted by. ``"zcdp"`` and ``"rdp"``
        need a grant with δ > 0.

        ``noise`` is the noise of the grant's queries (``"laplace"``, the default
        when it is created, ``"gaussian"`` or ``"auto"``; ``"gaussian"`` needs
        rule ``zcdp`` or ``rdp``). Unlike the rule it may change later (a call
        naming another noise sets it, audited as ``grant_noise``): the noise is
        public and chosen by the data owner, never by the data, and the grant's
        accountant charges each answer the cost of the noise it was given, so
        its ledger stays valid whatever noise later answers use.
        """
        _name(analyst, "analyst")
        _name(dataset, "dataset")
        rule = None if composition is None else check_grant_rule(composition)
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
                _check_rule_delta(rule or "basic", total)
                kind = check_grant_noise(noise or "laplace", rule or "basic")
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
                        composition=rule or "basic",
                        noise=kind,
                    )
                )
            else:
                have = Budget(_amount(row.epsilon, "a grant"), _amount(row.delta, "a grant"))
                own = _rule_of(row.composition)
                if rule is not None and rule != own:
                    raise ConflictError(
                        f"the grant of {analyst!r} on {dataset!r} composes its charges with "
                        f"accountant {own!r}, not {rule!r}; a grant keeps the rule it was "
                        "created with (its charges were admitted by it). Give the grant's own "
                        "rule, or grant on another dataset name."
                    )
                if noise is not None:
                    self._set_noise(conn, analyst, dataset, noise, own, row.noise, actor)
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

    def _set_noise(
        self,
        conn: sa.Connection,
        analyst: str,
        dataset: str,
        noise: str,
        rule: str,
        stored: object,
        actor: str,
    ) -> None:
        """Set an existing grant's noise (audited when it changes)."""
        kind = check_grant_noise(noise, rule)
        before = _noise_of(stored)
        if kind == before:
            return
        conn.execute(
            _grants.update()
            .where(_grants.c.analyst == analyst, _grants.c.dataset == dataset)
            .values(noise=kind, updated_at=time.time())
        )
        audit_row(
            conn,
            actor,
            "grant_noise",
            {"analyst": analyst, "dataset": dataset, "noise": kind, "was": before},
        )

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

    def grant_terms(self, analyst: str, dataset: str) -> GrantTerms | None:
        """The analyst's budget on the dataset, its composition rule and noise; None without a grant."""
        with self._read() as conn:
            row = self._grant_row(conn, analyst, dataset, lock=False)
        if row is None:
            return None
        budget = Budget(_amount(row.epsilon, "a grant"), _amount(row.delta, "a grant"))
        rule = _rule_of(row.composition)
        return GrantTerms(budget, rule, _noise_of(row.noise))

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
    _charges.c.event,
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
                    event=None if r.event is None else event_text(r.event),
                )
            )
            (row_id,) = result.inserted_primary_key or (None,)
            if not isinstance(row_id, int):  # pragma: no cover - both engines return it
                raise LedgerError("the service store did not return the id of a new charge.")
            out.append(Row(row_id, r.label, r.cost, r.path, now, r.event))
        return out


def _charge(raw: tuple[Any, ...]) -> Row:
    """A charges row as the accountant reads it; anything unreadable is corruption."""
    row_id, label, eps, delta, rho, path_text, created, event = raw
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
        recorded = _event(event, cost)
    except (ValueError, TypeError, RecursionError, OverflowError, InvalidParameterError):
        raise LedgerCorruptError(
            f"the service store's {where} is unreadable. dpkit never repairs its ledger, "
            "since forgetting spent budget would break the privacy guarantee: restore the "
            "database from a backup."
        ) from None
    return Row(int(row_id), label, cost, path, float(created), recorded)


def _event(text: object, cost: Budget) -> PrivacyEvent | None:
    """A charge's recorded privacy event (None: none recorded); it must state its cost."""
    if text is None:
        return None
    if not isinstance(text, str) or len(text) > _MAX_EVENT_TEXT:
        raise ValueError("event")
    event = event_from_json(json.loads(text))
    if event.budget() != cost:
        raise ValueError("event")
    return event


def _rule_of(stored: object) -> str:
    """A grant row's composition rule (NULL in stores made before rules: basic)."""
    if stored is None:
        return "basic"
    if stored not in GRANT_RULES:
        raise LedgerCorruptError(
            "the service store holds a grant with an unknown composition rule. dpkit never "
            "repairs its ledger: restore the database from a backup."
        )
    return str(stored)


def _noise_of(stored: object) -> str:
    """A grant row's noise (NULL in stores made before grants had one: laplace)."""
    if stored is None:
        return "laplace"
    if stored not in NOISES:
        raise LedgerCorruptError(
            "the service store holds a grant with an unknown noise. dpkit never repairs its "
            "ledger: restore the database from a backup."
        )
    return str(stored)


def _check_rule_delta(rule: str, total: Budget) -> None:
    if rule != "basic" and total.delta_exact == 0:
        raise InvalidParameterError(
            f"a grant with accountant {rule!r} needs a delta > 0 (zCDP and Renyi DP convert "
            "to (epsilon, delta)-DP only for delta > 0), e.g. delta = 1e-6."
        )
