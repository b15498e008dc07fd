"""No learning signal: the step's completions give GRPO nothing to learn from.

GRPO learns from the differences between the rewards of a prompt's completions. When every
completion of every group gets the same reward, every advantage is 0 and so is the policy
gradient (huggingface/trl#3857: ``frac_reward_zero_std`` 1, ``reward_std`` 0, ``loss`` 0,
``grad_norm`` 0). The check needs no warm-up, so a run broken from its first step is caught
at that step. A step carries no signal when

- every completion got the same reward: the batch's highest and lowest score are equal
  (verl's ``critic/score/max`` and ``/min``), at once with a second sign of the same step
  (every group alike, a gradient or a policy loss of exactly 0: verl#2088, rllm#54),
  otherwise after ``persist`` such steps in a row (a weak model's batch can score 0
  everywhere by chance, and a PPO critic's advantages are not 0 then); or
- every group got the same reward for all its completions (the zero-variance fraction is
  ``zero_variance_all`` or more, or the reward's std is 0): at once with a gradient of
  exactly 0 at the same step, otherwise after ``persist`` such steps in a row (a small batch
  can be all alike by chance: one prompt, a few completions);
- or the gradient is exactly 0 for ``zero_grad_persist`` steps in a row.

A zero-variance fraction of ``zero_variance_warning`` or more for ``persist`` steps in a row
is a warning too: most of the batch teaches nothing. Any of these for ``critical_steps``
steps in a row is critical. Values arrive one metric at a time; the check keeps the
latest of each for the step and judges the step on every value.

The signal can also drain slowly, as the policy solves more and more of its prompts (the
accuracy heading to 1: DAPO's case for dynamic sampling). Three series fall with the share
of groups whose completions still differ: one minus the zero-variance fraction, the reward's
std (TRL's is the mean of the groups' stds), and, when a train reward is fed (signal
``reward``) and is a success rate in [0, 1], one minus it. Each, smoothed, feeds a
:class:`~streamwatch.detectors.TrendBreak` on its log (``drain_trend``), so a run whose
accuracy rises and settles is credited with its own trend; their summed evidence over the
square root of their number, ``drain_trend.threshold`` or more, is a warning that the signal
is draining (a series seen outside [0, 1], a count or a score, is not one of them). The
gradient norm falls too, but only as the square root of that share (a batch's gradient is
mostly noise), and a healthy one falls several-fold by itself: it does not count.

>>> from streamwatch.config import SignalSettings
>>> check = NoSignalCheck(SignalSettings())
>>> check.observe("zero_variance", "frac_reward_zero_std", 1, 1.0)
[]
>>> [found] = check.observe("grad_norm", "grad_norm", 1, 0.0)
>>> found.severity.value, found.step
('warning', 1)
>>> print(found.message)  # doctest: +NORMALIZE_WHITESPACE
no learning signal at step 1: every group got the same reward for all its completions
(zero-variance groups 1) and the gradient is exactly 0
"""

from __future__ import annotations

import math
from typing import Final

from mypy_extensions import mypyc_attr

from streamwatch.config import SignalSettings
from streamwatch.detectors import TrendBreak, trend_break
from streamwatch.detectors.ewma import LIMIT, Ewma
from streamwatch.engine.findings import Finding
from streamwatch.incidents import Kind, Severity

__all__ = ["SIGNALS", "NoSignalCheck"]

#: what the check reads, by the name the run state passes
SIGNALS: Final = (
    "zero_variance",
    "reward_std",
    "reward_max",
    "reward_min",
    "grad_norm",
    "loss",
    "reward",
)
_ZERO: Final = 1e-12
#: the signals that move with the share of groups that still teach: how, when they drain
_DRAINS: Final = {
    "zero_variance": "(the groups whose completions all got one reward) rising",
    "reward_std": "(the reward's std) falling",
    "reward": "(the train reward) heading to 1",
}
_ORDER: Final = ("all_alike", "groups_alike", "std_zero", "mostly_alike", "zero_grad", "zero_loss")
_FED_BY: Final = {
    "all_alike": "reward_max",
    "groups_alike": "zero_variance",
    "std_zero": "reward_std",
    "mostly_alike": "zero_variance",
    "zero_grad": "grad_norm",
    "zero_loss": "loss",
}


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Drain:
    """One series that falls with the share of groups that still teach: its smoothed value
    (an EWMA), as the share maps it, and the trend break of its log."""

    __slots__ = ("smooth", "trend")

    def __init__(self, settings: SignalSettings) -> None:
        self.smooth = Ewma(settings.smoothing, limit=LIMIT)
        self.trend: TrendBreak = trend_break("down", settings.drain_trend)

    def update(self, share: float) -> None:
        """Feed the share's next (finite) value."""
        smooth = self.smooth.update(share)
        self.trend.update(
            math.log(smooth if smooth > _ZERO else _ZERO),
            math.log(share if share > _ZERO else _ZERO),
        )


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class NoSignalCheck:
    kinds: tuple[Kind, ...] = (Kind.NO_LEARNING_SIGNAL,)

    def __init__(self, settings: SignalSettings) -> None:
        self.s = settings
        self._zero_variance_warning = settings.zero_variance_warning  # read on every value
        self.step = -1
        self.values: dict[str, float] = {}  # this step's
        self.streaks: dict[str, int] = {}  # steps in a row each condition held, before this one
        self.held: dict[str, int] = {}  # this step's conditions, with their streak
        self.metrics: dict[str, str] = {}  # signal -> the metric that feeds it
        self.drains: dict[str, Drain] = {}
        self.not_shares: set[str] = set()  # signals seen outside [0, 1]: no drain of theirs
        self._limit = math.inf  # the drains' summed evidence that is a finding

    def observe(self, signal: str, metric: str, step: int, x: float) -> list[Finding]:
        """One value of one signal at ``step``: what the step looks like now."""
        if step != self.step:
            if step < self.step:
                return []
            self._next_step(step)
        values = self.values
        values[signal] = x
        self.metrics[signal] = metric
        draining = signal in _DRAINS and self._drain(signal, x)
        if not self.held and not self._suspect(signal, x):
            # the common case: nothing held at this step, and this value is fine
            return [self._draining(step)] if draining else []
        found = self._judge(step)
        return found or ([self._draining(step)] if draining else [])

    def _drain(self, signal: str, x: float) -> bool:
        """Feed a draining series; is the summed evidence of a drain past the threshold?"""
        # a std is at least 0; a fraction (not a count), a success rate (not a score) in [0, 1]
        share = x if signal == "reward_std" else (1.0 - x if 0.0 <= x <= 1.0 else -1.0)
        drains = self.drains
        drain = drains.get(signal)
        if drain is None:
            if share < 0.0 or signal in self.not_shares:
                self.not_shares.add(signal)
                return False
            drain = drains[signal] = Drain(self.s)
            self._limit = self.s.drain_trend.threshold * math.sqrt(len(drains))
        elif share < 0.0:
            # a count, a score on another scale: its values in [0, 1] say nothing either
            self.not_shares.add(signal)
            del drains[signal]
            self._limit = self.s.drain_trend.threshold * math.sqrt(max(1, len(drains)))
            return False
        drain.update(share)
        total = 0.0
        for d in drains.values():
            total += d.trend.statistic
        return total > self._limit

    def drain_evidence(self) -> float:
        """The drains' summed trend-break evidence over the square root of their number."""
        drains = self.drains.values()
        return sum(d.trend.statistic for d in drains) / math.sqrt(len(drains))

    def _draining(self, step: int) -> Finding:
        stats = {k: d.trend.statistic for k, d in self.drains.items()}
        falling = [k for k in _DRAINS if stats.get(k, 0.0) > 0.0]
        first = max(falling, key=stats.__getitem__)
        evidence: dict[str, object] = {k: self.values[k] for k in SIGNALS if k in self.values}
        evidence["drain_sds"] = self.drain_evidence()
        evidence.update({f"trend_break_sds/{k}": v for k, v in stats.items()})
        what = ", ".join(f"{self.metrics[k]} {_DRAINS[k]}" for k in falling)
        return Finding(
            Kind.NO_LEARNING_SIGNAL,
            "learning_signal",
            self.metrics[first],
            Severity.WARNING,
            step,
            f"learning signal draining at step {step}: {what}, faster than the run's own "
            "trend; fewer and fewer groups teach anything",
            evidence,
            rule="drain",
        )

    def _suspect(self, signal: str, x: float) -> bool:
        """Could this value make a condition hold?"""
        if signal == "grad_norm" or signal == "loss":
            return x == 0.0
        if signal == "reward_std":
            return abs(x) <= _ZERO
        if signal == "zero_variance":
            return x >= self._zero_variance_warning
        if signal == "reward":
            return False  # only a drain's
        other = self.values.get("reward_min" if signal == "reward_max" else "reward_max")
        return other is not None and abs(x - other) <= _ZERO

    def _next_step(self, step: int) -> None:
        self.streaks = dict(self.held)
        self.step = step
        self.values = {}
        self.held = {}

    def _conditions(self) -> dict[str, str]:
        """The conditions that hold at this step, each with its description."""
        v = self.values
        s = self.s
        out: dict[str, str] = {}
        high, low = v.get("reward_max"), v.get("reward_min")
        if high is not None and low is not None and high - low <= _ZERO:
            out["all_alike"] = f"every completion got the same reward ({low:.4g})"
        frac = v.get("zero_variance")
        if frac is not None and 0.0 <= frac <= 1.0:  # a fraction, not a count
            if frac >= s.zero_variance_all:
                out["groups_alike"] = (
                    f"every group got the same reward for all its completions "
                    f"(zero-variance groups {frac:.3g})"
                )
            elif frac >= s.zero_variance_warning:
                out["mostly_alike"] = f"{frac:.0%} of the groups got one reward for all"
        std = v.get("reward_std")
        if std is not None and abs(std) <= _ZERO and "groups_alike" not in out:
            # a std of 0 does not say how many groups it is the std of (Unsloth's notebooks
            # sample one prompt a step): alone it needs persistence, as a fraction of 1 does not
            out["std_zero"] = "the reward's std is 0"
        if v.get("grad_norm") == 0.0:
            out["zero_grad"] = "the gradient is exactly 0"
        if v.get("loss") == 0.0:
            out["zero_loss"] = "the loss is exactly 0"
        return out

    def _judge(self, step: int) -> list[Finding]:
        held = self._conditions()
        self.held = {c: self.streaks.get(c, 0) + 1 for c in held}
        s = self.s
        runs = self.held
        # every completion alike says it at once only with a second sign of the same step (a
        # weak model's batch can score 0 everywhere by chance, and a critic's advantages
        # are not 0 then): every group alike, a gradient or a policy loss of exactly 0
        vanished = "zero_grad" in held or "zero_loss" in held
        together = "groups_alike" in held or "std_zero" in held or vanished
        alike = ("all_alike" in held and together) or (
            "groups_alike" in held and "zero_grad" in held
        )
        signs = [
            alike,
            runs.get("all_alike", 0) >= s.persist,
            runs.get("groups_alike", 0) >= s.persist,
            runs.get("std_zero", 0) >= s.persist,
            runs.get("zero_grad", 0) >= s.zero_grad_persist,
            runs.get("mostly_alike", 0) >= s.persist,
        ]
        if not any(signs):
            return []
        longest = max(n for c, n in runs.items() if c != "zero_loss")
        severity = Severity.CRITICAL if longest >= s.critical_steps else Severity.WARNING
        why = " and ".join(held[c] for c in _ORDER if c in held)
        evidence: dict[str, object] = {k: self.values[k] for k in SIGNALS if k in self.values}
        evidence["steps"] = longest
        first = next(c for c in _ORDER if c in held)
        return [
            Finding(
                Kind.NO_LEARNING_SIGNAL,
                "learning_signal",
                self.metrics.get(_FED_BY[first]) or self.metrics.get("reward_std", ""),
                severity,
                step,
                f"no learning signal at step {step}: {why}"
                + (f", for {longest} steps" if longest > 1 else ""),
                evidence,
                onset_step=self.step - longest + 1,
                rule="at_once" if alike else "persist",
            )
        ]
