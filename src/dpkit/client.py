"""``dpkit.client.Client``: query a dpkit service as if it were a local Session.

::

    from dpkit.client import Client

    client = Client("http://127.0.0.1:8000", key="dpk_...")
    patients = client.dataset("patients")
    r = patients.mean("age", bounds=(0, 120), epsilon=0.1)   # a dpkit.Release, as in-process
    print(r.value, r.ci, r.remaining)
    patients.twin.mean("age", bounds=(0, 120), epsilon=0.1)   # the synthetic twin: free, not real

The dataset handle has the query methods of :class:`dpkit.Session` with the
same parameters; each builds a :class:`~dpkit.tables.QuerySpec`, sends it as
JSON and rebuilds the :class:`~dpkit.Release` (or
:class:`~dpkit.tables.GroupedRelease`) the service returns, its ``remaining``
the budget left on the server. Errors come back as dpkit's own exception
types (:class:`~dpkit.errors.BudgetExceededError`,
:class:`~dpkit.errors.InvalidParameterError`, ...) or :class:`ServiceError`.

Every query carries a fresh ``Idempotency-Key``; when the connection drops or
the service answers 503 or "pending", the client retries with the *same* key,
so a retry never pays twice: the server returns the stored answer once it
exists, and never computes a second answer for one charge.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import httpx

from dpkit.accounting import Budget
from dpkit.errors import (
    BudgetExceededError,
    DPKitError,
    InvalidParameterError,
    ReleaseFailedError,
)
from dpkit.release import Release
from dpkit.service.encoding import release_from_json
from dpkit.tables.query_methods import QueryMethods
from dpkit.tables.results import GroupedRelease
from dpkit.tables.specs import QuerySpec

__all__ = ["AdminClient", "Client", "RemoteDataset", "ServiceError"]

Result = Release | GroupedRelease
_RETRIES = 3


class ServiceError(DPKitError):
    """The service refused a request; ``status`` and ``code`` say why (see docs/service.md)."""

    def __init__(self, message: str, *, status: int, code: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


class _Http:
    def __init__(self, url: str, key: str, timeout: float, http: httpx.Client | None) -> None:
        if not isinstance(key, str) or not key:
            raise InvalidParameterError("the key is the text the data owner gave you (dpk_...).")
        self.http = http or httpx.Client(base_url=url.rstrip("/"), timeout=timeout)
        self.headers = {"Authorization": f"Bearer {key}"}

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Any = None,
        retry_key: str | None = None,
    ) -> Any:
        headers = dict(self.headers)
        if retry_key is not None:
            headers["Idempotency-Key"] = retry_key
        for attempt in range(_RETRIES + 1):
            try:
                response = self.http.request(
                    method, path, json=json, params=params, headers=headers
                )
            except httpx.TransportError:
                if retry_key is None or attempt == _RETRIES:
                    raise ServiceError(
                        "cannot reach the service; check the URL and that it is running.",
                        status=0,
                        code="unreachable",
                    ) from None
                time.sleep(0.2 * 2**attempt)
                continue
            retry = response.status_code in (503, 429) or (
                response.status_code == 409 and _code(response) == "pending"
            )
            if retry and retry_key is not None and attempt < _RETRIES:
                time.sleep(float(response.headers.get("retry-after", 0.2 * 2**attempt)))
                continue
            return _decode(response)
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self.http.close()


def _code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


def _decode(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.is_success:
        return body
    error = (body or {}).get("error", {}) if isinstance(body, dict) else {}
    code = str(error.get("code", "http_error"))
    message = str(error.get("message", f"the service answered HTTP {response.status_code}."))
    if code == "budget_exceeded":
        raise BudgetExceededError(message)
    if code in ("invalid_query", "unknown_dataset"):
        raise InvalidParameterError(message)
    if code == "release_failed":
        raise ReleaseFailedError(message)
    raise ServiceError(message, status=response.status_code, code=code)


class Client:
    """An analyst's connection to a dpkit service: ``Client(url, key)``.

    ``http`` takes an existing :class:`httpx.Client` (e.g. FastAPI's
    ``TestClient`` in tests) instead of opening one for ``url``.
    """

    def __init__(
        self, url: str, key: str, *, timeout: float = 120.0, http: httpx.Client | None = None
    ) -> None:
        self._http = _Http(url, key, timeout, http)

    def datasets(self) -> list[str]:
        """The datasets this key holds a grant on."""
        return [d["name"] for d in self._http.request("GET", "/api/v1/datasets")["datasets"]]

    def dataset(self, name: str) -> RemoteDataset:
        """A handle whose query methods mirror :class:`dpkit.Session`'s."""
        return RemoteDataset(self._http, name, twin=False)

    def budget(self) -> dict[str, Budget]:
        """What is left of each grant, by dataset."""
        grants = self._http.request("GET", "/api/v1/budget")["grants"]
        return {g["dataset"]: _budget(g["remaining"]) for g in grants}

    def history(self, dataset: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """This key's own queries, newest first (as the service stores them)."""
        params: dict[str, Any] = {"limit": limit}
        if dataset is not None:
            params["dataset"] = dataset
        return list(self._http.request("GET", "/api/v1/history", params=params)["queries"])

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteDataset(QueryMethods):
    """One dataset of the service, queried like a :class:`dpkit.Session`.

    The query methods (``count`` ... ``histogram2d``) come from the registry of
    kinds (:class:`~dpkit.tables.query_methods.QueryMethods`), with the Session's
    parameters; the arguments given are sent as they are (the service fills the
    defaults and checks them).
    """

    _strict_arguments = False

    def __init__(self, http: _Http, name: str, *, twin: bool) -> None:
        self._http, self.name, self._twin = http, name, twin

    @property
    def twin(self) -> RemoteDataset:
        """The same dataset's synthetic twin: free answers from made-up rows, to try queries."""
        return RemoteDataset(self._http, self.name, twin=True)

    def info(self) -> dict[str, Any]:
        """The public schema and this key's budget on the dataset."""
        return dict(self._http.request("GET", f"/api/v1/datasets/{self.name}"))

    @property
    def remaining(self) -> Budget:
        return _budget(self.info()["budget"]["remaining"])

    def rows(self, n: int = 100) -> list[dict[str, Any]]:
        """Rows of the synthetic twin (the real rows never leave the service)."""
        body = self._http.request("GET", f"/api/v1/datasets/{self.name}/twin", params={"rows": n})
        return list(body["rows"])

    def synthetic(self) -> Any:
        """The dataset's published DP synthetic table as a pandas DataFrame (free).

        Its ``attrs`` hold the ``guarantee`` (method, ε, δ, ρ) and ``report``
        (marginals measured, noise, error estimates) the service states with it.
        """
        import pandas as pd

        path = f"/api/v1/datasets/{self.name}/synthetic"
        body = self._http.request("GET", path, params={"offset": 0, "limit": _PAGE})
        rows = list(body["rows"])
        while len(rows) < body["total_rows"]:
            page = self._http.request("GET", path, params={"offset": len(rows), "limit": _PAGE})
            if not page["rows"]:
                break
            rows.extend(page["rows"])
        frame = pd.DataFrame.from_records(rows, columns=body["columns"])
        frame.attrs.update(name=body["name"], guarantee=body["guarantee"], report=body["report"])
        return frame

    def cost(self, spec: QuerySpec) -> dict[str, Any]:
        """A dry run: the query's cost and whether the budget can pay it (nothing charged)."""
        return dict(
            self._http.request(
                "POST", f"/api/v1/datasets/{self.name}/dry-run", json={"query": spec.to_dict()}
            )
        )

    def answer(self, spec: QuerySpec) -> Result:
        """Send one query spec; the release the service returns."""
        body = self._http.request(
            "POST",
            f"/api/v1/datasets/{self.name}/query",
            json={"query": spec.to_dict(), "twin": self._twin},
            retry_key=uuid.uuid4().hex,
        )
        return release_from_json(body["release"], remaining=_budget(body["remaining"]))


class AdminClient:
    """The data owner's connection: analysts, keys, grants and the audit log."""

    def __init__(
        self, url: str, key: str, *, timeout: float = 60.0, http: httpx.Client | None = None
    ) -> None:
        self._http = _Http(url, key, timeout, http)

    def analysts(self) -> list[dict[str, Any]]:
        return list(self._http.request("GET", "/api/v1/admin/analysts")["analysts"])

    def add_analyst(self, name: str) -> str:
        """A new analyst; returns the key (shown this once)."""
        return str(self._http.request("POST", "/api/v1/admin/analysts", json={"name": name})["key"])

    def rotate(self, name: str) -> str:
        return str(self._http.request("POST", f"/api/v1/admin/analysts/{name}/rotate")["key"])

    def revoke(self, name: str) -> None:
        self._http.request("POST", f"/api/v1/admin/analysts/{name}/revoke")

    def grant(
        self,
        analyst: str,
        dataset: str,
        epsilon: float,
        delta: float = 0.0,
        *,
        accountant: str | None = None,
        noise: str | None = None,
    ) -> Budget:
        """Add (ε, δ) to a grant; ``accountant`` (basic, zcdp, rdp) is fixed when it is
        created, ``noise`` (laplace, gaussian, auto) sets its queries' noise."""
        request: dict[str, Any] = {
            "analyst": analyst,
            "dataset": dataset,
            "epsilon": epsilon,
            "delta": delta,
        }
        if accountant is not None:
            request["accountant"] = accountant
        if noise is not None:
            request["noise"] = noise
        body = self._http.request("POST", "/api/v1/admin/grants", json=request)
        return _budget(body)

    def audit(self, limit: int = 100) -> list[dict[str, Any]]:
        return list(
            self._http.request("GET", "/api/v1/admin/audit", params={"limit": limit})["events"]
        )

    def close(self) -> None:
        self._http.close()


#: Rows per request when reading a synthetic table (the service's most).
_PAGE = 10_000


def _budget(data: Mapping[str, Any]) -> Budget:
    return Budget(float(data["epsilon"]), float(data["delta"]))
