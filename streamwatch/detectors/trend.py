"""A break in a series' own trend, found by a one-sided CUSUM of the departure from it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from mypy_extensions import i64, mypyc_attr

from streamwatch.detectors.window import DoubleRing

if TYPE_CHECKING:
    from streamwatch.config import TrendSettings

_SD_PER_MEAN_ABS: Final = math.sqrt(math.pi / 2)  # sd / mean |x| of Gaussian noise
#: the sampling sd of :class:`Correlation`'s estimate is about this over the square root of
#: the values it has seen (measured on Gaussian and AR(1) noise, 30 to 500 values)
_CORRELATION_SD: Final = 1.5
_MOST_CORRELATION: Final = 0.95
_SLOPE_MEMORY: Final = 20
_SLOPE_WEIGHT: Final = 1.0 / _SLOPE_MEMORY


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Correlation:
    """The lag-1 autocorrelation ``phi`` of a series' noise, online and robust to its trend.

    From the spread of the two-step differences ``y[t] - y[t-2]`` (about their recent mean:
    a trend adds its slope) and of the second differences ``y[t] - 2 y[t-1] +
    y[t-2]`` (a trend's bend is small): for AR(1) noise their variances are ``2 (1 - phi^2)``
    and ``2 (3 - 4 phi + phi^2)`` in its own unit, so their ratio ``r`` gives ``phi = (3 r -
    1) / (r + 1)``: 0 for independent noise (``r = 1 / 3``), 1 for a random walk. The
    spreads are mean absolute values over about ``memory`` values (the same Gaussian constant
    on both sides cancels), taken while the detectors reading it are :attr:`quiet`.
    :meth:`shown` is the estimate less two of its sampling sds, never below 0: the
    correlation the values have shown, not one they might have.

    :meth:`inflation` is what it does to a sum: the variance of the mean of ``m`` values in
    units of independent ones, ``1 + 2 sum_k (1 - k/m) phi^k``.

    >>> import random
    >>> rng = random.Random(1)
    >>> white, ar = Correlation(), Correlation()
    >>> x = 0.0
    >>> for t in range(400):
    ...     e = rng.gauss(0.0, 1.0)
    ...     x = 0.7 * x + e
    ...     white.update(e + 0.01 * t)  # a trend is not a correlation
    ...     ar.update(x)
    >>> white.shown(), round(ar.shown(), 1)
    (0.0, 0.4)
    >>> round(ar.inflation(10), 1), white.inflation(10)
    (2.0, 1.0)

    ``unit`` is ``1 / sqrt(inflation(m))`` for the ``m`` it was built with, refreshed every
    16 values (it moves slowly): what a departure is multiplied by.
    """

    __slots__ = ("_a", "_b", "_m", "_p1", "_p2", "m", "memory", "n", "quiet", "unit")

    def __init__(self, m: int = 10, memory: int = 200) -> None:
        self.m: i64 = m
        self.memory: i64 = memory
        self.n: i64 = 0
        self.unit = 1.0
        #: the detectors reading it that hold no evidence of a break, as bits (1: the "up"
        #: one, 2: the "down" one): it learns only while all do, so a fault's own course is
        #: not taken for the noise's
        self.quiet: i64 = 3
        self._p1 = math.nan  # the value before the last
        self._p2 = math.nan  # the last value
        self._m = 0.0  # mean two-step difference
        self._a = 0.0  # mean |two-step difference - its mean|
        self._b = 0.0  # mean |second difference|

    def update(self, y: float) -> None:
        """Feed one value (non-finite: ignored)."""
        if y - y != 0.0:
            return
        p1, p2 = self._p1, self._p2
        self._p1, self._p2 = p2, y
        if p1 != p1:
            return
        if self.quiet != 3:
            return
        two = y - p1
        bend = y - 2.0 * p2 + p1
        n = self.n = self.n + 1
        w = 1.0 / float(n if n < self.memory else self.memory)
        # centred on the recent slope (about 20 values: a learning curve's slope changes)
        self._m += (w if n < _SLOPE_MEMORY else _SLOPE_WEIGHT) * (two - self._m)
        d = two - self._m
        self._a += w * ((d if d > 0.0 else -d) - self._a)
        self._b += w * ((bend if bend > 0.0 else -bend) - self._b)
        if n & 15 == 0:
            self.unit = 1.0 / math.sqrt(self.inflation(self.m))

    def estimate(self) -> float:
        """The estimate of ``phi`` (nan before three values)."""
        if self.n < 1 or self._b <= 0.0:
            return math.nan
        r = self._a / self._b
        r *= r
        return (3.0 * r - 1.0) / (r + 1.0)

    def shown(self) -> float:
        """The estimate less two sampling sds, in [0, 0.95]."""
        phi = self.estimate()
        if phi != phi:
            return 0.0
        n = self.n if self.n < self.memory else self.memory
        phi -= 2.0 * _CORRELATION_SD / math.sqrt(float(n))
        if phi <= 0.0:
            return 0.0
        return phi if phi < _MOST_CORRELATION else _MOST_CORRELATION

    def inflation(self, m: int) -> float:
        """The variance of a mean of ``m`` values in units of independent ones (>= 1)."""
        phi = self.shown()
        if phi <= 0.0:
            return 1.0
        total = 1.0
        power = 1.0
        for k in range(1, m):
            power *= phi
            total += 2.0 * (1.0 - k / m) * power
        return total


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class TrendBreak:
    """One-sided CUSUM of how far a series left the path its own recent trend predicts.

    Healthy RL curves trend (entropy falls 3-8x and settles, length drifts), so a detector
    fed the raw value fires on the trend itself. This one predicts each value from the
    series ``lag`` steps ago and the slope over the ``span`` steps before that, and sums the
    departures (in noise units, clipped at ``clip`` so one blip cannot trip it, less
    ``slack`` a step) in the direction ``mode`` ("up" or "down"). Only a trend that already
    moved that way is extrapolated: a falling curve predicts a fall for a "down" detector
    and its last level for an "up" one. Healthy curves decelerate (a fall or a rise that
    settles), so the prediction errs on their safe side; a fault's new climb or fall adds
    up step after step. The noise unit is the mean absolute departure (as a Gaussian sd)
    over the first ``settle`` predictions, then followed slowly (weight ``1 / settle``)
    while the sum is at 0 (no evidence), so a fault does not teach it its own size.

    The input is whatever scale the change is additive in: the log of a smoothed length or
    entropy, a reward as it is. ``update`` returns True while the sum is above
    ``threshold``; ``statistic`` is the sum.

    Noise correlated from step to step (a batch-averaged metric wanders in runs of one sign)
    moves the departures the same way for many steps, and a sum of them climbs on a healthy
    run. Given each raw value too (``raw``: the same scale before the check's smoothing), the
    detector learns the raw noise's lag-1 correlation (:class:`Correlation`) and sums the
    departures in the units of a sum of ``lag`` such values: divided by the square root of
    their variance inflation. The check's own smoothing correlates the departures of
    independent noise too; that is what the threshold was set for, so only the correlation
    the raw values show beyond independence counts.

    A detector of the other direction on the same values (a check watching a fall and a rise
    of one curve) may be built ``along`` the first: it is fed the same values right after it,
    and reads its ring instead of keeping a second copy (when their ``lag`` and ``span`` are
    the same; otherwise it keeps its own).

    >>> t = TrendBreak("down", lag=5, span=10, settle=10, threshold=6.0)
    >>> flat = [0.01 * ((i * 7) % 5 - 2) for i in range(40)]
    >>> [t.update(y) for y in flat].count(True)
    0
    >>> [t.update(-0.05 * k) for k in range(1, 15)].index(True)
    3
    >>> down = TrendBreak("down", lag=5, span=10, settle=10, threshold=6.0)
    >>> up = TrendBreak("up", lag=5, span=10, settle=10, threshold=6.0, along=down)
    >>> alone = TrendBreak("up", lag=5, span=10, settle=10, threshold=6.0)
    >>> rise = flat + [0.05 * k for k in range(1, 15)]
    >>> [(down.update(y), up.update(y)) for y in rise] == [(False, alone.update(y)) for y in rise]
    True
    >>> up.ring is down.ring
    True
    """

    __slots__ = (
        "_abs",
        "_flag",
        "_fsettle",
        "_fspan",
        "along",
        "clip",
        "correlation",
        "lag",
        "mode",
        "n",
        "ring",
        "scale",
        "settle",
        "sign",
        "slack",
        "span",
        "statistic",
        "threshold",
    )

    def __init__(
        self,
        mode: str,
        *,
        lag: int = 10,
        span: int = 20,
        slack: float = 0.5,
        threshold: float = 10.0,
        clip: float = 4.0,
        settle: int = 20,
        along: TrendBreak | None = None,
    ) -> None:
        if mode not in ("up", "down"):
            raise ValueError(f"mode must be 'up' or 'down', got {mode!r}")
        if lag < 1 or span < 1 or settle < 1:
            raise ValueError("lag, span and settle must be >= 1")
        self.mode = mode
        self.sign = 1.0 if mode == "up" else -1.0
        # native integers, compiled: the per-value index arithmetic without tagged ints
        self.lag: i64 = lag
        self.span: i64 = span
        self.slack = slack
        self.threshold = threshold
        self.clip = clip
        self.settle: i64 = settle
        # the same as doubles, read on every value (interpreted, ``float()`` is a call)
        self._fspan = float(span)
        self._flag = float(lag)
        self._fsettle = float(settle)
        # the last lag + span + 1 values, a ring of doubles: the one of the detector this one
        # is built along, if any (it puts each value in; this one only reads)
        if along is not None and (along.lag != lag or along.span != span):
            along = None
        self.along = along
        self.ring: DoubleRing = DoubleRing(lag + span + 1) if along is None else along.ring
        # the raw values' correlation: the first detector's, shared
        self.correlation: Correlation = Correlation(lag) if along is None else along.correlation
        self.n: i64 = 0
        self._abs = 0.0
        self.scale = math.nan
        self.statistic = 0.0

    def update(self, y: float, raw: float = math.nan) -> bool:
        """Feed one value (and the raw value it was smoothed from, if any); True while the
        evidence of a break is above the threshold."""
        if y - y != 0.0:  # nan or inf: ignored
            return False
        ring = self.ring
        if self.along is None:
            ring.put(y)
            if raw == raw:  # a NaN would be ignored: no call for it
                self.correlation.update(raw)
        # else: fed this value just before
        n = self.n
        size: i64 = ring.size
        if n < self.settle and ring.n < size:
            return False
        # the departure from the prediction, in the direction watched
        span = self.span
        head: i64 = ring.head  # the oldest value's place
        i = head + span
        values = ring.ring
        then = values[i if i < size else i - size]
        slope = (then - values[head]) / self._fspan
        if self.sign > 0.0:
            r = y - then - (slope * self._flag if slope > 0.0 else 0.0)
        else:
            r = then - y + (slope * self._flag if slope < 0.0 else 0.0)
        a = (r if r > 0.0 else -r) * _SD_PER_MEAN_ABS  # its size, as a Gaussian sd
        if n < self.settle:
            self.n = n = n + 1
            self._abs += a
            if n == self.settle:
                self.scale = self._abs / float(n)
            return False
        scale = self.scale
        if scale <= 0.0:  # a constant series so far: its first departure sets the unit
            self.scale = a
            return False
        z = r / scale
        z *= self.correlation.unit
        stat = self.statistic + (z if z < self.clip else self.clip) - self.slack
        if stat <= 0.0:
            stat = 0.0
            if a > 4.0 * scale:
                a = 4.0 * scale
            self.scale = scale + (a - scale) / self._fsettle
        self.statistic = stat
        bit: i64 = 1 if self.sign > 0.0 else 2
        c = self.correlation
        c.quiet = (c.quiet | bit) if stat == 0.0 else (c.quiet & ~bit)
        return stat > self.threshold


def trend_break(mode: str, settings: TrendSettings, along: TrendBreak | None = None) -> TrendBreak:
    """A :class:`TrendBreak` with its hyper-parameters from config (``along``: see there)."""
    s = settings
    return TrendBreak(
        mode,
        lag=s.lag,
        span=s.span,
        slack=s.slack,
        threshold=s.threshold,
        clip=s.clip,
        settle=s.settle,
        along=along,
    )
