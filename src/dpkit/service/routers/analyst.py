"""The analysts' routes: datasets, queries, dry runs, the synthetic twin, budgets and
history (an analyst's key each), and the public ones (health, query kinds).

No route returns rows of a real dataset or an exact value. A query's charge is
committed before its answer is sent (see :meth:`~dpkit.service.runtime.Runtime.query`).
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

import dpkit
from dpkit.service.dependencies import AnalystKey, ConfigDep, DatasetDep, RuntimeDep, public_limit
from dpkit.service.errors import ApiError, call
from dpkit.service.models import QueryBody
from dpkit.tables import kinds
from dpkit.tables.work import Cancellation

__all__ = ["router"]

_IDEMPOTENCY = re.compile(r"[A-Za-z0-9_.:-]{1,128}")

router = APIRouter(prefix="/api/v1")


@router.get("/health")
def health() -> dict[str, Any]:
    """Whether the service is up (no key needed)."""
    return {"status": "ok", "version": dpkit.__version__}


@router.get("/query-kinds", dependencies=[Depends(public_limit)])
def query_kinds() -> dict[str, Any]:
    """The query kinds this service answers, with their parameters (no key needed)."""
    return {"kinds": kinds.describe()}


@router.get("/datasets")
async def datasets(who: AnalystKey, rt: RuntimeDep) -> dict[str, Any]:
    """The datasets this key holds a grant on, with their public schema and budget."""
    names = await call(rt, rt.datasets_for, who.name)
    return {"datasets": [await call(rt, rt.describe, who.name, n) for n in names]}


@router.get("/datasets/{name}")
async def dataset(target: DatasetDep, rt: RuntimeDep) -> dict[str, Any]:
    """One dataset's public schema and the budget left on it."""
    return await call(rt, rt.describe, target.analyst, target.dataset)


@router.post("/datasets/{name}/query")
async def query(
    body: QueryBody,
    request: Request,
    target: DatasetDep,
    rt: RuntimeDep,
    config: ConfigDep,
) -> JSONResponse:
    """Run a query: its charge is committed before the answer is sent.

    Send ``Idempotency-Key`` to make retries safe: the same key returns the
    stored answer without a second charge. A new key (or none) is a new
    release, charged again.
    """
    key = request.headers.get("idempotency-key")
    if key is not None and not _IDEMPOTENCY.fullmatch(key):
        raise ApiError(
            400,
            "invalid_request",
            "Idempotency-Key must be 1-128 letters, digits or '_.:-' (e.g. a UUID).",
        )
    seconds = config.limits.query_timeout_seconds
    stop = Cancellation()
    try:
        answer = await asyncio.wait_for(
            call(
                rt,
                rt.query,
                target.analyst,
                target.dataset,
                body.query,
                twin=body.twin,
                request_key=key,
                cancellation=stop,
            ),
            timeout=seconds,
        )
    except TimeoutError:
        stop.cancel()  # interrupts its engine work; the dataset is free for the next query
        raise ApiError(
            504,
            "timeout",
            f"the query ran longer than {seconds} s and was stopped. "
            "If it was charged, the charge stands (a retry with the same Idempotency-Key "
            "returns its answer if it completed, else the failure). Ask for fewer bins, "
            "keys or grid points, or another method.",
        ) from None
    except ApiError as err:
        if err.code == "release_failed" and key is not None:
            await run_in_threadpool(
                rt.record_failure, target.analyst, target.dataset, body.query, key, "failed"
            )
        raise
    return JSONResponse(answer.body)


@router.post("/datasets/{name}/dry-run")
async def dry_run(
    body: QueryBody,
    target: DatasetDep,
    rt: RuntimeDep,
) -> Any:
    """A query's cost and whether the budget can pay it; no data read, nothing charged."""
    return await call(rt, rt.dry_run, target.analyst, target.dataset, body.query)


@router.get("/datasets/{name}/twin")
async def twin(
    target: DatasetDep,
    rt: RuntimeDep,
    rows: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> dict[str, Any]:
    """Rows of the synthetic twin: generated from the public schema only (not real data)."""
    records = await call(rt, rt.twin_rows, target.analyst, target.dataset, rows)
    return {"dataset": target.dataset, "synthetic": True, "rows": records}


@router.get("/datasets/{name}/synthetic")
async def synthetic(
    target: DatasetDep,
    rt: RuntimeDep,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> dict[str, Any]:
    """Rows of the dataset's published DP synthetic table, with its guarantee and report.

    Free: the table was charged once, to the data owner's publication budget;
    reading it charges no analyst budget.
    """
    return await call(rt, rt.synthetic, target.analyst, target.dataset, offset, limit)


@router.get("/budget")
async def budget(who: AnalystKey, rt: RuntimeDep) -> dict[str, Any]:
    """Every grant of this key with what is spent and left."""
    names = await call(rt, rt.datasets_for, who.name)
    grants = [{"dataset": n, **(await call(rt, rt.budget, who.name, n))} for n in names]
    return {"analyst": who.name, "grants": grants}


@router.get("/history")
async def history(
    who: AnalystKey,
    rt: RuntimeDep,
    dataset: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """This key's own queries, newest first."""
    entries = await call(rt, rt.store.history, who.name, dataset, limit)
    return {"queries": entries}
