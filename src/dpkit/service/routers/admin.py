"""The admin's routes (``/api/v1/admin``, the admin key each): analysts and their keys,
grants, every dataset's exposure, and the audit log. No route shows a key but the one
it has just made, and none shows a key's hash."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from dpkit.service.dependencies import RuntimeDep, admin
from dpkit.service.errors import ApiError, call
from dpkit.service.models import GrantBody, NewAnalyst
from dpkit.service.store.grants import weak_grant_warning

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/admin", dependencies=[Depends(admin)])


@router.get("/analysts")
async def list_analysts(rt: RuntimeDep) -> dict[str, Any]:
    """Analysts with their grants (never keys)."""
    out = []
    for a in await call(rt, rt.store.analysts):
        grants = await call(rt, rt.store.grants, a.name)
        out.append(
            {
                "name": a.name,
                "active": a.active,
                "created_at": a.created_at,
                "grants": {d: _budget(b) for d, b in grants.items()},
            }
        )
    return {"analysts": out}


@router.post("/analysts", status_code=201)
async def add_analyst(body: NewAnalyst, rt: RuntimeDep) -> dict[str, str]:
    """A new analyst; the key is in this response only (stored as a hash)."""
    key = await call(rt, rt.store.add_analyst, body.name, actor="admin")
    return {"name": body.name, "key": key}


@router.post("/analysts/{name}/rotate")
async def rotate(name: str, rt: RuntimeDep) -> dict[str, str]:
    """A new key for the analyst; the old one stops working now."""
    key = await call(rt, rt.store.rotate_key, name, actor="admin")
    rt.forget_keys()
    return {"name": name, "key": key}


@router.post("/analysts/{name}/revoke")
async def revoke(name: str, rt: RuntimeDep) -> dict[str, Any]:
    """The analyst's key stops working, for good (their ledger rows stay)."""
    await call(rt, rt.store.revoke, name, actor="admin")
    rt.forget_keys()
    return {"name": name, "active": False}


@router.post("/grants")
async def grant(body: GrantBody, rt: RuntimeDep) -> dict[str, Any]:
    """Add to an analyst's budget on a dataset (a budget only grows)."""
    if body.dataset not in rt.sessions:
        raise ApiError(404, "unknown_dataset", "no dataset of that name in this service.")
    total = await call(
        rt,
        rt.add_grant,
        body.analyst,
        body.dataset,
        body.epsilon,
        body.delta,
        actor="admin",
        composition=body.accountant,
        noise=body.noise,
    )
    out = {"analyst": body.analyst, "dataset": body.dataset, **_budget(total)}
    weak = weak_grant_warning(total)
    return out if weak is None else {**out, "warning": weak}


@router.get("/datasets")
async def exposure(rt: RuntimeDep) -> dict[str, Any]:
    """Per dataset, the sum of all grants (analysts who pool answers compose) and its cap."""
    return {"datasets": await call(rt, rt.exposure)}


@router.get("/audit")
async def audit(
    rt: RuntimeDep,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> dict[str, Any]:
    """The audit log, newest first."""
    return {"events": await call(rt, rt.store.audit_log, limit)}


def _budget(b: Any) -> dict[str, float]:
    return {"epsilon": float(b.epsilon), "delta": float(b.delta)}
