"""A run's series and the gathering of their values: one metric, its checks, one step's
values from several sources (every rank logs its step time), closed into one value a step.

A series gathers a step's values and closes the step when as many sources have reported as
did last step, or when a later step arrives; the checks see one value per step (the mean).
The run (:mod:`streamwatch.engine.run`) decides what the values mean.
"""

from __future__ import annotations

import fnmatch
from typing import Final

from mypy_extensions import mypyc_attr

from streamwatch.checks import (
    Check,
    DriftColumn,
    EntropyCheck,
    LengthCheck,
    MismatchCheck,
    RewardCheck,
    SpikeCheck,
    StragglerCheck,
    TruncationCheck,
)
from streamwatch.config import EngineConfig
from streamwatch.detectors import Recent
from streamwatch.engine.indicators import Indicator

__all__ = [
    "HANDOVER_AFTER",
    "NO_OPEN",
    "NO_ORDER",
    "NO_STEPS",
    "NO_VALUES",
    "RATIOS",
    "Claim",
    "Gathered",
    "Series",
    "drift_column",
    "make_checks",
    "ratio_scale",
]

#: evaluations in a row without the bound metric before another takes its indicator
HANDOVER_AFTER: Final = 3

#: the indicators whose values are shares of a whole: in [0, 1], or in [0, 100] when the
#: metric's name says it is a percentage
RATIOS: Final = frozenset(
    {Indicator.TRUNCATION_RATIO, Indicator.CLIP_FRACTION, Indicator.TOKEN_PROB}
)
_PERCENT_WORDS: Final = ("pct", "percent", "%")

_FEEDS_HACKING: Final = {Indicator.TRAIN_REWARD, Indicator.HELDOUT_REWARD}

#: the indicators the no-learning-signal check reads, by its names for them
_SIGNAL_OF: Final = {
    Indicator.ZERO_VARIANCE_GROUPS: "zero_variance",
    Indicator.REWARD_STD: "reward_std",
    Indicator.REWARD_MAX: "reward_max",
    Indicator.REWARD_MIN: "reward_min",
    Indicator.GRAD_NORM: "grad_norm",
    Indicator.LOSS: "loss",
}

#: the length statistics the cap check reads, by its names for them
_LENGTH_OF: Final = {
    Indicator.RESPONSE_LENGTH: "mean",
    Indicator.RESPONSE_LENGTH_MAX: "max",
    Indicator.RESPONSE_LENGTH_MIN: "min",
}

#: the series the run's context reads, by its names for them
_CONTEXT_OF: Final = {
    Indicator.TRAIN_REWARD: "train_reward",
    Indicator.HELDOUT_REWARD: "heldout_reward",
    Indicator.TRUNCATION_RATIO: "truncation_ratio",
    Indicator.RESPONSE_LENGTH: "response_length",
    Indicator.REWARD_STD: "reward_std",
    Indicator.ZERO_VARIANCE_GROUPS: "zero_variance",
    Indicator.REWARD_MAX: "reward_max",
    Indicator.REWARD_MIN: "reward_min",
    Indicator.GRAD_NORM: "grad_norm",
    Indicator.LOSS: "loss",
}

#: indicators watched by run-level checks only (held-out rewards: the hacking check; the
#: extremes of a step's lengths: the cap check)
_NO_DRIFT: Final = {
    Indicator.HELDOUT_REWARD,
    Indicator.RESPONSE_LENGTH_MAX,
    Indicator.RESPONSE_LENGTH_MIN,
}


def ratio_scale(indicator: Indicator | None, metric: str) -> float:
    """What a series' values are multiplied by to be the share its indicator is (0.0: its
    indicator is not a share, nothing to check).

    >>> ratio_scale(Indicator.TRUNCATION_RATIO, "completions/clipped_ratio")
    1.0
    >>> ratio_scale(Indicator.TRUNCATION_RATIO, "truncated_pct")
    0.01
    >>> ratio_scale(Indicator.ENTROPY, "actor/entropy")
    0.0
    """
    if indicator not in RATIOS:
        return 0.0
    name = metric.lower()
    return 0.01 if any(word in name for word in _PERCENT_WORDS) else 1.0


def make_checks(
    indicator: Indicator | None, name: str, metric: str, cfg: EngineConfig
) -> list[Check]:
    """The RL checks a series gets, by indicator (metrics without one are screened for
    generic drift instead: :func:`drift_column`)."""
    i = Indicator
    if indicator is i.ENTROPY:
        return [EntropyCheck(name, metric, cfg.entropy)]
    if indicator is i.TOKEN_PROB:
        return [EntropyCheck(name, metric, cfg.entropy, invert=True)]
    if indicator is i.TRAIN_REWARD:
        return [RewardCheck(name, metric, cfg.reward)]
    if indicator is i.RESPONSE_LENGTH:
        return [LengthCheck(name, metric, cfg.length)]
    if indicator is i.TRUNCATION_RATIO:
        return [TruncationCheck(name, metric, cfg.length)]
    if indicator is i.GRAD_NORM:
        return [SpikeCheck(name, metric, cfg.spike, cfg.spike.grad_norm_ceiling)]
    if indicator is i.KL:
        return [SpikeCheck(name, metric, cfg.spike, cfg.spike.kl_ceiling)]
    if indicator is i.LOSS:
        return [SpikeCheck(name, metric, cfg.spike)]
    if indicator is i.PROB_MISMATCH:
        return [MismatchCheck(name, metric, cfg.mismatch)]
    return []


def drift_column(
    indicator: Indicator | None, name: str, metric: str, cfg: EngineConfig
) -> DriftColumn | None:
    """Generic drift for a metric that has no RL-specific check (held-out rewards and length
    extremes have run-level checks; counters and schedules trend by design)."""
    if indicator in _NO_DRIFT or any(
        fnmatch.fnmatchcase(metric, pattern) for pattern in cfg.drift.ignore
    ):
        return None
    return DriftColumn(name, metric, cfg.drift)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Gathered:
    """One step's values of one series so far, from several sources."""

    __slots__ = ("k", "n", "total", "values")

    def __init__(self) -> None:
        self.total = 0.0  # of the finite values
        self.n = 0  # sources heard, finite or not
        self.k = 0  # finite values among them
        self.values: list[tuple[str, float]] = []  # per source, for the straggler check


#: a series' gathering containers while it has one source: empty, shared, never added to
NO_STEPS: Final[dict[str, int]] = {}
NO_OPEN: Final[dict[int, Gathered]] = {}
NO_ORDER: Final[list[int]] = []
NO_VALUES: Final[list[tuple[str, float]]] = []


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Series:
    """One metric of one run: its checks, and the gathering of a step's values across
    sources."""

    __slots__ = (
        "checks",
        "component",
        "context",
        "drift",
        "feeds_hacking",
        "indicator",
        "judged",
        "last_step",
        "length",
        "metric",
        "name",
        "open",
        "order",
        "pending_values",
        "per_source",
        "scale",
        "signal",
        "solo",
        "special",
        "straggler",
        "window",
    )

    def __init__(
        self,
        metric: str,
        name: str,
        indicator: Indicator | None,
        checks: list[Check],
        drift: DriftColumn | None,
        straggler: StragglerCheck | None,
        component: bool = False,
        cap: int | None = None,
    ) -> None:
        self.metric = metric
        self.name = name
        self.indicator = indicator
        self.checks = checks
        self.drift = drift  # generic metrics: their column of the run's drift screen
        self.straggler = straggler
        self.scale = ratio_scale(indicator, metric)  # a share's unit: checked at every value
        self.feeds_hacking = indicator in _FEEDS_HACKING  # its values go to the hacking check
        self.per_source = straggler is not None  # each source's value kept for the straggler
        self.signal = _SIGNAL_OF.get(indicator) if indicator else None  # no-signal check's
        self.length = _LENGTH_OF.get(indicator) if indicator else None  # the cap check's
        if self.length == "mean" and cap is None:
            self.length = None  # the mean length counts only against a known cap
        self.component = component  # one reward function's: the components check's
        self.context = _CONTEXT_OF.get(indicator) if indicator else None  # the run context's
        # judged beyond its checks: the run-level checks' inputs, the straggler check
        self.special = (
            self.feeds_hacking
            or self.context is not None
            or straggler is not None
            or self.signal is not None
            or self.length is not None
            or component
        )
        # the gathering across sources (:meth:`RunState.value`); while the series has one
        # source, the module's shared empty containers (a series' own would take ~240 bytes)
        self.last_step = NO_STEPS
        self.judged = -1  # the last step handed to the checks
        self.open = NO_OPEN  # steps waiting for more sources
        self.order = NO_ORDER  # their steps, oldest first
        self.pending_values = NO_VALUES  # the judged step's, per source (replaced, not added to)
        # the only source, while there is one value a step (its step is not kept in last_step)
        self.solo: str | None = None
        # the newest (step, value) pairs of a series that projections read
        self.window: Recent | None = None


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Claim:
    """An outranked metric of an indicator that can be handed over (``_HANDED_OVER``): it
    takes the indicator once the bound metric has missed ``HANDOVER_AFTER`` of its
    evaluations in a row, unless the two were seen on different cadences (the bound one came
    back after missing some).

    >>> claim = Claim(Indicator.HELDOUT_REWARD, 7)
    >>> [claim.seen(step, -0.7, owner_last=0) for step in (0, 10, 20, 30, 40)]
    [False, False, False, False, True]
    >>> claim.recent
    [(10, -0.7), (20, -0.7), (30, -0.7), (40, -0.7)]
    """

    __slots__ = ("apart", "indicator", "last", "missed", "rank", "recent")

    def __init__(self, indicator: Indicator, rank: int) -> None:
        self.indicator = indicator
        self.rank = rank
        self.last = -1  # the step it was last logged at
        self.missed = 0  # its evaluations in a row that the bound metric missed
        self.apart = False  # the bound metric came back after missing: another cadence
        self.recent: list[tuple[int, float]] = []  # its newest values, replayed on handover

    def seen(self, step: int, x: float, owner_last: int) -> bool:
        """Its finite value at ``step``, the bound metric last logged at ``owner_last``:
        should it take the indicator over now? An evaluation is judged once a later one
        arrives (the bound metric may come in another event of the same step)."""
        if step <= self.last:
            return False
        if self.last >= 0:
            if owner_last >= self.last:
                self.apart = self.apart or self.missed > 0
                self.missed = 0
            else:
                self.missed += 1
        self.last = step
        self.recent.append((step, x))
        if len(self.recent) > HANDOVER_AFTER + 1:
            del self.recent[0]
        return not self.apart and self.missed >= HANDOVER_AFTER
