"""Step 4: run a validated, paid-for query on an engine — the only step that reads data.

:func:`execute` draws the query's own randomness (the contribution-bounding
salt, then the noise) and hands the query to its kind's ``release``
(:data:`dpkit.tables.kinds.REGISTRY`). It is always
called through :func:`dpkit.accounting.charge_and_run`, so any failure here
reaches the analyst as one :class:`~dpkit.errors.ReleaseFailedError` whose
message is the same for every dataset.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import Any

import numpy as np

from dpkit._checks import epsilon_checked
from dpkit.tables.engines.base import Contribution, Engine, Rows
from dpkit.tables.kinds import REGISTRY
from dpkit.tables.validation import ValidatedQuery

__all__ = ["draw_salt", "execute"]


def draw_salt(rng: Any) -> int:
    """A fresh 62-bit salt for one query's contribution bounding."""
    if rng is None:
        return secrets.randbits(62)
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(0, 2**62))
    return int(rng.generator().integers(0, 2**62))


def execute(query: ValidatedQuery, engine: Engine, rng: Any) -> Any:
    """The release of ``query`` (noise from ``rng``; ``None`` is the OS's CSPRNG)."""
    bound = query.rows.contribution
    if bound is not None:  # a fresh salt per query: which rows are kept is query randomness
        salted = Contribution(bound.column, bound.max_rows, draw_salt(rng), bound.max_groups)
        query = replace(query, rows=Rows(where=query.rows.where, contribution=salted))
    with epsilon_checked():  # validation warned about a weak epsilon once
        return REGISTRY[query.spec.kind].release(query, engine, rng)
