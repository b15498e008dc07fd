"""Policy mismatch: the rollout engine's token probabilities drift away from the trainer's.

The rollout engine (vLLM, SGLang) and the trainer (FSDP, Megatron) compute the same policy's
token probabilities with different kernels and precision; the gap is small and steady in a
healthy run, and when it grows the updates are off-policy in ways importance ratios cannot
fix, which can collapse training by itself ("When Speed Kills Stability", 2025; verl
``training/rollout_probs_diff_*``, NeMo RL ``token_mult_prob_error``, slime
``train_rollout_logprob_abs_diff``). Its healthy level depends on the model, the engines and
the hardware (vllm-project/vime#64: 0.013 on one node, 0.05 across nodes, for the same run),
so the check judges a run against its own start: the smoothed gap ``ratio`` times its
warm-up median or more, and ``robust_z`` warm-up sds above it, for ``persist`` steps in a
row. A gap that grows slowly is found earlier, as a climb of the log smoothed gap away from
its own trend (:class:`~streamwatch.detectors.TrendBreak`, ``growth_trend``: the departures,
in the series' own noise, add up step after step; it judges once it has learnt that noise,
about 100 steps into the run with the default settings). Both are warnings, critical from
``critical_ratio`` times the warm-up level. A run that converged with a large but steady gap
does not page: its gap has neither a level above its start nor a trend to break.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Final

from mypy_extensions import mypyc_attr

from streamwatch.checks.base import Check
from streamwatch.config import MismatchSettings
from streamwatch.detectors import Ewma, Persistence, trend_break
from streamwatch.detectors.ewma import LIMIT
from streamwatch.engine.findings import Finding
from streamwatch.incidents import Kind, Severity

__all__ = ["MismatchCheck"]

_TINY: Final = 1e-12


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class MismatchCheck(Check):
    """
    >>> from streamwatch.config import MismatchSettings
    >>> check = MismatchCheck("prob_mismatch", "training/rollout_probs_diff_mean",
    ...                       MismatchSettings())
    >>> healthy = [0.02, 0.021, 0.019, 0.022, 0.02, 0.018, 0.021, 0.02, 0.019, 0.02] * 3
    >>> [f for step, x in enumerate(healthy) for f in check.update(step, x)]
    []
    >>> found = [f for step in range(30, 60) for f in check.update(step, 0.02 * 1.1 ** (step - 29))]
    >>> found[0].step, found[0].severity.value
    (45, 'warning')

    A gap that doubles over 60 steps, after 120 steady ones, climbs away from its own trend
    long before it is three times its start:

    >>> check = MismatchCheck("prob_mismatch", "training/rollout_probs_diff_mean",
    ...                       MismatchSettings())
    >>> gaps = healthy * 4 + [(1 + k / 60) * healthy[k % 30] for k in range(60)]
    >>> found = [f for step, x in enumerate(gaps) for f in check.update(step, x)]
    >>> found[0].step - 120 < 30, found[0].evidence["ratio_to_reference"] < 2
    (True, True)
    >>> print(found[0].message)  # doctest: +ELLIPSIS
    rollout and trainer disagree: ... is climbing away from its own trend (...x its level ...)
    """

    kinds: tuple[Kind, ...] = (Kind.POLICY_MISMATCH,)

    def __init__(self, indicator: str, metric: str, settings: MismatchSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        # read on every value: plain typed attributes, not the settings model's
        self._warmup = settings.warmup
        self._ratio = settings.ratio
        self._robust_z = settings.robust_z
        self._warm: list[float] = []
        self.ref = math.nan
        self.noise = math.nan
        self._smooth = Ewma(settings.smoothing, limit=LIMIT)
        self._high = Persistence(settings.persist)
        self.since = -1
        self._rising = trend_break("up", settings.growth_trend)
        self.rise_from = 0  # the step the trend evidence last rose from 0

    def update(self, step: int, x: float) -> list[Finding]:
        gap = abs(x)  # a signed estimate (a KL, a mean log-ratio) drifts away from 0 either way
        smooth = self._smooth.update(gap)
        s = self.s
        trend = self._rising
        rising = trend.update(
            math.log(smooth if smooth > _TINY else _TINY), math.log(gap if gap > _TINY else _TINY)
        )
        if trend.statistic == 0.0:
            self.rise_from = step + 1
        if len(self._warm) < self._warmup:
            self._warm.append(gap)
            if len(self._warm) == self._warmup:
                self.ref = ref = max(median(self._warm), _TINY)
                mad = 1.4826 * median(abs(v - ref) for v in self._warm)
                self.noise = max(mad, s.noise_floor * ref)
            return []
        ratio = smooth / self.ref
        z = (smooth - self.ref) / self.noise
        high = ratio >= self._ratio and z >= self._robust_z
        if high and self._high.streak == 0:
            self.since = step
        if self._high.update(high):
            why = f"is {ratio:.1f}x its level at the start ({self.ref:.3g}) for "
            why += f"{self._high.streak} steps"
            since = self.since
        elif rising:
            why = f"is climbing away from its own trend ({ratio:.1f}x its level at the start, "
            why += f"{self.ref:.3g})"
            since = self.rise_from
        else:
            return []
        severity = Severity.CRITICAL if ratio >= s.critical_ratio else Severity.WARNING
        return [
            Finding(
                Kind.POLICY_MISMATCH,
                self.indicator,
                self.metric,
                severity,
                step,
                f"rollout and trainer disagree: {self.metric} {why}",
                {
                    "value": x,
                    "smoothed": smooth,
                    "reference": self.ref,
                    "ratio_to_reference": ratio,
                    "robust_z": z,
                    "trend_break_sds": self._rising.statistic,
                },
                onset_step=since,
            )
        ]
