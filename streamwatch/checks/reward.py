"""Reward chaos (volatility jumps) and reward collapse (a sustained drop).

Chaos: the noise of the curve over the last ``chaos_window`` steps is the sd of its residuals
around a straight line fitted to those steps (a rising reward is not a noisy one). Each
step's figure joins, ``chaos_window`` steps later and only if it did not look chaotic, the
run's reference: the median of the last ``chaos_history`` such figures. Recent noise above
``chaos_ratio`` times the reference for ``chaos_persist`` steps is chaos. Estimators built
on step-to-step differences (|x[t] - x[t-1]|, second differences) swing 3x on healthy
curves by chance, with the sample autocorrelation of a short window; ADWIN on the raw
|difference| finds the change, but ~60 steps late.

Collapse: the smoothed reward falls well below its peak, by a fraction of what the run had
gained and by many noise sds, for several steps in a row.
"""

from __future__ import annotations

import math
from collections import deque

from streamwatch.config import RewardSettings
from streamwatch.detectors import Ewma, Persistence, Window
from streamwatch.incidents import Finding, Kind, Severity

_TINY = 1e-12
_MIN_REFERENCE = 10


def detrended_sd(values: deque[float]) -> float:
    """Sd of the residuals around the least-squares line through ``values`` (equally spaced).

    From sums of the values' offsets from the first one, so that curves far from zero lose no
    precision; inf when the squares overflow.

    >>> round(detrended_sd(deque([1.0, 2.0, 3.0, 4.0])), 12)
    0.0
    >>> round(detrended_sd(deque([1.0, 3.0, 1.0, 3.0])), 12)
    1.264911064067
    """
    n = len(values)
    first = values[0]
    total = sum_id = sum_dd = 0.0  # sums of d, i * d and d * d, where d = value - first
    for i, v in enumerate(values):  # one plain loop: the same sums on every Python version
        d = v - first
        total += d
        sum_id += i * d
        sum_dd += d * d
    sxx = n * (n * n - 1) / 12
    sxy = sum_id - (n - 1) / 2 * total  # sum of (i - mid) * d[i]
    sse = sum_dd - total * total / n - sxy * sxy / sxx
    if sse != sse:  # inf - inf: the squares overflowed
        return math.inf
    return math.sqrt(max(sse, 0.0) / (n - 2))


class RewardCheck:
    kinds: tuple[Kind, ...] = (Kind.REWARD_CHAOS, Kind.REWARD_COLLAPSE)

    def __init__(self, indicator: str, metric: str, settings: RewardSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        self.n = 0
        self.low = math.inf
        self.high = -math.inf
        self._smooth = Ewma(settings.smoothing)
        self._recent: deque[float] = deque(maxlen=settings.chaos_window)
        self._waiting: deque[tuple[float, bool]] = deque()
        self._reference = Window(settings.chaos_history)
        self.noise = math.nan
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
        self._recent.append(x)
        if self.n < self.s.warmup:
            return []
        if self.n == self.s.warmup:
            self.start = smooth
        found = []
        if len(self._recent) == self._recent.maxlen:
            chaos = self._judge_chaos(step, x)
            if chaos is not None:
                found.append(chaos)
        if smooth > self.peak:
            self.peak, self.peak_step = smooth, step
        if not math.isnan(self.noise):
            collapse = self._judge_collapse(step, x, smooth)
            if collapse is not None:
                found.append(collapse)
        return found

    def _judge_chaos(self, step: int, x: float) -> Finding | None:
        recent = detrended_sd(self._recent)
        if len(self._reference) >= _MIN_REFERENCE:
            self.noise = max(self._reference.median(), _TINY)
        alarm = False
        r = math.nan
        floor = math.nan
        if not math.isnan(self.noise):
            # a curve that moved over a range of 0.7 is not chaotic at noise of 0.01, however
            # calm it was before: judge against a floor that is a small fraction of that range
            floor = max(self.noise, self.s.chaos_floor * (self.high - self.low))
            r = recent / floor
            alarm = r > self.s.chaos_ratio
        self._waiting.append((recent, alarm))
        if len(self._waiting) > self.s.chaos_window:  # no overlap with the recent window
            figure, was_alarm = self._waiting.popleft()
            if not was_alarm:
                self._reference.update(figure)
        if not self._chaos.update(alarm):
            return None
        severity = Severity.CRITICAL if r > 2 * self.s.chaos_ratio else Severity.WARNING
        return Finding(
            Kind.REWARD_CHAOS,
            self.indicator,
            self.metric,
            severity,
            step,
            f"reward curve turned noisy: {self.metric} noise over the last "
            f"{self.s.chaos_window} steps is {r:.1f}x the run's own",
            {
                "value": x,
                "recent_noise_sd": recent,
                "reference_noise_sd": floor,
                "noise_ratio": r,
                "window": self.s.chaos_window,
            },
            onset_step=step - self._chaos.streak - self.s.chaos_window // 2,
        )

    def _judge_collapse(self, step: int, x: float, smooth: float) -> Finding | None:
        drop = self.peak - smooth
        gain = max(self.peak - self.start, 0.0)
        noise = self.noise
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
