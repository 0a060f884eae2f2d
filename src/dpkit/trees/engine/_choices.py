"""Choices by name of the tree estimators: one registry per choice (name -> implementation).

A parameter that picks one of several named implementations (``criterion``,
``selector``, ``algorithm``, ``partition``, ``missing``, ``leaf``, ``loss``) is
one :class:`Choices`: the names in one spelling, the implementation behind each,
one lookup whose error lists the names, and scikit-learn's ``StrOptions``
constraint built from the same names (``_parameter_constraints``). A new
choice is one ``register`` call; the check, the error and the constraint
follow. Names are public parameters: checking them never looks at data.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from typing import Any, Generic, TypeVar

from sklearn.utils._param_validation import StrOptions

from dpkit.errors import InvalidParameterError

T = TypeVar("T")


class Choices(Mapping[str, T], Generic[T]):
    """The registry of one named choice: ``name -> implementation``, in registration order.

    ``parameter`` is the estimator parameter's name (it starts the error
    message); ``extra`` names are accepted by :meth:`check` but resolved by the
    estimator itself (``"auto"``, chosen by a public rule); ``why`` ends the
    error message with what the names mean.
    """

    def __init__(
        self,
        parameter: str,
        entries: Mapping[str, T] | None = None,
        *,
        extra: tuple[str, ...] = (),
        why: str = "",
    ) -> None:
        self.parameter = parameter
        self.extra = extra
        self.why = why
        self._entries: dict[str, T] = dict(entries or {})

    def register(self, name: str, implementation: T) -> T:
        """Add ``name`` (one spelling: no alias of an existing name); returns the implementation."""
        if name in self._entries or name in self.extra:
            raise ValueError(f"{self.parameter}={name!r} is already registered.")
        self._entries[name] = implementation
        return implementation

    def unregister(self, name: str) -> None:
        """Remove a name added by :meth:`register` (an experiment or a test that cleans up)."""
        del self._entries[name]

    @property
    def accepted(self) -> tuple[str, ...]:
        """Every name the parameter accepts, ``extra`` ones first."""
        return (*self.extra, *self._entries)

    def check(self, name: object) -> str:
        """``name`` if the parameter accepts it, else InvalidParameterError listing the names."""
        if not isinstance(name, str) or name not in self.accepted:
            why = f": {self.why}" if self.why else ""
            raise InvalidParameterError(
                f"{self.parameter} must be one of {list(self.accepted)}, got {name!r}{why}."
            )
        return name

    def lookup(self, name: object) -> T:
        """The implementation registered as ``name`` (checked: the error lists the names)."""
        checked = self.check(name)
        if checked not in self._entries:  # an ``extra`` name the estimator should have resolved
            raise InvalidParameterError(
                f"{self.parameter}={checked!r} must be resolved before it is looked up; "
                f"the implementations are {list(self._entries)}."
            )
        return self._entries[checked]

    def constraint(self) -> StrOptions:
        """scikit-learn's constraint for ``_parameter_constraints``: exactly the accepted names.

        Its options are a live view of the registry, so a name registered later is
        accepted by the constraint too.
        """
        return StrOptions(_Names(self))

    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Choices({self.parameter!r}, {list(self.accepted)})"


class _Names(Set[str]):
    """The names a :class:`Choices` accepts, as a set that follows the registry."""

    def __init__(self, choices: Choices[Any]) -> None:
        self._choices = choices

    @classmethod
    def _from_iterable(cls, names: Any) -> Any:  # set operations give plain sets
        return set(names)

    def __contains__(self, name: object) -> bool:
        return name in self._choices.accepted

    def __iter__(self) -> Iterator[str]:
        return iter(self._choices.accepted)

    def __len__(self) -> int:
        return len(self._choices.accepted)
