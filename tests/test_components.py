"""Reward components parting ways (the field case open-r1-255 holds the check to a real
report: tests/test_field_cases.py), and its false alarms on synthetic healthy runs."""

from __future__ import annotations

import math
import random

import pytest

from streamwatch.checks import ComponentsCheck, is_component
from streamwatch.config import HackingSettings
from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event

S = HackingSettings()


def run(seed: int, sd: float, accuracy_start: float, onset: int | None = None) -> int | None:
    """The first step the check fires on a run whose accuracy rises slowly, whose format
    reward rises fast and whose length reward stays put; with ``onset``, from then on the
    accuracy falls to 0 and the length reward climbs by 0.5 over 20 logs."""
    rng = random.Random(seed)
    check = ComponentsCheck(S)
    for t in range(1, 201):
        acc = accuracy_start + 0.4 * (1 - math.exp(-t / 80))
        length = 0.3
        if onset is not None and t >= onset:
            acc *= max(0.0, 1 - (t - onset + 1) / 20)
            length += 0.5 * min(1.0, (t - onset + 1) / 20)
        fmt = 0.3 + 0.65 * (1 - math.exp(-t / 10))
        found = check.update("rewards/accuracy_reward", t, acc + rng.gauss(0, sd))
        found += check.update("rewards/format_reward", t, fmt + rng.gauss(0, sd))
        found += check.update("rewards/length_reward", t, length + rng.gauss(0, sd))
        if found:
            return t
    return None


@pytest.mark.parametrize(("accuracy_start", "at_most"), [(0.05, 0.1), (0.2, 0.02), (0.5, 0.0)])
def test_false_alarms_on_healthy_runs_with_large_batches(
    accuracy_start: float, at_most: float
) -> None:
    fired = [run(seed, 0.03, accuracy_start) for seed in range(200)]
    assert sum(t is not None for t in fired) / 200 <= at_most


def test_a_late_divergence_is_found_within_its_first_half() -> None:
    found = [run(seed, 0.03, 0.2, onset=100) for seed in range(30)]
    delays = sorted(t - 100 for t in found if t is not None)
    assert all(d >= 0 for d in delays), "fired before the divergence began"
    assert len(delays) >= 27
    assert delays[len(delays) // 2] <= 12  # of a 20-log divergence


def test_components_are_the_per_function_means() -> None:
    assert is_component("rewards/accuracy_reward", S)
    assert is_component("rewards/format_reward/mean", S)
    assert is_component("train/rewards/format_reward/mean", S)
    assert not is_component("rewards/format_reward/std", S)
    assert not is_component("reward", S)


def test_in_the_engine_one_incident_names_both_components() -> None:
    monitor = Monitor()
    rows = [(0.16, 0.48), (0.12, 0.55), (0.06, 0.86)]
    updates = []
    for step, (acc, fmt) in enumerate(rows, start=1):
        metrics = {"rewards/accuracy_reward": acc, "rewards/format_reward": fmt}
        updates += monitor.process(Event(run_id="r", step=step, metrics=metrics))
    [hacking] = [u for u in updates if u.kind == "reward_hacking"]
    assert hacking.step == 3
    assert hacking.evidence["falling"] == "rewards/accuracy_reward"
    assert hacking.evidence["rising"] == "rewards/format_reward"
