"""The HTTP face of the service: FastAPI routes over :class:`~dpkit.service.runtime.Runtime`.

Routes, status codes and bodies are documented in docs/service.md and at
``/docs`` (OpenAPI, served from this package and fastapi-offline's Swagger UI
files: nothing is fetched from another origin). This module only translates:
it authenticates the key, applies the per-key rate limit, the body-size limit
and the time limit, checks that every JSON body is public input dpkit can
hold (text that is valid Unicode, finite numbers within 64 bits) before any
route sees it, runs the runtime's query path in a worker thread, and maps
dpkit's errors to status codes with bodies that say what to fix. One layer
outside everything (:class:`_Padded`) holds every API response, errors
included, until the response-time floor. Refusals and authentication
failures go to the audit log (rate-limited per address). No route returns
rows of a real dataset or an exact value; every data route needs an analyst
key, every admin route the admin key.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastapi_offline
from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field, model_validator
from pydantic_core import PydanticCustomError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import dpkit
from dpkit.errors import (
    BudgetExceededError,
    DataError,
    InvalidParameterError,
    LedgerError,
    LedgerLockedError,
    ReleaseFailedError,
)
from dpkit.service.config import ServiceConfig
from dpkit.service.runtime import Busy, NotFound, Pending, Runtime
from dpkit.service.store import (
    REQUEST_TIME,
    Analyst,
    ConflictError,
    RequestTime,
    hash_key,
    key_id,
)
from dpkit.tables.work import Cancellation, QueryTooLargeError

__all__ = ["ApiError", "create_app"]

STATIC = Path(__file__).with_name("static")
#: Swagger UI's files, installed with fastapi-offline (served at /static/swagger/).
SWAGGER = Path(fastapi_offline.__file__).with_name("static")
_FAILED_KEYS_PER_MINUTE = 30
_IDEMPOTENCY = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: Public input: JSON nested at most this deep, integers within 64 bits (no declared type
#: holds more; a float cannot hold 400 digits), floats finite, text valid Unicode.
_JSON_DEPTH = 32
_INT_RANGE = (-(2**64), 2**64)
#: Audit rows that anyone can provoke (no key, a bad key, a flood) are rate-limited.
_AUDIT_ROWS_PER_MINUTE = 60
_log = logging.getLogger("dpkit.service")


class ApiError(Exception):
    """An error response: status, a stable code, and a message that says what to fix."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def json_problem(value: Any) -> str | None:
    """What makes a parsed JSON value unfit as public input, or None when it is fit.

    Every string (keys too) must be valid Unicode (JSON's ``"\\ud800"`` escape
    makes a lone surrogate, which no engine, file or response can encode); every
    float finite (Python's JSON reader takes ``NaN`` and ``Infinity``); every
    integer within 64 bits (a 400-digit integer overflows every float and no
    declared type holds it); nesting at most ``_JSON_DEPTH`` levels. The message
    names the problem, never the value.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > _JSON_DEPTH:
            return f"the body is nested more than {_JSON_DEPTH} levels deep."
        if isinstance(item, str):
            if not _encodable(item):
                return (
                    "the body holds text that is not valid Unicode (a lone surrogate such as "
                    "the escape \\ud800); send UTF-8 text."
                )
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if not _INT_RANGE[0] <= item < _INT_RANGE[1]:
                return (
                    "the body holds an integer beyond 64 bits, which no parameter or "
                    "declared column type takes; send a smaller number."
                )
        elif isinstance(item, float):
            if not math.isfinite(item):
                return (
                    "the body holds NaN or Infinity, which JSON does not have; send finite "
                    "numbers (a missing value is null)."
                )
        elif isinstance(item, dict):
            for k, v in item.items():
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _PublicBody(BaseModel):
    """A request body: checked as public input (:func:`json_problem`) before its fields."""

    @model_validator(mode="before")
    @classmethod
    def _public_input(cls, data: Any) -> Any:
        problem = json_problem(data)
        if problem is not None:
            raise PydanticCustomError("public_input", problem)
        return data


class QueryBody(_PublicBody):
    """A query spec as ``QuerySpec.to_dict()`` writes it, and whether to ask the synthetic twin."""

    query: dict[str, Any] = Field(description="the query spec, e.g. {'kind': 'mean', ...}")
    twin: bool = Field(False, description="answer from the synthetic twin (free, not real)")


class NewAnalyst(_PublicBody):
    name: str


class GrantBody(_PublicBody):
    analyst: str
    dataset: str
    epsilon: float = Field(ge=0)
    delta: float = Field(0.0, ge=0, lt=1)


# ------------------------------------------------------------------------------- limits


class _BodyLimit:
    """Refuses request bodies above ``limit`` bytes (413) without reading more than that.

    The body is read here, before the app: a declared ``Content-Length`` above the
    limit is refused unread, and a chunked body (no length) is refused as soon as it
    passes the limit, with the same 413 (the app's body parser would turn an error
    raised while it reads into a 400).
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (
            not declared.isdigit() or len(declared) > 18 or int(declared) > self.limit
        ):
            await _send_error(send, 413, "too_large", self._message())
            return
        chunks: list[bytes] = []
        seen = 0
        queued: list[Message] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: the app sees that
                queued.append(message)
                break
            body = message.get("body", b"")
            seen += len(body)
            if seen > self.limit:
                await _send_error(send, 413, "too_large", self._message())
                return
            chunks.append(body)
            if not message.get("more_body", False):
                queued.insert(0, {"type": "http.request", "body": b"".join(chunks)})
                break

        async def replay() -> Message:
            return queued.pop(0) if queued else await receive()

        await self.app(scope, replay, send)

    def _message(self) -> str:
        return f"the request body is larger than {self.limit} bytes; send a smaller query."


async def _send_error(send: Send, status: int, code: str, message: str) -> None:
    response = JSONResponse({"error": {"code": code, "message": message}}, status_code=status)
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})


class _Padded:
    """Holds every API response (but health's) until ``floor`` seconds after its request
    arrived: answers, refusals, 404s, 401s, 413s, 429s and 500s alike, so that no
    response time below the floor depends on the data or on what exists for others.

    It also dates the request (:data:`~dpkit.service.store.REQUEST_TIME`): an answer
    stored for it is dated at its arrival and shown (history, replays) only from its
    deadline on.
    """

    def __init__(self, app: ASGIApp, floor: float) -> None:
        self.app, self.floor = app, float(floor)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or not path.startswith("/api/") or path == "/api/v1/health":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        received = time.time()
        token = REQUEST_TIME.set(RequestTime(received, received + self.floor))

        async def padded(message: Message) -> None:
            if message["type"] == "http.response.start":
                left = self.floor - (time.monotonic() - started)
                if left > 0:
                    await asyncio.sleep(left)
            await send(message)

        try:
            await self.app(scope, receive, padded)
        finally:
            REQUEST_TIME.reset(token)


class _Service(FastAPI):
    """FastAPI with the service's outermost layers around everything, the error handler
    of last resort included (so that even a 500 is padded and carries the headers)."""

    floor: float = 0.0

    def build_middleware_stack(self) -> ASGIApp:
        return _SecurityHeaders(_Padded(super().build_middleware_stack(), self.floor))


class _AuditThrottle:
    """At most one audit row a minute per (actor, address, code), and at most
    ``per_minute`` such rows a minute in all, so that a flood of bad keys cannot fill
    the disk; the events in between are counted into the next row written."""

    def __init__(self, per_minute: int = _AUDIT_ROWS_PER_MINUTE) -> None:
        self.per_minute = per_minute
        self._last: dict[tuple[str, str, str], tuple[float, int]] = {}
        self._window = (-math.inf, 0)  # (start, rows written in it)
        self._lock = threading.Lock()

    def admit(self, key: tuple[str, str, str]) -> int | None:
        """The number of events to record now (this one and those held back), or None."""
        now = time.monotonic()
        with self._lock:
            last, held = self._last.get(key, (-math.inf, 0))
            start, rows = self._window
            if now - start >= 60:
                start, rows = now, 0
            if now - last < 60 or rows >= self.per_minute:
                self._last[key] = (last, held + 1)
                self._window = (start, rows)
                return None
            if len(self._last) > 10_000:  # forget rather than grow without end
                self._last.clear()
            self._last[key] = (now, 0)
            self._window = (start, rows + 1)
            return held + 1


class _RateLimit:
    """A token bucket per key: ``per_minute`` requests, bursts up to that many."""

    def __init__(self, per_minute: int) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(per_minute)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, who: str) -> float:
        """0 if a request may go now, else the seconds to wait."""
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(who, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - last) * self.rate)
            if tokens < 1:
                self._buckets[who] = (tokens, now)
                return (1 - tokens) / self.rate
            self._buckets[who] = (tokens - 1, now)
            if len(self._buckets) > 100_000:  # forget idle keys rather than grow without end
                self._buckets.clear()
            return 0.0


# ------------------------------------------------------------------------------- the app


def create_app(config: ServiceConfig, *, runtime: Runtime | None = None) -> FastAPI:
    """The service as an ASGI application (``uvicorn.run(create_app(config))``)."""
    rt = runtime or Runtime(config)
    limits = config.limits
    limiter = _RateLimit(limits.requests_per_minute)
    # Failed key checks are also limited per client address: guessing keys means a new
    # key (a new bucket above) per try. Only invalid keys are held back: a valid key is
    # checked first and never refused because of others' attempts from its address.
    failures = _RateLimit(_FAILED_KEYS_PER_MINUTE)
    throttle = _AuditThrottle()
    app = _Service(
        title="dpkit query service",
        version=dpkit.__version__,
        description="Differentially private answers over HTTP; see docs/service.md.",
        docs_url=None,  # served below from installed files, under the page's CSP
        redoc_url=None,
    )
    app.floor = limits.min_response_seconds
    app.state.runtime = rt

    # -- the audit log -----------------------------------------------------------------

    async def _audit(request: Request, status: int, code: str) -> None:
        """A refusal or an authentication failure as an audit row: who (the analyst, or
        ``anonymous`` with the public key id tried), from where, which route and what
        code; never a secret, never data. Rows anyone can provoke are rate-limited."""
        actor = getattr(request.state, "actor", None)
        address = _address(request)
        count = 1
        if actor is None or code in ("unauthorized", "forbidden", "rate_limited"):
            admitted = throttle.admit((str(actor), address, code))
            if admitted is None:
                return
            count = admitted
        route = request.scope.get("route")
        detail: dict[str, Any] = {
            "status": status,
            "code": code,
            "method": request.method,
            "route": getattr(route, "path", "(no route)"),
            "address": address,
            "count": count,
        }
        name = request.path_params.get("name")
        if isinstance(name, str):
            detail["name"] = name if _NAME.fullmatch(name) else "(not a name)"
        if actor is None:
            header = request.headers.get("authorization", "")
            detail["key_id"] = key_id(header.partition(" ")[2].strip())
        action = "auth_failure" if code in ("unauthorized", "forbidden") else "refused"
        try:
            await run_in_threadpool(rt.store.audit, actor or "anonymous", action, **detail)
        except Exception:  # the refusal stands; a failed log write must not change it
            _log.warning("the audit log could not record a refusal", exc_info=True)

    # -- errors --------------------------------------------------------------------

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, err: ApiError) -> JSONResponse:
        await _audit(request, err.status, err.code)
        return _error(err.status, err.code, err.message, err.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        own = [e for e in err.errors() if e.get("type") == "public_input"]
        if own:  # our own messages never quote the input
            await _audit(request, 400, "invalid_request")
            return _error(400, "invalid_request", str(own[0].get("msg", "")))
        await _audit(request, 422, "invalid_request")
        # pydantic's own messages may echo the input: keep only where and what kind.
        parts = []
        for e in err.errors()[:5]:
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
            parts.append(f"{where}: {e.get('type', 'invalid')}")
        return _error(
            422,
            "invalid_request",
            "the request does not have the form this endpoint takes ("
            + "; ".join(parts)
            + "); see /docs.",
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException) -> JSONResponse:
        code = {
            400: "invalid_request",
            404: "not_found",
            405: "method_not_allowed",
        }.get(err.status_code, "http_error")
        message = {
            400: "the body could not be read as JSON (see /docs for the form it takes).",
            404: "no such endpoint; the API is under /api/v1 (see /docs).",
            405: "this endpoint does not take that method (see /docs).",
        }.get(err.status_code, "the request was refused.")
        return _error(err.status_code, code, message)

    @app.exception_handler(Exception)
    async def _internal(request: Request, err: Exception) -> JSONResponse:
        return _error(
            500, "internal", "the service failed to handle the request; nothing was released."
        )

    # -- who is asking ---------------------------------------------------------------

    def _key(request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(
                401,
                "unauthorized",
                "this endpoint needs your key: send the header 'Authorization: Bearer <key>'.",
                {"WWW-Authenticate": "Bearer"},
            )
        return key.strip()

    def _limit(who: str) -> None:
        """The per-key rate limit, counted per holder once the key is known to be valid
        (so nobody can use up another analyst's requests by sending their key id)."""
        wait = limiter.take(who)
        if wait:
            raise ApiError(
                429,
                "rate_limited",
                f"too many requests for this key (limit {limits.requests_per_minute} per "
                "minute); wait and retry.",
                {"Retry-After": str(max(1, round(wait)))},
            )

    def _invalid_key(request: Request) -> None:
        """An invalid key: counted against its address, and refused (429 once the address
        has tried too many this minute, else 401). Valid keys never come here."""
        if failures.take(_address(request)):
            raise _too_many_failures()

    def analyst(request: Request) -> Analyst:
        key = _key(request)
        who = rt.authenticate(key)  # first: a valid key is never held back by the address
        if who is None:
            _invalid_key(request)
            raise ApiError(
                401,
                "unauthorized",
                "the key is not valid (unknown, rotated or revoked); ask the data owner for a key.",
                {"WWW-Authenticate": "Bearer"},
            )
        request.state.actor = who.name
        _limit(f"analyst:{who.name}")
        return who

    def admin(request: Request) -> str:
        key = _key(request)
        expected = config.admin_key_hash
        if expected is None:
            raise ApiError(
                403, "forbidden", "this service has no admin key configured (admin_key_hash)."
            )
        try:
            given = hash_key(key)
        except InvalidParameterError:
            given = ""
        if not hmac.compare_digest(given.encode(), expected.encode()):
            holder = rt.authenticate(key)
            if holder is not None:  # a valid analyst key: not a guess
                request.state.actor = holder.name
                raise ApiError(403, "forbidden", "this endpoint needs the admin key.")
            _invalid_key(request)
            raise ApiError(
                401, "unauthorized", "the key is not valid.", {"WWW-Authenticate": "Bearer"}
            )
        request.state.actor = "admin"
        _limit("admin")
        return "admin"

    async def call(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a runtime call on the runtime's bounded worker pool, mapping dpkit's errors to
        responses (503 at once when the pool and its waiting line are full)."""
        try:
            return await asyncio.wrap_future(rt.submit(func, *args, **kwargs))
        except Busy as err:
            raise ApiError(503, "busy", str(err), {"Retry-After": "2"}) from None
        except NotFound as err:
            raise ApiError(404, "unknown_dataset", str(err)) from None
        except BudgetExceededError as err:
            raise ApiError(403, "budget_exceeded", str(err)) from None
        except ConflictError as err:
            raise ApiError(409, "conflict", str(err)) from None
        except Pending as err:
            raise ApiError(409, "pending", str(err), {"Retry-After": "1"}) from None
        except QueryTooLargeError as err:
            raise ApiError(413, "query_too_large", str(err)) from None
        except (InvalidParameterError, DataError) as err:
            raise ApiError(400, "invalid_query", str(err)) from None
        except ReleaseFailedError as err:
            raise ApiError(500, "release_failed", str(err)) from None
        except LedgerLockedError:
            raise ApiError(
                503, "busy", "the budget ledger is busy; retry with the same Idempotency-Key."
            ) from None
        except LedgerError:
            raise ApiError(
                503,
                "ledger_unavailable",
                "the budget ledger could not record the charge; nothing was released. Retry "
                "with the same Idempotency-Key.",
            ) from None

    # -- analysts ----------------------------------------------------------------------

    @app.get("/api/v1/health")
    def health() -> dict[str, Any]:
        """Whether the service is up (no key needed)."""
        return {"status": "ok", "version": dpkit.__version__}

    @app.get("/api/v1/datasets")
    async def datasets(who: Analyst = Depends(analyst)) -> dict[str, Any]:
        """The datasets this key holds a grant on, with their public schema and budget."""
        names = await call(rt.datasets_for, who.name)
        return {"datasets": [await call(rt.describe, who.name, n) for n in names]}

    @app.get("/api/v1/datasets/{name}")
    async def dataset(name: str, who: Analyst = Depends(analyst)) -> dict[str, Any]:
        """One dataset's public schema and the budget left on it."""
        return await call(rt.describe, who.name, name)

    @app.post("/api/v1/datasets/{name}/query")
    async def query(
        name: str, body: QueryBody, request: Request, who: Analyst = Depends(analyst)
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
        stop = Cancellation()
        try:
            answer = await asyncio.wait_for(
                call(
                    rt.query,
                    who.name,
                    name,
                    body.query,
                    twin=body.twin,
                    request_key=key,
                    cancellation=stop,
                ),
                timeout=limits.query_timeout_seconds,
            )
        except TimeoutError:
            stop.cancel()  # interrupts its engine work; the dataset is free for the next query
            raise ApiError(
                504,
                "timeout",
                f"the query ran longer than {limits.query_timeout_seconds} s and was stopped. "
                "If it was charged, the charge stands (a retry with the same Idempotency-Key "
                "returns its answer if it completed, else the failure). Ask for fewer bins, "
                "keys or grid points, or another method.",
            ) from None
        except ApiError as err:
            if err.code == "release_failed" and key is not None:
                await run_in_threadpool(
                    rt.record_failure, who.name, name, body.query, key, "failed"
                )
            raise
        return JSONResponse(answer.body)

    @app.post("/api/v1/datasets/{name}/dry-run")
    async def dry_run(name: str, body: QueryBody, who: Analyst = Depends(analyst)) -> Any:
        """A query's cost and whether the budget can pay it; no data read, nothing charged."""
        return await call(rt.dry_run, who.name, name, body.query)

    @app.get("/api/v1/datasets/{name}/twin")
    async def twin(
        name: str, rows: int = Query(100, ge=1, le=10_000), who: Analyst = Depends(analyst)
    ) -> dict[str, Any]:
        """Rows of the synthetic twin: generated from the public schema only (not real data)."""
        records = await call(rt.twin_rows, who.name, name, rows)
        return {"dataset": name, "synthetic": True, "rows": records}

    @app.get("/api/v1/budget")
    async def budget(who: Analyst = Depends(analyst)) -> dict[str, Any]:
        """Every grant of this key with what is spent and left."""
        names = await call(rt.datasets_for, who.name)
        grants = [{"dataset": n, **(await call(rt.budget, who.name, n))} for n in names]
        return {"analyst": who.name, "grants": grants}

    @app.get("/api/v1/history")
    async def history(
        dataset: str | None = None,
        limit: int = Query(100, ge=1, le=1000),
        who: Analyst = Depends(analyst),
    ) -> dict[str, Any]:
        """This key's own queries, newest first."""
        entries = await call(rt.store.history, who.name, dataset, limit)
        return {"queries": entries}

    # -- admin -------------------------------------------------------------------------

    @app.get("/api/v1/admin/analysts")
    async def list_analysts(_: str = Depends(admin)) -> dict[str, Any]:
        """Analysts with their grants (never keys)."""
        out = []
        for a in await call(rt.store.analysts):
            grants = await call(rt.store.grants, a.name)
            out.append(
                {
                    "name": a.name,
                    "active": a.active,
                    "created_at": a.created_at,
                    "grants": {d: _budget(b) for d, b in grants.items()},
                }
            )
        return {"analysts": out}

    @app.post("/api/v1/admin/analysts", status_code=201)
    async def add_analyst(body: NewAnalyst, _: str = Depends(admin)) -> dict[str, str]:
        """A new analyst; the key is in this response only (stored as a hash)."""
        key = await call(rt.store.add_analyst, body.name, actor="admin")
        return {"name": body.name, "key": key}

    @app.post("/api/v1/admin/analysts/{name}/rotate")
    async def rotate(name: str, _: str = Depends(admin)) -> dict[str, str]:
        """A new key for the analyst; the old one stops working now."""
        key = await call(rt.store.rotate_key, name, actor="admin")
        rt.forget_keys()
        return {"name": name, "key": key}

    @app.post("/api/v1/admin/analysts/{name}/revoke")
    async def revoke(name: str, _: str = Depends(admin)) -> dict[str, Any]:
        """The analyst's key stops working, for good (their ledger rows stay)."""
        await call(rt.store.revoke, name, actor="admin")
        rt.forget_keys()
        return {"name": name, "active": False}

    @app.post("/api/v1/admin/grants")
    async def grant(body: GrantBody, _: str = Depends(admin)) -> dict[str, Any]:
        """Add to an analyst's budget on a dataset (a budget only grows)."""
        if body.dataset not in rt.sessions:
            raise ApiError(404, "unknown_dataset", "no dataset of that name in this service.")
        total = await call(
            rt.add_grant, body.analyst, body.dataset, body.epsilon, body.delta, actor="admin"
        )
        return {"analyst": body.analyst, "dataset": body.dataset, **_budget(total)}

    @app.get("/api/v1/admin/datasets")
    async def exposure(_: str = Depends(admin)) -> dict[str, Any]:
        """Per dataset, the sum of all grants (analysts who pool answers compose) and its cap."""
        return {"datasets": await call(rt.exposure)}

    @app.get("/api/v1/admin/audit")
    async def audit(
        limit: int = Query(100, ge=1, le=10_000), _: str = Depends(admin)
    ) -> dict[str, Any]:
        """The audit log, newest first."""
        return {"events": await call(rt.store.audit_log, limit)}

    # -- the page ----------------------------------------------------------------------

    # Swagger UI's files first: the /static mount below would take their paths.
    app.mount("/static/swagger", StaticFiles(directory=SWAGGER), name="swagger")
    app.mount("/static", StaticFiles(directory=STATIC, check_dir=False), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/docs", include_in_schema=False)
    def docs() -> FileResponse:
        """The OpenAPI reference: Swagger UI from installed files, under the page's CSP."""
        return FileResponse(STATIC / "docs.html")

    app.add_middleware(_BodyLimit, limit=limits.max_request_bytes)
    return app


class _SecurityHeaders:
    """Headers on every response: no sniffing, no referrer; API answers are never cached;
    the page may load only its own scripts and styles. (Plain ASGI: cheaper than
    Starlette's BaseHTTPMiddleware on every request.)"""

    _COMMON = ((b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"))
    _API = ((b"cache-control", b"no-store"),)
    _PAGE = (
        (
            b"content-security-policy",
            b"default-src 'self'; img-src 'self' data:; style-src 'self'; "
            b"script-src 'self'; frame-ancestors 'none'",
        ),
    )

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        extra: tuple[tuple[bytes, bytes], ...] = self._COMMON
        if path.startswith("/api/"):
            extra += self._API
        else:
            # the analysts' page, /docs and their files: this origin's scripts only
            extra += self._PAGE

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


def _address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _too_many_failures() -> ApiError:
    return ApiError(
        429,
        "rate_limited",
        f"too many requests with invalid keys from this address (limit "
        f"{_FAILED_KEYS_PER_MINUTE} per minute); wait a minute and check your key.",
        {"Retry-After": "60"},
    )


def _budget(b: Any) -> dict[str, float]:
    return {"epsilon": float(b.epsilon), "delta": float(b.delta)}


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )
