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
        """Unix seconds (for timestamps and expiry; it can be set back or forward, so no
        decision about durations is taken on it)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never go back (for durations, deadlines,
        silence since an event arrived)."""
        ...


class SystemClock:
    """The real clocks."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to. Thread-safe.

    :meth:`advance` moves both readings together (time passes); :meth:`step` sets the wall
    clock forward or back without time passing, as an administrator or NTP does.

    >>> clock = ManualClock(1000.0)
    >>> clock.step(-3600.0)
    >>> clock.advance(1.0)
    >>> clock.now(), clock.monotonic()
    (-2599.0, 1.0)
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall = start  # the wall clock at monotonic zero
        self._elapsed = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._wall + self._elapsed

    def monotonic(self) -> float:
        with self._lock:
            return self._elapsed

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        with self._lock:
            self._elapsed += seconds

    def step(self, seconds: float) -> None:
        """Set the wall clock ``seconds`` forward (or back, when negative); the monotonic
        reading does not move."""
        with self._lock:
            self._wall += seconds
