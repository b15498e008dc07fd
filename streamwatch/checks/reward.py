"""Reward chaos (volatility jumps) and reward collapse (a sustained drop).

Chaos: the second difference ``x[t] - 2 x[t-1] + x[t-2]`` is the curve's noise with any
local linear trend removed (a rising reward is not a noisy one). Its recent median against a
slowly adapting reference (it follows calm quickly, rising noise slowly, and freezes above
``chaos_ratio``) is the volatility ratio; above ``chaos_ratio`` for ``chaos_persist`` steps
is chaos. (ADWIN on the raw |difference| finds the same change, ~60 steps late.)

Collapse: the smoothed reward falls well below its peak, by a fraction of what the run had
gained and by many noise sds, for several steps in a row.
"""

from __future__ import annotations

import math
from statistics import median

from streamwatch.config import RewardSettings
from streamwatch.detectors import Ewma, Persistence, Window
from streamwatch.incidents import Finding, Kind, Severity

_TINY = 1e-12
_REF_ALPHA = 0.05


class RewardCheck:
    kinds: tuple[Kind, ...] = (Kind.REWARD_CHAOS, Kind.REWARD_COLLAPSE)

    def __init__(self, indicator: str, metric: str, settings: RewardSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        self.n = 0
        self.low = math.inf
        self.high = -math.inf
        self._prev = math.nan
        self._prev2 = math.nan
        self._smooth = Ewma(settings.smoothing)
        self._errors = Window(settings.chaos_window)
        self._warm_errors: list[float] = []
        self.vol_ref = math.nan
        self.start = math.nan
        self.peak = -math.inf
        self.peak_step = -1
        self._chaos = Persistence(settings.chaos_persist)
        self._collapse = Persistence(settings.collapse_persist)

    def update(self, step: int, x: float) -> list[Finding]:
        self.n += 1
        smooth = self._smooth.update(x)
        self.low = min(self.low, smooth)
        self.high = max(self.high, smooth)
        p1, p2 = self._prev, self._prev2
        self._prev2, self._prev = p1, x
        if self.n <= 2:
            return []
        error = abs(x - 2.0 * p1 + p2)
        self._errors.update(error)
        if self.n <= self.s.warmup:
            self._warm_errors.append(error)
            if self.n == self.s.warmup:
                self.vol_ref = max(median(self._warm_errors), _TINY)
                self.start = smooth
            return []
        found = []
        chaos = self._judge_chaos(step, x)
        if chaos is not None:
            found.append(chaos)
        if smooth > self.peak:
            self.peak, self.peak_step = smooth, step
        collapse = self._judge_collapse(step, x, smooth)
        if collapse is not None:
            found.append(collapse)
        return found

    def _judge_chaos(self, step: int, x: float) -> Finding | None:
        recent = self._errors.median()
        # a curve that moved over a range of 0.7 is not chaotic at noise of 0.01, however calm
        # it was before: judge against a floor that is a small fraction of that range
        floor = self.s.chaos_floor * (self.high - self.low)
        r = recent / max(self.vol_ref, floor)
        alarmed = self._chaos.update(r > self.s.chaos_ratio)
        if r < self.s.chaos_ratio:  # follow calm quickly, a rising noise slowly
            alpha = _REF_ALPHA if r < 1.5 else _REF_ALPHA / 5
            self.vol_ref += alpha * (max(recent, _TINY) - self.vol_ref)
        if not alarmed:
            return None
        severity = Severity.CRITICAL if r > 2 * self.s.chaos_ratio else Severity.WARNING
        return Finding(
            Kind.REWARD_CHAOS,
            self.indicator,
            self.metric,
            severity,
            step,
            f"reward curve turned noisy: {self.metric} step-to-step volatility is {r:.1f}x "
            "the run's own baseline",
            {
                "value": x,
                "recent_volatility": recent,
                "baseline_volatility": max(self.vol_ref, floor),
                "volatility_ratio": r,
                "window": self.s.chaos_window,
            },
            onset_step=step - self._chaos.streak - self.s.chaos_window // 2,
        )

    def _judge_collapse(self, step: int, x: float, smooth: float) -> Finding | None:
        drop = self.peak - smooth
        gain = max(self.peak - self.start, 0.0)
        noise = 1.25 * self.vol_ref / math.sqrt(6.0)  # sd of the noise behind |2nd diff|
        frac = drop / gain if gain > _TINY else math.inf
        down = drop > self.s.collapse_fraction * gain and drop > self.s.collapse_noise * noise
        if not self._collapse.update(down):
            return None
        severity = Severity.CRITICAL if frac > 2 * self.s.collapse_fraction else Severity.WARNING
        return Finding(
            Kind.REWARD_COLLAPSE,
            self.indicator,
            self.metric,
            severity,
            step,
            f"reward collapsing: {self.metric} fell {drop:.3g} from its peak "
            f"{self.peak:.3g} at step {self.peak_step}",
            {
                "value": x,
                "smoothed": smooth,
                "peak": self.peak,
                "peak_step": self.peak_step,
                "drop": drop,
                "drop_fraction_of_gain": frac,
                "noise_sd": noise,
            },
            onset_step=self.peak_step,
        )
