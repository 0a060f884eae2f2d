"""The one list of local-DP mechanisms by name: frequency oracles and mean mechanisms.

A name is the class's own ``name`` (``GeneralizedRandomizedResponse.name ==
"grr"``), the one written in every release (``FrequencyEstimate.oracle``,
``MeanEstimate.mechanism``) and returned by the public choice rules
(:func:`dpkit.local.best_oracle`, :func:`dpkit.local.best_mean_mechanism`);
:func:`oracle` and :func:`mean_mechanism` turn a name back into its class, or
refuse it with the list of names. Every mechanism's docstring states its ε-LDP
argument (neighbouring relation: one respondent's value changed).

How to add an oracle: subclass :class:`dpkit.local.FrequencyOracle` with a
``name`` and add the class to the tuple below (``tests/local/test_methods.py``
checks its contract).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

from dpkit.errors import InvalidParameterError
from dpkit.local.frequency_oracles import (
    FrequencyOracle,
    GeneralizedRandomizedResponse,
    HadamardResponse,
    OptimizedLocalHashing,
    OptimizedUnaryEncoding,
    SymmetricUnaryEncoding,
)
from dpkit.local.mean import DuchiMean, PiecewiseMean

__all__ = ["MEAN_MECHANISMS", "ORACLES", "mean_mechanism", "oracle"]

MeanMechanism = type[DuchiMean] | type[PiecewiseMean]
_T = TypeVar("_T")

#: Frequency oracles by name, in display order.
ORACLES: Mapping[str, type[FrequencyOracle]] = MappingProxyType(
    {
        cls.name: cls
        for cls in (
            GeneralizedRandomizedResponse,
            OptimizedLocalHashing,
            OptimizedUnaryEncoding,
            SymmetricUnaryEncoding,
            HadamardResponse,
        )
    }
)
#: Mechanisms for the mean of a bounded number, by name.
MEAN_MECHANISMS: Mapping[str, MeanMechanism] = MappingProxyType(
    {cls.name: cls for cls in (DuchiMean, PiecewiseMean)}
)


def oracle(name: str) -> type[FrequencyOracle]:
    """The frequency oracle called ``name`` (one of :data:`ORACLES`)."""
    return _lookup(ORACLES, name, "frequency oracle")


def mean_mechanism(name: str) -> MeanMechanism:
    """The mean mechanism called ``name`` (one of :data:`MEAN_MECHANISMS`)."""
    return _lookup(MEAN_MECHANISMS, name, "mean mechanism")


def _lookup(table: Mapping[str, _T], name: object, what: str) -> _T:
    if isinstance(name, str) and name in table:
        return table[name]
    hint = ""
    if isinstance(name, str) and name.strip().lower() in table:
        hint = f" (write {name.strip().lower()!r})"
    names = ", ".join(repr(n) for n in table)
    raise InvalidParameterError(f"unknown {what}{hint}; choose one of {names}.")
