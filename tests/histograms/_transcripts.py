"""A release's transcript: everything an analyst observes of one call, for neighbour comparisons."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from dpkit.accounting import Accountant


def transcript(
    accountant: Accountant, publish: Callable[[], Any], fields: Callable[[Any], tuple[Any, ...]]
) -> tuple[Any, ...]:
    """``fields(publish())`` (or the exception's type and text), the charges and the warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fields(publish())
        except Exception as err:  # the exception is part of the transcript
            out = (type(err).__name__, str(err))
    return (
        *out,
        accountant.spent,
        [(e.label, e.cost, e.scopes) for e in accountant.history],
        [(type(w.message).__name__, str(w.message)) for w in caught],
    )


def histogram_fields(h: Any, lo: Any, hi: Any) -> tuple[Any, ...]:
    """What a published histogram shows besides its estimates (errors of ranges [lo, hi] included)."""
    return (
        h.method,
        h.epsilon,
        h.delta,
        h.rho,
        h.details,
        h.errors.tolist(),
        h.bins.tolist(),
        h.answer_error(lo, hi).tolist(),
    )
