"""Response length: explosion, collapse, and truncation saturation.

Healthy length drifts slowly (it may grow 2x over thousands of steps). An explosion grows
fast: the check measures growth of the smoothed length over a window and feeds river's
Page-Hinkley with the per-step log growth in noise-sd units, so only a sustained climb
accumulates; a slower one is a length that doubled within ``explosion_long_window`` steps
(healthy simulated runs grow at most 1.24x in 30 steps, the real runs 1.06x). A collapse
falls far below the run's peak. Truncation saturation is the clip ratio heading to 1: every
completion hits the max length and the run learns nothing.
"""

from __future__ import annotations

import math
from collections import deque
from statistics import median

from streamwatch.config import LengthSettings
from streamwatch.detectors import Ewma, Persistence, SustainedShift, Window
from streamwatch.incidents import Finding, Kind, Severity

_FLOOR = 1e-9


class LengthCheck:
    kinds: tuple[Kind, ...] = (Kind.LENGTH_EXPLOSION, Kind.LENGTH_COLLAPSE)

    def __init__(self, indicator: str, metric: str, settings: LengthSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        self._warm: list[float] = []
        self.ref = math.nan
        self._smooth = Ewma(settings.smoothing)
        self._recent: deque[float] = deque(maxlen=settings.growth_window + 1)
        self._long: deque[float] = deque(maxlen=settings.explosion_long_window + 1)
        self._steps = Window(30)
        self._last_log = math.nan
        self._shift = SustainedShift("up")
        self.peak = -math.inf
        self._explode = Persistence(2)
        self._collapse = Persistence(2)

    def update(self, step: int, x: float) -> list[Finding]:
        value = max(x, _FLOOR)
        smooth = self._smooth.update(value)
        log_x = math.log(value)
        step_growth = log_x - self._last_log
        self._last_log = log_x
        if len(self._warm) < self.s.warmup:
            self._warm.append(value)
            if len(self._warm) == self.s.warmup:
                self.ref = median(self._warm)
            self._steps.update(step_growth)
            return []
        noise = max(self._steps.robust_sd(), 1e-3)
        ph = self._shift.update(step_growth / noise)
        self._steps.update(step_growth)
        self._recent.append(smooth)
        self._long.append(smooth)
        self.peak = max(self.peak, smooth)
        found = []
        explosion = self._judge_explosion(step, x, smooth, ph)
        if self._explode.update(explosion is not None) and explosion is not None:
            found.append(explosion)
        collapse = self._judge_collapse(step, x, smooth)
        if self._collapse.update(collapse is not None) and collapse is not None:
            found.append(collapse)
        return found

    def _judge_explosion(self, step: int, x: float, smooth: float, ph: bool) -> Finding | None:
        growth = smooth / self._recent[0]
        to_ref = smooth / self.ref
        if growth >= self.s.explosion_growth:
            why = f"grew {growth:.2f}x in {len(self._recent) - 1} steps"
        elif ph and growth >= 1.0 + (self.s.explosion_growth - 1.0) / 2:
            why = f"is climbing steadily ({growth:.2f}x in {len(self._recent) - 1} steps)"
        elif smooth >= self.s.explosion_long_growth * (low := min(self._long)):
            since = len(self._long) - 1 - self._long.index(low)
            growth = smooth / low
            why = f"grew {growth:.2f}x in {since} steps"
        else:
            return None
        severity = Severity.CRITICAL if to_ref >= self.s.explosion_ratio else Severity.WARNING
        return Finding(
            Kind.LENGTH_EXPLOSION,
            self.indicator,
            self.metric,
            severity,
            step,
            f"response length exploding: {self.metric} {why}, {to_ref:.2f}x its start",
            {
                "value": x,
                "smoothed": smooth,
                "reference": self.ref,
                "growth_in_window": growth,
                "ratio_to_reference": to_ref,
                "page_hinkley": ph,
            },
        )

    def _judge_collapse(self, step: int, x: float, smooth: float) -> Finding | None:
        r = smooth / self.peak
        if r >= self.s.collapse_ratio:
            return None
        severity = Severity.CRITICAL if r < self.s.collapse_ratio / 2 else Severity.WARNING
        return Finding(
            Kind.LENGTH_COLLAPSE,
            self.indicator,
            self.metric,
            severity,
            step,
            f"response length collapsing: {self.metric} is {r:.2f}x its peak",
            {"value": x, "smoothed": smooth, "peak": self.peak, "ratio_to_peak": r},
        )


class TruncationCheck:
    kinds: tuple[Kind, ...] = (Kind.TRUNCATION_SATURATION,)

    def __init__(self, indicator: str, metric: str, settings: LengthSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        self._warm: list[float] = []
        self.baseline = math.nan
        self._smooth = Ewma(settings.smoothing)
        self._high = Persistence(2)

    def update(self, step: int, x: float) -> list[Finding]:
        smooth = self._smooth.update(x)
        s = self.s
        warming = len(self._warm) < s.warmup
        if warming:
            self._warm.append(x)
            if len(self._warm) == s.warmup:
                self.baseline = median(self._warm)
        if smooth >= s.truncation_absolute_warning:  # no warm-up: broken from the first step
            held = self._high.update(True)
            relative = not warming and held and smooth >= s.truncation_critical
            critical = smooth >= s.truncation_absolute_critical or relative
            return self._found(step, x, smooth, Severity.CRITICAL if critical else Severity.WARNING)
        if warming:
            return []
        rise = smooth - self.baseline
        if smooth >= s.truncation_critical:
            severity = Severity.CRITICAL
        elif smooth >= s.truncation_warning and rise >= s.truncation_rise:
            severity = Severity.WARNING
        else:
            self._high.update(False)
            return []
        if not self._high.update(True):
            return []
        return self._found(step, x, smooth, severity)

    def _found(self, step: int, x: float, smooth: float, severity: Severity) -> list[Finding]:
        evidence = {"value": x, "smoothed": smooth}
        baseline = "from the start"
        if self.baseline == self.baseline:  # known once warmed up
            evidence.update(baseline=self.baseline, rise=smooth - self.baseline)
            baseline = f"baseline {self.baseline:.1%}"
        return [
            Finding(
                Kind.TRUNCATION_SATURATION,
                self.indicator,
                self.metric,
                severity,
                step,
                f"completions truncated: {self.metric} is {smooth:.0%} ({baseline}); reward "
                "variance will vanish",
                evidence,
            )
        ]
