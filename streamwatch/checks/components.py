"""Reward hacking without a held-out set: the reward's components part ways.

GRPO runs often sum several reward functions, and log each (TRL ``rewards/<fn>/mean``,
older TRL ``rewards/<fn>``). When a verifiable one (accuracy, correctness: it checks the
answer) falls while another (format, length, style: it checks the look) rises, the policy is
learning to please the easy reward at the expense of the task: huggingface/open-r1#255,
format 0.48 -> 0.86 while accuracy 0.16 -> 0.06 over three logs. The sum may even rise.

The check keeps each component's peak (the highest of its smoothed values, its first value
included) and judges each new value: a verifiable component that fell on each of its last
``component_min_logs - 1`` logs, to at least ``component_drop`` below its peak (and by at
least ``component_drop_fraction`` of it), while another component is at least
``component_rise`` above where it was at that peak (or its start) and rose more than the
verifiable one fell. Which components are verifiable is a list of name globs
(``verifiable``, less the ``not_verifiable`` ones: a name that says "format" checks the
look). A steady decline is asked for because one noisy log proves nothing.
Three logs are little evidence: on synthetic healthy runs (accuracy rising slowly from 0.05,
0.2 or 0.5, format fast from 0.3; 200 seeds each) it fired, early on, in 7%, 0% and 0% of
the runs at a batch-mean noise sd of 0.03, and in 24%, 3% and 0% at 0.05 (small batches);
a reward that starts near 0 and is noisy is its weak spot. ``tests/test_components.py``
measures it.

>>> from streamwatch.config import HackingSettings
>>> check = ComponentsCheck(HackingSettings())
>>> rows = [(0.16, 0.48), (0.12, 0.55), (0.06, 0.86)]
>>> for step, (acc, fmt) in enumerate(rows, start=1):
...     found = check.update("rewards/accuracy_reward", step, acc)
...     found += check.update("rewards/format_reward", step, fmt)
>>> [(f.kind.value, f.step, f.evidence["rising"]) for f in found]
[('reward_hacking', 3, 'rewards/format_reward')]
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Final

from mypy_extensions import mypyc_attr

from streamwatch.config import HackingSettings
from streamwatch.engine.findings import Finding
from streamwatch.incidents import Kind, Severity

__all__ = ["ComponentsCheck", "is_component"]

_ALPHA: Final = 0.3  # smoothing of a component's peak: one lucky log is not its level


def is_component(metric: str, settings: HackingSettings) -> bool:
    """A per-function reward the check watches (not its std, min or max)."""
    if any(fnmatchcase(metric, p) for p in settings.component_exclude):
        return False
    return any(fnmatchcase(metric, p) for p in settings.components)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
@dataclass(slots=True)
class _Part:
    start: float
    step: int  # of the start, then of the peak
    last: float
    smooth: float
    peak: float  # the highest smoothed value, the start included
    others: dict[str, float]  # the other components' values at the peak
    logs: int = 1
    falling: int = 0  # logs in a row, each below the one before


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class ComponentsCheck:
    kinds: tuple[Kind, ...] = (Kind.REWARD_HACKING,)

    def __init__(self, settings: HackingSettings) -> None:
        self.s = settings
        self.parts: dict[str, _Part] = {}
        self.verifiable: dict[str, bool] = {}

    def update(self, metric: str, step: int, x: float) -> list[Finding]:
        part = self.parts.get(metric)
        if part is None:
            self.parts[metric] = _Part(x, step, x, x, x, self._others(metric))
            name = metric.lower()
            self.verifiable[metric] = any(
                fnmatchcase(name, p) for p in self.s.verifiable
            ) and not any(fnmatchcase(name, p) for p in self.s.not_verifiable)
            return []
        part.falling = part.falling + 1 if x < part.last else 0
        part.last = x
        part.logs += 1
        part.smooth += _ALPHA * (x - part.smooth)
        if part.smooth > part.peak:
            part.peak, part.step, part.others = part.smooth, step, self._others(metric)
        return self._judge(step)

    def _others(self, metric: str) -> dict[str, float]:
        return {m: p.last for m, p in self.parts.items() if m != metric}

    def _judge(self, step: int) -> list[Finding]:
        s = self.s
        falls = [
            (p.peak - p.last, m)
            for m, p in self.parts.items()
            if self.verifiable[m]
            and p.logs >= s.component_min_logs
            and p.falling >= s.component_min_logs - 1
        ]
        falls = [
            (fall, m)
            for fall, m in falls
            if fall >= s.component_drop
            and fall >= s.component_drop_fraction * abs(self.parts[m].peak)
        ]
        if not falls:
            return []
        fall, falling = max(falls)
        down = self.parts[falling]
        rises = [
            (p.last - down.others.get(m, p.start), m)
            for m, p in self.parts.items()
            if not self.verifiable[m] and p.logs >= s.component_min_logs
        ]
        rises = [(rise, m) for rise, m in rises if rise >= s.component_rise and rise > fall]
        if not rises:
            return []
        rise, rising = max(rises)
        up = self.parts[rising]
        before = down.others.get(rising, up.start)
        return [
            Finding(
                Kind.REWARD_HACKING,
                "reward_components",
                falling,
                Severity.WARNING,
                step,
                f"reward components part ways: {rising} rose {before:.3g} -> {up.last:.3g} "
                f"while {falling} fell {down.peak:.3g} -> {down.last:.3g} since step "
                f"{down.step}",
                {
                    "falling": falling,
                    "falling_peak": down.peak,
                    "falling_now": down.last,
                    "rising": rising,
                    "rising_before": before,
                    "rising_now": up.last,
                    "fall": fall,
                    "rise": rise,
                },
                onset_step=down.step,
            )
        ]
