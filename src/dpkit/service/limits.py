"""In-memory limits of one service process: token buckets per key or address, and the
throttle on audit rows that anyone can provoke (no key, a bad key, a flood)."""

from __future__ import annotations

import math
import threading
import time

from starlette.requests import Request

__all__ = [
    "AUDIT_ROWS_PER_MINUTE",
    "FAILED_KEYS_PER_MINUTE",
    "AuditThrottle",
    "RateLimit",
    "client_address",
]

#: Failed key checks per client address and minute (guessing keys means a new key per try).
FAILED_KEYS_PER_MINUTE = 30
#: Audit rows that anyone can provoke (no key, a bad key, a flood) are rate-limited.
AUDIT_ROWS_PER_MINUTE = 60


class AuditThrottle:
    """At most one audit row a minute per (actor, address, code), and at most
    ``per_minute`` such rows a minute in all, so that a flood of bad keys cannot fill
    the disk; the events in between are counted into the next row written."""

    def __init__(self, per_minute: int = AUDIT_ROWS_PER_MINUTE) -> None:
        self.per_minute = per_minute
        self._last: dict[tuple[str, str, str], tuple[float, int]] = {}
        self._window = (-math.inf, 0)  # (start, rows written in it)
        self._lock = threading.Lock()

    def admit(self, key: tuple[str, str, str]) -> int | None:
        """The number of events to record now (this one and those held back), or None."""
        now = time.monotonic()
        with self._lock:
            last, held = self._last.get(key, (-math.inf, 0))
            start, rows = self._window
            if now - start >= 60:
                start, rows = now, 0
            if now - last < 60 or rows >= self.per_minute:
                self._last[key] = (last, held + 1)
                self._window = (start, rows)
                return None
            if len(self._last) > 10_000:  # forget rather than grow without end
                self._last.clear()
            self._last[key] = (now, 0)
            self._window = (start, rows + 1)
            return held + 1


class RateLimit:
    """A token bucket per key: ``per_minute`` requests, bursts up to that many."""

    def __init__(self, per_minute: int) -> None:
        self.rate = per_minute / 60.0
        self.capacity = float(per_minute)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, who: str) -> float:
        """0 if a request may go now, else the seconds to wait."""
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(who, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - last) * self.rate)
            if tokens < 1:
                self._buckets[who] = (tokens, now)
                return (1 - tokens) / self.rate
            self._buckets[who] = (tokens - 1, now)
            if len(self._buckets) > 100_000:  # forget idle keys rather than grow without end
                self._buckets.clear()
            return 0.0


def client_address(request: Request) -> str:
    """The client's address as the server saw it (what per-address limits count)."""
    return request.client.host if request.client else "unknown"
