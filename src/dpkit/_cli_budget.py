"""The command line's budget policy: no verb that reads data runs on an unlimited budget.

Every CLI verb that *releases* something about a data file (``dpkit query``,
``dpkit histogram``) pays from a ledger:

* a data file has **one** ledger: the one the dataset registry
  (:mod:`dpkit.accounting.registry`) records for it, whoever made it (this
  command line or a Python ``Session``). Without ``--ledger`` that ledger is
  used; for a file without one, the **default ledger**
  ``<stem>-<hash>.ledger`` in ``$DPKIT_LEDGER_DIR`` (default
  ``$XDG_DATA_HOME/dpkit/ledgers``, i.e. ``~/.local/share/dpkit/ledgers``),
  so repeated invocations on the same file spend one budget, for good;
* ``--ledger FILE`` naming any other ledger is refused (so is a byte-for-byte
  copy of the file under another name): a second ledger would be a second,
  fresh budget. Only ``--new-ledger`` (with ``--ledger`` naming a file that
  does not exist yet, and ``--budget``) starts one, as the owner's explicit,
  recorded decision;
* a ledger that does not exist yet is created only with an explicit total
  budget, ``--budget EPSILON`` (and ``--budget-delta DELTA`` for queries that
  spend δ); without it the verb refuses, before reading anything, and says how
  to proceed — the budget of a dataset is a decision, never a default;
* the ledger records the dataset it guards and refuses another one;
* the ledger records how it composes charges, ``--accountant basic | zcdp |
  rdp``, given when it is created (default ``basic``) and kept for good; a
  later ``--accountant`` naming another rule is refused before anything is
  charged. The command line answers one query at a time, each chosen after
  seeing the earlier answers, so it offers only the rules that are valid for
  adaptively chosen queries (privacy filters, see ``docs/accounting.md``);
  ``pld`` and ``tightest`` are for scripts whose queries are fixed in advance.

Verbs that *evaluate* methods (``dpkit walkthrough``, ``dpkit reproduce``)
print held-out accuracy and use seeded noise: their output is not
differentially private whatever the budget, so no ledger could make it so.
They refuse to run unless ``--public-data`` states that the file is public
(e.g. the benchmark datasets they were written for).
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpkit.accounting import Accountant, Budget, as_accountant
from dpkit.accounting.registry import DatasetRegistry, ledger_directory
from dpkit.errors import InvalidParameterError, LedgerError, PrivacyWarning

__all__ = [
    "ACCOUNTANTS",
    "check_accountant",
    "cli_payer",
    "default_ledger",
    "ledger_directory",
    "ledger_options_accountant",
    "open_cli_accountant",
    "require_public_data",
    "warn_weak_budget",
    "weak_budget_message",
]


#: The composition rules ``--accountant`` offers: those valid when each query is chosen
#: after seeing the earlier answers (the command line is interactive).
ACCOUNTANTS = ("basic", "zcdp", "rdp")
_FIXED_IN_ADVANCE = ("pld", "tightest")


def check_accountant(name: str | None) -> str | None:
    """``--accountant NAME`` checked (public input, before anything is opened or charged)."""
    if name is None:
        return None
    if name in _FIXED_IN_ADVANCE:
        raise InvalidParameterError(
            f"--accountant {name} is valid only for a sequence of queries whose noise is fixed "
            "before the first answer (a script, in Python); the command line answers one query "
            "at a time, each chosen after seeing the earlier answers, so it offers only "
            f"{', '.join(ACCOUNTANTS[:-1])} and {ACCOUNTANTS[-1]}. Use --accountant rdp, the "
            "tightest rule that stays valid for adaptively chosen queries."
        )
    if name not in ACCOUNTANTS:
        raise InvalidParameterError(
            f"--accountant must be one of {', '.join(ACCOUNTANTS[:-1])} or {ACCOUNTANTS[-1]}; "
            f"got {name!r}."
        )
    return name


def planned_payer(
    table: Path,
    ledger: Path | None,
    budget: float | None,
    budget_delta: float | None,
    composition: str | None = None,
) -> tuple[Budget, str] | None:
    """The budget and rule the verb will pay under, read without opening or creating anything.

    An existing ledger's own (its header); else ``--budget``/``--budget-delta``
    with ``--accountant`` (default basic); None when neither is known yet (the
    verb then refuses when it opens the ledger). For costing a query before its
    ledger is opened (the Gaussian mechanism's cost depends on the payer's δ).
    """
    rule = check_accountant(composition)
    path = Path(ledger) if ledger is not None else default_ledger(table)
    if path.exists():
        recorded = Accountant.from_ledger(path)
        total, own = recorded.budget, recorded.composition
        recorded.close()
        return total, own
    if budget is None:
        return None
    return _new_total(budget, budget_delta, rule), rule or "basic"


def _new_total(budget: float, budget_delta: float | None, rule: str | None) -> Budget:
    """A new ledger's total; the rules that convert to (ε, δ) need δ > 0 (said in CLI words)."""
    total = Budget(budget, budget_delta or 0)
    if rule in ("zcdp", "rdp") and total.delta_exact == 0:
        raise InvalidParameterError(
            f"--accountant {rule} needs a budget with delta > 0 (it converts to (epsilon, "
            "delta)-DP only for delta > 0): add --budget-delta, e.g. --budget-delta 1e-6, or "
            "use --accountant basic."
        )
    return total


def dataset_identity(table: Path) -> str:
    """A data file's identity: its resolved path (what its ledger records)."""
    return str(Path(table).resolve())


def default_ledger(table: Path) -> Path:
    """The ledger of a data file: the one registered for it, else one per resolved path."""
    identity = dataset_identity(table)
    registered = DatasetRegistry().ledger_of(identity)
    if registered is not None:
        return registered
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:12]
    return ledger_directory() / f"{Path(table).stem}-{digest}.ledger"


def open_cli_accountant(
    table: Path,
    ledger: Path | None,
    budget: float | None,
    budget_delta: float | None,
    new_ledger: bool = False,
    composition: str | None = None,
) -> Accountant:
    """The accountant a data-reading verb pays from (see the module doc); refuses without one.

    ``composition`` is ``--accountant`` (None: the ledger's own, or basic for a
    new one). Everything here happens before anything is charged or read from
    the rows.
    """
    rule = check_accountant(composition)
    if new_ledger and (ledger is None or Path(ledger).exists() or budget is None):
        raise InvalidParameterError(
            "--new-ledger starts a second budget for a dataset that already has a ledger: it "
            "needs --ledger naming a file that does not exist yet and --budget, the new "
            "ledger's total."
        )
    path = Path(ledger) if ledger is not None else default_ledger(table)
    identity = dataset_identity(table)
    # One budget per dataset: a ledger other than the dataset's own is refused here,
    # before any prompt for a budget (the same check the ledger makes when it opens).
    DatasetRegistry().check(identity, path, new_ledger=new_ledger)
    if path.exists():
        recorded = Accountant.from_ledger(path)
        total, own = recorded.budget, recorded.composition
        recorded.close()
        if budget is not None and Budget(budget, budget_delta or 0) != total:
            raise LedgerError(
                f"the ledger {path} already holds the budget {total}; a dataset's budget is "
                "fixed when its ledger is created and cannot be raised. Drop "
                "--budget/--budget-delta to keep paying from it."
            )
        if rule is not None and rule != own:
            raise LedgerError(
                f"the ledger {path} composes its charges with --accountant {own}, not "
                f"--accountant {rule}; a ledger keeps the rule it was created with. Drop "
                f"--accountant (or give --accountant {own}) to keep paying from it."
            )
        return Accountant(total, ledger=path, composition=own, dataset=identity)  # type: ignore[arg-type]
    if budget is None:
        where = "" if ledger is not None else " (this file's default ledger)"
        raise InvalidParameterError(
            f"there is no ledger yet at {path}{where}, so this dataset has no budget. Give its "
            "total budget once to create the ledger, e.g. --budget 1.0 (add --budget-delta "
            "1e-6 if queries will spend delta). Every later command on this file spends from "
            "the same budget."
        )
    total = _new_total(budget, budget_delta, rule)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise LedgerError(f"cannot create the directory of the ledger {path}: {err}.") from None
    accountant = Accountant(
        total,
        ledger=path,
        dataset=identity,
        new_ledger=new_ledger,
        composition=rule or "basic",  # type: ignore[arg-type]
    )
    warn_weak_budget(budget)
    return accountant


def weak_budget_message(
    epsilon: float,
    what: str = "--budget",
    advice: str = "Give a smaller --budget for data whose releases are published.",
) -> str | None:
    """What a total budget above ε = 10 means for privacy, in CLI words (else None)."""
    from dpkit._checks import WEAK_EPSILON

    if not epsilon > WEAK_EPSILON:
        return None
    return (
        f"{what} {epsilon:g} is above {WEAK_EPSILON:g}: the guarantee is weak (all the "
        f"releases on this dataset together can change the odds of an outcome by a factor up "
        f"to e^{epsilon:g}). {advice}"
    )


def warn_weak_budget(epsilon: float) -> None:
    """One :class:`~dpkit.errors.PrivacyWarning` when a ledger is created with ε > 10.

    As a query's or a grant's epsilon above 10 warns; the total is fixed when the
    ledger is created, so this is said once, then.
    """
    message = weak_budget_message(epsilon)
    if message is not None:
        warnings.warn(message, PrivacyWarning, stacklevel=3)


def cli_payer(
    table: Path,
    accountant: Any,
    ledger: Path | None,
    budget: float | None,
    budget_delta: float | None,
    new_ledger: bool = False,
    composition: str | None = None,
) -> Accountant:
    """The given accountant (tests, scripts), else the file's ledger (:func:`open_cli_accountant`)."""
    if accountant is not None:
        payer = as_accountant(accountant)
        assert payer is not None
        return payer
    return open_cli_accountant(Path(table), ledger, budget, budget_delta, new_ledger, composition)


def require_public_data(public_data: bool, verb: str) -> None:
    """Evaluation verbs run only on data declared public (their output is not DP)."""
    if not public_data:
        raise InvalidParameterError(
            f"{verb} prints held-out accuracy and uses seeded noise, so its output is not "
            "differentially private whatever the budget: run it only on public data (such as "
            "the benchmark files it was written for) and say so with --public-data."
        )


def ledger_options_accountant(table: Path, options: Mapping[str, Any]) -> Accountant:
    """:func:`open_cli_accountant` from a command's ledger options (``ledger``, ``budget``,
    ``budget_delta``, ``new_ledger``, ``composition``; absent ones are None / False)."""
    return open_cli_accountant(
        table,
        options.get("ledger"),
        options.get("budget"),
        options.get("budget_delta"),
        bool(options.get("new_ledger", False)),
        options.get("composition"),
    )
