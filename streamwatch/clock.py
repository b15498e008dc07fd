"""Time: the one module that reads the wall clock and the monotonic clock.

Code that needs the time takes a :class:`Clock` and asks it; decisions get ``now`` passed
down as a number. :class:`SystemClock` reads the real clocks; tests use :class:`ManualClock`
and move time by hand.

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
        """Unix seconds (for timestamps, expiry, silence since an event arrived)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never go back (for durations, deadlines)."""
        ...


class SystemClock:
    """The real clocks."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to (both readings together). Thread-safe."""

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
