"""The no-learning-signal check, step by step (the field cases in tests/data/field hold it
to real reports: tests/test_field_cases.py)."""

from __future__ import annotations

import random

from streamwatch.checks import NoSignalCheck
from streamwatch.config import SignalSettings
from streamwatch.events import Event
from streamwatch.incidents import Finding, Severity, Status
from streamwatch.monitor import Monitor


def feed(rows: list[dict[str, float]]) -> list[tuple[int, Finding]]:
    check = NoSignalCheck(SignalSettings())
    out: list[tuple[int, Finding]] = []
    for step, row in enumerate(rows, start=1):
        for signal, x in row.items():
            out.extend((step, f) for f in check.observe(signal, signal, step, x))
    return out


def healthy(rng: random.Random) -> dict[str, float]:
    return {
        "zero_variance": rng.uniform(0.1, 0.6),
        "reward_std": rng.uniform(0.1, 0.4),
        "reward_max": 1.0,
        "reward_min": 0.0,
        "grad_norm": rng.uniform(0.05, 2.0),
    }


def test_healthy_steps_raise_nothing() -> None:
    rng = random.Random(1)
    assert feed([healthy(rng) for _ in range(500)]) == []


def test_an_isolated_step_with_one_reward_for_all_is_no_finding() -> None:
    rng = random.Random(2)
    rows = [healthy(rng) for _ in range(30)]
    rows[10] = dict(rows[10], reward_std=0.0)
    rows[12] = dict(rows[12], reward_std=0.0, zero_variance=1.0)
    assert feed(rows) == []


def test_zero_reward_std_three_steps_in_a_row_is_a_warning_at_the_third() -> None:
    rng = random.Random(3)
    rows = [healthy(rng) for _ in range(20)]
    for i in (10, 11, 12):
        rows[i] = dict(rows[i], reward_std=0.0)
    found = feed(rows)
    assert {step for step, _ in found} == {13}
    assert found[0][1].severity is Severity.WARNING
    assert found[0][1].onset_step == 11


def test_every_completion_alike_is_found_at_once_and_critical_when_it_lasts() -> None:
    rows = [{"reward_max": 0.0, "reward_min": 0.0, "grad_norm": 0.02} for _ in range(12)]
    found = feed(rows)
    assert found[0][0] == 1
    assert "every completion got the same reward (0)" in found[0][1].message
    severities = {step: f.severity for step, f in found}
    assert severities[9] is Severity.WARNING
    assert severities[10] is Severity.CRITICAL


def test_a_gradient_of_exactly_zero_twice_in_a_row() -> None:
    rng = random.Random(4)
    rows = [healthy(rng) for _ in range(10)]
    rows[4] = dict(rows[4], grad_norm=0.0)
    rows[7] = dict(rows[7], grad_norm=0.0)
    rows[8] = dict(rows[8], grad_norm=0.0)
    assert [step for step, _ in feed(rows)] == [9]


def test_a_zero_variance_count_is_not_read_as_a_fraction() -> None:
    rows = [{"zero_variance": 12.0, "reward_std": 0.3, "grad_norm": 0.4} for _ in range(10)]
    assert feed(rows) == []


def test_the_engine_raises_one_incident_and_resolves_it_when_rewards_differ_again() -> None:
    monitor = Monitor()
    updates = []
    for step in range(1, 60):
        broken = 5 <= step < 15
        metrics = {
            "frac_reward_zero_std": 1.0 if broken else 0.3,
            "reward_std": 0.0 if broken else 0.25,
            "grad_norm": 0.0 if broken else 0.4,
            "reward": 0.5,
        }
        updates += monitor.process(Event(run_id="r", step=step, metrics=metrics))
    signal = [u for u in updates if u.kind == "no_learning_signal"]
    assert [(u.status, u.severity, u.step) for u in signal] == [
        (Status.FIRING, Severity.WARNING, 5),
        (Status.FIRING, Severity.CRITICAL, 14),
        # three signals a step, each a healthy update: resolve_after (20) of them by step 21
        (Status.RESOLVED, Severity.CRITICAL, 21),
    ]
