"""A wall-clock bound for tests of work that must end."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def finishes_within(seconds: float) -> Iterator[None]:
    """Fail (rather than hang) when the block runs longer than ``seconds``.

    Uses SIGALRM, so only on the main thread; elsewhere it only checks the time after.
    """
    on_main = threading.current_thread() is threading.main_thread()

    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire) if on_main else None
    if on_main:
        signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    try:
        yield
    finally:
        if on_main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    assert time.perf_counter() - start < seconds
