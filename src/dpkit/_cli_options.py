"""Command-line options defined once: groups of Typer options handed to a verb as one value.

A verb names a group by a parameter of its own; :func:`grouped` puts the
group's options into the verb's signature in that place (so ``--help`` lists
them there) and calls the verb with the group's value built from them::

    @app.command()
    @grouped(ledger=LEDGER, output=OUTPUT)
    def histogram(table: Path = typer.Argument(...), ledger=None, output=None) -> None:
        histogram_command(table, **ledger, **output)

Every verb that shares an option takes it from here, so its flag, help text
and checks are the same everywhere (the ledger options of ``dpkit query``,
``dpkit histogram`` and ``dpkit histogram2d``; the query options of
``dpkit query`` and ``dpkit remote query``, :mod:`dpkit._cli_query`).

Old spellings that still work for one release (``--bounds LO,HI``,
``--keys private``, ``--method noise-first``) print one :func:`deprecated`
note on stderr and go on.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import typer

from dpkit.errors import InvalidParameterError

__all__ = [
    "LEDGER",
    "OUTPUT",
    "SEED",
    "OptionGroup",
    "choices",
    "deprecated",
    "grouped",
    "join_names",
    "numbers",
    "one_spelling",
    "option",
]

F = TypeVar("F", bound=Callable[..., Any])


def option(name: str, annotation: Any, default: Any, *flags: str, help: str) -> inspect.Parameter:
    """One Typer option as a signature parameter (``default=...`` makes it required)."""
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(default, *flags, help=help),
        annotation=annotation,
    )


@dataclass(frozen=True)
class OptionGroup:
    """Options a verb takes as one value: ``build(**options)`` (default: the options as a dict)."""

    parameters: tuple[inspect.Parameter, ...]
    build: Callable[..., Any] = dict

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)


def grouped(**groups: OptionGroup) -> Callable[[F], F]:
    """Replace each parameter named like a group by the group's options (see module doc)."""

    def decorate(func: F) -> F:
        own = inspect.signature(func, eval_str=True).parameters.values()
        missing = set(groups) - {p.name for p in own}
        if missing:
            raise TypeError(f"{func.__name__} has no parameter for the group(s) {sorted(missing)}")
        params: list[inspect.Parameter] = []
        for p in own:
            if p.name in groups:
                params.extend(groups[p.name].parameters)
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))

        @functools.wraps(func)
        def wrapper(**values: Any) -> Any:
            for name, group in groups.items():
                values[name] = group.build(**{n: values.pop(n) for n in group.names})
            return func(**values)

        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper  # type: ignore[return-value]

    return decorate


def deprecated(old: str, new: str) -> None:
    """One note on stderr: ``old`` still works in this release; write ``new``."""
    typer.secho(
        f"note: {old} is deprecated and will stop working in the next release; write {new}.",
        err=True,
        fg=typer.colors.YELLOW,
    )


def one_spelling(name: str, names: Iterable[str], option: str) -> str:
    """``name`` as registered; an old hyphenated spelling (``noise-first``) with a note."""
    known = tuple(names)
    if name in known:
        return name
    snake = name.strip().lower().replace("-", "_")
    for spelled in (snake, snake.replace("_", "")):
        if spelled in known:
            deprecated(f"{option} {name}", f"{option} {spelled}")
            return spelled
    return name  # the caller's check refuses it, with the list of names


def numbers(text: str, flag: str) -> list[float]:
    """Comma-separated numbers (``--edges 0,10,20``)."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidParameterError(
            f"{flag} must be comma-separated numbers, e.g. 0,10,20,40."
        ) from None


def choices(names: Iterable[str]) -> str:
    """``a | b | c`` for a help text."""
    return " | ".join(names)


def join_names(names: Iterable[str]) -> str:
    """``a, b and c`` for a message."""
    items = list(names)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# -- groups shared by the verbs that release something about a data file -----------------


#: Which ledger pays (see :mod:`dpkit._cli_budget`).
LEDGER = OptionGroup(
    (
        option(
            "ledger",
            Path | None,
            None,
            "--ledger",
            help="Ledger that records spending (default: the file's own, see docs).",
        ),
        option(
            "budget",
            float | None,
            None,
            "--budget",
            help="Total ε of this dataset, given once to create its ledger.",
        ),
        option(
            "budget_delta",
            float | None,
            None,
            "--budget-delta",
            help="Total δ of this dataset (with --budget, when creating).",
        ),
        option(
            "new_ledger",
            bool,
            False,
            "--new-ledger",
            help="Owner only: start a second budget (--ledger NEW --budget E) for data that "
            "already has a ledger; its total privacy loss becomes the sum. See "
            "docs/accounting.md.",
        ),
    )
)

#: Where the release goes besides the terminal (see :mod:`dpkit._cli_output`).
OUTPUT = OptionGroup(
    (
        option(
            "out_file",
            Path | None,
            None,
            "--out",
            help="Also save the whole release (every field) as JSON.",
        ),
        option("as_json", bool, False, "--json", help="Print the whole release as JSON."),
    )
)

#: The noise seed of the verbs that publish (tests only).
SEED = OptionGroup(
    (
        option(
            "seed",
            int | None,
            None,
            "--seed",
            help="Seed for reproducible noise (tests only; never publish).",
        ),
    )
)
