"""A third family of simulated healthy runs: shapes that were judged unhealthy by mistake.

Each shape is a healthy run whose numbers a check can misread; none of them is drawn from a
run of the corpus (they are the general forms, made here):

- **slow monotone declines** over 2,000-5,000 steps: entropy falling 2-3x as a log-linear
  drift, the train reward and the held-out score rising slowly;
- **very noisy flat rewards of small batches**: a step's reward is the mean of 4-8 prompts,
  each worth 0 or its maximum (1 to 2), so it wanders over most of its range around a flat
  mean for 300-600 steps while the held-out score rises;
- **count metrics named like ratios**: the number of completions cut (0 up to the batch),
  logged under a name that says truncation;
- **a weak model's first step**: at step 1 every completion scored 0, the reward's std, the
  gradient and the loss are exactly 0; the run learns from step 2 on;
- **the entropy of a small policy early**: 60-120 steps whose entropy is the mean of 16
  sequences' entropies (sampling noise only, the policy frozen or barely moving).

Deterministic by seed: ``third_run(seed)`` always gives the same events.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from healthy_family import FamilyRun

from streamwatch.events import Event

__all__ = ["SHAPES", "third_run"]

Metrics = dict[str, float]


def _slow_decline(rng: np.random.Generator, run_id: str) -> list[Event]:
    n = int(rng.integers(2000, 5001))
    e0 = float(rng.uniform(0.1, 0.6))
    fall = float(rng.uniform(2.0, 3.0))
    events = []
    for s in range(1, n + 1):
        x = s / n
        m: Metrics = {
            "entropy": e0 * fall**-x * float(np.exp(rng.normal(0, 0.06))),
            "reward": 0.35 + 0.3 * x + float(rng.normal(0, 0.05)),
            "completions/mean_length": 300.0 * (1 + 0.2 * x) + float(rng.normal(0, 12)),
        }
        if s % 100 == 0:
            m["eval_reward"] = 0.3 + 0.3 * x + float(rng.normal(0, 0.01))
        events.append(Event(run_id=run_id, step=s, metrics=m))
    return events


def _noisy_small_batch(rng: np.random.Generator, run_id: str) -> list[Event]:
    n = int(rng.integers(300, 601))
    batch = int(rng.choice([4, 8]))
    top = float(rng.uniform(1.0, 2.0))
    p = float(rng.uniform(0.2, 0.35))
    events = []
    for s in range(1, n + 1):
        scores = top * (rng.random(batch) < p)
        m: Metrics = {
            "reward": float(scores.mean()),
            "reward_std": float(scores.std()),
            "entropy": 0.5 * float(np.exp(rng.normal(0, 0.03))),
            "completions/mean_length": 200.0 + float(rng.normal(0, 10)),
        }
        if s % 50 == 0:
            m["eval_reward"] = 0.2 + 0.15 * s / n + float(rng.normal(0, 0.01))
        events.append(Event(run_id=run_id, step=s, metrics=m))
    return events


def _count_named_ratio(rng: np.random.Generator, run_id: str) -> list[Event]:
    n = int(rng.integers(100, 301))
    batch = int(rng.choice([64, 256, 512]))
    share = float(rng.uniform(0.05, 0.6))
    events = []
    for s in range(1, n + 1):
        m: Metrics = {
            "truncated_completions": float(rng.binomial(batch, share)),
            "reward": 0.3 + 0.2 * s / n + float(rng.normal(0, 0.04)),
            "entropy": 0.4 * float(np.exp(rng.normal(0, 0.03))),
        }
        events.append(Event(run_id=run_id, step=s, metrics=m))
    return events


def _weak_first_step(rng: np.random.Generator, run_id: str) -> list[Event]:
    n = int(rng.integers(60, 201))
    events = [
        Event(
            run_id=run_id,
            step=1,
            metrics={
                "reward": 0.0,
                "reward_std": 0.0,
                "frac_reward_zero_std": 1.0,
                "grad_norm": 0.0,
                "loss": 0.0,
                "entropy": 0.6,
            },
        )
    ]
    for s in range(2, n + 1):
        acc = 0.02 + 0.3 * (1 - np.exp(-s / 30))
        events.append(
            Event(
                run_id=run_id,
                step=s,
                metrics={
                    "reward": float(np.clip(acc + rng.normal(0, 0.04), 0, 1)),
                    "reward_std": float(np.sqrt(acc * (1 - acc))),
                    "frac_reward_zero_std": float(np.clip(1 - acc + rng.normal(0, 0.05), 0, 1)),
                    "grad_norm": float(0.3 * np.exp(rng.normal(0, 0.2))),
                    "loss": float(rng.normal(0, 0.01)),
                    "entropy": 0.6 * float(np.exp(rng.normal(0, 0.03))),
                },
            )
        )
    return events


def _small_policy_entropy(rng: np.random.Generator, run_id: str) -> list[Event]:
    n = int(rng.integers(60, 121))
    level = float(rng.uniform(0.8, 2.5))
    drift = float(rng.choice([0.0, -0.1, 0.1]))
    events = []
    for s in range(1, n + 1):
        per_seq = rng.gamma(4.0, level * (1 + drift * s / n) / 4.0, 16)
        m: Metrics = {
            "entropy": float(per_seq.mean()),
            "reward": float((rng.random(16) < 0.3).mean()),
            "completions/mean_length": float(rng.integers(6, 17, 16).mean()),
        }
        events.append(Event(run_id=run_id, step=s, metrics=m))
    return events


SHAPES: dict[str, Callable[[np.random.Generator, str], list[Event]]] = {
    "slow_decline": _slow_decline,
    "noisy_small_batch": _noisy_small_batch,
    "count_named_ratio": _count_named_ratio,
    "weak_first_step": _weak_first_step,
    "small_policy_entropy": _small_policy_entropy,
}


def third_run(seed: int) -> FamilyRun:
    """The run of one seed: its shape is ``SHAPES`` in turn, its numbers drawn from the seed."""
    shape = list(SHAPES)[seed % len(SHAPES)]
    rng = np.random.default_rng(20_000 + seed)
    run_id = f"third-{seed}-{shape}"
    events = SHAPES[shape](rng, run_id)
    return FamilyRun(run_id, (shape,), len(events), events)
