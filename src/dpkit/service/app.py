"""The HTTP face of the service: :func:`create_app` assembles the FastAPI application.

Routes, status codes and bodies are documented in docs/service.md and at
``/docs`` (OpenAPI, served from this package and fastapi-offline's Swagger UI
files: nothing is fetched from another origin). The parts, each in its own module:

* :mod:`~dpkit.service.routers` — the routes per audience: ``analyst`` (datasets,
  query, dry-run, twin, budget, history; health and query kinds without a key),
  ``admin`` (analysts, keys, grants, exposure, audit) and ``page`` (/, /docs, files);
* :mod:`~dpkit.service.dependencies` — who is asking (analyst or admin key, invalid
  keys limited per address, per-key rate limits) and the dataset a route addresses;
* :mod:`~dpkit.service.models` — request bodies, checked as public input dpkit can
  hold (valid Unicode, finite numbers within 64 bits) before any route sees them;
* :mod:`~dpkit.service.errors` — dpkit's errors as status codes with bodies that
  say what to fix, and the audit row of every refusal (rate-limited per address);
* :mod:`~dpkit.service.middleware` — the ASGI layers: security headers, the
  response-time floor (:class:`~dpkit.service.middleware.Padded`, outside
  everything, so every API response, errors included, waits for it) and the
  request-body limit.

State lives on ``app.state`` (``config``, ``runtime``, ``store`` and the limiters),
read by the dependencies; routes run the runtime's work on its bounded worker pool.
No route returns rows of a real dataset or an exact value; every data route needs an
analyst key, every admin route the admin key.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp

import dpkit
from dpkit.service.config import ServiceConfig
from dpkit.service.errors import ApiError, install_error_handlers
from dpkit.service.limits import FAILED_KEYS_PER_MINUTE, AuditThrottle, RateLimit
from dpkit.service.middleware import BodyLimit, Padded, SecurityHeaders
from dpkit.service.models import json_problem
from dpkit.service.routers import admin, analyst, page
from dpkit.service.runtime import Runtime

__all__ = ["KEEP_ALIVE_SECONDS", "ApiError", "create_app", "json_problem"]

#: How long the server keeps an idle connection open. Longer than clients keep theirs
#: (httpx, and so :class:`dpkit.client.Client`, drop an idle connection after 5 s):
#: a server that closes first races a client reusing the connection at that moment,
#: and the client sees "Server disconnected without sending a response".
KEEP_ALIVE_SECONDS = 30


class _Service(FastAPI):
    """FastAPI with the service's outermost layers around everything, the error handler
    of last resort included (so that even a 500 is padded and carries the headers)."""

    def build_middleware_stack(self) -> ASGIApp:
        floor = self.state.config.limits.min_response_seconds
        return SecurityHeaders(Padded(super().build_middleware_stack(), floor))


def create_app(config: ServiceConfig, *, runtime: Runtime | None = None) -> FastAPI:
    """The service as an ASGI application (``uvicorn.run(create_app(config))``)."""
    app = _Service(
        title="dpkit query service",
        version=dpkit.__version__,
        description="Differentially private answers over HTTP; see docs/service.md.",
        docs_url=None,  # served by the page router from installed files, under the page's CSP
        redoc_url=None,
    )
    rt = runtime or Runtime(config)
    app.state.config = config
    app.state.runtime = rt
    app.state.store = rt.store
    app.state.rate_limit = RateLimit(config.limits.requests_per_minute)
    # Failed key checks are also limited per client address: guessing keys means a new
    # key (a new bucket above) per try. Only invalid keys are held back: a valid key is
    # checked first and never refused because of others' attempts from its address.
    app.state.failed_keys = RateLimit(FAILED_KEYS_PER_MINUTE)
    app.state.public_limit = RateLimit(config.limits.requests_per_minute)
    app.state.audit_throttle = AuditThrottle()

    install_error_handlers(app)
    app.include_router(analyst.router)
    app.include_router(admin.router)
    page.mount_static(app)
    app.include_router(page.router)
    app.add_middleware(BodyLimit, limit=config.limits.max_request_bytes)
    return app
