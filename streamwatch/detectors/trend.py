"""A break in a series' own trend, found by a one-sided CUSUM of the departure from it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

from mypy_extensions import i64, mypyc_attr

from streamwatch.detectors.window import DoubleRing

if TYPE_CHECKING:
    from streamwatch.config import TrendSettings

_SD_PER_MEAN_ABS: Final = math.sqrt(math.pi / 2)  # sd / mean |x| of Gaussian noise


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
        "along",
        "clip",
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
        # the last lag + span + 1 values, a ring of doubles: the one of the detector this one
        # is built along, if any (it puts each value in; this one only reads)
        if along is not None and (along.lag != lag or along.span != span):
            along = None
        self.along = along
        self.ring: DoubleRing = DoubleRing(lag + span + 1) if along is None else along.ring
        self.n: i64 = 0
        self._abs = 0.0
        self.scale = math.nan
        self.statistic = 0.0

    def update(self, y: float) -> bool:
        """Feed one value; True while the evidence of a break is above the threshold."""
        if y - y != 0.0:  # nan or inf: ignored
            return False
        ring = self.ring
        if self.along is None:
            ring.put(y)
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
        slope = (then - values[head]) / float(span)
        if self.sign > 0.0:
            r = y - then - (slope * float(self.lag) if slope > 0.0 else 0.0)
        else:
            r = then - y + (slope * float(self.lag) if slope < 0.0 else 0.0)
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
        stat = self.statistic + (z if z < self.clip else self.clip) - self.slack
        if stat <= 0.0:
            stat = 0.0
            if a > 4.0 * scale:
                a = 4.0 * scale
            self.scale = scale + (a - scale) / float(self.settle)
        self.statistic = stat
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
