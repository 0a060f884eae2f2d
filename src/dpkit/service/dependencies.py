"""The routes' FastAPI dependencies: who is asking and what they address.

Every dependency reads the app's state (``app.state``: ``config``, ``runtime``,
``store`` and the limiters ``rate_limit``, ``failed_keys``, ``public_limit``), set
once by :func:`~dpkit.service.app.create_app`; none holds state of its own.

* :func:`analyst` and :func:`admin` authenticate the ``Authorization: Bearer`` key
  (a valid key first, so that it is never held back by others' guesses from its
  address), count invalid keys against the client's address, and apply the per-key
  rate limit once the holder is known.
* :func:`dataset_grant` names the dataset a route addresses with the analyst asking;
  the grant itself is resolved on the worker pool by the runtime call (an analyst
  without a grant and an unknown dataset get the same 404, after the body's checks).
* :func:`public_limit` rate-limits the paths that need no key, per client address.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from dpkit.errors import InvalidParameterError
from dpkit.service.config import ServiceConfig
from dpkit.service.errors import ApiError, too_many_failures
from dpkit.service.limits import RateLimit, client_address
from dpkit.service.runtime import Runtime
from dpkit.service.store import Analyst, hash_key

__all__ = [
    "AnalystKey",
    "ConfigDep",
    "DatasetDep",
    "DatasetGrant",
    "RuntimeDep",
    "admin",
    "analyst",
    "dataset_grant",
    "get_config",
    "get_runtime",
    "public_limit",
]


async def get_runtime(request: Request) -> Runtime:
    """The process's runtime: datasets, store, worker pool."""
    return _runtime(request)


async def get_config(request: Request) -> ServiceConfig:
    """The service's configuration, as checked at start-up."""
    return _config(request)


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _config(request: Request) -> ServiceConfig:
    config: ServiceConfig = request.app.state.config
    return config


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


def _limit(request: Request, who: str) -> None:
    """The per-key rate limit, counted per holder once the key is known to be valid
    (so nobody can use up another analyst's requests by sending their key id)."""
    _take(request, request.app.state.rate_limit, who, "for this key")


def _take(request: Request, limiter: RateLimit, who: str, what: str) -> None:
    wait = limiter.take(who)
    if wait:
        per_minute = _config(request).limits.requests_per_minute
        raise ApiError(
            429,
            "rate_limited",
            f"too many requests {what} (limit {per_minute} per minute); wait and retry.",
            {"Retry-After": str(max(1, round(wait)))},
        )


def _invalid_key(request: Request) -> None:
    """An invalid key: counted against its address, and refused (429 once the address
    has tried too many this minute, else 401). Valid keys never come here."""
    failures: RateLimit = request.app.state.failed_keys
    if failures.take(client_address(request)):
        raise too_many_failures()


def analyst(request: Request) -> Analyst:
    """The analyst holding the request's key (401 without a valid one, 429 over the limit)."""
    key = _key(request)
    who = _runtime(request).authenticate(key)  # first: never held back by the address
    if who is None:
        _invalid_key(request)
        raise ApiError(
            401,
            "unauthorized",
            "the key is not valid (unknown, rotated or revoked); ask the data owner for a key.",
            {"WWW-Authenticate": "Bearer"},
        )
    request.state.actor = who.name
    _limit(request, f"analyst:{who.name}")
    return who


def admin(request: Request) -> str:
    """``"admin"`` when the request holds the admin key (403 for an analyst's key)."""
    key = _key(request)
    expected = _config(request).admin_key_hash
    if expected is None:
        raise ApiError(
            403, "forbidden", "this service has no admin key configured (admin_key_hash)."
        )
    try:
        given = hash_key(key)
    except InvalidParameterError:
        given = ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        holder = _runtime(request).authenticate(key)
        if holder is not None:  # a valid analyst key: not a guess
            request.state.actor = holder.name
            raise ApiError(403, "forbidden", "this endpoint needs the admin key.")
        _invalid_key(request)
        raise ApiError(401, "unauthorized", "the key is not valid.", {"WWW-Authenticate": "Bearer"})
    request.state.actor = "admin"
    _limit(request, "admin")
    return "admin"


#: The analyst holding the request's key (a route parameter of this type authenticates).
AnalystKey = Annotated[Analyst, Depends(analyst)]


@dataclass(frozen=True)
class DatasetGrant:
    """The analyst asking and the dataset (by name) their request addresses."""

    analyst: str
    dataset: str


async def dataset_grant(name: str, who: AnalystKey) -> DatasetGrant:
    """The ``{name}`` of the path with the authenticated analyst."""
    return DatasetGrant(who.name, name)


async def public_limit(request: Request) -> None:
    """The rate limit of a path that needs no key: per client address."""
    _take(request, request.app.state.public_limit, client_address(request), "from this address")


#: The runtime, the configuration and the addressed dataset as route parameters.
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
ConfigDep = Annotated[ServiceConfig, Depends(get_config)]
DatasetDep = Annotated[DatasetGrant, Depends(dataset_grant)]
