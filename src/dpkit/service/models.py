"""The request bodies the API takes, each checked as public input before its fields."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field, model_validator
from pydantic_core import PydanticCustomError

__all__ = ["GrantBody", "NewAnalyst", "QueryBody", "json_problem"]

#: Public input: JSON nested at most this deep, integers within 64 bits (no declared type
#: holds more; a float cannot hold 400 digits), floats finite, text valid Unicode.
_JSON_DEPTH = 32
_INT_RANGE = (-(2**64), 2**64)


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
    #: the grant's composition rule, fixed when it is created: basic (default), zcdp or rdp
    accountant: str | None = None
    #: the noise of the grant's queries: laplace (default), gaussian (zcdp/rdp) or auto;
    #: naming it for an existing grant sets it
    noise: str | None = None
