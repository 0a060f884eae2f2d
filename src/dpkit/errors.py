"""Exceptions and warnings raised by dpkit.

Every message says what is wrong and how to fix it, and none contains a data
value: messages may name columns, parameters and budgets (public), never rows.
"""

from __future__ import annotations


class DPKitError(Exception):
    """Base class of every error dpkit raises on purpose."""


class InvalidParameterError(DPKitError, ValueError):
    """A public parameter (epsilon, delta, bounds, sensitivity, ...) is invalid."""


class BudgetExceededError(DPKitError):
    """A release would spend more privacy budget than is left.

    Raised *before* any data is read, so a refused query reveals nothing.
    """

    def __init__(self, message: str, *, requested: object = None, remaining: object = None):
        super().__init__(message)
        self.requested = requested
        self.remaining = remaining


class LedgerError(DPKitError):
    """The budget ledger cannot be used (corrupt, locked, or of another budget)."""


class LedgerCorruptError(LedgerError):
    """The ledger file is unreadable or its records are inconsistent.

    dpkit never repairs or overwrites a corrupt ledger: spent budget must not be
    forgotten. Restore the file from a backup, or start a new ledger for a new
    dataset.
    """


class LedgerLockedError(LedgerError):
    """Another process held the ledger for longer than the timeout."""


class DataError(DPKitError, ValueError):
    """The data cannot be processed as declared (e.g. text in a numeric column).

    Messages name the column and the problem, never the offending value.
    """


class ReleaseFailedError(DPKitError):
    """A release failed after its budget was charged.

    The message is the same for every dataset (the engine's own error can quote
    data, so it is withheld), and the charge stands: the release may have read
    the data before it failed. Everything that can be checked on public input
    is checked before the charge, so this signals an engine fault or a dpkit bug.
    """


class PrivacyWarning(UserWarning):
    """A choice that weakens or voids the privacy guarantee (e.g. a seeded RNG)."""
