"""A bounded window of recent values with robust statistics."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque

from mypy_extensions import mypyc_attr


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
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
        ordered = self.ordered
        n = len(ordered)
        if n % 2:
            return ordered[n // 2]
        return (ordered[n // 2 - 1] + ordered[n // 2]) / 2 if n else math.nan

    def robust_sd(self) -> float:
        """1.4826 x the median absolute deviation: the sd for Gaussian noise, blind to spikes."""
        return self.median_and_sd()[1]

    def median_and_sd(self) -> tuple[float, float]:
        """Median and robust sd together; NaN while too few values."""
        ordered = self.ordered
        if len(ordered) < 2:
            return (self.median(), math.nan)
        m = self.median()
        return m, 1.4826 * _deviation_median(ordered, m)


def _deviation_median(ordered: list[float], m: float) -> float:
    """The median of ``|v - m|`` over sorted values: below ``m`` the deviations rise going
    down, above it going up, so a walk outwards from ``m`` meets them in order and stops
    half-way (``m - v`` is exactly ``abs(v - m)``: rounding is symmetric).

    >>> _deviation_median([1.0, 2.0, 4.0, 7.0], 3.0)
    1.5
    """
    n = len(ordered)
    above = bisect_left(ordered, m)
    below = above - 1
    prev = cur = 0.0
    for _ in range(n // 2 + 1):
        if above < n and (below < 0 or ordered[above] - m <= m - ordered[below]):
            prev, cur = cur, ordered[above] - m
            above += 1
        else:
            prev, cur = cur, m - ordered[below]
            below -= 1
    return cur if n % 2 else (prev + cur) / 2
