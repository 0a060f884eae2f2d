"""Progress of large fits: a bar on stderr when it is a terminal, nothing otherwise.

Whether a bar is shown and its length are functions of public parameters only
(the number of rounds or trees fixed before the loop, the number of
features); what it shows is that count and the time. Never on stdout, never
when stderr is a pipe, a file or a test's capture (``dpkit._progress``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dpkit._progress import steps

#: Show a bar from this many (steps x features) of public work on (smaller fits are quick).
PROGRESS_MIN_WORK = 500


def _nothing(n: int = 1) -> None:
    return None


@contextmanager
def fit_progress(message: str, total: int, n_features: int) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n=1)`` for a loop of ``total`` steps; a transient bar when the work is large."""
    if int(total) * max(int(n_features), 1) < PROGRESS_MIN_WORK:
        yield _nothing
        return
    with steps(int(total), message, transient=True) as advance:
        yield advance
