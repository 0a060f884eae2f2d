"""Public metadata about a table's columns: bounds, domains, null policies.

A schema states what the data owner is willing to make public *before* any
query: numeric bounds (used to clip values, which fixes every sensitivity),
categorical domains (the candidate set of a mode, the bins of value counts,
the public keys of a group-by), and what to do with missing values. None of it
may be read off the data: bounds or domains computed from the table would
leak it. A schema can be written in Python or loaded from a JSON, TOML or YAML
file (for the command line)::

    # schema.toml
    [columns.age]
    bounds = [0, 120]
    nulls = "replace"
    replacement = 40

    [columns.district]
    domain = ["A", "B", "C"]

Missing values (SQL NULL, and NaN or ±inf in numeric columns) are handled by
the column's null policy: ``"drop"`` (the default: the row is left out of
queries on that column) or ``"replace"`` (by the public ``replacement``). Both
are per-row transformations, so they never increase a query's sensitivity
(see ``docs/queries.md``, "Missing and non-finite values": the one rule for
NaN, None and ±inf across dpkit, tree estimators included).
"""

from __future__ import annotations

import itertools
import json
import math
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import Any, Literal

from dpkit._checks import check_bounds
from dpkit.errors import InvalidParameterError

__all__ = ["Column", "NullPolicy", "Schema"]

NullPolicy = Literal["drop", "replace"]

_COLUMN_KEYS = {"bounds", "domain", "nulls", "replacement", "coerce", "coarse_range", "edges"}


def _check_domain(domain: object, name: str) -> tuple[Any, ...]:
    if isinstance(domain, str | bytes) or not isinstance(domain, Iterable):
        raise InvalidParameterError(
            f"the domain of column {name!r} must be a list of values, e.g. domain=['A', 'B']."
        )
    values = tuple(domain)
    if not values:
        raise InvalidParameterError(
            f"the domain of column {name!r} is empty; list its possible values."
        )
    for v in values:
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            raise InvalidParameterError(
                f"the domain of column {name!r} contains a missing or non-finite value; "
                "missing values are handled by the null policy, not the domain."
            )
        if not isinstance(v, str | int | float | bool):
            raise InvalidParameterError(
                f"the domain of column {name!r} may hold only strings, numbers or booleans."
            )
    if len(set(values)) != len(values):
        raise InvalidParameterError(f"the domain of column {name!r} lists a value twice.")
    return values


def _check_edges(edges: object, name: str) -> tuple[float, ...]:
    try:
        values = tuple(float(e) for e in edges)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"the bin edges of column {name!r} must be a list of numbers, e.g. edges=[0, 18, 65, 120]."
        ) from None
    if len(values) < 2:
        raise InvalidParameterError(f"column {name!r} needs at least two bin edges.")
    if not all(math.isfinite(v) for v in values):
        raise InvalidParameterError(f"the bin edges of column {name!r} must be finite.")
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise InvalidParameterError(
            f"the bin edges of column {name!r} must be strictly increasing."
        )
    return values


@dataclass(frozen=True)
class Column:
    """Public facts about one column.

    Attributes:
        name: the column's name in the table.
        bounds: ``(lo, hi)`` for numeric columns: values are clipped to it.
        domain: the possible values of a categorical column (public).
        nulls: ``"drop"`` or ``"replace"`` (missing, NaN and ±inf alike).
        replacement: the public value used when ``nulls == "replace"``.
        coerce: read a text column as numbers, treating unparsable entries as
            missing (then the null policy applies). Off by default, so a
            numeric query on a text column is an error rather than a guess.
        coarse_range: a wide public range for ``bounds="private"`` searches.
        edges: public histogram bin edges.
    """

    name: str
    bounds: tuple[float, float] | None = None
    domain: tuple[Any, ...] | None = None
    nulls: NullPolicy = "drop"
    replacement: Any = None
    coerce: bool = False
    coarse_range: tuple[float, float] | None = None
    edges: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidParameterError("a column name must be a non-empty string.")
        if self.bounds is not None:
            object.__setattr__(
                self, "bounds", check_bounds(self.bounds, f"bounds of {self.name!r}")
            )
        if self.coarse_range is not None:
            object.__setattr__(
                self,
                "coarse_range",
                check_bounds(self.coarse_range, f"coarse_range of {self.name!r}"),
            )
        if self.domain is not None:
            object.__setattr__(self, "domain", _check_domain(self.domain, self.name))
        if self.edges is not None:
            object.__setattr__(self, "edges", _check_edges(self.edges, self.name))
        if self.nulls not in ("drop", "replace"):
            raise InvalidParameterError(
                f"the null policy of column {self.name!r} must be 'drop' or 'replace', got {self.nulls!r}."
            )
        if self.nulls == "replace":
            r = self.replacement
            if r is None or (isinstance(r, float) and not math.isfinite(r)):
                raise InvalidParameterError(
                    f"column {self.name!r} replaces missing values but has no replacement; "
                    "give a public value, e.g. replacement=0."
                )
            if not isinstance(r, str | int | float | bool):
                raise InvalidParameterError(
                    f"the replacement of column {self.name!r} must be a string, number or boolean."
                )
        elif self.replacement is not None:
            raise InvalidParameterError(
                f"column {self.name!r} has a replacement but its null policy is 'drop'; "
                "set nulls='replace' to use it."
            )
        if not isinstance(self.coerce, bool):
            raise InvalidParameterError(f"coerce of column {self.name!r} must be true or false.")

    @classmethod
    def from_mapping(cls, name: str, spec: Mapping[str, Any]) -> Column:
        """Build from a mapping such as a parsed JSON/TOML/YAML section."""
        if not isinstance(spec, Mapping):
            raise InvalidParameterError(
                f"the schema entry of column {name!r} must be a table/mapping."
            )
        unknown = set(spec) - _COLUMN_KEYS
        if unknown:
            raise InvalidParameterError(
                f"unknown key(s) {sorted(unknown)} for column {name!r}; allowed: {sorted(_COLUMN_KEYS)}."
            )
        kwargs = dict(spec)
        for key in ("bounds", "coarse_range"):
            if kwargs.get(key) is not None:
                kwargs[key] = tuple(kwargs[key])
        return cls(name=name, **kwargs)


@dataclass(frozen=True)
class Schema:
    """Public metadata for the columns of one table (all optional)."""

    columns: Mapping[str, Column] = field(default_factory=dict)

    def __post_init__(self) -> None:
        cols = dict(self.columns)
        for key, col in cols.items():
            if not isinstance(col, Column) or col.name != key:
                raise InvalidParameterError(
                    "Schema.columns must map each name to a Column of that name."
                )
        object.__setattr__(self, "columns", cols)

    @classmethod
    def of(cls, columns: Iterable[Column]) -> Schema:
        """A schema from a list of :class:`Column`."""
        cols = list(columns)
        names = [c.name for c in cols]
        if len(set(names)) != len(names):
            raise InvalidParameterError("the schema lists a column twice.")
        return cls({c.name: c for c in cols})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schema:
        """``{"columns": {name: {bounds: ..., domain: ..., ...}}}`` (the file format)."""
        if not isinstance(data, Mapping):
            raise InvalidParameterError("a schema must be a mapping with a 'columns' section.")
        unknown = set(data) - {"columns"}
        if unknown:
            raise InvalidParameterError(
                f"unknown schema section(s) {sorted(unknown)}; expected 'columns'."
            )
        section = data.get("columns", {})
        if not isinstance(section, Mapping):
            raise InvalidParameterError("the 'columns' section must map column names to settings.")
        return cls.of(Column.from_mapping(str(name), spec) for name, spec in section.items())

    @classmethod
    def load(cls, path: str | PathLike[str]) -> Schema:
        """Load a schema from a ``.json``, ``.toml`` or ``.yaml``/``.yml`` file.

        YAML needs PyYAML installed; JSON and TOML use the standard library.
        """
        p = Path(path)
        if not p.is_file():
            raise InvalidParameterError(f"schema file {str(p)!r} does not exist.")
        suffix = p.suffix.lower()
        text = p.read_text(encoding="utf-8")
        try:
            if suffix == ".json":
                data = json.loads(text)
            elif suffix == ".toml":
                data = tomllib.loads(text)
            elif suffix in (".yaml", ".yml"):
                try:
                    import yaml
                except ImportError:
                    raise InvalidParameterError(
                        "reading a YAML schema needs PyYAML (pip install pyyaml); "
                        "or write the schema as .json or .toml."
                    ) from None
                data = yaml.safe_load(text)
            else:
                raise InvalidParameterError(
                    f"unknown schema file type {suffix!r}; use .json, .toml or .yaml."
                )
        except (json.JSONDecodeError, tomllib.TOMLDecodeError) as err:
            raise InvalidParameterError(
                f"schema file {str(p)!r} is not valid {suffix[1:]}: {err}"
            ) from None
        return cls.from_dict(data if data is not None else {})

    def get(self, name: str) -> Column:
        """The column's metadata (an all-defaults :class:`Column` if undeclared)."""
        return self.columns.get(name) or Column(name)

    def with_column(self, column: Column) -> Schema:
        """A copy with ``column`` added or replaced."""
        cols = dict(self.columns)
        cols[column.name] = column
        return Schema(cols)

    def updated(self, name: str, **changes: Any) -> Schema:
        """A copy with some settings of one column changed."""
        return self.with_column(replace(self.get(name), **changes))

    def names(self) -> Sequence[str]:
        return list(self.columns)
