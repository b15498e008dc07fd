"""Generic drift, for metrics with no RL-specific check: the screen.

Most metrics a trainer logs (timings, memory, sequence-length statistics, optimiser state)
have no RL-specific check; in a verl run they are four values in five. They are screened
together, a run at a time: :func:`screen` takes one step's ``(column, value)`` pairs in one
call and does, for each, what the check needs and no more.

Each metric is a :class:`DriftColumn`. Its value, centred and scaled by its warm-up (median,
robust sd), goes to river's ADWIN window (the compiled ``AdaptiveWindowing`` that
``river.drift.ADWIN.update`` wraps, called directly). A change ADWIN finds counts only if it
is also large and new: within the next ``_CONFIRM`` steps the median of the last few values
departs from where the values before the change were heading (their own trend, extrapolated
only when it moves the same way as the change: healthy curves that fall or rise and settle
are credited with their trend) by ``min_effect_sds`` of those values' sd and by
``min_relative`` of their level. Of metrics that are copies of each other (the same values
step after step: GRPO's ``critic/advantages/mean`` and ``critic/returns/mean``) only the
first by name is reported. A generic change is reported at the configured severity (info
by default).

>>> from librt.vecs import vec
>>> from streamwatch.config import DriftSettings
>>> col = DriftColumn("perf/mfu", "perf/mfu", DriftSettings(clock=1))
>>> found = [f for i in range(40) for f in screen(i, [col], vec[float]([1.0 + 0.01 * (i % 3)]))]
>>> found = [f for step in range(40, 60) for f in screen(step, [col], vec[float]([3.0]))]
>>> [(f.kind.value, f.step) for f in found]
[('metric_drift', 46)]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

from librt.vecs import vec
from mypy_extensions import i64, mypyc_attr
from river._river_rust.drift import AdaptiveWindowing

from streamwatch.config import DriftSettings
from streamwatch.detectors.window import DoubleRing, ascending, insert, merged, sorted_median
from streamwatch.engine.findings import Finding
from streamwatch.incidents import Kind, Severity

__all__ = ["DriftColumn", "drop_copies", "screen"]

KINDS: Final[tuple[Kind, ...]] = (Kind.METRIC_DRIFT,)

_RECENT: Final = 5
_CONFIRM: Final = 15  # steps after a change found by ADWIN in which it may show its size
_HISTORY: Final = 60
_SKIP: Final = 10  # the last values at a change found by ADWIN: where the change is, not before it
_MIN_BEFORE: Final = 10  # values needed to know where the metric was heading
# river.drift.ADWIN's defaults for what the settings do not name
_MAX_BUCKETS: Final = 5
_MIN_WINDOW: Final = 5
_GRACE: Final = 10
#: the window's update, taken from its class once: called so, it is not looked up by name
#: on each value
_UPDATE: Final[Callable[[Any, float], bool]] = AdaptiveWindowing.update


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class DriftColumn:
    """The drift state of one metric: warm-up, scale, ADWIN's window, recent values."""

    __slots__ = (
        "armed",
        "center",
        "history",
        "indicator",
        "metric",
        "min_effect_sds",
        "min_relative",
        "owed",
        "reference",
        "scale",
        "settings",
        "warm",
        "warm_range",
        "window",
    )

    kinds: ClassVar[tuple[Kind, ...]] = KINDS

    def __init__(self, indicator: str, metric: str, settings: DriftSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.settings = settings
        # read at each confirmation: plain attributes, not the settings model's
        self.min_effect_sds = settings.min_effect_sds
        self.min_relative = settings.min_relative
        self.warm: list[float] | None = []
        self.center = 0.0
        self.scale = 1.0
        self.window = self._new_window()
        # zeros owed to the window while it has seen nothing else (-1 once it has): such a
        # window finds no change in a zero, so it is given them when a value that is not
        # zero comes, in order, as it would have had them (a constant metric costs no update)
        self.owed = 0
        # its last _HISTORY values, a ring of doubles: no float object a value
        self.history = DoubleRing(_HISTORY)
        self.armed = 0
        self.reference: Reference | None = None
        self.warm_range = (math.inf, -math.inf)  # its warm-up's lowest and highest values

    def _new_window(self) -> AdaptiveWindowing:
        s = self.settings
        return AdaptiveWindowing(
            delta=s.delta,
            clock=s.clock,
            max_buckets=_MAX_BUCKETS,
            min_window_length=_MIN_WINDOW,
            grace_period=_GRACE,
        )

    def end_warmup(self) -> None:
        warm = self.warm
        assert warm is not None
        self.center = center = sorted_median(ascending(warm))
        mad = 1.4826 * sorted_median(ascending([abs(v - center) for v in warm]))
        self.scale = mad or abs(center) * 0.01 or 1.0
        self.warm_range = (min(warm), max(warm))
        self.warm = None

    def recent(self) -> list[float]:
        """Its last values, oldest first."""
        return self.history.lane()

    def changed(self) -> None:
        """ADWIN found a change: a fresh window (as river's ADWIN starts one on its next
        update); the values before the last ``_SKIP`` (where the change is) become the
        reference, and the next ``_CONFIRM`` steps may show the change's size against it."""
        self.window = self._new_window()
        self.owed = 0
        values = self.history.ordered()
        n = len(values) - _SKIP
        self.reference = Reference.of(values, n) if n >= _MIN_BEFORE else None
        self.armed = _CONFIRM if self.reference is not None else 0

    def confirm(self, step: int, x: float) -> Finding | None:
        """One of the steps after a change: is it large, and not where the series was
        heading anyway?"""
        self.armed -= 1
        ref = self.reference
        assert ref is not None
        # the median of the last values: one slow step (a checkpoint save) is not a shift
        recent = self.history.middle(_RECENT)
        # steps from the reference's newer half to the recent values' centre
        ahead = ref.ahead + _SKIP + (_CONFIRM - 1 - self.armed) - (_RECENT - 1) / 2
        expected = ref.expected(recent, ahead)
        change = recent - expected
        before = ref.level
        size = max(abs(before), abs(recent))
        if not abs(change) > max(self.min_effect_sds * ref.noise, self.min_relative * size):
            return None
        s = self.settings
        self.armed = 0
        rel = f"{(recent - before) / abs(before):+.0%}" if before else "from zero"
        # the range it has shown: its warm-up and the values before the change
        low, high = min(self.warm_range[0], ref.low), max(self.warm_range[1], ref.high)
        return Finding(
            Kind.METRIC_DRIFT,
            self.indicator,
            self.metric,
            Severity(s.severity),
            step,
            f"{self.metric} shifted from ~{before:.4g} to ~{recent:.4g} ({rel})",
            {
                "value": x,
                "before": before,
                "after": recent,
                "expected": expected,
                "change": change,
                "noise_sd": ref.noise,
                "change_sds": abs(change) / ref.noise if ref.noise else math.inf,
                "range_low": low,
                "range_high": high,
            },
        )


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Reference:
    """Where a metric was and where it was heading before a change.

    ``level`` is the median of the values, ``newer`` that of their newer half and ``slope``
    the step-to-step trend between the halves' medians; ``ahead`` is how many steps the last
    value is past the newer half's centre; ``noise`` is the sd of the values (a trend only
    makes it larger; a series that takes a few values, a batch maximum, changes by whole
    jumps); ``low`` and ``high`` their range.

    >>> ref = Reference.of(vec[float]([float(i % 2) for i in range(20)]), 20)
    >>> ref.level, ref.noise, ref.expected(3.0, 10.0)
    (0.5, 0.5, 0.5)
    >>> falling = Reference.of(vec[float]([10.0 - i for i in range(25)]), 20)
    >>> falling.newer, falling.expected(-2.0, 5.0), falling.expected(-12.0, 5.0)
    (-4.5, -4.5, -9.5)
    """

    __slots__ = ("ahead", "high", "level", "low", "newer", "noise", "slope")

    def __init__(
        self,
        level: float,
        newer: float,
        slope: float,
        ahead: float,
        noise: float,
        low: float,
        high: float,
    ) -> None:
        self.level = level
        self.newer = newer
        self.slope = slope
        self.ahead = ahead
        self.noise = noise
        self.low = low
        self.high = high

    @staticmethod
    def of(values: vec[float], n: i64) -> Reference | None:
        """The reference of the first ``n`` of ``values`` (oldest first), or None if a
        figure of it is not finite. Compiled, all of it is done on doubles."""
        half = n // 2
        first = vec[float](capacity=half)
        for i in range(half):
            first = insert(first, values[i])
        second = vec[float](capacity=n - half)
        for i in range(half, n):
            second = insert(second, values[i])
        older = sorted_median(first)
        newer = sorted_median(second)
        slope = (newer - older) / (float(n) / 2.0)  # the halves' centres are n / 2 steps apart
        total = 0.0
        for i in range(n):
            total += values[i]
        mean = total / float(n)
        squares = 0.0
        for i in range(n):
            d = values[i] - mean
            squares += d * d
        sd = math.sqrt(squares / float(n))
        ordered = merged(first, second)
        low, high = ordered[0], ordered[n - 1]
        level = sorted_median(ordered)
        ahead = float(n - half - 1) / 2.0
        for x in (level, newer, slope, sd, low, high):
            if x - x != 0.0:  # a NaN or an infinity
                return None
        return Reference(level, newer, slope, ahead, sd, low, high)

    def expected(self, recent: float, ahead: float) -> float:
        """Where the values were heading, ``ahead`` steps past the newer half's centre: its
        level, or its trend extrapolated when the recent value moved the same way (and not
        past it: a curve that settles is nothing new)."""
        if self.slope * (recent - self.newer) <= 0.0:
            return self.newer
        heading = self.newer + self.slope * ahead
        return recent if (recent - heading) * (recent - self.newer) < 0.0 else heading


def screen(step: int, columns: list[DriftColumn], xs: vec[float]) -> list[Finding]:
    """One step's finite values of a run's generic metrics (``xs[i]`` of ``columns[i]``);
    what drifted.

    The loop every generic value goes through: keep it short.
    """
    found: list[Finding] = []
    cols: list[DriftColumn] = []
    for i in range(len(columns)):
        col = columns[i]
        x = xs[i]
        col.history.put(x)
        warm = col.warm
        if warm is not None:
            warm.append(x)
            if len(warm) == col.settings.warmup:
                col.end_warmup()
            continue
        z = (x - col.center) / col.scale
        owed = col.owed
        if z == 0.0 and owed >= 0:
            col.owed = owed + 1
        elif z - z == 0.0:  # a finite z (a huge x can overflow)
            window = col.window
            if owed > 0:  # compiled, the loop boxes its start even when it runs no step
                for _ in range(owed):
                    _UPDATE(window, 0.0)
            col.owed = -1
            if _UPDATE(window, z):
                col.changed()
        if col.armed:
            finding = col.confirm(step, x)
            if finding is not None:
                found.append(finding)
                cols.append(col)
    return found if len(found) < 2 else _originals(found, cols)


def _originals(found: list[Finding], cols: list[DriftColumn]) -> list[Finding]:
    """The findings of one step without those of copies: of metrics whose recent values are
    all the same, the first by name."""
    kept: list[tuple[Finding, DriftColumn]] = []
    for finding, col in sorted(zip(found, cols, strict=True), key=lambda fc: fc[0].metric):
        if not any(col.recent() == other.recent() for _, other in kept):
            kept.append((finding, col))
    return [f for f, _ in kept]


def drop_copies(found: list[Finding], metrics: Mapping[str, float]) -> list[Finding]:
    """``found`` without the drift of a metric that is a copy, in this event, of another
    metric (one the RL checks watch, say, or one that sorts before it among those found):
    its value equals the other's exactly, and is not a whole number (0 and 1 coincide by
    chance).

    >>> from streamwatch.config import DriftSettings
    >>> f = Finding(Kind.METRIC_DRIFT, "critic/rewards/mean", "critic/rewards/mean",
    ...             Severity.INFO, 7, "shifted", {"value": 0.61})
    >>> drop_copies([f], {"critic/score/mean": 0.61, "critic/rewards/mean": 0.61})
    []
    >>> len(drop_copies([f], {"critic/score/mean": 0.6, "critic/rewards/mean": 0.61}))
    1
    """
    if not found:
        return found
    drifting = {f.metric for f in found}
    kept = []
    for f in found:
        x = metrics.get(f.metric)
        if x is not None and x != round(x):
            twins = [m for m, v in metrics.items() if v == x and m != f.metric]
            if any(m not in drifting or m < f.metric for m in twins):
                continue
        kept.append(f)
    return kept
