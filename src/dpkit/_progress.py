"""Feedback for long work: on stderr, and only when stderr is a terminal.

stdout carries the results (tables, paths written), so a pipe or a file gets
them alone; a terminal also sees a spinner with the elapsed time
(:func:`working`) or a bar with a count (:func:`steps`). Nothing is shown, and
nothing of Rich is imported beyond the terminal check, when stderr is a pipe, a
file or a test's capture.

Displays nest: a :func:`working` or :func:`steps` inside another one adds a
line to the display already on screen (Rich allows one live display at a
time), so a library solve inside a CLI command's spinner shows both.

What is shown is a function of public parameters only (the message, a count
fixed before the work starts) and of time; never of data.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

__all__ = ["Advance", "steps", "working"]


class Advance(Protocol):
    """What :func:`steps` yields: ``advance()`` after each step, ``advance(n)`` after n."""

    def __call__(self, n: int = 1) -> None: ...


def _no_display(n: int = 1) -> None:
    """Off a terminal there is nothing to advance."""


#: The display on screen, if any (nested calls add a task to it).
_active: list[Progress] = []


def _terminal_console() -> Console | None:
    """A Rich console on stderr when stderr is a terminal; None otherwise (show nothing)."""
    from rich.console import Console

    console = Console(stderr=True)
    return console if console.is_terminal else None


def _line(message: str, total: int | None, done: int) -> str:
    return message if total is None else f"{message} {done}/{total}"


@contextmanager
def _task(message: str, total: int | None, transient: bool) -> Iterator[Advance]:
    """A task on the display on screen, opening one on a terminal stderr if none is.

    One set of columns (spinner, line, elapsed time) for every task, the count
    in the line, so a counted task nested in a spinner's display shows it too.
    """
    if _active:
        progress = _active[-1]
        opened = None
    else:
        console = _terminal_console()
        if console is None:
            yield _no_display
            return
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        opened = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
            transient=transient,
        )
        progress = opened
        opened.start()
        _active.append(opened)
    task = progress.add_task(_line(message, total, 0), total=total)
    done = 0

    def advance(n: int = 1) -> None:
        nonlocal done
        done += n
        progress.update(task, description=_line(message, total, done), advance=n)

    try:
        yield advance
    finally:
        if opened is None:
            progress.remove_task(task)
        else:
            _active.pop()
            opened.stop()


@contextmanager
def working(message: str, *, transient: bool = False) -> Iterator[None]:
    """Show ``message`` with a spinner and elapsed time on a terminal stderr while the block runs.

    For work with no count to show (a solver without a progress callback).
    ``transient=True`` clears the line when the block ends (for library calls
    that may run many times); otherwise the line stays with the time taken.
    """
    with _task(message, None, transient):
        yield


@contextmanager
def steps(total: int, message: str, *, transient: bool = False) -> Iterator[Advance]:
    """Show ``message`` with a bar, ``done/total`` and elapsed time on a terminal stderr.

    Yields ``advance(n=1)``: call it after each step. ``total`` must come from
    public parameters (a number of trees, of ε values, of bins), never from data.
    """
    with _task(message, int(total), transient) as advance:
        yield advance
