"""The API's errors: :class:`ApiError`, the mapping of dpkit's errors to status codes, the
exception handlers, and the audit row every refusal leaves.

Every error body is ``{"error": {"code": ..., "message": ...}}``: a stable code and a
message that says what to fix, never a value from the request or the data.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dpkit.errors import (
    BudgetExceededError,
    DataError,
    InvalidParameterError,
    LedgerError,
    LedgerLockedError,
    ReleaseFailedError,
)
from dpkit.service.limits import FAILED_KEYS_PER_MINUTE, client_address
from dpkit.service.runtime import Busy, NotFound, Pending, Runtime
from dpkit.service.store import ConflictError, key_id
from dpkit.service.synthetic import NoSyntheticTable, NotStoredYet
from dpkit.tables.work import QueryTooLargeError

__all__ = ["ApiError", "call", "error_response", "install_error_handlers", "too_many_failures"]

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_log = logging.getLogger("dpkit.service")


class ApiError(Exception):
    """An error response: status, a stable code, and a message that says what to fix."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The body of every error the API sends."""
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


def too_many_failures() -> ApiError:
    """429 for an address that sent too many invalid keys this minute."""
    return ApiError(
        429,
        "rate_limited",
        f"too many requests with invalid keys from this address (limit "
        f"{FAILED_KEYS_PER_MINUTE} per minute); wait a minute and check your key.",
        {"Retry-After": "60"},
    )


async def call(runtime: Runtime, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a runtime call on the runtime's bounded worker pool, mapping dpkit's errors to
    responses (503 at once when the pool and its waiting line are full)."""
    try:
        return await asyncio.wrap_future(runtime.submit(func, *args, **kwargs))
    except Busy as err:
        raise ApiError(503, "busy", str(err), {"Retry-After": "2"}) from None
    except NotFound as err:
        raise ApiError(404, "unknown_dataset", str(err)) from None
    except BudgetExceededError as err:
        raise ApiError(403, "budget_exceeded", str(err)) from None
    except ConflictError as err:
        raise ApiError(409, "conflict", str(err)) from None
    except (Pending, NotStoredYet) as err:
        raise ApiError(409, "pending", str(err), {"Retry-After": "1"}) from None
    except NoSyntheticTable as err:
        raise ApiError(404, "no_synthetic_table", str(err)) from None
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


async def audit_refusal(request: Request, status: int, code: str) -> None:
    """A refusal or an authentication failure as an audit row: who (the analyst, or
    ``anonymous`` with the public key id tried), from where, which route and what
    code; never a secret, never data. Rows anyone can provoke are rate-limited."""
    state = request.app.state
    actor = getattr(request.state, "actor", None)
    address = client_address(request)
    count = 1
    if actor is None or code in ("unauthorized", "forbidden", "rate_limited"):
        admitted = state.audit_throttle.admit((str(actor), address, code))
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
        await run_in_threadpool(state.store.audit, actor or "anonymous", action, **detail)
    except Exception:  # the refusal stands; a failed log write must not change it
        _log.warning("the audit log could not record a refusal", exc_info=True)


async def _api_error(request: Request, err: ApiError) -> JSONResponse:
    await audit_refusal(request, err.status, err.code)
    return error_response(err.status, err.code, err.message, err.headers)


async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
    own = [e for e in err.errors() if e.get("type") == "public_input"]
    if own:  # our own messages never quote the input
        await audit_refusal(request, 400, "invalid_request")
        return error_response(400, "invalid_request", str(own[0].get("msg", "")))
    await audit_refusal(request, 422, "invalid_request")
    # pydantic's own messages may echo the input: keep only where and what kind.
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {e.get('type', 'invalid')}")
    return error_response(
        422,
        "invalid_request",
        "the request does not have the form this endpoint takes ("
        + "; ".join(parts)
        + "); see /docs.",
    )


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
    return error_response(err.status_code, code, message)


async def _internal(request: Request, err: Exception) -> JSONResponse:
    return error_response(
        500, "internal", "the service failed to handle the request; nothing was released."
    )


def install_error_handlers(app: FastAPI) -> None:
    """The handlers of every error a route can raise, the last resort (500) included."""
    app.exception_handler(ApiError)(_api_error)
    app.exception_handler(RequestValidationError)(_invalid)
    app.exception_handler(StarletteHTTPException)(_http)
    app.exception_handler(Exception)(_internal)
