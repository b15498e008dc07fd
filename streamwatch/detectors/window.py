"""A bounded window of recent values with robust statistics."""

from __future__ import annotations

import math
from collections import deque


class Window:
    """The last ``size`` finite values; median and a robust sd (1.4826 x MAD).

    >>> w = Window(5)
    >>> for x in [1.0, 2.0, 3.0, 100.0, 2.0]: w.update(x)
    >>> w.median(), w.full
    (2.0, True)
    """

    __slots__ = ("size", "values")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.values: deque[float] = deque(maxlen=size)

    def update(self, x: float) -> None:
        if math.isfinite(x):
            self.values.append(x)

    @property
    def full(self) -> bool:
        return len(self.values) == self.size

    def __len__(self) -> int:
        return len(self.values)

    def median(self) -> float:
        return _median(sorted(self.values)) if self.values else math.nan

    def robust_sd(self) -> float:
        """1.4826 x the median absolute deviation: the sd for Gaussian noise, blind to spikes."""
        return self.median_and_sd()[1]

    def median_and_sd(self) -> tuple[float, float]:
        """Median and robust sd together (one sort each); NaN while too few values."""
        if len(self.values) < 2:
            return (self.median(), math.nan)
        m = _median(sorted(self.values))
        return m, 1.4826 * _median(sorted([abs(v - m) for v in self.values]))


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
