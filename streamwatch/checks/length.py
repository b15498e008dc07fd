"""Response length: explosion, collapse, and truncation saturation.

Healthy length drifts slowly (it may grow 2x over thousands of steps). An explosion grows
fast: the check measures growth of the smoothed length over a window of logged values, a
rate compounded over the span when a sparse log's window spans more than
``explosion_long_window`` steps (or half that growth with half the trend evidence below); a
slower one is a length that doubled
within ``explosion_long_window`` training steps (a practical size: a length that doubles is
twice the compute a step). Steps, not logged values: a run that logs every 5 steps and
doubles its length over 140 steps lengthens as reasoning RL does, 2-4x over hundreds of
steps. Or, from its first steps, a climb of the log smoothed
length away from the run's own trend (:class:`~streamwatch.detectors.TrendBreak`: the
healthy drift is extrapolated, a new climb adds up step after step). A collapse falls far
below the run's peak, or below the run's own trend in the same way. Truncation saturation is
the clip ratio heading to 1: every completion hits the max length and the run learns
nothing; a clip ratio that climbs away from its own trend is the same failure building up.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Final

from librt.vecs import append, vec
from mypy_extensions import i64, mypyc_attr

from streamwatch.checks.base import Check, fall_word
from streamwatch.config import LengthSettings
from streamwatch.detectors import Ewma, Persistence, trend_break
from streamwatch.detectors.ewma import LIMIT
from streamwatch.detectors.window import INTERPRETED, DoubleRing
from streamwatch.engine.findings import CRITICAL, WARNING, Finding
from streamwatch.incidents import Kind

# the kinds of its findings as constants (an enum's member read from its class is a
# look-up at each use: see streamwatch.engine.findings.WARNING)
_EXPLOSION: Final = Kind.LENGTH_EXPLOSION
_SHORTENING: Final = Kind.LENGTH_COLLAPSE
_SATURATION: Final = Kind.TRUNCATION_SATURATION

_FLOOR: Final = 1e-9


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class LengthCheck(Check):
    kinds: tuple[Kind, ...] = (Kind.LENGTH_EXPLOSION, Kind.LENGTH_COLLAPSE)

    def __init__(self, indicator: str, metric: str, settings: LengthSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        # read on every value: plain typed attributes, not the settings model's
        self._warmup = settings.warmup
        self._growth = settings.explosion_growth
        self._long_growth = settings.explosion_long_growth
        self._long_window = settings.explosion_long_window
        self._climbing = settings.explosion_trend.threshold / 2
        self._collapse_ratio = settings.collapse_ratio
        self._warm: list[float] = []
        self.ref = math.nan
        self._smooth = Ewma(settings.smoothing, limit=LIMIT)
        # the last growth_window + 1 smoothed values, and their steps
        self._recent = DoubleRing(settings.growth_window + 1)
        self._recent_steps = DoubleRing(settings.growth_window + 1)
        # (step, smoothed length) of the last explosion_long_window steps: steps, not logged
        # values (a run that logs every 5 steps covers 150 steps in 30 values)
        self._long_steps: vec[i64] = vec[i64]()  # two vectors: no tuple nor object a value
        self._long: vec[float] = vec[float]()
        self._long_start = 0  # the first of them in the window (those before: to be dropped)
        self._rising = trend_break("up", settings.explosion_trend)
        self._falling = trend_break("down", settings.collapse_trend, along=self._rising)
        self.peak = -math.inf
        self._explode = Persistence(2)
        self._collapse = Persistence(2)

    def update(self, step: int, x: float) -> list[Finding]:
        value = max(x, _FLOOR)
        smooth = self._smooth.update(value)
        log_smooth = math.log(smooth)
        rising = self._rising.update(log_smooth, math.log(value))
        falling = self._falling.update(log_smooth)
        if len(self._warm) < self._warmup:
            self._warm.append(value)
            if len(self._warm) == self._warmup:
                self.ref = median(self._warm)
            return []
        self._recent.put(smooth)
        self._recent_steps.put(float(step))
        self._long_steps = steps = append(self._long_steps, step)
        self._long = append(self._long, smooth)
        start: i64 = self._long_start
        while step - steps[start] > self._long_window:
            start += 1
        if start > 64 and 2 * start > len(steps):  # dropped in bulk, not one at each value
            self._long_steps = steps[start:]
            self._long = self._long[start:]
            start = 0
        self._long_start = start
        self.peak = max(self.peak, smooth)
        found = []
        explosion = self._judge_explosion(step, x, smooth, rising)
        if self._explode.update(explosion is not None) and explosion is not None:
            found.append(explosion)
        collapse = self._judge_collapse(step, x, smooth, falling)
        if self._collapse.update(collapse is not None) and collapse is not None:
            found.append(collapse)
        return found

    def _judge_explosion(self, step: int, x: float, smooth: float, rising: bool) -> Finding | None:
        to_ref = smooth / self.ref
        half = 1.0 + (self._growth - 1.0) / 2
        if to_ref < half:
            # grown means above the run's start, by the least growth any rule counts: a
            # length climbing back from a dip (a model that learns a format shortens its
            # answers in its first steps, then lengthens them again) is no explosion
            return None
        # fast: explosion_growth over the window of logged values. A sparse log's window spans
        # more steps; over more than explosion_long_window steps (an explosion's time scale)
        # the growth is a rate compounded over the span (a log every 10 steps that grew 1.5x
        # over its last 10 values grew over 100 steps: reasoning RL's 2-4x over hundreds)
        growth = smooth / self._recent.oldest()
        span = float(step) - self._recent_steps.oldest()
        per = max(1.0, span / self._long_window)
        steps = int(span)
        # a climb with half the evidence, but fast: half the window's growth threshold
        climbing = self._rising.statistic > self._climbing
        rule = "fast"  # within growth_window steps
        if growth >= self._growth**per:
            why = f"grew {growth:.2f}x in {steps} steps"
        elif climbing and growth >= half**per:
            why = f"is climbing steadily ({growth:.2f}x in {steps} steps)"
        elif rising:
            rule, why = "trend", f"is climbing away from its own trend ({growth:.2f}x in a window)"
        elif smooth >= self._long_growth * self._long[at := _lowest(self._long, self._long_start)]:
            rule = "slow"  # within explosion_long_window steps
            since = step - self._long_steps[at]
            growth = smooth / self._long[at]
            why = f"grew {growth:.2f}x in {since} steps"
        else:
            return None
        severity = CRITICAL if to_ref >= self.s.explosion_ratio else WARNING
        return Finding(
            _EXPLOSION,
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
                "trend_break_sds": self._rising.statistic,
            },
            rule=rule,
        )

    def _judge_collapse(self, step: int, x: float, smooth: float, falling: bool) -> Finding | None:
        r = smooth / self.peak
        if r < self._collapse_ratio:
            why = f"is {r:.2f}x its peak"
        elif falling:
            why = f"is falling away from its own trend ({r:.2f}x its peak)"
        else:
            return None
        severity = CRITICAL if r < self._collapse_ratio / 2 else WARNING
        return Finding(
            _SHORTENING,
            self.indicator,
            self.metric,
            severity,
            step,
            f"response length {fall_word(r)}: {self.metric} {why}",
            {
                "value": x,
                "smoothed": smooth,
                "peak": self.peak,
                "ratio_to_peak": r,
                "trend_break_sds": self._falling.statistic,
            },
        )


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class TruncationCheck(Check):
    """The clip ratio's level and its climb; how severe each finding is, the run's context
    decides (:mod:`streamwatch.checks.judge`: a high ratio that falls while the reward rises
    is the policy learning to finish before the cap). A climb above its own trend counts only
    from ``truncation_floor``: a ratio of 0.05% rising to 0.3% breaks its trend by many sds
    and is one or two completions of a batch."""

    kinds: tuple[Kind, ...] = (Kind.TRUNCATION_SATURATION,)

    def __init__(self, indicator: str, metric: str, settings: LengthSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        # read on every value: plain typed attributes, not the settings model's
        self._warmup = settings.warmup
        self._absolute_warning = settings.truncation_absolute_warning
        self._warning = settings.truncation_warning
        self._rise = settings.truncation_rise
        self._floor = settings.truncation_floor
        self._warm: list[float] = []
        self.baseline = math.nan
        self._smooth = Ewma(settings.smoothing, limit=LIMIT)
        self._high = Persistence(2)
        self._rising = trend_break("up", settings.truncation_trend)
        self.steps_high = 0  # steps in a row of a level finding

    def update(self, step: int, x: float) -> list[Finding]:
        smooth = self._smooth.update(x)
        rising = self._rising.update(smooth, x)
        warming = len(self._warm) < self._warmup
        if warming:
            self._warm.append(x)
            if len(self._warm) == self._warmup:
                self.baseline = median(self._warm)
        if smooth >= self._absolute_warning:  # no warm-up: broken from the first step
            self.steps_high += 1
            self._high.update(True)
            return self._found(step, x, smooth, "level")
        if warming:
            self.steps_high = 0
            return []
        rise = smooth - self.baseline
        if smooth >= self._warning and rise >= self._rise:
            rule = "level"
            self.steps_high += 1
        elif rising and smooth >= self._floor:
            rule = "trend"
        else:
            self.steps_high = 0
            self._high.update(False)
            return []
        if rule != "level":
            self.steps_high = 0
        if not self._high.update(True):
            return []
        return self._found(step, x, smooth, rule)

    def _found(self, step: int, x: float, smooth: float, rule: str) -> list[Finding]:
        evidence = {
            "value": x,
            "smoothed": smooth,
            "steps_high": self.steps_high,
            "trend_break_sds": self._rising.statistic,
        }
        baseline = "from the start"
        if self.baseline == self.baseline:  # known once warmed up
            evidence.update(baseline=self.baseline, rise=smooth - self.baseline)
            baseline = f"baseline {self.baseline:.1%}"
        return [
            Finding(
                _SATURATION,
                self.indicator,
                self.metric,
                WARNING,
                step,
                f"completions truncated: {self.metric} is {smooth:.0%} ({baseline})",
                evidence,
                rule=rule,
            )
        ]


def _lowest(values: vec[float], start: i64) -> i64:
    """Where the lowest of ``values[start:]`` is (the first, if it is there more than once):
    a loop, not ``min`` of a slice, which compiled makes a list and compares float objects.

    >>> _lowest(vec[float]([1.0, 5.0, 2.0, 4.0, 2.0]), 1)
    2
    """
    if INTERPRETED:  # C's min and index: a loop here is many times slower, interpreted
        tail = list(values[start:])
        return start + tail.index(min(tail))
    at, low = start, values[start]
    for i in range(start + 1, len(values)):
        if values[i] < low:
            at, low = i, values[i]
    return at
