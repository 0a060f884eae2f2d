"""A dataset's published DP synthetic table: made once at start-up, served to analysts for free.

``[datasets.NAME.synthetic]`` declares it (public parameters only). At start-up
:func:`publish` finds it in the store, or makes it with
:meth:`dpkit.Session.synthesize`, paid by the dataset's *publication ledger*
(:mod:`dpkit.service.store.publications`; the data owner's budget, capped by
``publication_epsilon`` / ``publication_delta``, composed under zCDP), never by
an analyst's grant. The order is the session's: the parameters are checked
against the public schema, the cost against the ledger (refusals stop start-up
with the configuration's words, nothing charged), then the charge and the claim
of the table's name are committed together, then the data is read. A table is
charged once, ever: later starts reuse the stored table; other parameters under
the same name stop start-up (a new table needs a new name, charged again); a
claim without a stored table (another process is making it, or one stopped while
making it) is never made again under that name.

Guarantee of what analysts are served: the table and its report are
post-processing of one ρ-zCDP release under add/remove one row
(:func:`dpkit.synth.session.synthesize_mst` / ``synthesize_aim`` state the
proof), so any number of reads costs nothing more. A failure after the charge
is stored as ``failed`` and served as the one generic error, whatever the data.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from dpkit.accounting import Accountant
from dpkit.errors import (
    BudgetExceededError,
    DPKitError,
    InvalidParameterError,
    ReleaseFailedError,
)
from dpkit.service.config import ConfigError, DatasetConfig, SyntheticConfig, publication_cap
from dpkit.service.encoding import jsonable
from dpkit.service.store import DuplicateRequestError, Publication, Store
from dpkit.tables import Session

__all__ = [
    "FAILED",
    "MAX_PAGE_VALUES",
    "NoSyntheticTable",
    "NotStoredYet",
    "publish",
    "served",
    "synthetic_json",
]

_log = logging.getLogger("dpkit.service")

#: The one message of a synthetic table whose making failed after its charge.
FAILED = (
    "this dataset's synthetic table could not be made after its budget was charged; the "
    "charge stands and it is not made again under this name. This message is the same "
    "whatever the data."
)


#: The most values (rows × columns) one page of a served table holds.
MAX_PAGE_VALUES = 200_000


class NoSyntheticTable(DPKitError):
    """The dataset publishes no synthetic table (its configuration declares none)."""


class NotStoredYet(DPKitError):
    """The synthetic table is charged and not stored (being made, or its maker stopped)."""


def publish(session: Session, store: Store, dc: DatasetConfig, sc: SyntheticConfig) -> Publication:
    """The dataset's synthetic table as stored: reused, or made now and charged once.

    Raises :class:`~dpkit.service.config.ConfigError` (start-up stops, nothing
    charged) when the parameters do not fit the schema, cost more than the
    publication ledger has left, or differ from those the stored table under
    this name was made with.
    """
    where = f"[datasets.{dc.name}.synthetic]" + (f" (line {sc.line})" if sc.line else "")
    stored = store.publication(dc.name, sc.name)
    if stored is None:
        _make(session, store, dc, sc, where)
        stored = store.publication(dc.name, sc.name)
        assert stored is not None  # claimed by this process or another
    if stored.params != sc.params():
        raise ConfigError(
            f"{where}: the synthetic table {sc.name!r} of {dc.name!r} was made, and charged, "
            f"with other parameters ({stored.params}); it is never re-made silently, since that "
            "would spend the budget again. Put its parameters back to keep serving it, or "
            f'publish a new table under a new name (name = "..." in [datasets.{dc.name}.'
            "synthetic]), which is charged again to the dataset's publication budget."
        )
    if stored.status == "charged":
        _log.warning(
            "%s: the synthetic table %r is charged and not stored yet: another process is "
            "making it, or a process stopped while making it (then its charge stands and it "
            "is not made again under this name: give a new name to publish one).",
            where,
            sc.name,
        )
    return stored


def _make(
    session: Session, store: Store, dc: DatasetConfig, sc: SyntheticConfig, where: str
) -> None:
    cap = publication_cap(dc)
    if cap is None:  # pragma: no cover - the configuration requires it with a table
        raise ConfigError(f"{where}: declare publication_epsilon and publication_delta.")
    ledger = store.publication_ledger(dc.name, sc.name, sc.params())
    payer = Accountant(cap, ledger=ledger, composition="zcdp")
    try:
        result = session.synthesize(
            sc.method,
            rows=sc.rows,
            epsilon=sc.epsilon,
            delta=sc.delta,
            rho=sc.rho,
            columns=None if sc.columns is None else list(sc.columns),
            bins=sc.bins,
            workload=None if sc.workload is None else [list(w) for w in sc.workload],
            accountant=payer,
        )
        body = synthetic_json(result)
    except DuplicateRequestError:
        return  # another process claimed this name first: what it stores is served
    except BudgetExceededError:
        raise ConfigError(
            f"{where}: the synthetic table {sc.name!r} costs more than is left of "
            f"{dc.name!r}'s publication budget (publication_epsilon = {cap.epsilon:g}, "
            f"publication_delta = {cap.delta:g}; spent so far ε = {payer.spent.epsilon:g}, "
            f"δ = {payer.spent.delta:g}, composed under zCDP); nothing was charged. Raise the "
            "cap, or ask for a smaller epsilon (or rho)."
        ) from None
    except Exception as err:
        # charged (committed) by this process: the one generic failure
        if ledger.claimed and store.publication(dc.name, sc.name) is not None:
            store.finish_publication(dc.name, sc.name, None)
            _log.error("%s: %s", where, FAILED)
            return
        if isinstance(err, InvalidParameterError):  # public input only, before the charge
            raise ConfigError(f"{where}: {err}") from None
        raise
    store.finish_publication(dc.name, sc.name, body)


def synthetic_json(result: Any) -> dict[str, Any]:
    """A :class:`dpkit.synth.SynthesisResult` as stored and served: table, guarantee, report.

    The report's marginals carry their columns, σ, ρ, cell count and expected ℓ1
    error (``cells · σ · √(2/π)``, in counts: a function of public parameters);
    their noisy counts are left out (the table is what is served).
    """
    frame = result.table
    report = result.report
    privacy = result.privacy
    values = frame.astype(object).where(frame.notna(), None).to_numpy().tolist()
    return {
        "columns": [str(c) for c in frame.columns],
        "data": jsonable(values),
        "guarantee": {
            "method": report.method,
            "epsilon": float(privacy.epsilon),
            "delta": float(privacy.delta),
            "rho": None if privacy.rho is None else float(privacy.rho),
            "neighbouring": privacy.neighbouring,
            "mechanisms": list(privacy.mechanisms),
        },
        "report": {
            "method": report.method,
            "rows": int(report.rows),
            "rho": float(report.rho),
            "steps": {k: float(v) for k, v in report.steps.items()},
            "marginals": [
                {
                    "columns": list(m.columns),
                    "sigma": float(m.sigma),
                    "rho": float(m.rho),
                    "cells": int(m.counts.size),
                    "expected_l1_error": float(m.counts.size * m.sigma * math.sqrt(2 / math.pi)),
                    "merges": {c: list(v) for c, v in m.merges.items()},
                }
                for m in report.marginals
            ],
            "selected": [list(c) for c in report.selected],
            "selection_epsilon": float(report.selection_epsilon),
            "selection_epsilons": [float(e) for e in report.selection_epsilons],
            "workload_errors": [
                {"columns": list(k), "expected_l1_error": None if v is None else float(v)}
                for k, v in report.errors.items()
            ],
            "cells": jsonable({k: list(v) for k, v in report.cells.items()}),
            "edges": jsonable({k: list(v) for k, v in report.edges.items()}),
        },
    }


def served(
    dataset: str, name: str, stored: Publication | None, offset: int, limit: int
) -> dict[str, Any]:
    """The body of ``GET .../synthetic``: rows ``offset`` to ``offset + limit`` of the table
    (fewer when they would hold more than :data:`MAX_PAGE_VALUES` values), its guarantee and
    report. No budget is read or charged: the table is public once made."""
    if stored is None:
        raise NoSyntheticTable(
            "this dataset publishes no synthetic table; its data owner can declare one in "
            "[datasets.NAME.synthetic] of the service's configuration."
        )
    if stored.status == "failed" or (stored.status == "published" and stored.result is None):
        raise ReleaseFailedError(FAILED)
    if stored.status != "published" or stored.result is None:
        raise NotStoredYet(
            "this dataset's synthetic table is charged and not stored yet: it is being made, "
            "or the process making it stopped (then it is not made again under this name). "
            "Retry shortly."
        )
    result = stored.result
    columns = result["columns"]
    data = result["data"]
    limit = min(limit, max(1, MAX_PAGE_VALUES // max(1, len(columns))))
    return {
        "dataset": dataset,
        "name": name,
        "synthetic": True,
        "guarantee": result["guarantee"],
        "report": result["report"],
        "columns": columns,
        "total_rows": len(data),
        "offset": offset,
        "rows": [
            dict(zip(columns, values, strict=True)) for values in data[offset : offset + limit]
        ],
    }
