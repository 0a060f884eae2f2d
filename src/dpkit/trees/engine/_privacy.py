"""The ``privacy_`` report every fitted tree estimator carries, and how a fit pays.

One format for every estimator (trees, forests, boosted models)::

    model.privacy_.epsilon        # the epsilon the fit was charged (a float)
    model.privacy_.delta          # 0.0 for pure-epsilon fits
    model.privacy_.rho            # the zCDP rho when the fit was accounted in zCDP, else None
    model.privacy_.neighbouring   # "add/remove one row"
    model.privacy_.split          # {"query kind": epsilon of one such query on a row's path, ...}
    model.privacy_.uses           # {"query kind": how many such queries a row's path meets}

    model.privacy_.mechanisms     # the plan's noisy query kinds (the keys of split)
    model.privacy_.remaining      # the Budget left when an accountant paid, else None

``privacy_`` is the :class:`dpkit.PrivacyReport` every release carries (see
:mod:`dpkit.privacy`). ``privacy_["epsilon"]`` and the other keys of the earlier
dict form still work one release more, with a ``DeprecationWarning``.

A fit pays through :func:`dpkit.accounting.charge_and_run` like every other
release: everything public is validated first, the budget is charged, only then
are the rows read (see :func:`fit_paid`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from dpkit.accounting.budget import Budget
from dpkit.accounting.charging import as_accountant, charge_and_run
from dpkit.accounting.events import PrivacyEvent
from dpkit.privacy import NEIGHBOURING, PrivacyReport

__all__ = ["NEIGHBOURING", "PrivacyReport", "fit_paid", "plan_report"]

T = TypeVar("T")


def fit_paid(
    accountant: Any,
    cost: Budget,
    label: str,
    fit: Callable[[], T],
    *,
    event: PrivacyEvent | None = None,
) -> T:
    """Charge ``cost`` to ``accountant`` (None, an Accountant, a ledger path or a Session), then fit.

    Call it after every check on public input (parameters, declared bounds and
    classes, shapes) and before anything reads the rows: a refused fit costs
    nothing; once charged, a failure inside ``fit`` surfaces as one
    :class:`dpkit.ReleaseFailedError` whose message is the same for every dataset.

    ``event``: the fit's privacy event (its noise), recorded with the charge;
    its ``budget()`` must equal ``cost``. Without one the ledger records the
    event ``cost`` stands for (pure ε, or zCDP with its declared ρ).

    When ``fit`` returns an estimator with a ``privacy_`` report, the budget the
    accountant has left after this charge is written into it (``remaining``).
    """
    payer = as_accountant(accountant)
    out = charge_and_run(payer, cost, label, fit, event=event)
    report = getattr(out, "privacy_", None)
    if payer is not None and isinstance(report, PrivacyReport):
        out.privacy_ = report.paid(payer.remaining_seen)  # type: ignore[attr-defined]
    return out


def plan_report(epsilon: float, plan: Any, **details: Any) -> PrivacyReport:
    """The report of a pure-epsilon fit whose budget split is a ``trees._budget.BudgetPlan``.

    ``details`` keep the earlier dict keys working: ``privacy_["queries"]`` (the
    plan as a dict) and ``privacy_["total"]`` (the exact total, a Fraction).
    """
    return PrivacyReport(
        epsilon=epsilon,
        mechanisms=tuple(plan.parts),
        split={k: float(v) for k, v in plan.parts.items()},
        uses=dict(plan.uses),
        details={"queries": plan.as_dict(), "total": plan.total, **details},
    )
