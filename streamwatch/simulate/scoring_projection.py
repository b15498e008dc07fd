"""How good the projections are, on simulated failures that build.

For each seed a run with one gradual fault of a projected kind (its effect builds linearly
over 50-100 steps) goes through a fresh Monitor. Every incident update of the fault's kind
that carries a projection is judged against what the run then did: the *actual* crossing is
the first step after the projection was made at which the series (the median of the 5
values centred on the step, so that one noisy value is no crossing) is beyond the projected
level. A projection is right when it is within 20% of the actual step (the bar), and is
also measured against the time it looked ahead (the actual step less the step it was made
at), which is the harder figure. A run that never crosses is judged only when its
projected step came before the run ended (then it is wrong).
``benchmarks/projection.py`` prints the table; ``tests/test_projection.py`` asserts the bar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median

from streamwatch.config import Config
from streamwatch.engine.monitor import Monitor
from streamwatch.engine.projection import PROJECTED
from streamwatch.incidents import Incident, Status
from streamwatch.simulate import random_fault_spec, simulate_run

__all__ = ["Judged", "ProjectionScore", "actual_crossing", "score_projection"]


@dataclass(frozen=True)
class Judged:
    seed: int
    made_at: int
    step: int
    low: int
    high: int
    actual: int | None  # None: the run ended before the series crossed

    @property
    def error(self) -> float:
        return math.inf if self.actual is None else float(self.step - self.actual)

    def within(self, share: float) -> bool:
        return self.actual is not None and abs(self.error) <= share * self.actual

    def within_horizon(self, share: float) -> bool:
        if self.actual is None:
            return False
        return abs(self.error) <= share * max(self.actual - self.made_at, 1)

    @property
    def covered(self) -> bool:
        return self.actual is not None and self.low <= self.actual <= self.high


@dataclass
class ProjectionScore:
    kind: str
    runs: int = 0
    raised: int = 0  # runs with an incident of the kind
    judged: list[Judged] = field(default_factory=list)
    unjudged: int = 0  # projected beyond the run's end, and the run never crossed

    @property
    def shown(self) -> int:
        return len(self.judged) + self.unjudged

    def share(self, test: str, amount: float = 0.2) -> float:
        if not self.judged:
            return math.nan
        if test == "step":
            hits = sum(j.within(amount) for j in self.judged)
        elif test == "horizon":
            hits = sum(j.within_horizon(amount) for j in self.judged)
        else:
            hits = sum(j.covered for j in self.judged)
        return hits / len(self.judged)

    @property
    def median_abs_error(self) -> float:
        errors = [abs(j.error) for j in self.judged if j.actual is not None]
        return median(errors) if errors else math.nan


def actual_crossing(series: dict[int, float], level: float, rising: bool, after: int) -> int | None:
    """The first step after ``after`` whose centred 5-value median is beyond ``level``."""
    steps = sorted(series)
    values = [series[s] for s in steps]
    for i, step in enumerate(steps):
        if step <= after:
            continue
        around = sorted(values[max(0, i - 2) : i + 3])
        mid = around[len(around) // 2]
        if (mid >= level) if rising else (mid <= level):
            return step
    return None


def score_projection(
    kind: str,
    seeds: Sequence[int],
    *,
    config: Config | None = None,
    gradual: bool = True,
    strength: float = 1.0,
) -> ProjectionScore:
    """The projections of one kind's incidents over ``seeds``, each judged (module doc)."""
    if kind not in PROJECTED:
        raise ValueError(f"{kind} is not projected; projected kinds: {sorted(PROJECTED)}")
    score = ProjectionScore(kind)
    for seed in seeds:
        spec = random_fault_spec(kind, seed, strength=strength, gradual=gradual)
        monitor = Monitor(config)
        values: dict[str, dict[int, float]] = {}
        updates: list[Incident] = []
        last = 0
        for event in simulate_run(spec):
            last = max(last, event.step)
            for metric, x in event.metrics.items():
                values.setdefault(metric, {}).setdefault(event.step, x)
            updates.extend(
                u for u in monitor.process(event) if u.kind == kind and u.status is Status.FIRING
            )
        updates.extend(u for u in monitor.flush() if u.kind == kind)
        score.runs += 1
        score.raised += bool(updates)
        for inc in updates:
            p = inc.projection
            if not p:
                continue
            series = values.get(inc.metric, {})
            actual = actual_crossing(series, p["level"], p["rising"], p["made_at"])
            if actual is None and p["step"] > last:
                score.unjudged += 1
                continue
            score.judged.append(Judged(seed, p["made_at"], p["step"], p["low"], p["high"], actual))
    return score
