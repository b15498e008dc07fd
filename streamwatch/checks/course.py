"""Which way a noisy series moves, and how sure that is: a robust slope with its interval.

A clip ratio is a share of a batch: its noise is binomial at best, heavy-tailed when a few
prompts dominate a batch, correlated from step to step when the same prompts come back, and
many runs log it every 5 or 10 steps. Its direction is the Theil-Sen slope (the median of
the slopes between every two of its values, per training step, so a sparse log is read in
steps, not in logs) and Kendall's interval around it (Sen 1968; Gilbert 1987, ch. 16): of
the N pairwise slopes ordered, the bounds are those of rank ``(N -/+ z sqrt(var S)) / 2``,
where ``var S`` is the variance of Kendall's S under no trend, corrected for tied values (a
ratio of 8 completions takes 9 values). The values are taken as independent draws: a batch's
share is a fresh sample of the batch each step, and a correlation read from a few dozen
values of a ratio that jumps or bends reads its shape as correlation (a logistic climb gives
an effective sample 11 times smaller). One outlier moves none of it much; with too few
values the bounds are infinite.

What the judge asks of it: is the series shown to fall (the upper bound below 0), shown to
rise (the lower bound above 0), or shown not to fall by as much as a given rate (the lower
bound above minus that rate)? Anything else is not decided yet.

>>> c = Course(40)
>>> for step, x in enumerate([0.62, 0.55, 0.6, 0.51, 0.52, 0.47, 0.5, 0.44, 0.45, 0.41]):
...     c.update(5 * step, x)
>>> low, slope, high = c.bounds(2.0)
>>> high < 0.0, round(slope, 4)
(True, -0.004)
"""

from __future__ import annotations

import math

from mypy_extensions import mypyc_attr

__all__ = ["Course"]


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Course:
    """The last ``size`` finite values of a series with their steps."""

    __slots__ = ("size", "start", "steps", "values")

    def __init__(self, size: int) -> None:
        if size < 3:
            raise ValueError(f"size must be >= 3, got {size}")
        self.size = size
        self.steps: list[int] = []  # lists: a deque takes 760 bytes however few its values
        self.values: list[float] = []
        self.start = 0  # the first kept (those before it are dropped in bulk, not one a value)

    def update(self, step: int, x: float) -> None:
        if x - x != 0.0:  # nan or inf
            return
        steps = self.steps
        values = self.values
        while len(steps) > self.start and steps[-1] >= step:  # a resumed run logs again
            steps.pop()
            values.pop()
        steps.append(step)
        values.append(x)
        if len(values) - self.start > self.size:
            self.start += 1
            if self.start >= self.size:
                del steps[: self.start]
                del values[: self.start]
                self.start = 0

    def __len__(self) -> int:
        return len(self.values) - self.start

    def last(self, count: int) -> list[float]:
        """Its last ``count`` values (fewer while it holds fewer), oldest first."""
        return self.values[max(self.start, len(self.values) - count) :]

    def median(self) -> float:
        ordered = sorted(self.values[self.start :])
        n = len(ordered)
        if not n:
            return math.nan
        return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2.0

    def bounds(self, z: float, last: int = 0) -> tuple[float, float, float]:
        """The lower bound of the slope per step, the slope and its upper bound, ``z`` sds of
        Kendall's S wide, over the ``last`` values (all when 0); ``(-inf, nan, inf)`` with
        fewer than 3 values."""
        xs, ys = self.steps[self.start :], self.values[self.start :]
        if 0 < last < len(ys):
            xs, ys = xs[-last:], ys[-last:]
        n = len(ys)
        if n < 3:
            return -math.inf, math.nan, math.inf
        slopes: list[float] = []
        for i in range(n - 1):
            xi, yi = xs[i], ys[i]
            for j in range(i + 1, n):
                slopes.append((ys[j] - yi) / (xs[j] - xi))
        slopes.sort()
        m = len(slopes)
        slope = _quantile(slopes, (m + 1) / 2.0)
        c = z * math.sqrt(_variance_s(ys))
        low = _quantile(slopes, (m - c) / 2.0) if (m - c) / 2.0 >= 1.0 else -math.inf
        high = _quantile(slopes, (m + c) / 2.0 + 1.0) if (m + c) / 2.0 + 1.0 <= m else math.inf
        return low, slope, high


def _quantile(ordered: list[float], rank: float) -> float:
    """The value of 1-based ``rank`` in ``ordered``, between two ranks by linear steps."""
    k = int(rank)
    frac = rank - k
    if k >= len(ordered):
        return ordered[-1]
    if frac == 0.0 or k < 1:
        return ordered[max(k, 1) - 1]
    return ordered[k - 1] + frac * (ordered[k] - ordered[k - 1])


def _variance_s(ys: list[float]) -> float:
    """The variance of Kendall's S with no trend, less what tied values take away."""
    n = len(ys)
    ties: dict[float, int] = {}
    for y in ys:
        ties[y] = ties.get(y, 0) + 1
    tied = 0
    for t in ties.values():
        if t > 1:
            tied += t * (t - 1) * (2 * t + 5)
    return max((n * (n - 1) * (2 * n + 5) - tied) / 18.0, 1e-12)
