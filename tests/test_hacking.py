"""The reward-hacking check on hand-made curves: noise estimates and what it demands."""

from __future__ import annotations

import math
import random

from streamwatch.checks.hacking import Bends, HackingCheck
from streamwatch.config import HackingSettings
from streamwatch.incidents import Finding


def test_eval_noise_follows_the_noise_not_the_learning_curve() -> None:
    rng = random.Random(3)
    for sd in (0.005, 0.01, 0.02):
        bends = Bends(50)
        for t in range(200):
            level = 0.3 + 0.5 * (1.0 - math.exp(-t / 20.0))  # a rising, saturating curve
            bends.update(level + rng.gauss(0.0, sd))
        assert 0.75 * sd < bends.noise() < 1.25 * sd


def test_one_broken_evaluation_does_not_blind_the_noise_estimate() -> None:
    rng = random.Random(4)
    bends = Bends(50)
    for t in range(60):
        bends.update(0.7 + rng.gauss(0.0, 0.01) + (0.5 if t == 40 else 0.0))
    assert bends.noise() < 0.02


def run_check(train_slope: float, seed: int = 0) -> list[Finding]:
    """40 evaluations every 10 steps; held-out flat at 0.7, then falling 0.02 per
    evaluation from step 300; train reward flat at 0.8, plus ``train_slope`` per step
    from step 300."""
    rng = random.Random(seed)
    check = HackingCheck(HackingSettings())
    found: list[Finding] = []
    for step in range(400):
        after = max(0, step - 300)
        check.train(0.8 + train_slope * after + rng.gauss(0.0, 0.02))
        if step % 10 == 0:
            heldout = 0.7 - 0.002 * after + rng.gauss(0.0, 0.01)
            found += check.heldout(step, "val/acc", heldout)
    return found


def test_held_out_falling_while_train_rises_is_hacking() -> None:
    for seed in range(5):
        found = run_check(train_slope=0.002, seed=seed)
        assert found, f"seed {seed}: not found"
        first = found[0]
        assert 300 < first.step <= 340
        assert first.evidence["heldout_drop"] >= 0.02
        assert first.evidence["train_gain_sds"] > 2.0


def test_held_out_falling_while_train_stays_flat_is_not_hacking() -> None:
    for seed in range(5):
        assert run_check(train_slope=0.0, seed=seed) == []


def test_a_train_reward_unknown_at_the_reference_is_no_rise() -> None:
    """Evaluations logged before the train reward: the held-out level was set when the train
    reward was unknown, so a later fall beside a rising train reward shows no rise since."""
    check = HackingCheck(HackingSettings())
    found: list[Finding] = []
    for step in range(0, 500):
        i = step // 10
        if step >= 210:
            check.train(0.8 + 0.002 * (step - 210))
        if step % 10 == 0:
            y = 0.7 + 0.01 * (-1) ** i - (0.03 * (i - 20) if i > 20 else 0.0)
            found += check.heldout(step, "val/score", y)
    assert found == []
