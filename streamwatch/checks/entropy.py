"""Entropy collapse and blow-up.

Healthy entropy falls 3-8x early in training and settles; a collapse keeps falling towards
zero, a blow-up climbs back far above where it settled (gibberish). The check judges the
EWMA-smoothed entropy against the run's own start (median of the warm-up) and its own
minimum, plus the fall rate over a window. Mean token probability tells the same story
upside down: with ``invert=True`` the check watches ``1 - p``.
"""

from __future__ import annotations

import math
from functools import partial
from statistics import median
from typing import Final

from mypy_extensions import mypyc_attr

from streamwatch.checks.base import Check, fall_word, ratio
from streamwatch.config import EntropySettings
from streamwatch.detectors import Ewma, Persistence, trend_break
from streamwatch.detectors.ewma import LIMIT
from streamwatch.detectors.window import DoubleRing
from streamwatch.engine.findings import CRITICAL, WARNING, Finding
from streamwatch.incidents import Kind

# the kinds of its findings as constants (an enum's member read from its class is a
# look-up at each use: see streamwatch.engine.findings.WARNING)
_COLLAPSE: Final = Kind.ENTROPY_COLLAPSE
_BLOWUP: Final = Kind.ENTROPY_BLOWUP

_FLOOR: Final = 1e-9


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class EntropyCheck(Check):
    kinds: tuple[Kind, ...] = (Kind.ENTROPY_COLLAPSE, Kind.ENTROPY_BLOWUP)

    def __init__(
        self, indicator: str, metric: str, settings: EntropySettings, invert: bool = False
    ) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        # read on every value: plain typed attributes, not the settings model's
        self._warmup = settings.warmup
        self._blowup_ratio = settings.blowup_ratio
        self._rebound_factor = settings.rebound_factor
        self._critical_ratio = settings.collapse_critical_ratio
        self._collapse_ratio = settings.collapse_ratio
        self._fall_factor = settings.fall_factor
        self._fall_min_ratio = settings.fall_min_ratio
        self.invert = invert
        self._warm: list[float] = []
        self.ref = math.nan
        self._smooth = Ewma(settings.smoothing, limit=LIMIT)
        # the last fall_window + 1 smoothed values
        self._recent = DoubleRing(settings.fall_window + 1)
        self.low = math.inf
        self._collapse = Persistence(2)
        self._blowup = Persistence(2)
        self._falling = trend_break("down", settings.collapse_trend)
        self._rising = trend_break("up", settings.blowup_trend, along=self._falling)
        s = settings
        self._no_collapse = max(s.collapse_critical_ratio, s.collapse_ratio, s.fall_min_ratio)

    def update(self, step: int, x: float) -> list[Finding]:
        value = max(1.0 - x if self.invert else x, _FLOOR)
        smooth = self._smooth.update(value)
        if len(self._warm) < self._warmup:
            self._warm.append(value)
            if len(self._warm) == self._warmup:
                self.ref = max(median(self._warm), _FLOOR)
            return []
        self._recent.put(smooth)
        self.low = min(self.low, smooth)
        log_smooth = math.log(smooth)
        falling = self._falling.update(log_smooth, math.log(value))
        rising = self._rising.update(log_smooth)
        found = []
        collapse = self._judge_collapse(step, smooth, x, falling)
        if self._collapse.update(collapse is not None) and collapse is not None:
            found.append(collapse)
        blowup = self._judge_blowup(step, smooth, x, rising)
        if self._blowup.update(blowup is not None) and blowup is not None:
            found.append(blowup)
        return found

    def _evidence(self, smooth: float, x: float) -> dict[str, float]:
        return {
            "value": x,
            "smoothed": self._shown(smooth),
            "reference": self._shown(self.ref),
            "ratio_to_reference": smooth / self.ref,
            "run_minimum": self._shown(self.low),
        }

    def _shown(self, v: float) -> float:
        return 1.0 - v if self.invert else v

    def _judge_collapse(self, step: int, smooth: float, x: float, falling: bool) -> Finding | None:
        r = smooth / self.ref
        if r >= self._no_collapse and not falling:
            return None  # well above every ratio that could be a collapse: the common case
        fall = ratio(self._recent.oldest(), smooth) if self._recent.full else 1.0
        rule = "level"
        if r < self._critical_ratio:
            severity, why = CRITICAL, f"is {r:.3f}x its start"
        elif r < self._collapse_ratio:
            severity, why = WARNING, f"is {r:.3f}x its start"
        elif fall >= self._fall_factor and r < self._fall_min_ratio:
            severity, rule = WARNING, "rate"
            why = f"fell {fall:.1f}x in {self.s.fall_window} steps to {r:.3f}x its start"
        elif falling:
            severity, rule = WARNING, "trend"
            why = f"is falling faster than its own trend ({r:.3f}x its start)"
        else:
            return None
        evidence = self._evidence(smooth, x)
        evidence["fall_in_window"] = fall
        evidence["trend_break_sds"] = self._falling.statistic
        what = f"entropy {fall_word(r)}"
        if self.invert:
            what += " (token probability rising towards 1)"
        return Finding(
            _COLLAPSE,
            self.indicator,
            self.metric,
            severity,
            step,
            f"{what}: {self.metric} {why}",
            evidence,
            rule=rule,
        )

    def _judge_blowup(self, step: int, smooth: float, x: float, rising: bool) -> Finding | None:
        above_start = smooth / self.ref
        above_low = smooth / self.low
        if above_start > self._blowup_ratio:
            rule = "level"
        elif above_low > self._rebound_factor:
            rule = "rebound"
        elif rising:
            rule = "trend"
        else:
            return None
        severity = CRITICAL if above_start > 2 * self._blowup_ratio else WARNING
        evidence = self._evidence(smooth, x)
        evidence["ratio_to_minimum"] = above_low
        evidence["trend_break_sds"] = self._rising.statistic
        metric = self.metric
        return Finding(
            _BLOWUP,
            self.indicator,
            metric,
            severity,
            step,
            partial(_blowup_words, metric, rule, above_start, above_low),
            evidence,
            rule=rule,
        )


def _blowup_words(metric: str, rule: str, above_start: float, above_low: float) -> str:
    if rule == "level":
        why = f"is {above_start:.2f}x its start"
    elif rule == "rebound":
        why = f"climbed {above_low:.2f}x above the run's minimum"
    else:
        why = f"is climbing away from its own trend ({above_low:.2f}x the run's minimum)"
    return f"entropy blowing up (gibberish risk): {metric} {why}"
