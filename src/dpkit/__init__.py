"""dpkit: differentially private data analysis.

Exact-sampling noise mechanisms, an exact privacy budget that survives restarts,
private queries over tables, DP histograms and DP decision trees.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from dpkit import histograms, local, mechanisms
from dpkit.accounting import Accountant, Budget, ChargeRecord
from dpkit.errors import (
    BudgetExceededError,
    DataError,
    DPKitError,
    InvalidParameterError,
    LedgerCorruptError,
    LedgerError,
    LedgerLockedError,
    PrivacyWarning,
    ReleaseFailedError,
)
from dpkit.release import Release
from dpkit.tables import Column, GroupedRelease, Schema, Session

try:
    __version__ = version("dpkit")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"

__all__ = [
    "Accountant",
    "Budget",
    "BudgetExceededError",
    "ChargeRecord",
    "Column",
    "DPKitError",
    "DataError",
    "GroupedRelease",
    "InvalidParameterError",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerLockedError",
    "PrivacyWarning",
    "Release",
    "ReleaseFailedError",
    "Schema",
    "Session",
    "__version__",
    "histograms",
    "local",
    "mechanisms",
]
