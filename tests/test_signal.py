"""The no-learning-signal check, step by step (the field cases in tests/data/field hold it
to real reports: tests/test_field_cases.py)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from streamwatch.checks import NoSignalCheck
from streamwatch.config import SignalSettings
from streamwatch.engine.findings import Finding
from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event
from streamwatch.incidents import Severity, Status


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


def test_every_completion_alike_is_found_after_three_steps_and_critical_when_it_lasts() -> None:
    """Alone (no second sign of the same step), one batch that scored 0 everywhere is a weak
    model's chance; three in a row are not."""
    rows = [{"reward_max": 0.0, "reward_min": 0.0, "grad_norm": 0.02} for _ in range(12)]
    found = feed(rows)
    assert found[0][0] == 3
    assert "every completion got the same reward (0)" in found[0][1].message
    severities = {step: f.severity for step, f in found}
    assert severities[9] is Severity.WARNING
    assert severities[10] is Severity.CRITICAL


def test_every_completion_alike_with_a_policy_loss_of_zero_is_found_at_once() -> None:
    """verl#2088's row (tests/data/field/verl-2088-all-rewards-zero.jsonl): score max = min
    = 0 and ``actor/pg_loss`` 0.0, the grad norm 0.017 (the KL term's)."""
    found = feed([{"reward_max": 0.0, "reward_min": 0.0, "grad_norm": 0.017, "loss": 0.0}])
    assert [step for step, _ in found] == [1]


def test_a_weak_models_batch_that_scored_zero_once_is_no_finding() -> None:
    """A PPO run at an accuracy near 0: one batch scores 0 everywhere, the next has a 1;
    its critic's advantages keep the loss away from 0."""
    rows = [{"reward_max": 1.0, "reward_min": 0.0, "grad_norm": 0.3, "loss": 0.01}] * 6
    rows[3] = {"reward_max": 0.0, "reward_min": 0.0, "grad_norm": 0.28, "loss": -0.02}
    assert feed(rows) == []


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
        # one healthy update a step, however many signals it logs: resolve_after (20) of them,
        # steps 15 to 34
        (Status.RESOLVED, Severity.CRITICAL, 34),
    ]


# --- a slow drain ----------------------------------------------------------------------------

REAL = Path(__file__).parent / "data" / "real"


def trl_row(rng: random.Random, share_alike: float, groups: int = 128) -> dict[str, float]:
    """A step as TRL logs it: the zero-variance fraction a count over the groups, the reward
    std (the mean of the groups' stds) falling with the share of groups that still vary."""
    sd = math.sqrt(share_alike * (1.0 - share_alike) / groups)
    frac = min(1.0, max(0.0, round((share_alike + sd * rng.gauss(0, 1)) * groups) / groups))
    live = 1.0 - share_alike
    return {
        "zero_variance": frac,
        "reward_std": 0.35 * live / 0.7 * math.exp(0.04 * rng.gauss(0, 1)),
        "grad_norm": 0.1 * math.sqrt(live / 0.7) * math.exp(0.1 * rng.gauss(0, 1)),
    }


def test_groups_turning_all_alike_over_75_steps_are_a_warning_while_most_still_differ() -> None:
    delays = []
    for seed in range(20):
        rng = random.Random(seed)
        steady = [trl_row(rng, 0.3) for _ in range(150)]
        drain = [trl_row(rng, 0.3 + 0.7 * min(1.0, (k + 1) / 75)) for k in range(75)]
        found = feed(steady + drain)
        assert found and found[0][0] > 150, seed
        step, first = found[0]
        assert first.severity is Severity.WARNING and "draining" in first.message, seed
        assert first.evidence["zero_variance"] < 0.9, seed  # before the level rule's 0.9
        delays.append(step - 150)
    assert sorted(delays)[10] <= 20, sorted(delays)


def test_healthy_verl_runs_whose_accuracy_climbs_towards_1_are_not_draining() -> None:
    """The real GSM8K runs: train score 0.25 -> 0.98, grad norm down 4x; fed the train
    reward, the check finds nothing (their accuracy rises and settles: their own trend)."""
    names = {
        "critic/score/max": "reward_max",
        "critic/score/min": "reward_min",
        "actor/grad_norm": "grad_norm",
        "critic/score/mean": "reward",
    }
    for path in sorted(REAL.glob("*.jsonl")):
        check = NoSignalCheck(SignalSettings())
        found = []
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            for metric, signal in names.items():
                if metric in row["metrics"]:
                    found += check.observe(signal, metric, row["step"], row["metrics"][metric])
        assert "reward" in check.drains and found == [], path.name


def test_a_reward_outside_0_1_and_a_zero_variance_count_say_nothing_of_a_drain() -> None:
    check = NoSignalCheck(SignalSettings())
    for step in range(1, 200):
        check.observe("reward", "reward", step, 3.0 - step / 100)  # a sum of reward functions
        check.observe("zero_variance", "num_zero_std", step, float(step))  # a count
    assert check.drains == {}
