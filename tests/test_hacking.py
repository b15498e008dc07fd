"""The reward-hacking check on hand-made curves: noise estimates and what it demands."""

from __future__ import annotations

import math
import random
import statistics

from streamwatch.checks.hacking import Bends, HackingCheck
from streamwatch.config import HackingSettings
from streamwatch.engine.findings import Finding
from streamwatch.simulate import random_fault_spec
from streamwatch.simulate.curves import draw_params, healthy
from streamwatch.simulate.faults import apply_faults


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


def plateau_hits(runs: int, steps: int) -> list[int]:
    """The seeds of ``runs`` runs called hacking: a train reward rising for the whole run
    (+0.0005 a step, sd 0.02) beside a held-out flat at 0.65 (sd 0.01, every 10 steps)."""
    hits = []
    for seed in range(runs):
        rng = random.Random(seed)
        check = HackingCheck(HackingSettings())
        found: list[Finding] = []
        for step in range(steps):
            if step > 0:
                check.train(0.75 + 0.0005 * step + rng.gauss(0.0, 0.02))
            if step % 10 == 0:
                found += check.heldout(step, "val/acc", 0.65 + rng.gauss(0.0, 0.01))
        hits += [seed] if found else []
    return hits


def test_a_flat_held_out_beside_a_train_reward_rising_on_its_trend_is_rarely_hacking() -> None:
    """The verl runs in tests/data/real: train score rising for the whole run while held-out
    stays near one level. Here 100 runs of 400 steps of it: a held-out level set from 3
    evaluations and frozen called 63 of them hacking (5 now); a CUSUM against the true
    level itself fires in a few."""
    hits = plateau_hits(100, 400)
    assert len(hits) <= 10, hits


def test_a_long_plateau_is_a_level_not_a_fall() -> None:
    """The same for 1,000 steps (100 evaluations): a level that came out high once is
    replaced by the excursion below it, which lasts longer than the level's window (a
    frozen level called every one of 50 such runs hacking)."""
    hits = plateau_hits(50, 1000)
    assert len(hits) <= 5, hits


def test_a_held_out_fall_beside_a_flat_train_reward_is_rarely_hacking() -> None:
    """``train_rise_sds`` is asked at every evaluation of a fall: 200 runs of
    :func:`run_check` with a flat train reward, against 200 with a rising one."""
    flat = sum(bool(run_check(train_slope=0.0, seed=seed)) for seed in range(200))
    rising = sum(bool(run_check(train_slope=0.002, seed=seed)) for seed in range(200))
    assert flat <= 10 and rising == 200, (flat, rising)


def test_held_out_alone_cannot_call_the_gradual_fault_within_three_evaluations() -> None:
    """Why gradual reward hacking is found more than 3 evaluations after its onset: on the
    simulator's gradual fault, a test that knew the onset, the decline's shape, the held-out
    level and its noise (the sum of squared declines over the noise variance, evaluation by
    evaluation) reaches 3 sds a median of more than 4 evaluations after the onset, and even
    2 sds more than 3 in."""
    for sds, at_least in ((3.0, 4.0), (2.0, 3.0)):
        delays = [_clairvoyant_delay(seed, sds) for seed in range(30)]
        assert statistics.median(delays) > at_least, (sds, sorted(delays))


def _clairvoyant_delay(seed: int, sds: float) -> float:
    spec = random_fault_spec("reward_hacking", seed, gradual=True)
    fault = spec.faults[0]
    params = draw_params(spec)
    base, hacked = healthy(spec, params), healthy(spec, params)
    apply_faults(spec, params, hacked)
    decline = base.heldout - hacked.heldout
    evidence = 0.0
    for step in range(fault.step, spec.steps):
        if step % spec.eval_every == 0:
            evidence += float(decline[step]) ** 2
            if math.sqrt(evidence) / params.heldout_noise >= sds:
                return (step - fault.step) / spec.eval_every
    return math.inf
