"""Exponentially weighted moving average."""

from __future__ import annotations

import math

from mypy_extensions import mypyc_attr


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Ewma:
    """EWMA with weight ``alpha`` on the newest value; ``value`` is NaN until the first update.

    >>> e = Ewma(0.5)
    >>> e.update(2.0); e.update(4.0)
    2.0
    3.0
    """

    __slots__ = ("alpha", "n", "value")

    def __init__(self, alpha: float) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.value = math.nan
        self.n = 0

    def update(self, x: float) -> float:
        if x - x != 0.0:  # nan or inf (math.isfinite is a module look-up when compiled)
            return self.value
        self.n += 1
        if self.n == 1:
            self.value = x
        else:
            self.value += self.alpha * (x - self.value)
        return self.value
