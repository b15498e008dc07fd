"""Detection quality on seeded simulated runs: the product's requirements per failure kind.

For every kind, 30 seeded runs with the fault at full strength: detected in every run, a
small median delay, and (almost) no warning-or-worse incident before the fault's onset.
Thirty healthy runs raise no warning at all.
"""

from __future__ import annotations

from functools import cache

import pytest

from streamwatch.incidents import Kind
from streamwatch.scoring import KindScore, score_healthy, score_kind
from streamwatch.simulate import FAULT_KINDS

pytestmark = pytest.mark.slow

SEEDS = tuple(range(30))
STRENGTH = 1.0
MIN_CLEAN_FRACTION = 0.97

#: Median delay allowed, in the kind's unit: steps, except held-out evaluations for
#: reward_hacking and cadences of silence for run_stalled.
MAX_MEDIAN_DELAY: dict[str, float] = {kind: 15.0 for kind in FAULT_KINDS}
MAX_MEDIAN_DELAY[Kind.NONFINITE_METRIC] = 0.0
MAX_MEDIAN_DELAY[Kind.REWARD_HACKING] = 3.0
MAX_MEDIAN_DELAY[Kind.RUN_STALLED] = 15.0


@cache
def scored(kind: str) -> KindScore:
    return score_kind(kind, SEEDS, strength=STRENGTH)


@cache
def scored_healthy() -> KindScore:
    return score_healthy(SEEDS)


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_detected_in_every_run(kind: str) -> None:
    score = scored(kind)
    assert score.runs == len(SEEDS)
    assert score.detected == len(SEEDS), (
        f"{kind}: detected in {score.detected}/{score.runs} runs; missed seeds {score.missed_seeds}"
    )


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_median_delay(kind: str) -> None:
    score = scored(kind)
    limit = MAX_MEDIAN_DELAY[kind]
    assert score.delays, f"{kind}: never detected"
    assert score.median_delay <= limit, (
        f"{kind}: median delay {score.median_delay:.2f} > {limit} (delays {sorted(score.delays)})"
    )


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_no_false_alarm_before_onset(kind: str) -> None:
    score = scored(kind)
    assert score.clean_fraction >= MIN_CLEAN_FRACTION, (
        f"{kind}: {score.clean_fraction:.3f} of runs clean before the onset "
        f"({score.false_alarm_runs} with a false alarm): {score.false_alarms}"
    )


def test_healthy_runs_raise_no_warning() -> None:
    score = scored_healthy()
    assert score.runs == len(SEEDS)
    assert score.clean_fraction == 1.0, (
        f"{score.clean_fraction:.3f} of healthy runs clean "
        f"({score.false_alarm_runs} with a false alarm): {score.false_alarms}"
    )
