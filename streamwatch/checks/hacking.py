"""Reward hacking: train reward keeps rising while held-out reward falls.

Held-out evaluations arrive every k steps. At each one the check compares the held-out
value with its own peak so far, and the (smoothed) train reward now with the train reward
at that peak. A drop larger than ``drop`` (absolute) and ``drop_noise`` eval-noise sds, while
train reward has not fallen, for ``persist`` evaluations in a row, is the Gao et al. signature
of over-optimisation. A train score far above held-out is normal and is not judged.
"""

from __future__ import annotations

import math

from streamwatch.config import HackingSettings
from streamwatch.detectors import Ewma, Persistence, Window
from streamwatch.incidents import Finding, Kind, Severity


class HackingCheck:
    kinds: tuple[Kind, ...] = (Kind.REWARD_HACKING,)

    def __init__(self, settings: HackingSettings) -> None:
        self.s = settings
        self._train = Ewma(0.3)
        self.evals = 0
        self.peak = -math.inf
        self.peak_step = -1
        self.train_at_peak = math.nan
        self._diffs = Window(10)
        self._last = math.nan
        self._down = Persistence(settings.persist)
        self.metric = ""

    def train(self, x: float) -> None:
        self._train.update(x)

    def heldout(self, step: int, metric: str, y: float) -> list[Finding]:
        self.metric = metric
        self.evals += 1
        last = self._last
        if math.isfinite(last):
            self._diffs.update(y - last)
        self._last = y
        # the peak is of the two-evaluation mean: a single lucky evaluation is not a peak
        level = (y + last) / 2 if math.isfinite(last) else y
        train_now = self._train.value
        if self.evals < self.s.min_evals or math.isnan(train_now):
            self._note_peak(step, level, train_now)
            return []
        noise = self._diffs.robust_sd() / math.sqrt(2)
        drop = self.peak - level
        train_gain = train_now - self.train_at_peak
        diverging = (
            drop > self.s.drop
            and drop > self.s.drop_noise * noise
            and train_gain > -self.s.train_tolerance
        )
        self._note_peak(step, level, train_now)
        if not self._down.update(diverging):
            return []
        severity = Severity.CRITICAL if drop > 3 * self.s.drop else Severity.WARNING
        return [
            Finding(
                Kind.REWARD_HACKING,
                "heldout_reward",
                metric,
                severity,
                step,
                f"train reward {train_gain:+.3g} since step {self.peak_step} while held-out "
                f"{metric} fell {drop:.3g} from its peak {self.peak:.3g}",
                {
                    "heldout": y,
                    "heldout_peak": self.peak,
                    "heldout_peak_step": self.peak_step,
                    "heldout_drop": drop,
                    "eval_noise_sd": noise,
                    "train_reward": train_now,
                    "train_reward_at_peak": self.train_at_peak,
                    "evaluations_below": self._down.streak,
                },
                onset_step=self.peak_step,
            )
        ]

    def _note_peak(self, step: int, y: float, train_now: float) -> None:
        if y > self.peak:
            self.peak, self.peak_step, self.train_at_peak = y, step, train_now
