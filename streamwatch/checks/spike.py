"""Loss / grad-norm / KL spikes that persist, and magnitudes no healthy run reaches.

A value far from the recent median (in robust sds, and a multiple of the median's size) for
``persist`` steps in a row. Single-step spikes, common in healthy runs (grad norm 60x for one
step), do not count: the median and MAD of the window ignore them. A grad norm or KL
beyond its ceiling (``grad_norm_ceiling``, ``kl_ceiling``: magnitudes at which an update
is no longer a step of an optimiser, see their descriptions) is a finding at once, from the
first step: a run whose grad norm is 3e9 from step 1 never jumps, so no comparison with its
past would see it. A grad
norm that grows slowly (no step is far from the recent median) is found as a climb
away from the run's own trend (:class:`~streamwatch.detectors.TrendBreak` on the log of the
smoothed median of the last 5 values, so the isolated spikes of healthy runs do not count).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Final

from mypy_extensions import mypyc_attr

from streamwatch.checks.base import Check
from streamwatch.config import SpikeSettings
from streamwatch.detectors import Persistence, Window, trend_break
from streamwatch.detectors.window import DoubleRing
from streamwatch.engine.findings import CRITICAL, WARNING, Finding
from streamwatch.engine.indicators import Indicator
from streamwatch.incidents import Kind

# the kinds of its findings as constants (an enum's member read from its class is a
# look-up at each use: see streamwatch.engine.findings.WARNING)
_SPIKE: Final = Kind.METRIC_SPIKE

_SD_PER_MEAN_ABS: Final = math.sqrt(math.pi / 2)  # sd / mean |x| of Gaussian noise


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class SpikeCheck(Check):
    kinds: tuple[Kind, ...] = (Kind.METRIC_SPIKE,)

    def __init__(
        self,
        indicator: str,
        metric: str,
        settings: SpikeSettings,
        ceiling: float | None = None,
        growth: bool | None = None,
    ) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        # read on every value: plain typed attributes, not the settings model's
        self._robust_z = settings.robust_z
        self._range_recent = settings.range_recent
        self.ceiling = ceiling
        self._window = Window(settings.window)
        self._beyond_median = settings.factor - 1.0  # how far from the median, in its size
        self._spiking = Persistence(settings.persist)
        self.first_step = -1
        # the grad norm (by default) is also watched for slow growth: a healthy KL grows
        # 10-50x early in a run, a loss is signed
        if growth is None:
            growth = indicator == Indicator.GRAD_NORM.value
        self._growth = trend_break("up", settings.growth_trend) if growth else None
        self._last = DoubleRing(5)  # the last 5 values, this one included
        self._growing = False
        self._level_factor = settings.growth_factor
        self._far = Persistence(settings.growth_persist)
        # the growth counts only beyond the run's own range: the smoothed values before it
        self._range = DoubleRing(settings.range_window)
        self.beyond = 0  # logged values in a row beyond the ceiling
        # a KL estimate this small is no spike however it moves against its median
        self.floor = settings.kl_floor if indicator == Indicator.KL.value else 0.0

    def update(self, step: int, x: float) -> list[Finding]:
        if self._growth is not None:
            grown = self._grown(step, x)
            if grown is not None:
                self._window.update(x)
                return [grown]
        w = self._window
        ceiling = self.ceiling
        if ceiling is not None and abs(x) >= ceiling:
            w.update(x)
            self._spiking.update(False)  # judged by its size: not the start of a spike
            self.beyond += 1
            return [self._beyond(step, x, ceiling)]
        self.beyond = 0
        if not w.full:
            w.update(x)
            return []
        med = w.median()
        dist = abs(x - med)
        # the size test first: it is cheap, and most values fail it (no spread needed then)
        spike = dist > self._beyond_median * abs(med) and abs(x) >= self.floor
        sd = math.nan
        if spike:
            sd = max(w.robust_sd(), 1e-12)
            ordered = w.ascending()
            if ordered[0] <= 0.0:
                # a series that reaches 0 (a signed loss, a KL around 0, values logged
                # rounded to 0): "times the median" says nothing, and most of its values
                # may be one rounded number (a MAD of 0); its spread is at least the mean
                # absolute deviation, as a Gaussian sd
                spread = 0.0
                for v in ordered:  # a loop, not sum(): no float object per value compiled
                    spread += abs(v - med)
                sd = max(sd, _SD_PER_MEAN_ABS * spread / float(len(ordered)))
            spike = dist > self._robust_z * sd
        w.update(x)
        if spike and self._spiking.streak == 0:
            self.first_step = step
        if spike and self._growth is not None and not self._beyond_range(x):
            spike = False  # a magnitude back where the run had it: inside its own range
        if not self._spiking.update(spike):
            return []
        size = x / med if med else float("inf")
        # a multiple of a median within its own noise of 0 (a signed loss, a KL around 0)
        # means nothing: such a spike is a warning however large the multiple
        sized = abs(med) > self._robust_z * sd
        big = sized and abs(size) >= 10 * self.s.factor
        severity = CRITICAL if big else WARNING
        return [
            Finding(
                _SPIKE,
                self.indicator,
                self.metric,
                severity,
                step,
                f"{self.metric} spiking for {self._spiking.streak} steps: {x:.4g} against a "
                f"recent median of {med:.4g}",
                {
                    "value": x,
                    "window_median": med,
                    "window_robust_sd": sd,
                    "robust_z": dist / sd,
                    "times_median": size,
                    "steps_spiking": self._spiking.streak,
                },
                onset_step=self.first_step,
                rule="spike",
            )
        ]

    def _beyond_range(self, x: float) -> bool:
        """Is ``x`` above the run's own range (the smoothed values before the last
        ``range_recent``; True while that range is not known)?"""
        if len(self._range) <= self._range_recent:
            return True
        return x > self._range_high()

    def _range_high(self) -> float:
        """The highest smoothed value before the last ``range_recent`` (more are kept)."""
        return self._range.highest(but=self._range_recent)

    def _beyond(self, step: int, x: float, ceiling: float) -> Finding:
        """A value no healthy run reaches, whatever came before (no warm-up); one such step
        is an outlier until it persists (:mod:`streamwatch.checks.judge`)."""
        return Finding(
            _SPIKE,
            self.indicator,
            self.metric,
            WARNING,
            step,
            f"{self.metric} is {x:.4g}, beyond any healthy run's (ceiling {ceiling:.4g})",
            {
                "value": x,
                "ceiling": ceiling,
                "times_ceiling": abs(x) / ceiling,
                "steps_beyond": self.beyond,
            },
            onset_step=step - self.beyond + 1,
            rule="ceiling",
        )

    def _grown(self, step: int, x: float) -> Finding | None:
        """A magnitude climbing away from its own trend, from the second warning on."""
        growth = self._growth
        assert growth is not None
        if x <= 0.0:  # a signed estimate: only the spike test applies
            self._growth = None
            return None
        last = self._last
        last.put(x)
        if not last.full:
            return None
        smooth = last.middle(5)  # the median of the last 5: one spike moves it not
        self._range.put(smooth)
        if growth.update(math.log(smooth), math.log(x)):
            self._growing = True  # until the evidence is back at 0
        elif growth.statistic == 0.0:
            self._growing = False
        # inside the run's own range (the smoothed values of the steps before the last
        # ``range_recent``): a return to where it was is no growth, until it leaves it
        kept = len(self._range) - self._range_recent
        if kept <= 0:
            return None
        # or grown by a practical size: several times the range's median, step after step
        # (a concave climb, fast then slowing, is extrapolated by the trend break once it
        # has climbed a while; its size is not)
        level = smooth / self._level_factor
        above = 2 * self._range.at_most(level, but=self._range_recent) > kept
        far = self._far.update(above)
        if not self._growing and not far:
            return None
        high = self._range_high()
        if smooth <= high:
            return None
        metric = self.metric
        evidence: dict[str, object] = {
            "value": x,
            "trend_break_sds": growth.statistic,
            "range_high": high,
        }
        words = partial(_growth_words, metric, x, high)
        if far and not self._growing:
            evidence["times_range_median"] = self._level_factor
            evidence["steps_grown"] = self._far.streak
            words = partial(_level_words, metric, x, self._level_factor, self._far.streak)
        return Finding(
            _SPIKE, self.indicator, metric, WARNING, step, words, evidence, rule="growth"
        )


def _level_words(metric: str, x: float, factor: float, steps: int) -> str:
    return (
        f"{metric} grown: {x:.4g}, its median of 5 at {factor:g}x or more its own range's "
        f"median for {steps} logged steps"
    )


def _growth_words(metric: str, x: float, high: float) -> str:
    return f"{metric} growing away from its own trend: {x:.4g}, beyond its own range ({high:.4g})"
