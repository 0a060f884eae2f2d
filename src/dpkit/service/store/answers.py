"""Stored answers: what each request produced, for replays (Idempotency-Key) and history.

A stored answer is dated at its request's arrival and shown only from its
request's padded deadline on (``visible_at``), so neither its date nor when it
appears tells how long the work took.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from dpkit.accounting.budget import Amount, Budget
from dpkit.errors import InvalidParameterError
from dpkit.service.store._database import (
    REQUEST_TIME,
    Database,
    RequestTime,
    _amount,
    _answers,
    _limit,
    _name,
    _request_key,
    _text,
)

_STATUSES = ("answered", "failed", "timeout")


class Answers(Database):
    """The stored answers' part of the store."""

    def save_answer(
        self,
        analyst: str,
        request_key: str,
        *,
        dataset: str,
        query: Mapping[str, Any],
        status: str,
        response: Mapping[str, Any] | None,
        epsilon: Amount,
        delta: Amount,
    ) -> None:
        """Store what a request produced. An answer is never replaced by a failure;
        a failure or timeout is replaced by the answer that arrives after it.

        Within a request (:data:`REQUEST_TIME` set) the row is dated at the request's
        arrival and hidden until its deadline, so neither its date nor when it appears
        tells how long the work took; outside one, both are now.
        """
        _request_key(request_key)
        now = time.time()
        when = REQUEST_TIME.get() or RequestTime(now, now)
        if status not in _STATUSES:
            raise InvalidParameterError(f"status must be one of {', '.join(_STATUSES)}.")
        cost = Budget(epsilon, delta)
        values = {
            "dataset": _name(dataset, "dataset"),
            "query": json.dumps(dict(query), sort_keys=True),
            "status": status,
            "response": None if response is None else json.dumps(dict(response)),
            "charge_epsilon": _text(cost.epsilon_exact),
            "charge_delta": _text(cost.delta_exact),
            "created_at": when.received,
            "visible_at": when.deadline,
        }
        where = (_answers.c.analyst == analyst, _answers.c.request_key == request_key)
        with self._write() as conn:
            have = conn.execute(sa.select(_answers.c.status).where(*where)).first()
            if have is None:
                conn.execute(
                    _answers.insert().values(analyst=analyst, request_key=request_key, **values)
                )
            elif status == "answered" and have.status != "answered":
                conn.execute(_answers.update().where(*where).values(**values))

    def find_answer(self, analyst: str, request_key: str) -> dict[str, Any] | None:
        """The stored outcome of the analyst's request with this key, or None (also
        before the request's deadline: a replay must not show when the work ended)."""
        with self._read() as conn:
            row = conn.execute(
                _answers.select().where(
                    _answers.c.analyst == analyst,
                    _answers.c.request_key == request_key,
                    _visible(),
                )
            ).first()
        return None if row is None else _answer_json(row)

    def history(
        self, analyst: str, dataset: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The analyst's stored requests (optionally on one dataset), newest first by
        arrival; each is shown from its deadline on, dated to the whole second."""
        query = _answers.select().where(_answers.c.analyst == analyst, _visible())
        if dataset is not None:
            query = query.where(_answers.c.dataset == dataset)
        query = query.order_by(_answers.c.created_at.desc(), _answers.c.request_key).limit(
            _limit(limit)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [_answer_json(r) for r in rows]


def _visible() -> sa.ColumnElement[bool]:
    return sa.or_(_answers.c.visible_at.is_(None), _answers.c.visible_at <= time.time())


def _answer_json(row: Any) -> dict[str, Any]:
    return {
        "query_id": row.request_key,
        "dataset": row.dataset,
        "query": json.loads(row.query),
        "status": row.status,
        "response": None if row.response is None else json.loads(row.response),
        "epsilon": float(_amount(row.charge_epsilon, "an answer's epsilon")),
        "delta": float(_amount(row.charge_delta, "an answer's delta")),
        # the arrival, to the second: finer digits would only carry the server's jitter
        "created_at": float(math.floor(row.created_at)),
    }
