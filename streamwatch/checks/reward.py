"""Reward chaos (volatility jumps) and reward collapse (a sustained drop).

Chaos: the noise of the curve over the last ``chaos_window`` steps is the sd of its residuals
around a straight line fitted to those steps (a rising reward is not a noisy one). Each
step's figure joins, ``chaos_window`` steps later and only if it did not look chaotic, the
run's reference: the median of the last ``chaos_history`` such figures. Recent noise above
``chaos_ratio`` times the reference for ``chaos_persist`` steps is chaos. Estimators built
on step-to-step differences (|x[t] - x[t-1]|, second differences) swing 3x on healthy
curves by chance, with the sample autocorrelation of a short window; ADWIN on the raw
|difference| finds the change, but ~60 steps late.

A slow rise of the noise never makes a window 3x noisier before it is far along: beside
the windows, a CUSUM of the log-likelihood ratio of "the noise sd is ``chaos_cusum_ratio``
times the run's own" over each step's second difference (x[t] - 2 x[t-1] + x[t-2], blind to
a straight trend; its square in units of the run's noise clipped at 9, so one outlier is not
chaos) adds the evidence of every step; above ``chaos_cusum_threshold`` it is chaos too.
Its unit is the run's own: the median window sd is below the sd of heavy-tailed noise
(detrended train rewards have excess kurtosis), whose bends would then count as growth step
after step; once 50 calm steps are known, a squared bend is divided by how much the calm
ones exceed what Gaussian noise gives (never multiplied). The price: the calm steps before
a slow rise is shown include its start, so a gradual chaos is found a few steps later.

Collapse: the smoothed reward falls well below its peak, by a fraction of what the run had
gained and by many noise sds, for several steps in a row; or, sooner for a slow slide, it
falls away from the run's own trend step after step
(:class:`~streamwatch.detectors.TrendBreak`: a rising reward is credited with its rise only
as a level, a falling one with its fall).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Final

from librt.vecs import vec
from mypy_extensions import i64, mypyc_attr

from streamwatch.checks.base import Check, fall_word
from streamwatch.config import RewardSettings
from streamwatch.detectors import Ewma, Persistence, Window, trend_break
from streamwatch.detectors.ewma import LIMIT
from streamwatch.detectors.window import DoubleRing, insert
from streamwatch.engine.findings import CRITICAL, WARNING, Finding
from streamwatch.incidents import Kind

# the kinds of its findings as constants (an enum's member read from its class is a
# look-up at each use: see streamwatch.engine.findings.WARNING)
_CHAOS: Final = Kind.REWARD_CHAOS
_COLLAPSE: Final = Kind.REWARD_COLLAPSE

_TINY: Final = 1e-12
_MIN_REFERENCE: Final = 10
_CLIP_SQUARE: Final = 9.0  # most a second difference's square (in noise units) counts
_MIN_BENDS: Final = 50  # calm steps before the CUSUM's unit is the run's own squared bends
#: the mean of that clipped square for Gaussian noise, in units of the median of its
#: windows' sds (20,000 draws: 1.07; Student-t with 3 degrees of freedom: 1.17)
_GAUSSIAN_BEND: Final = 1.07


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class LineNoise:
    """Sd of the residuals around the least-squares line through the last ``size`` values
    (equally spaced): how noisy a window of a curve is, its trend aside.

    Kept from running sums of the values' offsets from a base value (sums of d, i * d and
    d * d), updated in a few operations a value; every ``size`` values the sums are computed
    afresh from the window, based on its first value, so that curves far from zero lose no
    precision and rounding does not pile up. inf when the squares overflow; NaN until the
    window is full.

    >>> noise = LineNoise(4)
    >>> [round(noise.update(x), 12) for x in [1.0, 2.0, 3.0, 4.0, 5.0, 3.0, 5.0, 3.0]][3:]
    [0.0, 0.0, 1.161895003862, 1.161895003862, 1.264911064067]
    """

    __slots__ = ("base", "fresh", "s0", "s1", "s2", "size", "values")

    def __init__(self, size: int) -> None:
        if size < 3:
            raise ValueError(f"size must be >= 3, got {size}")
        self.size = size
        self.values = DoubleRing(size)
        self.base = self.s0 = self.s1 = self.s2 = 0.0
        self.fresh = 0  # values since the sums were last computed afresh

    def update(self, x: float) -> float:
        values = self.values
        n = self.size
        if values.full and self.fresh < n:
            # the window slides: every offset's index falls by one, the oldest leaves
            gone = values.oldest() - self.base
            values.put(x)
            d = x - self.base
            s0 = self.s0
            self.s1 = self.s1 - (s0 - gone) + (n - 1) * d
            self.s0 = s0 = s0 - gone + d
            self.s2 = self.s2 - gone * gone + d * d
            self.fresh += 1
        else:
            values.put(x)
            if not values.full:
                return math.nan
            self._afresh()
        s0 = self.s0
        sxy = self.s1 - (n - 1) / 2 * s0  # sum of (i - mid) * d[i]
        sse = self.s2 - s0 * s0 / n - sxy * sxy / (n * (n * n - 1) / 12)
        if sse != sse:  # inf - inf: the squares overflowed
            return math.inf
        return math.sqrt(max(sse, 0.0) / (n - 2))

    def mean(self) -> float:
        """The window's mean value (NaN when empty)."""
        return self.values.mean()

    def robust_sd(self) -> float:
        """A robust sd of the window's residuals: 1.4826 x their median absolute value around
        the line fitted again without the value farthest from the first line (computed
        afresh: asked only of a window that looks noisy). Heavy-tailed noise puts one or two
        outliers in a window now and then; they tilt a least-squares line and widen every
        residual's square, but not the median residual of the rest. For Gaussian noise it is
        about 0.9x the window's sd (it errs quiet); chaos widens the bulk, which it sees.

        >>> noise = LineNoise(6)
        >>> for x in [1.0, 1.1, -9.0, 0.9, 1.0]:
        ...     _ = noise.update(x)
        >>> round(noise.update(1.1), 3), round(noise.robust_sd(), 3)
        (4.534, 0.142)
        """
        values = self.values.ordered()  # doubles, oldest first: no float object a value
        n = len(values)
        if n < 4:
            return math.nan
        farthest = _farthest(values)
        slope, intercept = _line(values, farthest)
        residuals = vec[float](capacity=n)
        for i in range(n):
            if i != farthest:
                residuals = insert(residuals, abs(values[i] - intercept - slope * float(i)))
        return (
            1.4826 * residuals[(len(residuals) - 1) // 2] * math.sqrt(float(n - 1) / float(n - 3))
        )

    def _afresh(self) -> None:
        values = self.values.lane()
        base = self.base = values[0]
        total = sum_id = sum_dd = 0.0
        for i, v in enumerate(values):
            d = v - base
            total += d
            sum_id += i * d
            sum_dd += d * d
        self.s0, self.s1, self.s2 = total, sum_id, sum_dd
        self.fresh = 0


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class RewardCheck(Check):
    kinds: tuple[Kind, ...] = (Kind.REWARD_CHAOS, Kind.REWARD_COLLAPSE)

    def __init__(self, indicator: str, metric: str, settings: RewardSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        # read on every value: plain typed attributes, not the settings model's
        self._warmup = settings.warmup
        self._cusum_threshold = settings.chaos_cusum_threshold
        self._chaos_floor = settings.chaos_floor
        self._chaos_ratio = settings.chaos_ratio
        self._bend_history = settings.chaos_history * settings.chaos_window
        self._collapse_fraction = settings.collapse_fraction
        self._collapse_noise = settings.collapse_noise
        self.n = 0
        self.low = math.inf
        self.high = -math.inf
        self._smooth = Ewma(settings.smoothing, limit=LIMIT)
        self._recent = LineNoise(settings.chaos_window)
        self.recent_noise = math.nan
        # (noise, mean level, alarmed 1/0, bend) of each of the last chaos_window steps
        self._waiting = DoubleRing(settings.chaos_window, 4)
        self._reference = Window(settings.chaos_history)
        self._reference_level = Window(settings.chaos_history)  # the windows' mean rewards
        # each window's noise over the largest a 0/1 reward's mean allows at its level,
        # sqrt(m (1 - m)): a pass/fail reward's reference in its own units, window by window
        # (a reference taken over a warm-up at the floor and a climb is no one level's)
        self._reference_per_bound = Window(settings.chaos_history)
        self.noise = math.nan
        self.start = math.nan
        self.peak = -math.inf
        self.peak_step = -1
        self._chaos = Persistence(settings.chaos_persist)
        self._prev = (math.nan, math.nan)  # the two values before this one
        self.chaos_evidence = 0.0  # the CUSUM of the noise growing
        self._bend = math.nan  # this step's squared bend / 6 (a variance of the noise)
        # the mean of that over the run's calm steps: the noise's variance
        self._bend_mean = 0.0
        self._bends = 0
        # its log-likelihood ratio a step is u * slope - offset, u the squared bend in sds
        rho = settings.chaos_cusum_ratio
        self._llr_slope = 0.5 * (1.0 - 1.0 / rho)
        self._llr_offset = 0.5 * math.log(rho)
        self._collapse = Persistence(settings.collapse_persist)
        self._falling = trend_break("down", settings.collapse_trend)

    def update(self, step: int, x: float) -> list[Finding]:
        self.n += 1
        smooth = self._smooth.update(x)
        falling = self._falling.update(smooth, x)
        self.low = min(self.low, smooth)
        self.high = max(self.high, smooth)
        self.recent_noise = self._recent.update(x)
        if self.n < self._warmup:
            return []
        if self.n == self._warmup:
            self.start = smooth
        found = []
        if self.recent_noise == self.recent_noise:  # the window is full
            chaos = self._judge_chaos(step, x)
            if chaos is not None:
                found.append(chaos)
        if smooth > self.peak:
            self.peak, self.peak_step = smooth, step
        if not math.isnan(self.noise):
            collapse = self._judge_collapse(step, x, smooth, falling)
            if collapse is not None:
                found.append(collapse)
        return found

    def _noisier(self, x: float) -> bool:
        """One step's evidence that the noise grew (second difference against the run's
        noise); True while the CUSUM is above its threshold."""
        a, b = self._prev
        self._prev = (b, x)
        noise = self.noise
        if a != a or noise != noise:
            return False
        e = x - 2.0 * b + a  # variance 6 sd^2 for independent noise
        square = self._bend = e * e / 6.0
        # in the unit of the run's own calm bends once 50 are known, a mean over
        # ~chaos_history windows of steps: under health the squared bend then averages 1
        # whatever the noise's family, and the CUSUM drifts down (the short reference, a
        # median of 12-step window sds, swings by a third on healthy runs: as the unit it
        # made a healthy run's CUSUM climb)
        enough = self._bends >= _MIN_BENDS
        unit = self._bend_mean if enough else noise * noise * _GAUSSIAN_BEND
        u = min(square / max(unit, _TINY), _CLIP_SQUARE)
        stat = self.chaos_evidence + (u * self._llr_slope - self._llr_offset)
        self.chaos_evidence = stat = max(stat, 0.0)
        return stat > self._cusum_threshold

    def _judge_chaos(self, step: int, x: float) -> Finding | None:
        noisier = self._noisier(x)
        recent = self.recent_noise
        if len(self._reference) >= _MIN_REFERENCE:
            self.noise = max(self._reference.median(), _TINY)
        alarm = False
        r = math.nan
        floor = math.nan
        robust = math.nan  # the window's robust sd, once computed this step
        if not math.isnan(self.noise):
            # a curve that moved over a range of 0.7 is not chaotic at noise of 0.01, however
            # calm it was before: judge against a floor that is a small fraction of that range
            floor = max(self.noise, self._chaos_floor * (self.high - self.low))
            r = recent / floor
            alarm = r > self._chaos_ratio
            if alarm:
                # a heavy-tailed value or two is no chaos: the window's robust noise
                # (its bulk's, the farthest value left out of its line) must be as high
                robust = self._recent.robust_sd()
                alarm = robust / floor > self._chaos_ratio
        level = self._recent.mean()
        waiting = self._waiting
        ring, size = waiting.ring, waiting.size
        full = waiting.full
        i = waiting.place()  # the oldest's place once full: it leaves, no overlap with now
        if full and ring[2 * size + i] == 0.0:  # it raised no alarm
            self._reference.update(ring[i])
            self._reference_level.update(ring[size + i])
            self._reference_per_bound.update(ring[i] / _unit_bound(ring[size + i]))
            bend = ring[3 * size + i]
            if bend == bend:
                self._calm_bend(bend)
        ring[i] = recent
        ring[size + i] = level
        ring[2 * size + i] = 1.0 if alarm else 0.0
        ring[3 * size + i] = self._bend
        self._bend = math.nan
        if not self._chaos.update(alarm) and not noisier:
            return None
        if robust != robust:
            robust = self._recent.robust_sd()
        severity = CRITICAL if r > 2 * self._chaos_ratio else WARNING
        metric, window = self.metric, self.s.chaos_window
        return Finding(
            _CHAOS,
            self.indicator,
            metric,
            severity,
            step,
            partial(_chaos_words, metric, window, r),
            {
                "value": x,
                "recent_noise_sd": recent,
                "recent_noise_robust": robust,
                "reference_noise_sd": floor,
                "noise_ratio": r,
                "window": window,
                "noise_growth_evidence": self.chaos_evidence,
                "recent_level": level,
                "reference_level": self._reference_level.median(),
                "reference_noise_per_bound": self._reference_per_bound.median(),
            },
            onset_step=step - self._chaos.streak - window // 2,
        )

    def _calm_bend(self, u: float) -> None:
        # their mean: plain at first, then moving, over about chaos_history windows
        self._bends = n = self._bends + 1
        self._bend_mean += (u - self._bend_mean) / min(n, self._bend_history)

    def _judge_collapse(self, step: int, x: float, smooth: float, falling: bool) -> Finding | None:
        drop = self.peak - smooth
        gain = max(self.peak - self.start, 0.0)
        # in the unit of the smoothed reward's wander: a step's noise, widened by the
        # correlation its raw values show (a reward that wanders in runs of one sign moves its
        # smoothed level, and its peak, further than independent noise would)
        noise = self.noise / self._falling.correlation.unit
        frac = drop / gain if gain > _TINY else math.inf
        down = drop > self._collapse_fraction * gain and drop > self._collapse_noise * noise
        held = self._collapse.update(down)
        if not held and not falling:
            return None
        # a fall below the run's own trend alone is a warning, however far from the peak
        far = held and frac > 2 * self._collapse_fraction
        severity = CRITICAL if far else WARNING
        metric, peak, peak_step = self.metric, self.peak, self.peak_step
        return Finding(
            _COLLAPSE,
            self.indicator,
            metric,
            severity,
            step,
            partial(_collapse_words, metric, drop, peak, peak_step, frac),
            {
                "value": x,
                "smoothed": smooth,
                "peak": self.peak,
                "peak_step": self.peak_step,
                "drop": drop,
                "drop_fraction_of_gain": frac,
                "noise_sd": noise,
                "trend_break_sds": self._falling.statistic,
            },
            onset_step=self.peak_step,
        )


def _unit_bound(m: float) -> float:
    """The largest sd a mean in [0, 1] can have at ``m`` (a 0/1 variable's): sqrt(m (1 - m)),
    never 0 (``nan`` outside [0, 1], where no such reward lives)."""
    if not 0.0 <= m <= 1.0:
        return math.nan
    return math.sqrt(max(m * (1.0 - m), 1e-24))


def _chaos_words(metric: str, window: int, ratio: float) -> str:
    return (
        f"reward curve turned noisy: {metric} noise over the last {window} steps is "
        f"{ratio:.1f}x the run's own"
    )


def _collapse_words(metric: str, drop: float, peak: float, peak_step: int, frac: float) -> str:
    """``collapsing`` when it lost a third of what it had gained or more, else ``falling``."""
    word = fall_word(1.0 - frac) if math.isfinite(frac) else "collapsing"
    return f"reward {word}: {metric} fell {drop:.3g} from its peak {peak:.3g} at step {peak_step}"


def _line(values: vec[float], skip: i64) -> tuple[float, float]:
    """Least-squares slope and intercept of ``values`` against their places, without the
    one at ``skip`` (-1: none).

    >>> _line(vec[float]([1.0, 2.0, 30.0, 4.0, 5.0]), 2)
    (1.0, 1.0)
    """
    count = 0.0
    sum_i = sum_v = 0.0
    for i in range(len(values)):
        if i != skip:
            count += 1.0
            sum_i += float(i)
            sum_v += values[i]
    mean_i, mean_v = sum_i / count, sum_v / count
    sxx = sxy = 0.0
    for i in range(len(values)):
        if i != skip:
            d = float(i) - mean_i
            sxx += d * d
            sxy += d * (values[i] - mean_v)
    slope = sxy / sxx
    return slope, mean_v - slope * mean_i


def _farthest(values: vec[float]) -> i64:
    """The place of the value farthest from the least-squares line through ``values``.

    >>> _farthest(vec[float]([1.0, 2.0, 30.0, 4.0]))
    2
    """
    slope, intercept = _line(values, -1)
    at: i64 = 0
    far = -1.0
    for i in range(len(values)):
        r = abs(values[i] - intercept - slope * float(i))
        if r > far:
            at, far = i, r
    return at
