"""Generic drift, for metrics with no RL-specific check: the screen.

Most metrics a trainer logs (timings, memory, sequence-length statistics, optimiser state)
have no RL-specific check; in a verl run they are four values in five. They are screened
together, a run at a time: :func:`screen` takes one step's ``(column, value)`` pairs in one
call and does, for each, what the check needs and no more.

Each metric is a :class:`DriftColumn`. Its value, centred and scaled by its warm-up (median,
robust sd), goes to river's ADWIN window (the compiled ``AdaptiveWindowing`` that
``river.drift.ADWIN.update`` wraps, called directly). A change ADWIN finds counts only if it
is also large: within the next few steps the mean of the last few values differs from the
median before them by 20% of its size. Healthy RL curves all trend, so a generic change is
reported at the configured severity (info by default).

>>> from streamwatch.config import DriftSettings
>>> col = DriftColumn("perf/mfu", "perf/mfu", DriftSettings(clock=1))
>>> found = screen(0, [(col, 1.0 + 0.01 * (i % 3)) for i in range(40)])
>>> found = [f for step in range(40, 60) for f in screen(step, [(col, 3.0)])]
>>> [(f.kind.value, f.step) for f in found]
[('metric_drift', 46)]
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from statistics import fmean, median

from river._river_rust.drift import AdaptiveWindowing

from streamwatch.config import DriftSettings
from streamwatch.incidents import Finding, Kind, Severity

__all__ = ["DriftColumn", "screen"]

KINDS: tuple[Kind, ...] = (Kind.METRIC_DRIFT,)

_RECENT = 5
_HISTORY = 30
_MIN_RELATIVE = 0.2
# river.drift.ADWIN's defaults for what the settings do not name
_MAX_BUCKETS = 5
_MIN_WINDOW = 5
_GRACE = 10


class DriftColumn:
    """The drift state of one metric: warm-up, scale, ADWIN's window, recent values."""

    __slots__ = (
        "armed",
        "center",
        "history",
        "indicator",
        "metric",
        "scale",
        "settings",
        "warm",
        "window",
    )

    kinds = KINDS

    def __init__(self, indicator: str, metric: str, settings: DriftSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.settings = settings
        self.warm: list[float] | None = []
        self.center = 0.0
        self.scale = 1.0
        self.window = self._new_window()
        self.history: deque[float] = deque(maxlen=_HISTORY)
        self.armed = 0

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
        self.center = center = median(warm)
        mad = 1.4826 * median(abs(v - center) for v in warm)
        self.scale = mad or abs(center) * 0.01 or 1.0
        self.warm = None

    def changed(self) -> None:
        """ADWIN found a change: a fresh window (as river's ADWIN starts one on its next
        update), and the next few steps confirm the change's size."""
        self.window = self._new_window()
        self.armed = _RECENT

    def confirm(self, step: int, x: float) -> Finding | None:
        """One of the steps after a change: is it large?"""
        self.armed -= 1
        values = list(self.history)
        recent = fmean(values[-_RECENT:])
        before = median(values[:-_RECENT]) if len(values) > _RECENT else recent
        change = recent - before
        size = max(abs(before), abs(recent))
        if abs(change) <= _MIN_RELATIVE * size or not math.isfinite(change):
            return None
        self.armed = 0
        rel = f"{change / abs(before):+.0%}" if before else "from zero"
        return Finding(
            Kind.METRIC_DRIFT,
            self.indicator,
            self.metric,
            Severity(self.settings.severity),
            step,
            f"{self.metric} shifted from ~{before:.4g} to ~{recent:.4g} ({rel})",
            {"value": x, "before": before, "after": recent, "change": change},
        )


def screen(step: int, values: Iterable[tuple[DriftColumn, float]]) -> list[Finding]:
    """One step's finite values of a run's generic metrics; what drifted.

    The loop every generic value goes through: keep it short.
    """
    found: list[Finding] = []
    for col, x in values:
        col.history.append(x)
        warm = col.warm
        if warm is not None:
            warm.append(x)
            if len(warm) == col.settings.warmup:
                col.end_warmup()
            continue
        z = (x - col.center) / col.scale
        if z - z == 0.0 and col.window.update(z):  # a finite z (a huge x can overflow)
            col.changed()
        if col.armed:
            finding = col.confirm(step, x)
            if finding is not None:
                found.append(finding)
    return found
