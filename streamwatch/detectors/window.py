"""A bounded window of recent values with robust statistics."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque


class Window:
    """The last ``size`` finite values; median and a robust sd (1.4826 x MAD).

    The values are also kept in order (one insertion and one removal by bisection per
    update), so the median is a look-up and the absolute deviations from it come out as two
    sorted runs, which one linear merge orders: checks ask for these on every value.

    >>> w = Window(5)
    >>> for x in [1.0, 2.0, 3.0, 100.0, 2.0]: w.update(x)
    >>> w.median(), w.full
    (2.0, True)
    """

    __slots__ = ("ordered", "size", "values")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.values: deque[float] = deque()
        self.ordered: list[float] = []

    def update(self, x: float) -> None:
        if x - x != 0.0:  # nan or inf
            return
        values = self.values
        if len(values) == self.size:
            ordered = self.ordered
            del ordered[bisect_left(ordered, values.popleft())]
        values.append(x)
        insort(self.ordered, x)

    @property
    def full(self) -> bool:
        return len(self.values) == self.size

    def __len__(self) -> int:
        return len(self.values)

    def median(self) -> float:
        return _median(self.ordered) if self.ordered else math.nan

    def robust_sd(self) -> float:
        """1.4826 x the median absolute deviation: the sd for Gaussian noise, blind to spikes."""
        return self.median_and_sd()[1]

    def median_and_sd(self) -> tuple[float, float]:
        """Median and robust sd together; NaN while too few values."""
        ordered = self.ordered
        if len(ordered) < 2:
            return (self.median(), math.nan)
        m = _median(ordered)
        # below the median the deviations fall, above it they rise: sorted() merges the runs
        return m, 1.4826 * _median(sorted([abs(v - m) for v in ordered]))


def _median(ordered: list[float]) -> float:
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2
