"""The accountant: one place that charges every release against a fixed privacy budget."""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Literal

from dpkit.accounting.budget import Amount, Budget
from dpkit.accounting.composition import (
    COMPOSITION_RULES,
    _Rule,
    _Totals,
    parallel_composition,
)
from dpkit.accounting.events import PrivacyEvent, as_event, event_from_json, is_event
from dpkit.accounting.filters import PrivacyFilter, _filter_for_rule
from dpkit.accounting.ledger import (
    Ledger,
    Level,
    MemoryLedger,
    NewRow,
    Row,
    SqliteLedger,
    event_text,
    open_ledger,
    row_event,
)
from dpkit.errors import BudgetExceededError, InvalidParameterError, LedgerCorruptError

Composition = Literal["basic", "zcdp", "tightest", "pld", "rdp"]

#: How many refusals an accountant object remembers (:attr:`Accountant.refusals`).
MAX_REFUSALS = 1000

# Most steps Accountant.affordable moves its count to match the Rényi sums of one-by-one
# charges (k·curve and k float additions differ by k ulps: one step at most in practice).
_SETTLE_STEPS = 8

# Logs only what the analyst already sees: a ledger's place and budget, a
# charge's label and cost, a refusal's message. Never data. Silent unless the
# application configures logging (dpkit's root logger has a NullHandler).
_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChargeRecord:
    """One charge in an accountant's history.

    Attributes:
        id: position in the ledger (increasing, never reused).
        label: what the analyst called the release (public).
        cost: the privacy amount charged.
        timestamp: when it was committed (UTC).
        scopes: for charges inside parallel scopes, ``(scope label, part key)``
            pairs from the outermost scope in; ``part key`` is None when the
            charge is a part of its own. Empty for sequential charges.
        event: the privacy event charged (:mod:`dpkit.accounting.events`): the
            one given to :meth:`Accountant.charge`, else ``as_event(cost)``
            (also for charges in ledgers written before events were recorded).
            ``event.budget() == cost`` always.
    """

    id: int
    label: str
    cost: Budget
    timestamp: datetime
    scopes: tuple[tuple[str, str | None], ...] = ()
    event: PrivacyEvent | None = None

    def __post_init__(self) -> None:
        if self.event is None:
            object.__setattr__(self, "event", as_event(self.cost))


@dataclass(frozen=True)
class RefusalRecord:
    """A charge this accountant refused (kept in memory only: ledgers record charges).

    Attributes:
        label: what the analyst called the release (public).
        cost: the privacy amount that was asked for and not charged.
        after: the id of the last charge in the ledger when it was refused (0: none).
        timestamp: when it was refused (UTC).
    """

    label: str
    cost: Budget
    after: int
    timestamp: datetime


# ---------------------------------------------------------------------------------
# The composition tree: sequential nodes hold totals, parallel nodes the max of parts
# ---------------------------------------------------------------------------------
_PartKey = tuple[str, str | int]  # ("key", user key) or ("auto", row id)


@dataclass
class _Sequence:
    totals: _Totals = field(default_factory=_Totals)
    scopes: dict[str, _Parallel] = field(default_factory=dict)


@dataclass
class _Parallel:
    cost: Budget | None = None
    parts: dict[_PartKey, _Sequence] = field(default_factory=dict)


def _part_key(level: Level, row_id: int | None) -> _PartKey | None:
    if level[2] is not None:
        return ("key", level[2])
    return None if row_id is None else ("auto", row_id)


class _State:
    """What the ledger holds, folded into running totals.

    Costs only grow, so a parallel node's cost is updated as max(old, new part)
    and a sequential node's totals by exactly replacing one entry's old cost
    with its new one: each charge costs O(depth), not O(history).
    """

    def __init__(self) -> None:
        self.root = _Sequence()
        self.last_id = 0
        self.records: list[ChargeRecord] = []

    def _walk(
        self,
        path: Sequence[Level],
        cost: Budget,
        row_id: int | None,
        commit: bool,
        event: PrivacyEvent | None = None,
    ) -> _Totals:
        """Root totals after adding ``cost`` (made by ``event``) at ``path``; stored if ``commit``."""
        seqs: list[_Sequence | None] = [self.root]
        pars: list[_Parallel | None] = []
        node: _Sequence | None = self.root
        for level in path:
            par = node.scopes.get(level[0]) if node is not None else None
            if par is None and commit and node is not None:
                par = node.scopes[level[0]] = _Parallel()
            key = _part_key(level, row_id)
            seq = par.parts.get(key) if par is not None and key is not None else None
            if seq is None and commit and par is not None and key is not None:
                seq = par.parts[key] = _Sequence()
            pars.append(par)
            seqs.append(seq)
            node = seq
        leaf = seqs[-1]
        totals = (leaf.totals if leaf is not None else _Totals()).plus(cost, event)
        if commit and leaf is not None:
            leaf.totals = totals
        for depth in range(len(path) - 1, -1, -1):
            par = pars[depth]
            old = par.cost if par is not None else None
            part_cost = totals.sequential_budget()
            new = part_cost if old is None else parallel_composition([old, part_cost])
            parent = seqs[depth]
            totals = (parent.totals if parent is not None else _Totals()).replace(old, new)
            if commit:
                assert par is not None and parent is not None
                par.cost = new
                parent.totals = totals
        return totals

    def preview(
        self, path: Sequence[Level], cost: Budget, event: PrivacyEvent | None = None
    ) -> _Totals:
        return self._walk(path, cost, None, commit=False, event=event)

    def ingest(self, rows: Sequence[Row]) -> None:
        for row in rows:
            if row.id <= self.last_id:
                continue
            self._walk(row.path, row.cost, row.id, commit=True, event=row.event)
            self.last_id = row.id
            self.records.append(
                ChargeRecord(
                    id=row.id,
                    label=row.label,
                    cost=row.cost,
                    timestamp=datetime.fromtimestamp(row.timestamp, UTC),
                    scopes=tuple((lv[1], lv[2]) for lv in row.path),
                    event=row_event(row),
                )
            )

    def scope_cost(self, path: Sequence[Level], scope_id: str) -> Budget:
        node: _Sequence | None = self.root
        for level in path:
            par = node.scopes.get(level[0]) if node is not None else None
            key = _part_key(level, None)
            node = par.parts.get(key) if par is not None and key is not None else None
        par = node.scopes.get(scope_id) if node is not None else None
        return par.cost if par is not None and par.cost is not None else Budget.zero()


def _check_label(label: object) -> str:
    if not isinstance(label, str) or not label.strip():
        raise InvalidParameterError(
            "label must be a non-empty string naming the release, e.g. 'mean age'; it is "
            "stored in the ledger and shown in messages, so it must not contain private data."
        )
    return label


def _check_event(cost: Budget, event: object) -> PrivacyEvent | None:
    """``event`` (None, or a privacy event whose budget() is exactly ``cost``); refused otherwise."""
    if event is None:
        return None
    if isinstance(event, Budget):
        raise InvalidParameterError(
            "event must be a dpkit privacy event (dpkit.accounting.events), not a Budget; "
            "pass the budget as the cost."
        )
    if not is_event(event):
        raise InvalidParameterError(
            "event must be a dpkit privacy event (dpkit.accounting.events: LaplaceEvent, "
            f"GaussianEvent, ...), got an object of type {type(event).__name__}."
        )
    ev = as_event(event)  # type: ignore[arg-type]
    # what the ledger stores must read back as the same event (never a corrupt ledger)
    if event_from_json(json.loads(event_text(ev))) != ev:  # pragma: no cover - defensive
        raise InvalidParameterError("this privacy event does not survive its JSON form.")
    stated = ev.budget()
    if stated != cost:
        raise InvalidParameterError(
            f"the event is charged as {stated} but the cost given is {cost}; they must be the "
            "same amount (build the cost as event.budget(), or omit the cost's event)."
        )
    return ev


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise InvalidParameterError(
            "a part key must be a non-empty string naming a disjoint subset of rows, "
            "e.g. the value of a public grouping column."
        )
    return key


# ---------------------------------------------------------------------------------
# The accountant
# ---------------------------------------------------------------------------------
class Accountant:
    """Charges releases against a fixed privacy budget and refuses to overspend.

    ``Accountant(budget, ledger=None, *, timeout=30.0, composition="basic")``

    * ``budget``: the total privacy loss allowed for the dataset, a
      :class:`Budget` (or a number, read as a pure ε).
    * ``ledger``: None keeps the history in memory (it lasts as long as this
      object); a path keeps it in a SQLite file shared by every process and
      restart, so a spent budget stays spent. The file records the budget and
      cannot be reopened with another one. An object implementing
      :class:`~dpkit.accounting.ledger.Ledger` (``read``, ``write``, ``close``;
      e.g. the query service's per-grant ledger) is used as is.
    * ``timeout``: seconds to wait for another process holding the ledger.
    * ``dataset``: the identity of the dataset the budget guards (a name, or
      the data file's path). A ledger records it when created and refuses to
      be opened for another dataset; an old ledger without one records the
      first identity it is opened with. The other direction holds too: a
      dataset has one ledger (the registry of :mod:`dpkit.accounting.registry`),
      so a second ledger, or a budget in memory, for a dataset that already has
      a ledger is refused with :class:`~dpkit.errors.LedgerError`.
    * ``new_ledger``: the data owner's explicit decision to give a dataset that
      already has a ledger a second one (a second budget: the dataset's total
      privacy loss is then the sum). Recorded in the registry; see
      ``docs/accounting.md``, "One budget per dataset".
    * ``composition``: how charges add up.

      - ``"basic"`` (default): Σ ε and Σ δ must fit the budget. Exact, and valid
        when the analyst chooses each cost after seeing earlier answers.
      - ``"zcdp"``: every cost must carry a zCDP ρ (pure-ε costs do, ε²/2;
        Gaussian releases declare one); Σ ρ must fit the largest ρ whose
        conversion to (ε, δ) fits the budget. Valid for adaptively chosen costs;
        much tighter than basic for many Gaussian releases. Needs δ > 0.
      - ``"tightest"``: a charge is admitted if *any* of basic composition,
        Kairouz–Oh–Viswanath advanced composition, or zCDP-plus-basic
        composition keeps the total within budget. Valid only if the sequence of
        costs was fixed before the first release (a script, not an interactive
        session): the theorems it uses assume non-adaptive parameters.
      - ``"pld"``: a charge is admitted if basic composition or the privacy
        loss distribution of all charges (Google's ``dp_accounting``,
        :mod:`dpkit.accounting.pld`) keeps the total within budget: the
        tightest (ε, δ) for many Laplace or Gaussian releases. Valid for
        adaptively chosen queries whose noise parameters are fixed in advance.
        Needs δ > 0.
      - ``"rdp"``: a privacy filter for mixed Laplace / Gaussian / pure-ε
        sessions (:class:`~dpkit.accounting.filters.RenyiFilter`): Gaussian-only
        sessions are admitted by Gaussian DP, others by each release's exact
        Rényi curve (δ split 1:9 between the two). Valid for adaptively chosen queries
        *and* noise parameters. (ε, δ) costs with δ > 0 and no ρ are refused.
        Needs δ > 0.

      For a pure budget (δ = 0) all three reduce to exact basic composition
      (``"zcdp"`` is refused).

    A charge is checked and recorded in one transaction *before* the release
    reads any data: if it would overspend, :class:`~dpkit.errors.BudgetExceededError`
    is raised and nothing is recorded. Once the budget is spent, every further
    charge is refused, for good.

    Parallel composition: ``with accountant.parallel(label) as scope:`` opens a
    scope for releases on disjoint subsets of rows; it costs the component-wise
    maximum over its parts, and a part may hold several sequential charges
    (``scope.part(key)``) or further parallel scopes.
    """

    def __init__(
        self,
        budget: Budget | Amount,
        ledger: str | os.PathLike[str] | Ledger | None = None,
        *,
        timeout: float = 30.0,
        composition: Composition = "basic",
        dataset: str | None = None,
        new_ledger: bool = False,
    ) -> None:
        total = Budget.coerce(budget, "budget")
        if dataset is not None and (not isinstance(dataset, str) or not dataset):
            raise InvalidParameterError("dataset must be a non-empty name (e.g. the file's path).")
        if total.epsilon_exact <= 0:
            raise InvalidParameterError(
                "the budget's epsilon must be > 0; a zero budget allows no release at all."
            )
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout < float("inf")
        ):
            raise InvalidParameterError(
                f"timeout must be a positive number of seconds, got {timeout!r}."
            )
        self._budget = total
        self._rule = _Rule(composition, total)
        # the stopping rule every charge is checked by (docs/accounting.md, "Adaptive composition")
        self._filter = _filter_for_rule(self._rule)
        self._timeout = float(timeout)
        self._lock = threading.RLock()
        self._state = _State()
        # bounded: a long-lived accountant (the service's) must not grow with refused requests
        self._refusals: deque[RefusalRecord] = deque(maxlen=MAX_REFUSALS)
        if not isinstance(new_ledger, bool):
            raise InvalidParameterError("new_ledger must be True or False.")
        self._ledger: Ledger = open_ledger(
            ledger, total, composition, self._timeout, dataset, new_ledger
        )
        self._dataset = getattr(self._ledger, "dataset", None) or dataset
        try:
            self._sync()
        except BaseException:
            self._ledger.close()
            raise
        _logger.info(
            "ledger opened: %s, budget %s, composition %s, %d charge(s) so far",
            self._ledger.path
            or ("memory" if isinstance(self._ledger, MemoryLedger) else self._ledger),
            total,
            composition,
            len(self._state.records),
        )

    @classmethod
    def from_ledger(cls, path: str | os.PathLike[str], *, timeout: float = 30.0) -> Accountant:
        """Open an existing ledger file with the budget and composition it records."""
        header = SqliteLedger(path, None, None, float(timeout))
        budget, composition = header.budget, header.composition
        header.close()
        if composition not in COMPOSITION_RULES:
            raise header._corrupt("its composition rule is unknown")
        return cls(budget, path, timeout=timeout, composition=composition)  # type: ignore[arg-type]

    # --- state --------------------------------------------------------------------
    def _sync(self) -> None:
        with self._lock:
            rows = self._ledger.read(self._state.last_id)
            try:
                self._state.ingest(rows)
            except (KeyError, ValueError, TypeError, RecursionError, AssertionError):
                raise LedgerCorruptError(
                    f"the privacy ledger {self.ledger_path} holds charges whose scopes do not "
                    "fit together; it is corrupt. dpkit never repairs a ledger: restore it from "
                    "a backup."
                ) from None

    @property
    def dataset(self) -> str | None:
        """The identity of the dataset this budget guards (recorded in the ledger), if known."""
        return self._dataset

    @property
    def budget(self) -> Budget:
        """The total budget (fixed at creation)."""
        return self._budget

    @property
    def composition(self) -> str:
        """The composition rule: "basic", "zcdp", "tightest", "pld" or "rdp"."""
        return self._rule.name

    @property
    def privacy_filter(self) -> PrivacyFilter:
        """The stopping rule that decides every charge (:mod:`dpkit.accounting.filters`).

        Its ``adaptive_valid`` says whether the guarantee holds when each cost is
        chosen after seeing earlier answers (True for ``"basic"``, ``"zcdp"``
        and ``"rdp"``).
        """
        return self._filter

    @property
    def ledger_path(self) -> Path | None:
        """The ledger file, or None for an in-memory ledger."""
        return self._ledger.path

    @property
    def spent(self) -> Budget:
        """The total spent so far, as certified by the composition rule.

        ``"basic"``: (Σ ε, Σ δ) exactly. ``"zcdp"``: the conversion of Σ ρ at the
        budget's δ (carrying ρ). ``"tightest"``: the certified total with the
        smallest ε (its δ is the budget's δ when a δ-slack theorem was used).
        ``"pld"``: the smaller of basic composition and the PLD's ε at the
        budget's δ (then with that δ). ``"rdp"``: the smallest of basic
        composition and the ε each branch of the Rényi filter certifies for the
        history at the budget's δ (then with that δ).
        """
        with self._lock:
            self._sync()
            return self._rule.spent(self._state.root.totals)

    @property
    def remaining(self) -> Budget:
        """What is left. Exact for ``"basic"`` (budget − spent).

        ``"zcdp"``: Budget(ε, 0, rho=ρ left) with ε the largest pure ε that ρ
        pays for (ε²/2 ≤ ρ). ``"tightest"``, ``"pld"`` and ``"rdp"``: budget − spent, an
        indication only; :meth:`can_afford` is the authority. In answers rather
        than (ε, δ): :meth:`affordable`.
        """
        with self._lock:
            self._sync()
            return self._rule.remaining(self._state.root.totals)

    @property
    def remaining_seen(self) -> Budget:
        """What was left when this accountant last read its ledger — no new read.

        Right after :meth:`charge` that is exactly what its transaction left
        (it read every earlier charge under the lock), so a release can report
        it without a second trip to the ledger; other processes' later charges
        show in :attr:`remaining`.
        """
        with self._lock:
            return self._rule.remaining(self._state.root.totals)

    @property
    def history(self) -> tuple[ChargeRecord, ...]:
        """Every charge in the ledger, oldest first (other processes' included)."""
        with self._lock:
            self._sync()
            return tuple(self._state.records)

    def spent_over_time(self) -> tuple[tuple[ChargeRecord, Budget], ...]:
        """Each charge in the ledger, oldest first, with the certified total spent after it.

        The totals are :attr:`spent` replayed one charge at a time (parallel
        scopes and the composition rule included), for a budget-over-time chart.
        """
        with self._lock:
            rows = self._ledger.read(0)
        state, out = _State(), []
        for row in rows:
            state.ingest([row])
            out.append((state.records[-1], self._rule.spent(state.root.totals)))
        return tuple(out)

    @property
    def refusals(self) -> tuple[RefusalRecord, ...]:
        """The charges this accountant object refused, oldest first.

        Kept in memory (the last :data:`MAX_REFUSALS`), not in the ledger.
        """
        with self._lock:
            return tuple(self._refusals)

    # --- charging -----------------------------------------------------------------
    def _precheck(self, cost: Budget) -> None:
        if self._rule.name == "zcdp" and cost.rho_exact is None:
            raise InvalidParameterError(
                f"this accountant composes in zCDP, but the cost {cost} has delta > 0 and no "
                "rho; give the release's zCDP rho (Budget(epsilon, delta, rho=...)) or use an "
                "accountant with composition='basic'."
            )
        if self._rule.name == "rdp" and cost.delta_exact > 0 and cost.rho_exact is None:
            raise InvalidParameterError(
                f"this accountant composes by Renyi DP (composition='rdp'), but the cost {cost} "
                "has delta > 0 and no rho, so no Renyi curve; give the release's zCDP rho "
                "(Budget(epsilon, delta, rho=...)), or use an accountant with "
                "composition='basic'."
            )

    def _refusal(self, label: str, cost: Budget, where: str) -> BudgetExceededError:
        totals = self._state.root.totals
        spent, left = self._rule.spent(totals), self._rule.remaining(totals)
        rule = "" if self._rule.name == "basic" else f" (composition={self._rule.name!r})"
        short = [
            name
            for name, asked, have in (
                ("epsilon", cost.epsilon_exact, left.epsilon_exact),
                ("delta", cost.delta_exact, left.delta_exact),
            )
            if asked > have
        ]
        which = " and ".join(short) if short else f"the {self._rule.name} composition of both"
        return BudgetExceededError(
            f"privacy budget exceeded ({which} short): '{label}'{where} costs {cost}, but only "
            f"{left} of the budget {self._budget} is left ({spent} spent{rule}). Nothing was "
            "charged and nothing was released. The budget of a dataset cannot be raised: ask "
            f"for less ({'a smaller ' + which if short else 'a smaller epsilon or delta'}) "
            "or stop.",
            requested=cost,
            remaining=left,
        )

    def _charge_rows(
        self, path: tuple[Level, ...], item: Budget, rows: list[NewRow], label: str, where: str
    ) -> list[ChargeRecord]:
        """Check that adding ``item`` at ``path`` fits, then write ``rows``, atomically."""
        with self._lock:
            with self._ledger.write(self._state.last_id) as txn:
                self._state.ingest(txn.new_rows)
                event = rows[0].event if len(rows) == 1 else None
                if self._filter.exceeds(self._state.preview(path, item, event)):
                    refusal = self._refusal(label, item, where)
                    _logger.warning("charge refused: %s", refusal)
                    self._refusals.append(
                        RefusalRecord(label, item, self._state.last_id, datetime.now(UTC))
                    )
                    raise refusal
                written = txn.append(rows)
            self._state.ingest(written)
            for row in written:
                _logger.info("charged %r: %s", row.label, row.cost)
            # ingest appended them last, in id order, under the same lock
            return self._state.records[-len(written) :]

    def _can_afford(self, path: tuple[Level, ...], cost: Budget) -> bool:
        if self._rule.name == "zcdp" and cost.rho_exact is None:
            return False
        if self._rule.name == "rdp" and cost.delta_exact > 0 and cost.rho_exact is None:
            return False
        with self._lock:
            self._sync()
            return not self._filter.exceeds(self._state.preview(path, cost))

    def charge(
        self, cost: Budget | Amount, label: str, *, event: PrivacyEvent | None = None
    ) -> ChargeRecord:
        """Charge one release on the whole data (sequential composition).

        Checks, in one ledger transaction, that the total with ``cost`` still
        fits the budget, and records it. Call it *before* the release touches
        the data: if it raises :class:`~dpkit.errors.BudgetExceededError`,
        nothing was recorded and the release must not run.

        ``event``: what the release does (its mechanism and noise, a
        :mod:`dpkit.accounting.events` event), recorded with the charge for
        tighter accounting; its ``budget()`` must equal ``cost``, else
        :class:`~dpkit.errors.InvalidParameterError` is raised before anything
        is written.
        """
        c = Budget.coerce(cost)
        name = _check_label(label)
        ev = _check_event(c, event)
        self._precheck(c)
        return self._charge_rows((), c, [NewRow(name, c, (), ev)], name, "")[0]

    def can_afford(self, cost: Budget | Amount) -> bool:
        """Would :meth:`charge` of ``cost`` succeed now? (Advisory: another process
        may spend in between; :meth:`charge` is the authority.)"""
        return self._can_afford((), Budget.coerce(cost))

    def affordable(
        self,
        cost: Budget | Amount,
        event: PrivacyEvent | None = None,
        *,
        limit: int = 1_000_000,
    ) -> int:
        """How many more charges of exactly ``cost`` (made by ``event``) the budget admits now.

        The largest k ≤ ``limit`` such that k calls of :meth:`charge` with these
        arguments, one after another (sequential, not in a parallel scope), would
        all be admitted by this accountant's composition rule after the charges
        already in the ledger (other processes' included, read as
        :meth:`can_afford` reads them); 0 if not even one. Nothing is charged
        and no data is read. Advisory like :meth:`can_afford`: another process
        may spend in between, and :meth:`charge` stays the authority.

        All it reads is public (the cost and event: noise scales, sensitivities,
        budgets; the charges in the ledger; the budget), so the count depends on
        nothing private and may be shown to the analyst.

        Found by a doubling then a bit-by-bit search on k, each step one check of
        the rule on the running totals with k copies added in one step: O(log
        ``limit``) checks (measured for ``limit`` = 10⁶: milliseconds, and
        0.1–0.6 s for ``"pld"``, which composes the k copies by repeated
        squaring of the release's PLD). Every rule is monotone: admitting k
        copies implies admitting k − 1. Exact for ``"basic"``, ``"zcdp"``,
        ``"tightest"`` (rational sums) and ``"rdp"`` (the float Rényi sums of k
        one-by-one charges, reproduced bit for bit at the boundary): that many
        charges succeed and the next is refused. For ``"pld"``, k copies
        composed at once differ from k charges composed one by one by float
        rounding (FFT convolutions; a tail truncation of 10⁻¹⁵ per
        composition), so the count can be off by one when the total lands that
        close to the budget.

        Raises what :meth:`charge` raises for the same ``cost`` and ``event``
        before it looks at the budget (:class:`~dpkit.errors.InvalidParameterError`:
        an event whose ``budget()`` is not ``cost``; under ``"zcdp"`` or
        ``"rdp"``, a cost with δ > 0 and no ρ), and for a ``limit`` that is not
        a whole number ≥ 0.
        """
        c = Budget.coerce(cost)
        ev = _check_event(c, event)
        self._precheck(c)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidParameterError(
                f"limit must be a whole number >= 0 (the most answers to count), got "
                f"{repr(limit)[:40]}."
            )
        with self._lock:
            self._sync()
            base = self._state.root.totals

            def admits(k: int, exact: bool = False) -> bool:
                return not self._filter.exceeds(base.plus_copies(c, ev, k, exact_floats=exact))

            n = _largest_admitted(admits, limit)
            if self._rule.name == "rdp":
                # the search added the float Rényi sums as k·curve; settle the boundary with
                # the sums k charges make, bit for bit (they differ by k ulps at most: in
                # practice no step, and the caps only bound the work)
                for _ in range(_SETTLE_STEPS):
                    if n == 0 or admits(n, exact=True):
                        break
                    n -= 1
                for _ in range(_SETTLE_STEPS):
                    if n >= limit or not admits(n + 1, exact=True):
                        break
                    n += 1
            return n

    def charge_parallel(
        self, costs: Sequence[Budget | Amount] | Mapping[str, Budget | Amount], label: str
    ) -> list[ChargeRecord]:
        """Charge releases on disjoint subsets of rows at once: they cost their maximum.

        ``costs`` is a list (one part each) or a mapping from part key to cost.
        All are recorded, or none (one transaction). The caller guarantees the
        subsets are disjoint and chosen without looking at the data of other
        rows (e.g. the groups of a public column): parallel composition
        (McSherry 2009) then gives the component-wise max of the costs.
        """
        return _charge_parallel(self, (), costs, label)

    def parallel(self, label: str) -> ParallelScope:
        """Open a parallel scope; use it as ``with accountant.parallel(label) as scope:``."""
        return ParallelScope(self, _check_label(label), ())

    # --- lifecycle ----------------------------------------------------------------
    def close(self) -> None:
        """Close the ledger file (a later call opens it again)."""
        with self._lock:
            self._ledger.close()

    def __enter__(self) -> Accountant:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self._ledger.path is None else str(self._ledger.path)
        spent = self._rule.spent(self._state.root.totals)
        return (
            f"Accountant(budget={self._budget}, spent={spent}, "
            f"composition={self._rule.name!r}, ledger={where!r})"
        )


def _largest_admitted(admits: Callable[[int], bool], limit: int) -> int:
    """The largest k in [0, ``limit``] with ``admits(k)``, for a monotone ``admits``.

    Doubling finds the highest admitted power of two, then the lower bits are
    set from the top down: at most about 2·log2(limit) + 2 calls, and each
    probe extends an admitted count by one bit (the PLD rule reuses it).
    """
    if limit == 0 or not admits(1):
        return 0
    low = 1
    while low * 2 <= limit and admits(low * 2):
        low *= 2
    step = low // 2  # the answer is in [low, 2·low): its lower bits remain
    while step:
        if low + step <= limit and admits(low + step):
            low += step
        step //= 2
    return low


def _charge_parallel(
    accountant: Accountant,
    path: tuple[Level, ...],
    costs: Sequence[Budget | Amount] | Mapping[str, Budget | Amount],
    label: str,
) -> list[ChargeRecord]:
    name = _check_label(label)
    items: list[tuple[str | None, Budget]]
    if isinstance(costs, Mapping):
        items = [(_check_key(k), Budget.coerce(v)) for k, v in costs.items()]
    elif isinstance(costs, Sequence) and not isinstance(costs, str):
        items = [(None, Budget.coerce(v)) for v in costs]
    else:
        raise InvalidParameterError("costs must be a list of costs or a mapping part -> cost.")
    if not items:
        raise InvalidParameterError("charge_parallel needs at least one cost.")
    for _, c in items:
        accountant._precheck(c)
    scope_id = uuid.uuid4().hex
    rows = [
        NewRow(f"{name}[{key if key is not None else i}]", c, (*path, (scope_id, name, key)))
        for i, (key, c) in enumerate(items)
    ]
    item = parallel_composition(_Totals().plus(c).sequential_budget() for _, c in items)
    return accountant._charge_rows(path, item, rows, name, " (parallel releases)")


class ParallelScope:
    """Releases on disjoint subsets of the rows, which together cost their maximum.

    Obtained from :meth:`Accountant.parallel` (or :meth:`Part.parallel` for
    nesting). Each :meth:`charge` is checked against the budget with the scope's
    new cost (the component-wise max over parts of each part's sequential
    total) and refused before any data is read if it would overspend.

    The caller guarantees that different parts touch disjoint rows, and that
    the partition does not depend on other rows' data (e.g. a public grouping
    column): adding or removing one row then changes one part only.
    """

    def __init__(
        self,
        accountant: Accountant,
        label: str,
        prefix: tuple[Level, ...],
        parent: ParallelScope | None = None,
    ) -> None:
        self._accountant = accountant
        self._label = label
        self._prefix = prefix
        self._parent = parent
        self._id = uuid.uuid4().hex
        self._closed = False

    @property
    def label(self) -> str:
        return self._label

    @property
    def closed(self) -> bool:
        """True once the ``with`` block has ended (or :meth:`close` was called)."""
        return self._closed or (self._parent is not None and self._parent.closed)

    @property
    def cost(self) -> Budget:
        """What the scope costs so far (the max over its parts)."""
        acc = self._accountant
        with acc._lock:
            acc._sync()
            return acc._state.scope_cost(self._prefix, self._id)

    def _level(self, part: str | None) -> Level:
        if self.closed:
            raise InvalidParameterError(
                f"the parallel scope '{self._label}' is closed; open a new one with "
                "accountant.parallel(label)."
            )
        return (self._id, self._label, part)

    def charge(
        self,
        cost: Budget | Amount,
        label: str,
        *,
        part: str | None = None,
        event: PrivacyEvent | None = None,
    ) -> ChargeRecord:
        """Charge a release on one part of the rows.

        ``part=None`` makes the release a part of its own (disjoint from every
        other part); charges with the same ``part`` key are on the same rows and
        add up sequentially within the part. ``event`` as in
        :meth:`Accountant.charge`.
        """
        c = Budget.coerce(cost)
        name = _check_label(label)
        key = None if part is None else _check_key(part)
        ev = _check_event(c, event)
        path = (*self._prefix, self._level(key))
        self._accountant._precheck(c)
        where = f" in parallel scope '{self._label}'" + (f" (part '{key}')" if key else "")
        return self._accountant._charge_rows(path, c, [NewRow(name, c, path, ev)], name, where)[0]

    def can_afford(self, cost: Budget | Amount, *, part: str | None = None) -> bool:
        """Would :meth:`charge` of ``cost`` on ``part`` succeed now? (Advisory.)"""
        key = None if part is None else _check_key(part)
        return self._accountant._can_afford((*self._prefix, self._level(key)), Budget.coerce(cost))

    def part(self, key: str) -> Part:
        """The part of the rows named ``key``: its charges add up sequentially."""
        return Part(self, _check_key(key))

    def close(self) -> None:
        """End the scope: further charges through it are refused."""
        self._closed = True

    def __enter__(self) -> ParallelScope:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ParallelScope({self._label!r}, closed={self.closed})"


class Part:
    """One part (a disjoint subset of rows) of a parallel scope.

    Charges on a part compose sequentially with each other; a part may also
    hold nested parallel scopes (e.g. per-region, then per-age-group).
    """

    def __init__(self, scope: ParallelScope, key: str) -> None:
        self._scope = scope
        self._key = key

    @property
    def key(self) -> str:
        return self._key

    def charge(
        self, cost: Budget | Amount, label: str, *, event: PrivacyEvent | None = None
    ) -> ChargeRecord:
        """Charge a release on this part's rows (``event`` as in :meth:`Accountant.charge`)."""
        return self._scope.charge(cost, label, part=self._key, event=event)

    def can_afford(self, cost: Budget | Amount) -> bool:
        """Would :meth:`charge` of ``cost`` succeed now? (Advisory.)"""
        return self._scope.can_afford(cost, part=self._key)

    def _path(self) -> tuple[Level, ...]:
        return (*self._scope._prefix, self._scope._level(self._key))

    def parallel(self, label: str) -> ParallelScope:
        """Open a parallel scope inside this part (disjoint subsets of its rows)."""
        return ParallelScope(
            self._scope._accountant, _check_label(label), self._path(), self._scope
        )

    def charge_parallel(
        self, costs: Sequence[Budget | Amount] | Mapping[str, Budget | Amount], label: str
    ) -> list[ChargeRecord]:
        """Like :meth:`Accountant.charge_parallel`, on disjoint subsets of this part."""
        return _charge_parallel(self._scope._accountant, self._path(), costs, label)

    def __enter__(self) -> Part:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def __repr__(self) -> str:
        return f"Part({self._key!r} of {self._scope.label!r})"
