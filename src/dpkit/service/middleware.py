"""The service's ASGI layers, outermost first: security headers on every response, the
response-time floor (:class:`Padded`, which also dates each request), and the
request-body limit (:class:`BodyLimit`, inside FastAPI's own middleware). Plain ASGI
classes: cheaper than Starlette's ``BaseHTTPMiddleware`` on every request, and they
see every response, the error handler of last resort's included.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dpkit.service.errors import error_response
from dpkit.service.store import REQUEST_TIME, RequestTime

__all__ = ["BodyLimit", "Padded", "SecurityHeaders"]


class BodyLimit:
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
    response = error_response(status, code, message)
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})


class Padded:
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


class SecurityHeaders:
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
