"""Reward hacking: train reward keeps rising while held-out reward falls.

Held-out evaluations arrive every k steps, each with noise of its own. The check keeps a
reference level (the median of recent evaluations, frozen while evidence of a fall
accumulates) and a one-sided CUSUM of the held-out shortfall below it, in eval-noise sds
(from the second differences of recent evaluations, which a rising curve does not
inflate):
``S = max(0, S + (reference - heldout) / noise - slack)``. S above ``threshold``, a fall of
at least ``drop`` and a train reward that rose meanwhile (by ``train_rise``) is the Gao et al.
signature of over-optimisation. A CUSUM weighs every evaluation since the fall began, so a
steady decline is found in a few evaluations while a single bad one is not. A train score
far above held-out is normal and is not judged.
"""

from __future__ import annotations

import math

from streamwatch.config import HackingSettings
from streamwatch.detectors import Ewma, Window
from streamwatch.incidents import Finding, Kind, Severity

_MIN_NOISE = 1e-3


class HackingCheck:
    kinds: tuple[Kind, ...] = (Kind.REWARD_HACKING,)

    def __init__(self, settings: HackingSettings) -> None:
        self.s = settings
        self._train = Ewma(0.3)
        self.evals = 0
        self._reference = Window(settings.reference)
        self._bends = Window(settings.reference)  # second differences of evaluations
        self._last = math.nan
        self._last2 = math.nan
        self.train_at_reference = math.nan
        self.reference_step = -1
        self.cusum = 0.0
        self.since = -1

    def train(self, x: float) -> None:
        self._train.update(x)

    def heldout(self, step: int, metric: str, y: float) -> list[Finding]:
        self.evals += 1
        if math.isfinite(self._last2):
            self._bends.update(y - 2.0 * self._last + self._last2)
        self._last2, self._last = self._last, y
        train_now = self._train.value
        ready = self.evals >= self.s.min_evals and len(self._reference) >= 3
        if not ready or math.isnan(train_now):
            self._note_reference(step, y, train_now)
            return []
        reference = self._reference.median()
        # two robust estimates, each swinging ~2x by chance on 20 values: trust the larger
        noise = _noise(self._bends, self._reference)
        if self.cusum == 0.0:
            self.since = step
        shortfall = reference - y
        self.cusum = max(0.0, self.cusum + shortfall / noise - self.s.slack)
        if self.cusum == 0.0:
            self._note_reference(step, y, train_now)
            return []
        drop = shortfall
        train_gain = train_now - self.train_at_reference
        if self.cusum <= self.s.threshold or drop < self.s.drop or train_gain < self.s.train_rise:
            return []
        severity = Severity.CRITICAL if drop > 3 * self.s.drop * 2 else Severity.WARNING
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
                },
                onset_step=self.since,
            )
        ]

    def _note_reference(self, step: int, y: float, train_now: float) -> None:
        """No evidence of a fall: this evaluation is part of the held-out's normal level."""
        self._reference.update(y)
        self.reference_step = step
        self.train_at_reference = train_now


def _noise(bends: Window, reference: Window) -> float:
    """Eval noise from second differences (sd of noise x sqrt(6) for independent
    evaluations): blind to the learning curve's trend, which inflates a plain spread."""
    if len(bends) >= 3:
        return max(bends.robust_sd() / math.sqrt(6.0), _MIN_NOISE)
    return max(reference.robust_sd(), _MIN_NOISE)
