"""The audit log: append-only rows of who did what (public facts only, never keys or data)."""

from __future__ import annotations

import json
import time
from typing import Any

import sqlalchemy as sa

from dpkit.service.store._database import Database, _audit, _limit


def audit_row(conn: sa.Connection, actor: str, action: str, detail: object) -> None:
    """Append an audit row inside the caller's transaction (committed with its change)."""
    conn.execute(
        _audit.insert().values(
            created_at=time.time(),
            actor=str(actor)[:64],
            action=str(action)[:64],
            detail=json.dumps(detail, sort_keys=True, default=str),
        )
    )


class Audit(Database):
    """The audit log's part of the store."""

    def audit(self, actor: str, action: str, **detail: Any) -> None:
        """Append an event to the audit log (give it public facts only: names, never keys)."""
        with self._write() as conn:
            audit_row(conn, actor, action, detail)

    def audit_log(self, limit: int = 100) -> list[dict[str, Any]]:
        """The latest audit events, newest first."""
        with self._read() as conn:
            rows = conn.execute(
                _audit.select().order_by(_audit.c.id.desc()).limit(_limit(limit))
            ).all()
        return [
            {
                "id": r.id,
                "created_at": r.created_at,
                "actor": r.actor,
                "action": r.action,
                "detail": json.loads(r.detail),
            }
            for r in rows
        ]
