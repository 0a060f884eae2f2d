"""dpkit: differentially private data analysis.

Exact-sampling noise mechanisms, an exact privacy budget that survives restarts,
private queries over tables, DP histograms and DP decision trees.

``import dpkit`` is cheap: the names below are loaded on first use
(``dpkit.Session``, ``dpkit.trees.DPDecisionTreeClassifier``), so NumPy, SciPy,
DuckDB and scikit-learn load only with the part that needs them. The layers
and the rules between them are in ``docs/architecture.md`` and
``tests/test_architecture.py``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dpkit._lazy import lazy_exports
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

# The library logs to the "dpkit" logger (ledger opened, charges, refusals);
# silent until the application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from dpkit import histograms, local, mechanisms, synth, trees
    from dpkit.accounting import Accountant, Budget, ChargeRecord
    from dpkit.privacy import PrivacyReport
    from dpkit.release import Release
    from dpkit.tables import Column, GroupedRelease, Schema, Session

    __version__: str

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
    "PrivacyReport",
    "PrivacyWarning",
    "Release",
    "ReleaseFailedError",
    "Schema",
    "Session",
    "__version__",
    "histograms",
    "local",
    "mechanisms",
    "synth",
    "trees",
]

_getattr, _dir = lazy_exports(
    __name__,
    {
        "Accountant": "dpkit.accounting",
        "Budget": "dpkit.accounting",
        "ChargeRecord": "dpkit.accounting",
        "Column": "dpkit.tables",
        "GroupedRelease": "dpkit.tables",
        "PrivacyReport": "dpkit.privacy",
        "Release": "dpkit.release",
        "Schema": "dpkit.tables",
        "Session": "dpkit.tables",
        "histograms": "dpkit.histograms",
        "local": "dpkit.local",
        "mechanisms": "dpkit.mechanisms",
        "synth": "dpkit.synth",
        "trees": "dpkit.trees",
    },
)


def __getattr__(name: str) -> Any:
    if name == "__version__":  # importlib.metadata costs more than the rest of `import dpkit`
        from importlib.metadata import PackageNotFoundError, version

        global __version__
        try:
            __version__ = version("dpkit")
        except PackageNotFoundError:  # running from a source tree without installation
            __version__ = "0.0.0"
        return __version__
    return _getattr(name)


def __dir__() -> list[str]:
    return sorted({*_dir(), "__version__"})
