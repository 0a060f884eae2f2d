"""The ``privacy_`` report every fitted tree estimator carries, and how a fit pays.

One format for every estimator (trees, forests, boosted models)::

    model.privacy_.epsilon        # the epsilon the fit was charged (a float)
    model.privacy_.delta          # 0.0 for pure-epsilon fits
    model.privacy_.rho            # the zCDP rho when the fit was accounted in zCDP, else None
    model.privacy_.neighbouring   # "add/remove one row"
    model.privacy_.split          # {"query kind": epsilon of one such query on a row's path, ...}
    model.privacy_.uses           # {"query kind": how many such queries a row's path meets}

``privacy_["epsilon"]`` and the other keys of :meth:`PrivacyReport.as_dict` still
work, for scripts written against the earlier dict form.

A fit pays through :func:`dpkit.accounting.charge_and_run` like every other
release: everything public is validated first, the budget is charged, only then
are the rows read (see :func:`fit_paid`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dpkit.accounting.budget import Budget
from dpkit.accounting.charging import as_accountant, charge_and_run

__all__ = ["NEIGHBOURING", "PrivacyReport", "fit_paid", "plan_report"]

NEIGHBOURING = "add/remove one row"

T = TypeVar("T")


@dataclass(frozen=True)
class PrivacyReport(Mapping[str, Any]):
    """What a fitted estimator's training released, in one format for every estimator.

    ``epsilon``/``delta`` is the (ε, δ)-DP guarantee of the whole fit under
    ``neighbouring``; ``rho`` the ρ-zCDP guarantee when the fit was accounted in
    zCDP (then ``epsilon``/``delta`` is its conversion); ``split`` the budget of
    one query of each kind on a row's path and ``uses`` how many such queries a
    path meets, so ``sum(split[k] * uses[k])`` is the fit's total (sequential
    along a path; parallel across disjoint nodes). ``details`` holds
    estimator-specific public facts (the partition of a forest, the number of
    rounds of a boosted model).
    """

    epsilon: float
    delta: float = 0.0
    rho: float | None = None
    neighbouring: str = NEIGHBOURING
    split: Mapping[str, float] = field(default_factory=dict)
    uses: Mapping[str, int] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A plain dict (JSON-ready) of the report."""
        out: dict[str, Any] = {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "neighbouring": self.neighbouring,
            "split": dict(self.split),
            "uses": dict(self.uses),
            "total": self.epsilon,
        }
        out.update(self.details)
        return out

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())

    @property
    def budget(self) -> Budget:
        """The guarantee as a :class:`dpkit.Budget` (what an accountant was charged)."""
        return Budget(self.epsilon, self.delta, rho=self.rho)


def fit_paid(accountant: Any, cost: Budget, label: str, fit: Callable[[], T]) -> T:
    """Charge ``cost`` to ``accountant`` (None, an Accountant, a ledger path or a Session), then fit.

    Call it after every check on public input (parameters, declared bounds and
    classes, shapes) and before anything reads the rows: a refused fit costs
    nothing; once charged, a failure inside ``fit`` surfaces as one
    :class:`dpkit.ReleaseFailedError` whose message is the same for every dataset.
    """
    return charge_and_run(as_accountant(accountant), cost, label, fit)


def plan_report(epsilon: float, plan: Any, **details: Any) -> PrivacyReport:
    """The report of a pure-epsilon fit whose budget split is a ``trees._budget.BudgetPlan``.

    ``details`` keep the earlier dict keys working: ``privacy_["queries"]`` (the
    plan as a dict) and ``privacy_["total"]`` (the exact total, a Fraction).
    """
    return PrivacyReport(
        epsilon=epsilon,
        split={k: float(v) for k, v in plan.parts.items()},
        uses=dict(plan.uses),
        details={"queries": plan.as_dict(), "total": plan.total, **details},
    )
