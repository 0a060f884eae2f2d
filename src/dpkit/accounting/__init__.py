"""Privacy budgets: exact amounts, composition theorems and an accountant that cannot overspend.

See ``docs/accounting.md`` for the theorems used and the ledger's guarantees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._lazy import lazy_exports

if TYPE_CHECKING:
    from dpkit.accounting.accountant import (
        Accountant,
        ChargeRecord,
        ParallelScope,
        Part,
        RefusalRecord,
    )
    from dpkit.accounting.budget import Budget
    from dpkit.accounting.charging import as_accountant, charge_and_run
    from dpkit.accounting.composition import (
        COMPOSITION_RULES,
        advanced_composition,
        basic_composition,
        dp_to_zcdp,
        drv_composition,
        largest_rho,
        parallel_composition,
        tightest_composition,
        zcdp_composition,
        zcdp_to_dp,
        zcdp_to_dp_simple,
    )
    from dpkit.accounting.events import (
        ComposedEvent,
        DiscreteGaussianEvent,
        EpsilonDeltaEvent,
        GaussianEvent,
        GeometricEvent,
        LaplaceEvent,
        PrivacyEvent,
        RepeatedEvent,
        ZCDPEvent,
        as_event,
        event_from_json,
    )
    from dpkit.accounting.plot import plot_budget

__all__ = [
    "COMPOSITION_RULES",
    "Accountant",
    "Budget",
    "ChargeRecord",
    "ComposedEvent",
    "DiscreteGaussianEvent",
    "EpsilonDeltaEvent",
    "GaussianEvent",
    "GeometricEvent",
    "LaplaceEvent",
    "ParallelScope",
    "Part",
    "PrivacyEvent",
    "RefusalRecord",
    "RepeatedEvent",
    "ZCDPEvent",
    "advanced_composition",
    "as_accountant",
    "as_event",
    "basic_composition",
    "charge_and_run",
    "dp_to_zcdp",
    "drv_composition",
    "event_from_json",
    "largest_rho",
    "parallel_composition",
    "plot_budget",
    "tightest_composition",
    "zcdp_composition",
    "zcdp_to_dp",
    "zcdp_to_dp_simple",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Accountant": "dpkit.accounting.accountant",
        "Budget": "dpkit.accounting.budget",
        "COMPOSITION_RULES": "dpkit.accounting.composition",
        "ChargeRecord": "dpkit.accounting.accountant",
        "ComposedEvent": "dpkit.accounting.events",
        "DiscreteGaussianEvent": "dpkit.accounting.events",
        "EpsilonDeltaEvent": "dpkit.accounting.events",
        "GaussianEvent": "dpkit.accounting.events",
        "GeometricEvent": "dpkit.accounting.events",
        "LaplaceEvent": "dpkit.accounting.events",
        "ParallelScope": "dpkit.accounting.accountant",
        "Part": "dpkit.accounting.accountant",
        "PrivacyEvent": "dpkit.accounting.events",
        "RefusalRecord": "dpkit.accounting.accountant",
        "RepeatedEvent": "dpkit.accounting.events",
        "ZCDPEvent": "dpkit.accounting.events",
        "advanced_composition": "dpkit.accounting.composition",
        "as_accountant": "dpkit.accounting.charging",
        "as_event": "dpkit.accounting.events",
        "basic_composition": "dpkit.accounting.composition",
        "charge_and_run": "dpkit.accounting.charging",
        "dp_to_zcdp": "dpkit.accounting.composition",
        "drv_composition": "dpkit.accounting.composition",
        "event_from_json": "dpkit.accounting.events",
        "largest_rho": "dpkit.accounting.composition",
        "parallel_composition": "dpkit.accounting.composition",
        "plot_budget": "dpkit.accounting.plot",
        "tightest_composition": "dpkit.accounting.composition",
        "zcdp_composition": "dpkit.accounting.composition",
        "zcdp_to_dp": "dpkit.accounting.composition",
        "zcdp_to_dp_simple": "dpkit.accounting.composition",
    },
)
