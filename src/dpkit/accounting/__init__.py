"""Privacy budgets: exact amounts, composition theorems and an accountant that cannot overspend.

See ``docs/accounting.md`` for the theorems used and the ledger's guarantees.
"""

from dpkit.accounting.accountant import Accountant, ChargeRecord, ParallelScope, Part
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

__all__ = [
    "COMPOSITION_RULES",
    "Accountant",
    "Budget",
    "ChargeRecord",
    "ParallelScope",
    "Part",
    "advanced_composition",
    "as_accountant",
    "basic_composition",
    "charge_and_run",
    "dp_to_zcdp",
    "drv_composition",
    "largest_rho",
    "parallel_composition",
    "tightest_composition",
    "zcdp_composition",
    "zcdp_to_dp",
    "zcdp_to_dp_simple",
]
