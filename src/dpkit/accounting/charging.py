"""The one way a release pays for itself: resolve who pays, charge, then run the release.

Every releasing entry point of dpkit (Session queries, histograms, mechanisms,
tree estimators, local-DP collectors) takes an ``accountant=`` argument and goes
through :func:`charge_and_run`::

    accountant = as_accountant(accountant)   # None, an Accountant, a ledger path, a Session
    release = charge_and_run(accountant, Budget(epsilon, delta), label, lambda: _release(data))

The order is the guarantee's structure: everything that can be checked on public
input is checked *before* :func:`paid` (a refused or invalid call reveals nothing
and costs nothing); the charge is recorded atomically; only then is data read.
Whatever goes wrong *after* the charge (inside ``release``) surfaces as one :class:`ReleaseFailedError`
with the same message for every dataset (its cause is dropped, not chained: an
engine's message can quote data), and the charge stands — the release may have
read the data before failing, so it was paid for.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from dpkit.accounting.accountant import Accountant
from dpkit.accounting.budget import Budget
from dpkit.accounting.events import PrivacyEvent
from dpkit.errors import InvalidParameterError, ReleaseFailedError

__all__ = ["ReleaseFailedError", "as_accountant", "charge_and_run"]

T = TypeVar("T")


def as_accountant(payer: Any) -> Accountant | None:
    """The :class:`Accountant` that pays, from what a user passes as ``accountant=``.

    Accepted: ``None`` (nothing is tracked: the caller spends budget outside any
    ledger, which the caller's docs must say), an :class:`Accountant`, a path to
    an existing ledger file (opened with the budget it records), or any object
    with an ``accountant`` attribute holding one (a :class:`dpkit.Session`, so a
    model trained on a session's table pays from the session's budget).
    """
    if payer is None or isinstance(payer, Accountant):
        return payer
    if isinstance(payer, str | os.PathLike):
        return Accountant.from_ledger(payer)
    inner = getattr(payer, "accountant", None)
    if isinstance(inner, Accountant):
        return inner
    raise InvalidParameterError(
        "accountant must be a dpkit.Accountant, a ledger file path, or a dpkit.Session "
        f"(whose budget then pays), got an object of type {type(payer).__name__}."
    )


def charge_and_run(
    accountant: Accountant | None,
    cost: Budget,
    label: str,
    release: Callable[[], T],
    *,
    event: PrivacyEvent | None = None,
) -> T:
    """Charge ``cost`` to ``accountant`` (if any), then run ``release()`` and return its result.

    ``event``: the release's privacy event (its mechanism and noise), recorded
    with the charge; its ``budget()`` must equal ``cost``
    (:meth:`Accountant.charge`), checked before anything is charged.

    Raises :class:`~dpkit.errors.BudgetExceededError` before ``release`` runs
    if the budget cannot pay. Once charged, any exception raised by ``release``
    becomes a :class:`ReleaseFailedError` whose message does not depend on the
    data (with no accountant nothing is charged, and errors pass unchanged); the
    original exception is neither chained nor kept as ``__context__`` (a plain
    function, not a context manager, so that the new error is raised outside
    every exception handler).
    """
    if accountant is None:  # nothing charged: errors are the caller's to see as they are
        return release()
    accountant.charge(cost, label, event=event)
    failed = False
    try:
        result = release()
    except Exception:
        failed = True
    if failed:
        raise ReleaseFailedError(
            "the release failed after its budget was charged; the charge stands. This message "
            "is the same whatever the data; check the query against the declared schema, or "
            "report it as a dpkit bug."
        )
    return result
