"""Exponentially weighted moving average, optionally robust to a heavy tail's lone values."""

from __future__ import annotations

import math
from typing import Final

from mypy_extensions import mypyc_attr

#: innovations (a value less the average before it) learnt before any is limited
_SETTLE: Final = 20
#: the mean absolute innovation's weight once settled: it follows the noise over ~50 steps
_FOLLOW: Final = 1.0 / 50.0
#: the limit the checks smooth with, in sds of the innovation: beyond any Gaussian value of a
#: healthy run's length (1 in 16,000), within reach of a heavy tail's
LIMIT: Final = 4.0
#: a Gaussian's sd over its mean absolute value
_SD_PER_MAD: Final = math.sqrt(math.pi / 2.0)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Ewma:
    """EWMA with weight ``alpha`` on the newest value; ``value`` is NaN until the first update.

    >>> e = Ewma(0.5)
    >>> e.update(2.0); e.update(4.0)
    2.0
    3.0

    With ``limit`` (in sds of the innovation, the value less the average before it), a lone
    value farther than that from the average moves it only as far as the limit: batch means
    of heavy-tailed noise throw one far now and then, and a smoothed series that takes it
    whole carries it for steps, each a departure that a trend break downstream adds up. A
    second value beyond the limit on the same side in a row passes whole, and each after it:
    a level that moved is followed one step later. The sd is the mean absolute innovation
    (as a Gaussian's sd), learnt over the first 20 innovations, then followed over about 50,
    each counted at most at the limit (so the outliers do not widen it). Gaussian noise is
    limited at 4 sds in about 1 value of 16,000: the smoothing of the noise the thresholds
    were set on is the same.

    >>> r = Ewma(0.3, limit=4.0)
    >>> for k in range(40):
    ...     _ = r.update(1.0 + 0.1 * (-1) ** k)
    >>> round(r.update(11.0), 3)  # a lone outlier: taken as 4 sds of the innovation (4 x 0.135)
    1.162
    >>> round(r.update(1.0), 3)
    1.113
    >>> [round(r.update(5.0), 3) for _ in range(4)]  # a level that moved: followed
    [1.308, 2.416, 3.191, 3.734]
    """

    __slots__ = ("alpha", "beyond", "limit", "mad", "n", "value")

    def __init__(self, alpha: float, limit: float = 0.0) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if limit < 0.0:
            raise ValueError(f"limit must be >= 0 (0: none), got {limit}")
        self.alpha = alpha
        self.limit = limit
        self.value = math.nan
        self.n = 0
        self.mad = 0.0  # the mean absolute innovation
        self.beyond = 0.0  # the sign of the last innovation beyond the limit (0: within)

    def update(self, x: float) -> float:
        if x - x != 0.0:  # nan or inf (math.isfinite is a module look-up when compiled)
            return self.value
        self.n += 1
        if self.n == 1:
            self.value = x
            return x
        d = x - self.value
        if self.limit > 0.0:
            d = self._limited(d)
        self.value += self.alpha * d
        return self.value

    def _limited(self, d: float) -> float:
        """The innovation ``d`` as the average takes it, and the noise's sd learnt from it."""
        learnt = self.n - 1  # innovations before this one (the first value had none)
        bound = self.limit * _SD_PER_MAD * self.mad
        size = abs(d)
        if learnt > _SETTLE and size > bound:
            side = 1.0 if d > 0.0 else -1.0
            if self.beyond != side:  # a lone value beyond: limited
                self.beyond = side
                d = side * bound
            # else: the second in a row on that side (and those after it): the level moved
            size = bound
        else:
            self.beyond = 0.0
        weight = 1.0 / float(learnt) if learnt <= _SETTLE else _FOLLOW
        self.mad += weight * (size - self.mad)
        return d
