"""The synthetic-data methods a :class:`~dpkit.tables.Session` can run, by name.

``Session.synthesize(method=...)`` looks the method up here. Each entry names
the module and function that run it (validate public input, cost, charge
through the session's accountant, read through the engine, release); the
module is imported on first use, as :mod:`dpkit.histograms.methods` loads its
publishers: the methods live in :mod:`dpkit.synth` (a layer above the
tables, which the tables' own code never imports), and they load JAX and
``mbi`` only when a synthetic table is made.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dpkit.errors import InvalidParameterError
from dpkit.tables.schema import Schema

__all__ = ["SYNTHESIZERS", "SynthesisInputs", "synthesizer"]

#: method name -> (module, function); the function takes a :class:`SynthesisInputs` and keywords.
SYNTHESIZERS: dict[str, tuple[str, str]] = {
    "mst": ("dpkit.synth.session", "synthesize_mst"),
    "aim": ("dpkit.synth.session", "synthesize_aim"),
}


@dataclass(frozen=True)
class SynthesisInputs:
    """What a synthesizer may use of a session: its engine (guarded), public metadata and payer.

    ``kinds`` and ``types``: each column's kind and declared type (public).

    ``rng``: the source of the call (``None``: the secure default).
    """

    engine: Any
    schema: Schema
    kinds: Mapping[str, str]
    types: Mapping[str, str]
    accountant: Any
    privacy_unit: str | None
    max_contributions: int
    rng: object


def synthesizer(method: object) -> Callable[..., Any]:
    """The function that runs ``method`` (a clear error for an unknown name)."""
    if not isinstance(method, str) or method not in SYNTHESIZERS:
        raise InvalidParameterError(
            f"method must be one of {', '.join(map(repr, sorted(SYNTHESIZERS)))}, got "
            + (repr(method) if isinstance(method, str) else f"a {type(method).__name__}")
            + "."
        )
    module, name = SYNTHESIZERS[method]
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function
