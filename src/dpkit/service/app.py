"""The HTTP face of the service: FastAPI routes over :class:`~dpkit.service.runtime.Runtime`.

Routes, status codes and bodies are documented in docs/service.md and at
``/docs`` (OpenAPI). This module only translates: it authenticates the key,
applies the per-key rate limit, the body-size limit and the time limit, runs
the runtime's query path in a worker thread, pads the response time of data
endpoints to the configured floor, and maps dpkit's errors to status codes
with bodies that say what to fix. No route returns rows of a real dataset or
an exact value; every data route needs an analyst key, every admin route the
admin key.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
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
from dpkit.service.runtime import NotFound, Pending, Runtime
from dpkit.service.store import Analyst, ConflictError, hash_key

__all__ = ["ApiError", "create_app"]

STATIC = Path(__file__).with_name("static")
_FAILED_KEYS_PER_MINUTE = 30
_IDEMPOTENCY = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class ApiError(Exception):
    """An error response: status, a stable code, and a message that says what to fix."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


class QueryBody(BaseModel):
    """A query spec as ``QuerySpec.to_dict()`` writes it, and whether to ask the synthetic twin."""

    query: dict[str, Any] = Field(description="the query spec, e.g. {'kind': 'mean', ...}")
    twin: bool = Field(False, description="answer from the synthetic twin (free, not real)")


class NewAnalyst(BaseModel):
    name: str


class GrantBody(BaseModel):
    analyst: str
    dataset: str
    epsilon: float = Field(ge=0)
    delta: float = Field(0.0, ge=0, lt=1)


# ------------------------------------------------------------------------------- limits


class _BodyLimit:
    """Refuses request bodies above ``limit`` bytes (413) without reading more than that."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _send_error(send, 413, "too_large", self._message())
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise ApiError(413, "too_large", self._message())
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        return f"the request body is larger than {self.limit} bytes; send a smaller query."


async def _send_error(send: Send, status: int, code: str, message: str) -> None:
    response = JSONResponse({"error": {"code": code, "message": message}}, status_code=status)
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})


class _RateLimit:
    """A token bucket per key: ``per_minute`` requests, bursts up to that many."""

    def __init__(self, per_minute: int) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(per_minute)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def blocked(self, who: str) -> bool:
        """Whether ``who`` has no request left now (without taking one)."""
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(who, (self.capacity, now))
        return min(self.capacity, tokens + (now - last) * self.rate) < 1

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
    # key (a new bucket above) per try.
    failures = _RateLimit(_FAILED_KEYS_PER_MINUTE)
    app = FastAPI(
        title="dpkit query service",
        version=dpkit.__version__,
        description="Differentially private answers over HTTP; see docs/service.md.",
    )
    app.state.runtime = rt

    # -- errors --------------------------------------------------------------------

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, err: ApiError) -> JSONResponse:
        return _error(err.status, err.code, err.message, err.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
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
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code, "http_error")
        message = {
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

    def analyst(request: Request) -> Analyst:
        key = _key(request)
        client = request.client.host if request.client else "unknown"
        if failures.blocked(client):
            raise _too_many_failures()
        who = rt.authenticate(key)
        if who is None:
            failures.take(client)
            raise ApiError(
                401,
                "unauthorized",
                "the key is not valid (unknown, rotated or revoked); ask the data owner for a key.",
                {"WWW-Authenticate": "Bearer"},
            )
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
        client = request.client.host if request.client else "unknown"
        if failures.blocked(client):
            raise _too_many_failures()
        if not hmac.compare_digest(given.encode(), expected.encode()):
            failures.take(client)
            if rt.store.authenticate(key) is not None:
                raise ApiError(403, "forbidden", "this endpoint needs the admin key.")
            raise ApiError(
                401, "unauthorized", "the key is not valid.", {"WWW-Authenticate": "Bearer"}
            )
        _limit("admin")
        return "admin"

    async def call(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a runtime call in a worker thread, mapping dpkit's errors to responses."""
        try:
            return await run_in_threadpool(func, *args, **kwargs)
        except NotFound as err:
            raise ApiError(404, "unknown_dataset", str(err)) from None
        except BudgetExceededError as err:
            raise ApiError(403, "budget_exceeded", str(err)) from None
        except ConflictError as err:
            raise ApiError(409, "conflict", str(err)) from None
        except Pending as err:
            raise ApiError(409, "pending", str(err), {"Retry-After": "1"}) from None
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
        started = time.monotonic()
        try:
            answer = await asyncio.wait_for(
                call(rt.query, who.name, name, body.query, twin=body.twin, request_key=key),
                timeout=limits.query_timeout_seconds,
            )
        except TimeoutError:
            await _pad(started)
            raise ApiError(
                504,
                "timeout",
                f"the query ran longer than {limits.query_timeout_seconds} s. If it was "
                "charged, the charge stands and the query finishes in the background: retry "
                "with the same Idempotency-Key to get its answer.",
            ) from None
        except ApiError as err:
            await _pad(started)
            if err.code == "release_failed" and key is not None:
                await run_in_threadpool(
                    rt.record_failure, who.name, name, body.query, key, "failed"
                )
            raise
        await _pad(started)
        return JSONResponse(answer.body)

    async def _pad(started: float) -> None:
        """Hold the response until the configured floor (a timing side channel defence)."""
        left = limits.min_response_seconds - (time.monotonic() - started)
        if left > 0:
            await asyncio.sleep(left)

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

    app.mount("/static", StaticFiles(directory=STATIC, check_dir=False), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    return _limited(app, limits.max_request_bytes)


def _limited(app: FastAPI, limit: int) -> FastAPI:
    app.add_middleware(_BodyLimit, limit=limit)
    app.add_middleware(_SecurityHeaders)
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
        elif path == "/" or path.startswith("/static/"):
            # the analysts' page; /docs (Swagger UI from its CDN) keeps FastAPI's defaults
            extra += self._PAGE

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)


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
