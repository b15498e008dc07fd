"""Reward hacking: train reward keeps rising while held-out reward falls.

Held-out evaluations arrive every k steps, each with noise of its own. The check keeps a
reference level (the median of recent evaluations, frozen while evidence of a fall
accumulates) and a one-sided CUSUM of the held-out shortfall below it, in eval-noise sds:
``S = max(0, S + (reference - heldout) / noise - slack)``. S above ``threshold``, a fall of
at least ``drop`` in the mean of the last ``drop_evals`` evaluations, and a train reward
that rose meanwhile, by ``train_rise`` and by more than ``train_rise_sds`` sds of its own
noise, is the Gao et al. signature of over-optimisation. The fall is judged once the level
rests on ``min_reference`` evaluations; the evaluations of an excursion that ends without a
finding join the level afterwards (they were the held-out's level too), and one that stays
a little below it (less than ``drop``) for longer than the level's window is the level.
A reference of 3 evaluations that came out high, frozen for good, read a flat held-out
beside a rising train reward as a fall in 63 of 100 runs of 400 steps and in all 50 of
1,000 steps; now in 5 of 100 and 5 of 50 (tests/test_hacking.py). The train reward's rise
is the mean of its values over the evaluation's period against that at the reference, each
step counted once.

A CUSUM weighs every evaluation since the fall began, so a steady decline is found in a few
evaluations while a single bad one is not. A train score far above held-out is normal and is
not judged.

A run evaluated rarely has no level to judge by: 6 evaluations in 1,400 steps never make the
8 of ``min_reference``. Until it has one, its fall is seen another way: ``fall_evals``
evaluations in a row, each below the one before (6 values of a flat noisy series fall so by
chance once in 720 orderings), falling by ``drop`` in all, while the train reward rose over
the same evaluations as above. Once the level exists, the CUSUM alone judges: beside a
rising train reward, a flat held-out (sd 0.01, 100 evaluations) has 6 in a row falling by
0.02 somewhere in 10 runs of 200, and the CUSUM calls 13 of the 200 hacking with or without
this rule before the level. A fall that matters is ``drop``, or ``drop_share`` of the
held-out's level when that is less: a score that lives at 0.02 (a recommender's NDCG@10)
cannot fall by 0.02, while an accuracy of 0.2 or more keeps the absolute 0.02.

Noise, of evaluations and of the train reward alike, comes from second differences
(``y[t] - 2 y[t-1] + y[t-2]`` has sd ``sqrt(6)`` x the noise for independent values, and a
learning curve's slow bend adds almost nothing), as a root mean square over the last
``noise_window`` values, each clipped at four robust sds so that one broken evaluation
cannot inflate it. The median absolute deviation of 20 second differences, the obvious
robust choice, swings 3x by chance (they are correlated), and its low swings were false
alarms.
"""

from __future__ import annotations

import math
from typing import Final

from mypy_extensions import mypyc_attr

from streamwatch.config import HackingSettings
from streamwatch.detectors import Window
from streamwatch.detectors.window import DoubleRing, robust_sd_sorted, sorted_median
from streamwatch.engine.findings import Finding
from streamwatch.incidents import Kind, Severity

_MIN_NOISE: Final = 1e-3


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class HackingCheck:
    kinds: tuple[Kind, ...] = (Kind.REWARD_HACKING,)

    def __init__(self, settings: HackingSettings) -> None:
        self.s = settings
        self._period_sum = 0.0  # the train values since the last evaluation
        self._period_n = 0
        self.train_level = math.nan  # their mean at the last evaluation
        self._level_n = 0  # ...and how many values it is the mean of
        self._train_bends = Bends(settings.noise_window)
        self.forget_heldout()

    def floor(self, level: float) -> float:
        """The least fall that matters below ``level``: ``drop``, or ``drop_share`` of the
        level when that is less.

        >>> from streamwatch.config import HackingSettings
        >>> c = HackingCheck(HackingSettings())
        >>> c.floor(0.6), c.floor(0.0222), c.floor(-0.67)
        (0.02, 0.00222, 0.02)
        """
        return min(self.s.drop, self.s.drop_share * abs(level))

    def forget_heldout(self) -> None:
        """The held-out side afresh: at the start, and when another metric feeds the
        held-out reward from then on (the train reward's state is kept)."""
        self.evals = 0
        self._reference = Window(self.s.reference)
        self._reference_n = 0  # train values in the period at the reference
        self._bends = Bends(self.s.noise_window, ordered=True)
        self.train_at_reference = math.nan
        self.reference_step = -1
        self.cusum = 0.0
        self.since = -1
        self._excursion: list[float] = []  # the evaluations since the CUSUM left 0
        # the last evaluations, each below the one before: (value, step, the train reward's
        # mean over its period, how many values that mean is of)
        self._fall: list[tuple[float, int, float, int]] = []

    def train(self, x: float) -> None:
        self._period_sum += x
        self._period_n += 1
        self._train_bends.update(x)

    def heldout(self, step: int, metric: str, y: float) -> list[Finding]:
        self.evals += 1
        self._bends.update(y)
        if self._period_n:  # the train reward over the evaluation's period
            self.train_level = self._period_sum / self._period_n
            self._level_n = self._period_n
            self._period_sum, self._period_n = 0.0, 0
        train_now = self.train_level
        ready = self.evals >= self.s.min_evals and len(self._reference) >= self.s.min_reference
        # before the held-out has a level, its fall is told by its order alone (and only then:
        # over 100 evaluations a flat series has such a stretch in 1 run of 20)
        fell = [] if ready else self._falling(step, metric, y, train_now)
        if not ready or math.isnan(train_now):
            self._note_reference(step, y, train_now)
            return fell
        reference = self._reference.median()
        noise = max(
            self._bends.noise() if self._bends.ready else self._reference.robust_sd(), _MIN_NOISE
        )
        if self.cusum == 0.0:
            self.since = step
        shortfall = reference - y
        self.cusum = max(0.0, self.cusum + shortfall / noise - self.s.slack)
        if self.cusum == 0.0:
            # no fall after all: the excursion's evaluations were the held-out's level too
            self._level_again(step, y, train_now)
            return fell
        self._excursion.append(y)
        # the fall: of the last evaluations, not one low one (noise dips alone)
        last = self._excursion[-self.s.drop_evals :]
        drop = reference - sum(last) / len(last)
        floor = self.floor(reference)
        if len(self._excursion) > self._reference.size and drop < floor:
            # a little below the level for longer than the level's own window: this is the
            # held-out's level now (a reference that came out high never sees the CUSUM
            # return to 0)
            self._excursion.pop()
            self._level_again(step, y, train_now)
            return fell
        train_gain = train_now - self.train_at_reference
        if self.cusum <= self.s.threshold or drop < floor:
            return fell
        train_sd = self._train_sd(self._level_n, self._reference_n)
        if not self._rose(train_gain, train_sd):
            return fell  # no rise, or no train reward at the reference: no sign of hacking
        severity = Severity.CRITICAL if drop > 3 * floor * 2 else Severity.WARNING
        return [
            Finding(
                Kind.REWARD_HACKING,
                "heldout_reward",
                metric,
                severity,
                step,
                f"train reward {train_gain:+.3g} since step {self.reference_step} while held-out "
                f"{metric} fell {drop:.3g} below its level of {reference:.3g}",
                {
                    "heldout": y,
                    "heldout_reference": reference,
                    "heldout_drop": drop,
                    "eval_noise_sd": noise,
                    "cusum_sds": self.cusum,
                    "train_reward": train_now,
                    "train_reward_at_reference": self.train_at_reference,
                    "train_gain_sds": train_gain / train_sd if train_sd > 0 else math.inf,
                },
                onset_step=self.since,
            )
        ]

    def _train_sd(self, n: int, m: int) -> float:
        """The sd by chance of the difference of two periods' train means, of n and m values:
        sqrt(1 / n + 1 / m) x the train noise."""
        if n <= 0 or m <= 0:
            return math.inf
        noise = self._train_bends.noise() if self._train_bends.ready else 0.0
        return noise * math.sqrt(1.0 / n + 1.0 / m)

    def _rose(self, gain: float, sd: float) -> bool:
        """Whether the train reward rose: by ``train_rise``, and by more than chance."""
        if math.isnan(gain) or gain < self.s.train_rise:
            return False
        return gain > self.s.train_rise_sds * sd

    def _falling(self, step: int, metric: str, y: float, train_now: float) -> list[Finding]:
        """The fall rule: the last ``fall_evals`` evaluations each below the one before, by
        a fall that matters in all, while the train reward rose over them."""
        fall = self._fall
        if fall and not y < fall[-1][0]:  # not below the last: the fall starts afresh
            fall.clear()
        fall.append((y, step, train_now, self._level_n))
        if len(fall) > self.s.fall_evals:
            del fall[0]
        if len(fall) < self.s.fall_evals:
            return []
        first, start, train_first, n_first = fall[0]
        drop = first - y
        if drop < self.floor(first):
            return []
        gain = train_now - train_first
        sd = self._train_sd(n_first, self._level_n)
        if not self._rose(gain, sd):
            return []
        return [
            Finding(
                Kind.REWARD_HACKING,
                "heldout_reward",
                metric,
                Severity.WARNING,
                step,
                f"train reward {gain:+.3g} since step {start} while held-out {metric} fell at "
                f"each of its last {len(fall) - 1} evaluations, {first:.3g} -> {y:.3g}",
                {
                    "heldout": y,
                    "heldout_reference": first,
                    "heldout_drop": drop,
                    "falls_in_a_row": float(len(fall) - 1),
                    "train_reward": train_now,
                    "train_reward_at_reference": train_first,
                    "train_gain_sds": gain / sd if sd > 0 else math.inf,
                },
                onset_step=start,
            )
        ]

    def _level_again(self, step: int, y: float, train_now: float) -> None:
        """The excursion below the level was no fall: its evaluations, then this one, join
        the level, and the evidence starts afresh."""
        for past in self._excursion:
            self._reference.update(past)
        self._excursion.clear()
        self.cusum = 0.0
        self._note_reference(step, y, train_now)

    def _note_reference(self, step: int, y: float, train_now: float) -> None:
        """No evidence of a fall: this evaluation is part of the held-out's normal level."""
        self._reference.update(y)
        self.reference_step = step
        self.train_at_reference = train_now
        self._reference_n = self._level_n


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Bends:
    """Noise of a series from its second differences: the clipped root mean square of the
    last ``size`` of them, over sqrt(6). The differences are kept in arrival order (a
    :class:`~streamwatch.detectors.window.DoubleRing`) and, with ``ordered``, in ascending
    order too as they come (a :class:`~streamwatch.detectors.window.Window`, whose ring is
    the same): the held-out side asks for the noise at every evaluation, and sorting them
    then cost more than keeping them sorted; the train side asks for it rarely, and sorts
    them then.

    >>> b, kept = Bends(50), Bends(50, ordered=True)
    >>> for y in [0.1, 0.3, 0.2, 0.4, 0.3, 0.5]:
    ...     b.update(y)
    ...     kept.update(y)
    >>> round(b.noise(), 4), b.noise() == kept.noise()
    (0.1225, True)
    """

    __slots__ = ("_last", "_last2", "_ring", "_window")

    def __init__(self, size: int, ordered: bool = False) -> None:
        self._window = Window(size) if ordered else None
        self._ring = self._window.values if self._window is not None else DoubleRing(size)
        self._last = math.nan
        self._last2 = math.nan

    def update(self, y: float) -> None:
        if y - y != 0.0:  # nan or inf
            return
        if self._last2 - self._last2 == 0.0:
            bend = y - 2.0 * self._last + self._last2
            if self._window is not None:
                self._window.update(bend)  # (not when the difference overflows)
            elif bend - bend == 0.0:
                self._ring.put(bend)
        self._last2, self._last = self._last, y

    @property
    def ready(self) -> bool:
        return len(self._ring) >= 3

    def noise(self) -> float:
        window = self._window
        ordered = window.ascending() if window is not None else self._ring.ascending()
        limit = 4.0 * robust_sd_sorted(ordered, sorted_median(ordered))
        cap = limit * limit
        values = self._ring.ordered()  # doubles, oldest first
        total = 0.0
        for b in values:
            total += min(b * b, cap)
        return math.sqrt(total / float(len(values)) / 6.0)
