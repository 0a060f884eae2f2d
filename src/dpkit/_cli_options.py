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

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator
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
    "cli_warnings",
    "cli_words",
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
        option(
            "composition",
            str | None,
            None,
            "--accountant",
            help="How the ledger adds up charges: basic | zcdp | rdp (needs --budget-delta). "
            "Chosen when the ledger is created (default basic) and kept; see "
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


#: The library's advice in Python words and the command line's flags for it, applied in
#: order by :func:`cli_words` to every dpkit error and warning a verb prints.
CLI_WORDS: tuple[tuple[str, str], ...] = (
    (r"pass bounds=\(lo, hi\) to the query", "give --bounds LO HI"),
    (r"declare them in the schema \(Column\('[^']*', bounds=\(lo, hi\)\)\)",
     "declare them in a --schema file"),
    (r"pass bounds='private'", "pass --bounds private"),
    (r"bounds='private'", "--bounds private"),
    (r"bins= with bounds=\(lo, hi\)", "--bins N with --bounds LO HI"),
    (r"bounds=\(lo, hi\)", "--bounds LO HI"),
    (r"edges=\[\.\.\.\]", "--edges E0,E1,..."),
    (r"declare it in the schema \(Column\('[^']*', domain=\[\.\.\.\]\)\)",
     "declare it in a --schema file"),
    (r"domain=\[\.\.\.\]", "--domain VALUE (repeatable)"),
    (r"pass keys='private' with delta=\.\.\.", "pass --private-keys with --delta D"),
    (r"pass keys=\[\.\.\.\]", "give --keys KEY (repeatable)"),
    (r"keys=\[\.\.\.\]", "--keys KEY"),
    (r"coerce=True in the schema", '"coerce": true in a --schema file'),
    (r"declared in the schema", "declared in a --schema file"),
    (r"declare a domain in the schema", "declare a domain in a --schema file"),
    (r"\(infer_types=True\)", "(--infer-types)"),
    (r"declare them with types=\{\.\.\.\} instead", "declare them with --type COLUMN=TYPE instead"),
    (r" \(new_ledger=True\)", ""),
    (r" \(on the command line, leave out --ledger; in Python, ledger='[^']*'\)",
     " (leave out --ledger)"),
    (r"Use rng=None \(the operating system's CSPRNG\)", "Leave out --seed (secure randomness)"),
    (r"\bgroup_by\b", "--group-by"),
    (r"\bmax_count\b", "--max-count"),
    (r" \(command line\) or encoding='[^']*' \(Python\)", ""),
    (r"coerce=True for it in the schema", '"coerce": true for it in a --schema file'),
    (r"^bounds must satisfy lo < hi", "--bounds LO HI must satisfy LO < HI"),
    (r"^bounds must be finite", "--bounds must be finite"),
    (r"^(epsilon|delta|level|q) must be", r"--\1 must be"),
    (r"\bin where=", "in --where"),
    (r"cannot read the filter", "cannot read the --where filter"),
    (r"^types declares column", "--type declares column"),
    (r"^unknown encoding ('[^']*')", r"unknown encoding \1 for --encoding"),
    (r"^bins must be", "--bins must be"),
    (r"^max_contributions must be", "--max-contributions must be"),
    (r"^grid_size must be", "--grid-size must be"),
    (r"\bin privacy_unit;", "in --privacy-unit;"),
    (r"^the filter on", "the --where filter on"),
    (r"^(mode|quantile|median|min|max)\(\) needs", r"\1 needs"),
    (r"\(a smaller epsilon\)", "(a smaller --epsilon)"),
)  # fmt: skip


def cli_words(message: str) -> str:
    """``message`` with the library's Python advice (``bounds=(lo, hi)``) in CLI flags.

    One translation for every verb: dpkit's errors and warnings are written for
    the Python API; a verb prints them through this (see
    :func:`dpkit._cli_friendly.friendly` and :func:`cli_warnings`).
    """
    import re

    for pattern, flag in CLI_WORDS:
        message = re.sub(pattern, flag, message)
    return message


@contextlib.contextmanager
def cli_warnings() -> Iterator[None]:
    """Warnings printed as one ``warning:`` line in CLI words: no source path, no code line."""
    import warnings

    def show(message: Any, category: Any, *_: Any, **__: Any) -> None:
        typer.secho(f"warning: {cli_words(str(message))}", fg=typer.colors.YELLOW, err=True)

    shown = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown
