"""The dpkit query service: analysts query over HTTP, never see rows, and spend a budget that ends.

``dpkit serve --config service.toml`` runs :func:`~dpkit.service.app.create_app`
under Uvicorn. The parts, each in its own module:

* :mod:`~dpkit.service.config` — the configuration file (datasets with their
  public schema, analysts, grants, limits), checked at start-up;
* :mod:`~dpkit.service.store` — analysts and hashed keys, grants, the
  per-grant privacy ledger, stored answers and the audit log (a module each),
  in SQLite or PostgreSQL (SQLAlchemy);
* :mod:`~dpkit.service.twin` — the synthetic twin of a dataset, made from its
  public schema only;
* :mod:`~dpkit.service.runtime` — the query path: validate, cost, charge
  (committed), execute, store, answer;
* :mod:`~dpkit.service.app` — assembles the FastAPI app from
  :mod:`~dpkit.service.routers` (analyst, admin, page), the dependencies
  (keys, rate limits), the ASGI layers and the error mapping;
  :mod:`~dpkit.service.encoding` — releases as JSON.

The analysts' side is :class:`dpkit.client.Client`. See docs/service.md and
docs/service-attack-model.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpkit._lazy import lazy_exports

if TYPE_CHECKING:
    from dpkit.service.config import ConfigError, ServiceConfig, load_config

__all__ = [
    "ConfigError",
    "ServiceConfig",
    "load_config",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ConfigError": "dpkit.service.config",
        "ServiceConfig": "dpkit.service.config",
        "load_config": "dpkit.service.config",
    },
)
