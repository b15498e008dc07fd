"""Detection quality on simulated runs: delays and false alarms per failure kind.

For each seed a run with one fault at a random onset step goes through a fresh Monitor;
the fault is fast, or gradual (``gradual=True``: its full effect builds linearly over a ramp
of 50-100 steps drawn from the seed, the onset the same as the fast run's).
A run counts as detected when an incident of the fault's kind fires at or after the onset
(``serious_delays``: its first warning or critical, which the run's context may hold back
while it looks healthy);
its delay is counted from the onset, gradual or not, in steps (run_stalled: cadences of
silence; reward_hacking: held-out evaluations). A false alarm is any warning-or-worse
incident that fires before the onset, or anywhere in a healthy run.
``benchmarks/detection.py`` prints the tables; the tests assert the targets on them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median

from streamwatch.config import Config
from streamwatch.engine.monitor import Monitor
from streamwatch.incidents import Incident, Kind, Severity, Status
from streamwatch.simulate import (
    GRADUAL_KINDS,
    RunSpec,
    healthy_spec,
    random_fault_spec,
    simulate,
    simulate_run,
)

__all__ = ["KindScore", "replay_spec", "score_healthy", "score_kind"]


@dataclass
class KindScore:
    kind: str
    gradual: bool = False
    runs: int = 0
    detected: int = 0
    false_alarm_runs: int = 0
    delays: list[float] = field(default_factory=list)
    #: each detected run's delay to the first warning-or-worse incident of the kind (a run
    #: judged info at first, while its context looked healthy, is counted when it warns)
    serious_delays: list[float] = field(default_factory=list)
    ramps: list[int] = field(default_factory=list)  # gradual: each detected run's ramp, in steps
    missed_seeds: list[int] = field(default_factory=list)
    false_alarms: list[str] = field(default_factory=list)

    @property
    def median_delay(self) -> float:
        return median(self.delays) if self.delays else math.nan

    @property
    def median_serious_delay(self) -> float:
        return median(self.serious_delays) if self.serious_delays else math.nan

    @property
    def median_delay_share(self) -> float:
        """Gradual faults: the median of delay / ramp (both in steps; NaN for fast faults)."""
        if not self.ramps or self.kind in (Kind.RUN_STALLED, Kind.REWARD_HACKING):
            return math.nan
        return median(d / r for d, r in zip(self.delays, self.ramps, strict=True))

    @property
    def clean_fraction(self) -> float:
        return 1.0 - self.false_alarm_runs / self.runs if self.runs else math.nan


def replay_spec(
    spec: RunSpec, config: Config | None = None, *, companions: Sequence[RunSpec] = ()
) -> list[Incident]:
    """All incident updates of one simulated run (with others beside it), flushed."""
    monitor = Monitor(config)
    out: list[Incident] = []
    events = simulate([spec, *companions]) if companions else simulate_run(spec)
    for event in events:
        out.extend(i for i in monitor.process(event) if i.run_id == spec.run_id)
    out.extend(i for i in monitor.flush() if i.run_id == spec.run_id)
    return out


def _serious(inc: Incident) -> bool:
    return inc.status is Status.FIRING and inc.severity is not Severity.INFO


def score_kind(
    kind: str,
    seeds: Sequence[int],
    *,
    strength: float = 1.0,
    config: Config | None = None,
    gradual: bool = False,
) -> KindScore:
    """Detection of one fault kind over ``seeds`` (``gradual``: its ramped form)."""
    if gradual and kind not in GRADUAL_KINDS:
        raise ValueError(f"fault {kind} has no gradual form; gradual kinds: {GRADUAL_KINDS}")
    score = KindScore(kind, gradual=gradual)
    for seed in seeds:
        spec = random_fault_spec(kind, seed, strength=strength, gradual=gradual)
        onset = spec.faults[0].step
        # a stall is judged on event time: other runs on the cluster keep the clock going
        companions = [healthy_spec(f"peer-{seed}", seed + 10_000)] if kind == "run_stalled" else []
        incidents = replay_spec(spec, config, companions=companions)
        score.runs += 1
        early = [i for i in incidents if _serious(i) and i.step < _earliest(kind, onset)]
        if early:
            score.false_alarm_runs += 1
            score.false_alarms.append(f"seed {seed}: {early[0].kind} at {early[0].step}")
        hits = [
            i
            for i in incidents
            if i.status is Status.FIRING and i.kind == kind and i.step >= _earliest(kind, onset)
        ]
        if not hits:
            score.missed_seeds.append(seed)
            continue
        score.detected += 1
        score.delays.append(_delay(kind, hits[0], onset, spec))
        serious = [i for i in hits if i.severity is not Severity.INFO]
        if serious:
            score.serious_delays.append(_delay(kind, serious[0], onset, spec))
        if (ramp := spec.faults[0].ramp) is not None:
            score.ramps.append(ramp)
    return score


def score_healthy(seeds: Sequence[int], config: Config | None = None) -> KindScore:
    score = KindScore("healthy")
    for seed in seeds:
        incidents = replay_spec(healthy_spec(f"healthy-{seed}", seed), config)
        score.runs += 1
        serious = [i for i in incidents if _serious(i)]
        if serious:
            score.false_alarm_runs += 1
            score.false_alarms.append(f"seed {seed}: {serious[0].kind} at {serious[0].step}")
    return score


def _earliest(kind: str, onset: int) -> int:
    # a stall is reported at the last step that was heard, just before the silence
    return onset - 1 if kind == Kind.RUN_STALLED else onset


def _delay(kind: str, hit: Incident, onset: int, spec: RunSpec) -> float:
    if kind == Kind.RUN_STALLED:
        return float(hit.evidence["silent_seconds"]) / float(hit.evidence["cadence_seconds"])
    steps = float(hit.step - onset)
    if kind == Kind.REWARD_HACKING:
        return steps / spec.eval_every
    return steps
