"""The query options of ``dpkit query`` (local) and ``dpkit remote query``: one definition.

Both verbs take ``KIND [COLUMN]`` and the same options, built from the
query-kind registry (:data:`dpkit.tables.specs.QUERY_KINDS` and
:data:`~dpkit.tables.specs.PARAMETERS`): every parameter a kind takes has
one command-line option in :data:`SPEC_OPTIONS` (a test checks that none is
missing), an option a kind does not take is refused with the kinds that take
it, and the verb receives a :class:`QueryOptions` that turns into a
:class:`~dpkit.tables.QuerySpec` — the local verb gives it to
``Session.answer``, the remote one to ``Client.dataset(...).answer``.

One syntax on both sides: ``--bounds LO HI``, ``--where 'COLUMN==VALUE'``
(repeatable; ``!=``, ``<``, ``<=``, ``>``, ``>=``; ``COLUMN==A,B`` for
membership; values read by the column's declared kind), ``--keys K``
(repeatable; ``A|x`` for two group-by columns) or ``--private-keys``.
Deprecated for one release, with a note on stderr: ``--bounds LO,HI``,
``--where COLUMN=VALUE`` and ``--keys private``.

Everything here is public input: nothing reads data, and every check runs
before anything is charged.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from dpkit._cli_options import (
    OptionGroup,
    choices,
    deprecated,
    join_names,
    numbers,
    one_spelling,
    option,
)
from dpkit.errors import InvalidParameterError
from dpkit.histograms.methods import PUBLISHERS_1D, PUBLISHERS_2D
from dpkit.tables.engines import ColumnKind, Condition
from dpkit.tables.filters import parse_where, parse_where_text
from dpkit.tables.specs import PARAMETERS, QUERY_KINDS, QuerySpec

__all__ = [
    "DRY_RUN",
    "QUERY",
    "SOURCE",
    "SPEC_OPTIONS",
    "QueryCommand",
    "QueryOptions",
    "kinds_of_types",
]

_WHERE_HELP = (
    "Filter COLUMN==VALUE (repeatable; also !=, <, <=, >, >=; COLUMN==A,B for membership)."
)

#: One option per spec parameter (the registry's names), in ``--help`` order.
SPEC_OPTIONS: dict[str, inspect.Parameter] = {
    p.name: p
    for p in (
        option("epsilon", float, ..., "--epsilon", help="Privacy budget this query spends."),
        option(
            "bounds",
            tuple[float, float] | None,
            None,
            "--bounds",
            help="Public bounds: --bounds LO HI (values are clipped to them).",
        ),
        option("where", list[str] | None, None, "--where", help=_WHERE_HELP),
        option("group_by", list[str] | None, None, "--group-by", help="Group-by column (repeatable)."),
        option(
            "keys",
            list[str] | None,
            None,
            "--keys",
            help="A public key of the groups (repeatable; 'A|x' for two group-by columns).",
        ),
        option(
            "delta",
            float | None,
            None,
            "--delta",
            help="δ this query spends (private keys, Gaussian mechanisms).",
        ),
        option("level", float | None, None, "--level", help="Confidence level of the intervals (default 0.95)."),
        option("q", float | None, None, "--q", help="Quantile for quantile (or min/max)."),
        option("grid_size", int | None, None, "--grid-size", help="Points of the quantile's value grid."),
        option("domain", list[str] | None, None, "--domain", help="Public category (repeatable)."),
        option("edges", str | None, None, "--edges", help="Explicit public bin edges, comma-separated."),
        option("bins", int | None, None, "--bins", help="Equal-width histogram bins over --bounds."),
        option(
            "method", str | None, None, "--method",
            help=f"Publisher: histogram {choices(PUBLISHERS_1D)}; histogram2d {choices(PUBLISHERS_2D)}.",
        ),
        option(
            "max_count", float | None, None, "--max-count", help="Public bound on a unit count (histogram)."
        ),
        option("y_column", str | None, None, "--y-column", help="The second column (histogram2d)."),
        option(
            "n_records", float | None, None, "--n-records", help="Public number of rows (histogram2d)."
        ),
    )
}  # fmt: skip

_PRIVATE_KEYS = option(
    "private_keys",
    bool,
    False,
    "--private-keys",
    help="Select the groups privately (partition selection; needs --delta).",
)
_PRIVATE_BOUNDS = option(
    "private_bounds",
    bool,
    False,
    "--private-bounds",
    help="Find the bounds privately (spends part of --epsilon); also --bounds private.",
)
_KIND = inspect.Parameter(
    "kind",
    inspect.Parameter.KEYWORD_ONLY,
    default=typer.Argument(..., help=", ".join(QUERY_KINDS) + "."),
    annotation=str,
)
_COLUMN = inspect.Parameter(
    "column",
    inspect.Parameter.KEYWORD_ONLY,
    default=typer.Argument(None, help="The column (optional for count)."),
    annotation=str | None,
)


@dataclass(frozen=True)
class QueryOptions:
    """A query as typed on the command line (text, not yet read against the schema)."""

    kind: str
    column: str | None = None
    epsilon: float | None = None
    bounds: tuple[float, float] | None = None
    where: Sequence[str] | None = None
    group_by: Sequence[str] | None = None
    keys: Sequence[str] | None = None
    private_keys: bool = False
    private_bounds: bool = False
    delta: float | None = None
    level: float | None = None
    q: float | None = None
    grid_size: int | None = None
    domain: Sequence[str] | None = None
    edges: str | None = None
    bins: int | None = None
    method: str | None = None
    max_count: float | None = None
    y_column: str | None = None
    n_records: float | None = None

    @property
    def needs_kinds(self) -> bool:
        """Whether :meth:`spec` reads values by column kind (filters, keys, categories)."""
        return bool(self.where or self.keys or self.domain)

    def check(self) -> None:
        """What the registry alone decides: the kind, its column, the options it takes."""
        kind = self.kind
        if kind not in QUERY_KINDS:
            raise InvalidParameterError(
                f"unknown query {kind!r}; use one of {', '.join(QUERY_KINDS)}."
            )
        for name in SPEC_OPTIONS:
            if name in ("keys", "delta"):
                continue  # checked with --group-by below
            if _given(getattr(self, name)) and name not in PARAMETERS[kind]:
                takers = [k for k in QUERY_KINDS if name in PARAMETERS[k]]
                raise InvalidParameterError(f"{_flag(name)} applies to {join_names(takers)} only.")
        if kind == "quantile" and self.q is None:
            raise InvalidParameterError("quantile needs --q, e.g. --q 0.9 (or use median).")
        if kind != "count" and self.column is None:
            raise InvalidParameterError(f"{kind} needs a column.")
        if (self.keys or self.private_keys) and not self.group_by:
            raise InvalidParameterError("--keys needs --group-by.")
        if self.bounds is not None and self.private_bounds:
            raise InvalidParameterError("give --bounds LO HI or --bounds private, not both.")
        if self.private_bounds and "bounds" not in PARAMETERS[kind]:
            takers = [k for k in QUERY_KINDS if "bounds" in PARAMETERS[k]]
            raise InvalidParameterError(f"--bounds applies to {join_names(takers)} only.")
        if self.keys and self.private_keys:
            raise InvalidParameterError("give public --keys or --private-keys, not both.")

    def spec(self, kinds: Mapping[str, ColumnKind] | None = None) -> QuerySpec:
        """The :class:`QuerySpec`; ``kinds`` (the public schema's) reads filter and key values."""
        self.check()
        kinds = kinds or {}
        params: dict[str, Any] = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name in SPEC_OPTIONS and _given(getattr(self, f.name))
        }
        if self.where:
            params["where"] = _conditions(self.where, kinds)
        if self.group_by:
            params["group_by"] = list(self.group_by)
            keys = list(self.keys or [])
            if keys == ["private"]:
                deprecated("--keys private", "--private-keys")
            if self.private_keys or keys == ["private"]:
                params["keys"] = "private"
            elif keys:
                params["keys"] = _keys(keys, self.group_by, kinds)
        if self.delta == 0:
            params.pop("delta", None)  # the default, as if not given
        if self.bounds is not None:
            params["bounds"] = tuple(self.bounds)
        elif self.private_bounds:
            params["bounds"] = "private"
        if self.domain:
            column = self.column or ""
            params["domain"] = [_convert(v, column, kinds.get(column, "text")) for v in self.domain]
        if self.edges is not None:
            params["edges"] = numbers(self.edges, "--edges")
        if self.method is not None:  # one spelling, the registry's
            names = PUBLISHERS_2D if self.kind == "histogram2d" else PUBLISHERS_1D
            params["method"] = one_spelling(self.method, names, "--method")
        return QuerySpec(self.kind, self.column, **params)


def _given(value: Any) -> bool:
    return value is not None and value is not False and value != [] and value != ()


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _build(**values: Any) -> QueryOptions:
    return QueryOptions(**values)


#: ``KIND [COLUMN]`` and every query option, for :func:`dpkit._cli_options.grouped`.
QUERY = OptionGroup(
    (_KIND, _COLUMN, *SPEC_OPTIONS.values(), _PRIVATE_KEYS, _PRIVATE_BOUNDS),
    _build,
)


#: ``--cost``: the query's cost, and nothing charged (both verbs).
DRY_RUN = OptionGroup(
    (
        option(
            "cost",
            bool,
            False,
            "--cost",
            help="Only show the cost (dry run: nothing is charged or read).",
        ),
    )
)

#: How the local verb opens a file (the declared schema): ``dpkit query`` only.
SOURCE = OptionGroup(
    (
        option("schema", Path | None, None, "--schema", help="Schema file (.json, .toml, .yaml)."),
        option(
            "types",
            list[str] | None,
            None,
            "--type",
            help="Declared column type COLUMN=TYPE (repeatable), e.g. age=DOUBLE.",
        ),
        option(
            "infer_types",
            bool,
            False,
            "--infer-types",
            help="Take undeclared column types from the file (warns).",
        ),
        option("privacy_unit", str | None, None, "--privacy-unit", help="Person-id column."),
        option("max_contributions", int, 1, "--max-contributions", help="Rows kept per person."),
        option(
            "encoding",
            str | None,
            None,
            "--encoding",
            help="The CSV file's text encoding, e.g. latin-1 (default UTF-8).",
        ),
        option(
            "noise",
            str | None,
            None,
            "--noise",
            help="Noise of the release: laplace (default) | gaussian (needs a ledger made with "
            "--accountant zcdp or rdp) | auto (the smaller error; laplace under basic).",
        ),
    )
)


#: The ``--where`` operators (``=`` is the deprecated spelling of ``==``).
_OPERATORS = ("==", "!=", "<", "<=", ">", ">=")


def _conditions(items: Sequence[str], kinds: Mapping[str, ColumnKind]) -> list[Condition]:
    """``--where`` items as conditions (each item on its own: a column may be filtered twice)."""
    out: list[Condition] = []
    for item in items:
        written = re.search(r"[=<>!]+", item)
        if written is not None and written.group() not in (*_OPERATORS, "="):
            raise InvalidParameterError(
                f"--where {item.partition(written.group())[0].strip()}{written.group()}...: "
                f"unknown operator {written.group()!r}; use one of {', '.join(_OPERATORS)} "
                "(e.g. --where 'age>=3')."
            )
        # The operator is the first of these in the text, as parse_where_text reads it.
        op = next((o for o in ("!=", "<=", ">=", "==", "=", "<", ">") if o in item), None)
        if op == "=":
            column = item.partition("=")[0].strip()
            deprecated(f"--where {column}=VALUE", f"--where '{column}==VALUE'")
        out.extend(parse_where(parse_where_text([item], kinds), kinds))
    return out


def _convert(raw: str, column: str, kind: str) -> Any:
    if kind == "numeric":
        try:
            number = float(raw)
        except ValueError:
            raise InvalidParameterError(
                f"values for numeric column {column!r} must be numbers."
            ) from None
        return int(number) if number.is_integer() and "." not in raw else number
    if kind == "boolean":
        return raw.lower() == "true"
    return raw


def _keys(keys: Sequence[str], group_by: Sequence[str], kinds: Mapping[str, Any]) -> list[Any]:
    out: list[Any] = []
    for text in keys:
        parts = text.split("|")
        if len(parts) != len(group_by):
            raise InvalidParameterError(
                f"key {text!r} must have {len(group_by)} part(s) separated by '|', one per group-by column."
            )
        converted = [_convert(p, c, kinds.get(c, "text")) for p, c in zip(parts, group_by)]
        out.append(converted[0] if len(converted) == 1 else tuple(converted))
    return out


_NUMERIC = re.compile(
    r"^(U?(TINY|SMALL|BIG|HUGE)?INT(EGER)?\d*|LONG|SHORT|BYTE|DOUBLE|FLOAT\d*|REAL|"
    r"DECIMAL.*|NUMERIC.*)$"
)


def kinds_of_types(types: Mapping[str, str]) -> dict[str, ColumnKind]:
    """Column kinds from a service's public type names (how the CLI types filter values).

    Only the literal's Python type depends on it: the service checks every
    literal against its own schema again before anything is charged, so a
    wrong guess is an error, never another query.
    """
    out: dict[str, ColumnKind] = {}
    for column, type_name in types.items():
        t = str(type_name).upper()
        out[column] = (
            "numeric"
            if _NUMERIC.match(t)
            else "boolean"
            if t == "BOOLEAN"
            else "text"
            if t.startswith("VARCHAR") or t in ("TEXT", "STRING")
            else "temporal"
            if t.startswith(("DATE", "TIMESTAMP", "TIME"))
            else "other"
        )
    return out


class QueryCommand(TyperCommand):
    """A query verb: reads ``--bounds private`` and the old ``--bounds LO,HI`` (one token)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _old_bounds(list(args)))


def _old_bounds(args: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--bounds", "--bounds=private") and (
            arg == "--bounds=private" or (i + 1 < len(args) and args[i + 1] == "private")
        ):
            out.append("--private-bounds")
            i += 1 if arg == "--bounds=private" else 2
            continue
        if arg == "--bounds" and i + 1 < len(args) and "," in args[i + 1]:
            lo, _, hi = args[i + 1].partition(",")
            deprecated(f"--bounds {args[i + 1]}", f"--bounds {lo.strip()} {hi.strip()}")
            out += [arg, lo.strip(), hi.strip()]
            i += 2
            continue
        if arg.startswith("--bounds=") and "," in arg:
            lo, _, hi = arg.removeprefix("--bounds=").partition(",")
            deprecated(arg, f"--bounds {lo.strip()} {hi.strip()}")
            out += ["--bounds", lo.strip(), hi.strip()]
        else:
            out.append(arg)
        i += 1
    return out
