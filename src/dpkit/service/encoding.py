"""Releases as JSON and back: what travels between the service and its clients.

Everything here is post-processing of a release (no data, no budget). Arrays
become lists, dates are tagged as in :mod:`dpkit.tables.specs`
(``{"$date": "2020-01-31"}``), non-finite floats become ``{"$float": "inf"}``
(JSON has no infinity), tuples become lists. :func:`release_from_json` rebuilds
a :class:`~dpkit.Release` or :class:`~dpkit.tables.GroupedRelease` whose
``value`` and ``ci`` have the types the in-process session returns (a list of
numbers is an ``ndarray`` again); ``details`` keep their JSON types.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from dpkit.accounting import Budget
from dpkit.privacy import PrivacyReport
from dpkit.release import Release
from dpkit.tables.results import GroupedRelease

__all__ = ["budget_json", "jsonable", "release_from_json", "release_json", "unjson"]


def jsonable(value: Any) -> Any:
    """A JSON-ready copy of ``value`` (see the module docstring for the tags)."""
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, tuple | list):
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, _dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, _dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, Budget):
        return budget_json(value)
    if isinstance(value, decimal.Decimal):
        return jsonable(float(value))
    return str(value)


def unjson(value: Any) -> Any:
    """The inverse of :func:`jsonable`'s tags (lists stay lists)."""
    if isinstance(value, list):
        return [unjson(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"$float"}:
            return float(value["$float"])
        if set(value) == {"$date"}:
            return _dt.date.fromisoformat(value["$date"])
        if set(value) == {"$datetime"}:
            return _dt.datetime.fromisoformat(value["$datetime"])
        return {k: unjson(v) for k, v in value.items()}
    return value


def budget_json(budget: Budget) -> dict[str, float]:
    return {"epsilon": float(budget.epsilon), "delta": float(budget.delta)}


def release_json(result: Release | GroupedRelease) -> dict[str, Any]:
    """The release's public fields (everything but ``remaining``, which the response carries).

    ``privacy`` is the release's :class:`dpkit.PrivacyReport` as a dict
    (``remaining`` null: the response's own ``remaining`` is what the grant has
    left); ``epsilon``/``delta`` stay beside it for clients of earlier versions.
    """
    common = {
        "epsilon": float(result.epsilon),
        "delta": float(result.delta),
        "level": float(result.level),
        "mechanism": result.mechanism,
        "details": jsonable(result.details),
        "privacy": replace(result.privacy, remaining=None).to_dict(),
    }
    if isinstance(result, GroupedRelease):
        return {
            "type": "grouped",
            "group_by": list(result.group_by),
            "keys": jsonable(list(result.keys)),
            "value": [jsonable(result.value[k]) for k in result.keys],
            "ci": [jsonable(result.ci.get(k)) for k in result.keys],
            **common,
        }
    return {"type": "release", "value": jsonable(result.value), "ci": jsonable(result.ci), **common}


def release_from_json(data: Mapping[str, Any], remaining: Any = None) -> Release | GroupedRelease:
    """Rebuild the release :func:`release_json` wrote (``remaining`` from the response).

    Its ``privacy`` is the in-process report, with ``remaining`` the service's.
    """
    details = unjson(dict(data.get("details") or {}))
    if isinstance(data.get("privacy"), Mapping):
        report = PrivacyReport.from_dict(data["privacy"]).paid(remaining)
    else:  # an earlier service: only epsilon, delta and the mechanism travel
        report = PrivacyReport(
            epsilon=float(data["epsilon"]),
            delta=float(data["delta"]),
            mechanisms=tuple(m for m in str(data["mechanism"]).split("+") if m),
            remaining=remaining,
        )
    common = {
        "level": float(data["level"]),
        "mechanism": str(data["mechanism"]),
        "details": details,
        "privacy": report,
    }
    if data.get("type") == "grouped":
        keys = tuple(_key(k) for k in unjson(data["keys"]))
        values = [_value(v) for v in unjson(data["value"])]
        cis = [_ci(c) for c in unjson(data["ci"])]
        return GroupedRelease(
            group_by=tuple(data["group_by"]),
            keys=keys,
            value=dict(zip(keys, values, strict=True)),
            ci=dict(zip(keys, cis, strict=True)),
            **common,
        )
    return Release(value=_value(unjson(data["value"])), ci=_ci(unjson(data.get("ci"))), **common)


def _key(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k


def _value(v: Any) -> Any:
    return np.asarray(v) if isinstance(v, list) else v


def _ci(ci: Any) -> tuple[Any, Any] | None:
    if ci is None:
        return None
    lo, hi = ci
    return (_value(lo), _value(hi))
