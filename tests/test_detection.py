"""Detection quality on seeded simulated runs: the product's requirements per failure kind.

For every kind, 30 seeded runs with the fault at full strength: detected in every run, a
small median delay, and (almost) no warning-or-worse incident before the fault's onset.
Thirty healthy runs raise no warning at all. The same targets for gradual faults (the full
effect built over 50-100 steps), where the engine still falls short, are strict xfails, so
each turns into a failure the day it is met.
"""

from __future__ import annotations

from functools import cache

import pytest

from streamwatch.incidents import Kind
from streamwatch.simulate import FAULT_KINDS, GRADUAL_KINDS
from streamwatch.simulate.scoring import KindScore, score_healthy, score_kind

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
def scored_gradual(kind: str) -> KindScore:
    return score_kind(kind, SEEDS, strength=STRENGTH, gradual=True)


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


# --- gradual faults ------------------------------------------------------------------------

_LATE = "gradual ramps are caught late or not at all (benchmarks/detection.py)"
#: Gradual kinds not yet detected in every run (none).
_MISSED: frozenset[str] = frozenset()
#: Gradual kinds detected later than the target (median).
_SLOW = frozenset({"reward_chaos", "reward_hacking"})


def _gradual(kinds: frozenset[str]) -> list[object]:
    late = pytest.mark.xfail(strict=True, reason=_LATE)
    return [pytest.param(k, marks=[late] if k in kinds else []) for k in GRADUAL_KINDS]


@pytest.mark.parametrize("kind", _gradual(_MISSED))
def test_gradual_detected_in_every_run(kind: str) -> None:
    score = scored_gradual(kind)
    assert score.runs == len(SEEDS) and score.gradual
    assert len(score.ramps) == score.detected
    assert score.detected == len(SEEDS), (
        f"{kind}: detected in {score.detected}/{score.runs} runs; missed seeds {score.missed_seeds}"
    )


@pytest.mark.parametrize("kind", _gradual(_SLOW))
def test_gradual_median_delay(kind: str) -> None:
    score = scored_gradual(kind)
    limit = MAX_MEDIAN_DELAY[kind]
    assert score.delays, f"{kind}: never detected"
    assert score.median_delay <= limit, (
        f"{kind}: median delay {score.median_delay:.2f} > {limit} (delays {sorted(score.delays)})"
    )


@pytest.mark.parametrize("kind", GRADUAL_KINDS)
def test_gradual_no_false_alarm_before_onset(kind: str) -> None:
    score = scored_gradual(kind)
    assert score.clean_fraction >= MIN_CLEAN_FRACTION, (
        f"{kind}: {score.clean_fraction:.3f} of runs clean before the onset "
        f"({score.false_alarm_runs} with a false alarm): {score.false_alarms}"
    )


@pytest.mark.parametrize("kind", [Kind.NONFINITE_METRIC, Kind.RUN_STALLED])
def test_no_gradual_score_for_a_kind_without_a_gradual_form(kind: str) -> None:
    with pytest.raises(ValueError, match="no gradual form"):
        score_kind(kind, SEEDS[:1], gradual=True)
