"""Generic drift, for metrics with no RL-specific check.

The value, centred and scaled by its warm-up (median, robust sd), goes to river's ADWIN.
A change ADWIN finds counts only if it is also large: within the next few steps the mean
of the last few values differs from the median before them by 20% of its size. Healthy RL curves all
trend, so a generic change is reported at the configured severity (info by default).
"""

from __future__ import annotations

import math
from collections import deque
from statistics import fmean, median

from streamwatch.config import DriftSettings
from streamwatch.detectors import LevelShift
from streamwatch.incidents import Finding, Kind, Severity

_RECENT = 5
_HISTORY = 30
_MIN_RELATIVE = 0.2


class DriftCheck:
    kinds: tuple[Kind, ...] = (Kind.METRIC_DRIFT,)

    def __init__(self, indicator: str, metric: str, settings: DriftSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        self._warm: list[float] | None = []
        self.center = 0.0
        self.scale = 1.0
        self._adwin = LevelShift(delta=settings.delta, clock=settings.clock)
        self._history: deque[float] = deque(maxlen=_HISTORY)
        self._armed = 0

    def update(self, step: int, x: float) -> list[Finding]:
        self._history.append(x)  # the engine passes finite values only
        if self._warm is not None:
            self._warm.append(x)
            if len(self._warm) == self.s.warmup:
                self.center = median(self._warm)
                mad = 1.4826 * median(abs(v - self.center) for v in self._warm)
                self.scale = mad or abs(self.center) * 0.01 or 1.0
                self._warm = None
            return []
        if self._adwin.update((x - self.center) / self.scale):
            self._armed = _RECENT  # ADWIN saw a change: confirm its size over the next steps
        if not self._armed:
            return []
        self._armed -= 1
        values = list(self._history)
        recent = fmean(values[-_RECENT:])
        before = median(values[:-_RECENT]) if len(values) > _RECENT else recent
        change = recent - before
        size = max(abs(before), abs(recent))
        if abs(change) <= _MIN_RELATIVE * size or not math.isfinite(change):
            return []
        self._armed = 0
        rel = f"{change / abs(before):+.0%}" if before else "from zero"
        return [
            Finding(
                Kind.METRIC_DRIFT,
                self.indicator,
                self.metric,
                Severity(self.s.severity),
                step,
                f"{self.metric} shifted from ~{before:.4g} to ~{recent:.4g} ({rel})",
                {"value": x, "before": before, "after": recent, "change": change},
            )
        ]
