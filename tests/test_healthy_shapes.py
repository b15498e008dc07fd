"""Healthy runs whose numbers a check can misread (benchmarks/third_family.py): each shape
raises no warning. The shapes: a slow monotone decline over thousands of steps, a very noisy
flat reward of a small batch, a count named like a ratio, a weak model's first step, a small
policy's entropy early."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event
from streamwatch.incidents import Severity, Status

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _family() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))  # third_family imports healthy_family beside it
    try:
        spec = importlib.util.spec_from_file_location(
            "third_family", BENCHMARKS / "third_family.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


FAMILY = _family()
SHAPES = list(FAMILY.SHAPES)
#: three seeds of each shape (seed % 5 picks the shape), and a slow decline whose train
#: reward's noise reference once swung low enough to make the chaos CUSUM climb
SEEDS = [*range(3 * len(SHAPES)), 45]


@pytest.mark.parametrize("seed", SEEDS, ids=[f"{SHAPES[s % len(SHAPES)]}-{s}" for s in SEEDS])
def test_a_healthy_shape_raises_no_warning(seed: int) -> None:
    run = FAMILY.third_run(seed)
    monitor = Monitor()
    out = [u for event in run.events for u in monitor.process(event)]
    serious = [
        f"{u.kind}@{u.step} {u.severity.value}"
        for u in out
        if u.status is Status.FIRING and u.severity is not Severity.INFO
    ]
    assert serious == [], run.run_id


def test_the_weak_first_step_is_said_as_an_info() -> None:
    seed = SHAPES.index("weak_first_step")
    run = FAMILY.third_run(seed)
    monitor = Monitor()
    out = [u for event in run.events[:3] for u in monitor.process(event)]
    first = [u for u in out if u.step == 1 and u.kind == "no_learning_signal"]
    assert first and all(u.severity is Severity.INFO for u in first)
    assert "one step of evidence" in str(first[0].evidence.get("held_as"))


def _serious(events: list[Event]) -> list[str]:
    monitor = Monitor()
    out = [u for event in events for u in monitor.process(event)]
    return [
        f"{u.kind}@{u.step} {u.severity.value}"
        for u in out
        if u.status is Status.FIRING and u.severity is not Severity.INFO
    ]


def test_a_weak_start_cut_at_the_cap_is_no_warning_before_the_reward_has_a_way() -> None:
    """A weak model's first batches run long and score alike: 60% of completions cut and
    every group alike at steps 1-2, then the run learns. Until the reward has a direction
    that is all there is to judge, and it is an info; near 1 it would still be critical."""
    events = []
    for step in range(1, 61):
        early = step <= 2
        events.append(
            Event(
                run_id="weak-start",
                step=step,
                metrics={
                    "completions/clipped_ratio": 0.6 if early else max(0.05, 0.4 - 0.01 * step),
                    "reward": 0.0 if early else min(0.8, 0.1 + 0.02 * step),
                    "reward_std": 0.0 if early else 0.3,
                    "frac_reward_zero_std": 1.0 if early else 0.2,
                },
            )
        )
    assert _serious(events) == []


def test_most_groups_alike_while_the_held_out_rises_is_no_critical() -> None:
    """Most groups alike (zero-variance fraction 0.93) for 30 steps, the train reward flat
    near its plateau, and the held-out score still rising at each evaluation: the rest of the
    batch teaches. Said as an info, not a critical (which would stop the run)."""
    events = []
    for step in range(1, 121):
        m = {
            "reward": 0.8 + 0.01 * ((step * 7) % 5 - 2),
            "reward_std": 0.3,
            "frac_reward_zero_std": 0.2 if step < 80 else 0.93,
        }
        if step % 10 == 0:
            m["eval_reward"] = 0.3 + 0.004 * step
        events.append(Event(run_id="solving", step=step, metrics=m))
    assert not [s for s in _serious(events) if s.endswith("critical")]


def test_a_pass_fail_reward_leaving_its_floor_is_no_chaos() -> None:
    """A pass/fail reward (each step the mean of 16 completions scored 0 or 1, its logged
    std sqrt(m (1 - m))) at 5% for a 60-step warm-up, then climbing to 60%: its noise grows
    with its level as a 0/1 mean's must. Judged window by window in the units its level
    allows, it is no chaos (a reference taken over the floor and the climb together made it
    one)."""
    warned = 0
    for seed in range(8):
        rng = random.Random(seed)
        events = []
        for step in range(1, 301):
            p = 0.05 if step <= 60 else min(0.6, 0.05 + 0.0055 * (step - 60))
            m = sum(rng.random() < p for _ in range(16)) / 16
            metrics = {"reward": m, "reward_std": math.sqrt(m * (1 - m))}
            events.append(Event(run_id=f"climb-{seed}", step=step, metrics=metrics))
        warned += any(s.startswith("reward_chaos") for s in _serious(events))
    assert warned == 0


def test_one_length_for_all_with_a_logged_clip_ratio_of_zero_is_no_cut() -> None:
    """Every completion 20 tokens long at every step (a task whose answer has a fixed form),
    far below a 128-token cap, and the run's own clip ratio 0: one length for all is no cut
    at the cap when the run says none was cut."""
    events = [
        Event(
            run_id="fixed-form",
            step=step,
            metrics={
                "response_length/mean": 20.0,
                "response_length/min": 20.0,
                "response_length/max": 20.0,
                "response_length/clip_ratio": 0.0,
                "critic/score/mean": min(0.8, 0.1 + 0.01 * step),
            },
        )
        for step in range(1, 101)
    ]
    assert _serious(events) == []


def test_a_gradient_logged_as_zero_beside_groups_that_differ_is_no_lost_signal() -> None:
    """A grad norm logged as exactly 0 at two logs in a row while half the groups' rewards
    differ: GRPO's advantages are not all 0, so neither is the gradient; the 0 is the
    logger's precision, said as an info. With every group alike it stays a warning."""

    def run(alike: float) -> list[str]:
        events = []
        for step in range(10, 310, 10):
            zero = step in (260, 270)
            events.append(
                Event(
                    run_id=f"grad-zero-{alike}",
                    step=step,
                    metrics={
                        "reward": 1.1 + 0.05 * ((step // 10) % 3 - 1),
                        "reward_std": 0.0 if zero and alike == 1.0 else 0.7,
                        "frac_reward_zero_std": alike if zero else 0.3,
                        "grad_norm": 0.0 if zero else 0.02,
                        "loss": -0.002,
                    },
                )
            )
        return _serious(events)

    assert run(0.5) == []
    assert any(s.startswith("no_learning_signal") for s in run(1.0))


def _falling_cut_start(seed: int, c0: float) -> list[Event]:
    """A weak model's start: ``c0`` of its completions cut at first, falling to 5% with a time
    constant of 40 steps (15% noise of its level), a cut completion scoring 0; its accuracy
    climbs from 0 by 0.3% a step; the reward is a mean of 128 pass/fail completions, and a
    batch that scored 0 everywhere has every group alike."""
    rng = random.Random(seed)
    events = []
    for step in range(1, 201):
        clip = 0.05 + (c0 - 0.05) * math.exp(-step / 40)
        clip = min(1.0, max(0.0, clip * (1.0 + 0.15 * rng.gauss(0.0, 1.0))))
        acc = min(0.9, 0.003 * step) * (1.0 - clip)
        m = sum(rng.random() < acc for _ in range(128)) / 128
        metrics = {
            "completions/clipped_ratio": clip,
            "reward": m,
            "reward_std": math.sqrt(m * (1 - m)),
            "frac_reward_zero_std": 1.0 if m == 0.0 else acc**8 + (1 - acc) ** 8,
        }
        events.append(Event(run_id=f"cut-start-{seed}", step=step, metrics=metrics))
    return events


def test_a_high_cut_share_falling_from_the_start_is_no_warning_beside_alike_groups() -> None:
    """60-75% of completions cut at the start and falling, most groups alike beside it (a
    weak model's long, failing answers): a second signal does not stand in for the clip
    ratio's course below near 1. Nor does holding a high ratio whose fall is not yet shown:
    a warning needs the course to show it is not falling fast enough to halve."""
    for seed in range(6):
        events = _falling_cut_start(seed, 0.6 + 0.03 * seed)
        assert not [s for s in _serious(events) if s.startswith("truncation")], seed


def test_a_cut_share_near_1_beside_alike_groups_is_critical_at_once() -> None:
    """The impossible stays immediate: 95% cut and every group alike is critical in two
    steps, whatever the run does next."""
    events = [
        Event(
            run_id="cut-all",
            step=step,
            metrics={
                "completions/clipped_ratio": 0.95,
                "reward": 0.0,
                "reward_std": 0.0,
                "frac_reward_zero_std": 1.0,
            },
        )
        for step in range(1, 4)
    ]
    assert "truncation_saturation@1 critical" in _serious(events)


def test_two_heavy_tailed_values_in_one_window_are_no_chaos() -> None:
    """A flat pass/fail reward (a mean of 64 completions at 0.4) whose batch means have
    heavy tails: two values far out (0.03 and 0.01) nine steps apart, the rest as usual.
    The window's noise is judged by its bulk, not by the two outliers."""
    rng = random.Random(7)
    events = []
    for step in range(1, 301):
        m = sum(rng.random() < 0.4 for _ in range(64)) / 64
        if step in (150, 159):
            m = 0.03 if step == 150 else 0.01
        metrics = {"reward": m, "reward_std": math.sqrt(m * (1 - m))}
        events.append(Event(run_id="two-tails", step=step, metrics=metrics))
    assert not [s for s in _serious(events) if s.startswith("reward_chaos")]


def test_most_groups_alike_beside_a_reward_held_at_its_best_is_solved_not_broken() -> None:
    """A run that climbed to a 0/1 reward of 0.97-1.0 and holds it: 93% of its groups of 8
    alike for 40 steps. Its prompts are solved: an info with the remedy, not a critical."""
    events = []
    for step in range(1, 301):
        reward = min(1.0, 0.2 + 0.008 * step) if step < 100 else 0.97 + 0.03 * (step % 3 == 0)
        metrics = {
            "reward": reward,
            "reward_std": 0.15 if step >= 100 else 0.4,
            "frac_reward_zero_std": 0.93 if step >= 260 else min(0.8, reward**8),
        }
        events.append(Event(run_id="solved", step=step, metrics=metrics))
    assert not [s for s in _serious(events) if s.startswith("no_learning")]


def _sparse_length(every: int, lengths: list[float], learning: bool = True) -> list[Event]:
    return [
        Event(
            run_id=f"sparse-{every}",
            step=every * (k + 1),
            metrics={
                "response_length/mean": x,
                "response_length/clip_ratio": 0.005 + 0.06 * (x / 2048) ** 2,
                "critic/score/mean": min(0.8, 0.1 + 0.05 * k) if learning else 0.4,
            },
        )
        for k, x in enumerate(lengths)
    ]


def test_a_sparse_logs_steady_lengthening_is_no_fast_explosion() -> None:
    """A length logged every 10 steps that grows 3x linearly over 200 steps (reasoning RL
    lengthening, a few completions more cut as it grows toward a 2,048-token cap): 1.5x
    over its last 10 logs is 100 training steps, not a fast explosion,
    which is a rate (1.5x within 10 steps). Doubling between two logs still is one."""
    steady = [300.0 * (1.0 + 2.0 * k / 19) for k in range(20)]
    assert not [s for s in _serious(_sparse_length(10, steady)) if s.startswith("length")]
    jump = [300.0] * 10 + [300.0 * 2.0**k for k in range(1, 6)]
    found = _serious(_sparse_length(10, jump, learning=False))
    assert [s for s in found if s.startswith("length_explosion")]


def test_a_flat_reward_with_heavy_tails_is_no_collapse() -> None:
    """A flat reward (0.5) whose batch means have heavy tails (Student-t with 3 degrees of
    freedom, sd 0.04), 400 steps, 40 seeds: a lone value far out moves the smoothed reward
    only as far as 4 sds of its innovations, so it is not carried for steps as a fall that
    the trend break adds up. No collapse on any seed."""
    warned = []
    for seed in range(50, 90):
        rng = random.Random(seed)
        events = []
        for step in range(1, 401):
            chi = sum(rng.gauss(0.0, 1.0) ** 2 for _ in range(3)) / 3
            t = rng.gauss(0.0, 1.0) / math.sqrt(chi) / math.sqrt(3.0)  # unit sd
            metrics = {"reward": 0.5 + 0.04 * t, "entropy": 0.6 * (1.0 + 0.04 * t)}
            events.append(Event(run_id=f"heavy-{seed}", step=step, metrics=metrics))
        warned += [f"{seed}: {s}" for s in _serious(events) if s.startswith("reward_collapse")]
    assert warned == []


def test_a_grad_norm_that_settles_at_its_level_is_no_growth_but_four_times_it_is() -> None:
    """A grad norm with log-normal noise (log-sd 0.25) and a one-step spike every 97 steps,
    400 steps, 4 seeds: no growth at its level, nor when it rises 1.5x and settles. A linear
    climb to 4x over 70 steps (concave in its log, which a trend break extrapolates once it
    has climbed a while) is found on every seed: its median of 5 at 3x its range's median."""

    def run(target: float, seed: int) -> list[str]:
        rng = random.Random(seed)
        events = []
        for step in range(1, 401):
            g = min(1.0, max(0.0, (step - 150) / 70))
            level = 0.05 * (1.0 + (target - 1.0) * g)
            x = level * math.exp(0.25 * rng.gauss(0.0, 1.0)) * (4.0 if step % 97 == 0 else 1.0)
            events.append(Event(run_id=f"grad-{target}", step=step, metrics={"grad_norm": x}))
        return [s for s in _serious(events) if s.startswith("metric_spike")]

    for seed in range(4):
        assert run(1.0, seed) == [] and run(1.5, seed) == [], seed
        assert run(4.0, seed), seed
