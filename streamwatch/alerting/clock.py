"""Time for the alerting layer: the only module that reads the wall clock.

Decisions take ``now`` as an argument; the dispatcher asks its :class:`Clock` once per step
and passes the value down. Tests use :class:`ManualClock` and move time by hand.

>>> clock = ManualClock(1000.0)
>>> clock.advance(2.5)
>>> clock.now(), clock.monotonic()
(1002.5, 2.5)
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Unix seconds (for timestamps, expiry and notification times)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never go back (for durations, deadlines)."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to. Thread-safe."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._start = start
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._now - self._start

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        with self._lock:
            self._now += seconds
