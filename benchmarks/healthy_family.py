"""A second family of simulated healthy runs, built apart from ``streamwatch.simulate``.

The engine's simulator draws every run from one model (Gaussian noise around smooth curves,
every step logged). A monitor tuned on it can mistake shapes it never makes for faults, so
this family makes those shapes, each one seen in a healthy run of the real corpus
(``tests/data/real/runs.toml``):

- **noise families**: Gaussian; Student-t with 3 degrees of freedom (a batch with a few
  extreme prompts: the detrended train reward of ``trl-grpo-hint-unfaithful`` has an excess
  kurtosis of 4.0); AR(1) with phi 0.3-0.6, a stress shape rather than a measured one (the
  detrended train rewards of five corpus runs have a lag-1 autocorrelation of -0.10 to
  -0.03, that is none: consecutive batches are independent draws there);
- **heavy-tailed grad norm**: log-normal with Student-t steps and one-step outliers 3-6x the
  level that return at once (``verl-grpo-q3b_fsdp_base``: a maximum 3.7x its median;
  ``unsloth-grpo-minesweeper-20b``: 0.0 to 1.8 between logged steps);
- **warm-ups of 5-100 steps** before the reward moves (``trl-grpo-countdown-tb``: 39 steps
  at a format reward near 0.06; ``unsloth-grpo-gsm8k-qwen``: correctness 0.16 -> 0.29 in the
  first 30 steps, then the climb);
- **saturating reward**: a logistic rise to a ceiling of 0.85-0.99, its std shrinking as the
  accuracy nears 1 (``verl-grpo-*``: score 0.83 -> 0.98, held-out 0.53 -> 0.89);
- **plateaus**: a flat stretch of 15-30% of the run in the middle of the climb, or a reward
  flat from the start (``trl-grpo-hotpotqa-v3``: 0.75-0.78 over 900 steps; the dstack PPO
  run: 0.94-0.95 over 330 steps);
- **entropy that falls and settles**: an exponential fall by 2-6x to a floor, with a time
  constant of at least 25 steps (``verl-grpo-q3b_fsdp_base``: 0.28 -> 0.05, 35% of it in the
  first 13 steps; ``unsloth-grpo-minesweeper-20b``: 1.5 -> 0.93);
- **rising length** 1.3-2.5x over the run with truncation under 10% (reasoning RL lengthens
  its answers; ``unsloth-grpo-humaneval-qwen3-4b``: 164 tokens over its first 5 logged steps,
  615 over its last 5, 5.8% truncated on average), or falling length
  0.7-0.9x (``verl-grpo-gsm8k_qwen2_7b_base``: 189 -> 149);
- **falling truncation**: a tight cap with 30-80% of completions cut at the start, falling
  below 10% on a clock of its own from the first step (the policy learns to finish:
  ``unsloth-grpo-minesweeper-20b`` falls 0.96 -> 0.82; a PPO run reported 79, 77, 75, 74,
  70 ... 46% by step 12). A cut completion has no answer and scores nothing, so the reward
  is the accuracy of the finished ones times the share finished: the fall of the
  truncation pays the reward, whatever the accuracy curve (flat, warming up) does;
- **sparse logging**: every 5, 10 or 20 steps (``trl-grpo-hotpotqa-*``: every 20,
  ``unsloth-grpo-minesweeper-20b`` and ``trl-grpo-aokvqa-vl3b``: every 10).

Deterministic by seed: ``family_run(seed)`` always gives the same events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streamwatch.events import Event

__all__ = ["FamilyRun", "family_run"]

Array = np.ndarray

_NAMES = {
    "trl": {
        "reward": "reward",
        "reward_std": "reward_std",
        "zero_std": "frac_reward_zero_std",
        "entropy": "entropy",
        "length": "completions/mean_length",
        "length_min": "completions/min_length",
        "length_max": "completions/max_length",
        "clip": "completions/clipped_ratio",
        "kl": "kl",
        "grad_norm": "grad_norm",
        "loss": "loss",
        "lr": "learning_rate",
        "heldout": "eval_reward",
    },
    "verl": {
        "reward": "critic/score/mean",
        "reward_std": "critic/score/std",
        "entropy": "actor/entropy",
        "length": "response_length/mean",
        "length_min": "response_length/min",
        "length_max": "response_length/max",
        "clip": "response_length/clip_ratio",
        "kl": "actor/kl_loss",
        "grad_norm": "actor/grad_norm",
        "loss": "actor/pg_loss",
        "lr": "actor/lr",
        "heldout": "val-core/math/reward/mean@1",
    },
}


@dataclass(frozen=True)
class FamilyRun:
    """One healthy run of the family: its shapes (for the report) and its events."""

    run_id: str
    shapes: tuple[str, ...]
    steps: int
    events: list[Event]


def _noise(rng: np.random.Generator, kind: str, n: int) -> Array:
    """Unit-scale noise of one family."""
    if kind == "student_t":
        return rng.standard_t(3, n) / math.sqrt(3.0)  # df 3: variance 3
    if kind == "ar1":
        phi = float(rng.uniform(0.3, 0.6))
        e = rng.normal(0.0, math.sqrt(1.0 - phi * phi), n)
        out = np.empty(n)
        out[0] = rng.normal()
        for i in range(1, n):
            out[i] = phi * out[i - 1] + e[i]
        return out
    return rng.normal(0.0, 1.0, n)


def _reward_curve(rng: np.random.Generator, n: int, shapes: list[str]) -> Array:
    """The mean accuracy in [0, 1]: a warm-up, a logistic climb to a ceiling, plateaus."""
    t = np.arange(n, dtype=float)
    start = float(rng.uniform(0.05, 0.6))
    ceiling = float(rng.uniform(0.85, 0.99))
    if rng.random() < 0.15:
        shapes.append("flat_reward")
        level = float(rng.uniform(0.3, 0.95))
        return np.full(n, level)
    warm = int(rng.integers(5, 101)) if rng.random() < 0.6 else 0
    if warm:
        shapes.append(f"warmup_{warm}")
    tau = float(rng.uniform(0.08, 0.35)) * n
    clock = np.clip(t - warm, 0.0, None)
    if rng.random() < 0.35:
        shapes.append("plateau")
        a = float(rng.uniform(0.2, 0.5)) * n
        width = float(rng.uniform(0.15, 0.3)) * n
        clock = np.where(clock < a, clock, np.maximum(a, clock - width))
    shapes.append("saturating")
    curve: Array = start + (ceiling - start) * (1.0 - np.exp(-clock / tau))
    return curve


def family_run(seed: int) -> FamilyRun:
    """The healthy run of one seed (always the same events for the same seed)."""
    rng = np.random.default_rng(10_000 + seed)
    framework = "trl" if rng.random() < 0.5 else "verl"
    names = _NAMES[framework]
    n = int(rng.integers(120, 601))
    shapes: list[str] = [framework]
    noise_kind = str(rng.choice(["gauss", "student_t", "ar1"]))
    shapes.append(noise_kind)
    t = np.arange(n, dtype=float)

    acc = _reward_curve(rng, n, shapes)
    group = int(rng.choice([4, 8, 16]))
    batch = int(rng.choice([64, 128, 256]))
    # unit noises drawn here (the order of the draws fixes every later one); the reward
    # series are made once the share of completions that finish is known
    reward_noise = _noise(rng, noise_kind, n)
    std_noise = _noise(rng, noise_kind, n)
    zero_noise = _noise(rng, noise_kind, n)

    # entropy: falls by 2-6x to a floor and settles
    e0 = float(rng.uniform(0.3, 1.6))
    floor = e0 / float(rng.uniform(2.0, 6.0))
    e_tau = max(25.0, float(rng.uniform(0.1, 0.4)) * n)  # q3b: -35% in its first 13 steps
    shapes.append("entropy_settles")
    entropy = floor + (e0 - floor) * np.exp(-t / e_tau)
    entropy = entropy * (1.0 + 0.04 * _noise(rng, noise_kind, n))

    # length and truncation
    cap = float(rng.choice([512, 1024, 2048, 4096]))
    mode = str(rng.choice(["rising", "falling_truncation", "flat", "falling"]))
    if mode == "rising":
        growth = float(rng.uniform(1.3, 2.5))
        l0 = cap * float(rng.uniform(0.12, 0.3))
        length = l0 * (1.0 + (growth - 1.0) * t / (n - 1))
        clip = np.clip(0.005 + 0.06 * (length / cap) ** 2, 0.0, 0.09)
        shapes.append(f"rising_length_{growth:.1f}x")
    elif mode == "falling_truncation":
        c0 = float(rng.uniform(0.3, 0.8))
        c1 = float(rng.uniform(0.01, 0.09))
        c_tau = max(8.0, float(rng.uniform(0.05, 0.25)) * n)
        clip = c1 + (c0 - c1) * np.exp(-t / c_tau)
        acc = acc * (1.0 - clip)  # a cut completion scores nothing
        length = cap * (0.55 + 0.42 * clip)
        shapes.append("falling_truncation")
    else:
        l0 = cap * float(rng.uniform(0.15, 0.4))
        ratio = 1.0 if mode == "flat" else float(rng.uniform(0.7, 0.9))
        length = l0 * (1.0 + (ratio - 1.0) * t / (n - 1))
        clip = np.full(n, float(rng.uniform(0.0, 0.03)))
        shapes.append(f"{mode}_length")
    length = np.clip(length * (1.0 + 0.03 * _noise(rng, noise_kind, n)), 1.0, cap)
    clip = np.clip(clip * (1.0 + 0.15 * _noise(rng, noise_kind, n)), 0.0, 1.0)
    length_min = np.clip(length * rng.uniform(0.05, 0.3, n), 1.0, None)
    length_max = np.where(clip > 0.0, cap, np.minimum(cap, length * rng.uniform(1.8, 3.0, n)))

    sd_mean = np.sqrt(acc * (1.0 - acc) / batch)
    reward = np.clip(acc + sd_mean * reward_noise, 0.0, 1.0)
    reward_std = np.sqrt(np.clip(reward * (1.0 - reward), 0.0, None))
    reward_std = reward_std * (1.0 + 0.05 * std_noise)
    zero_std = acc**group + (1.0 - acc) ** group
    zero_std = np.clip(zero_std + 0.03 * zero_noise, 0.0, 1.0)

    # grad norm: log-normal level with heavy-tailed steps and one-step outliers
    g0 = float(10 ** rng.uniform(-1.5, 0.5))
    # (a t(3) draw is clipped at 8 units, e^2 in the norm: unclipped, one of 250,000 steps
    # reached 10^37, a gradient no healthy run logs)
    log_g = math.log(g0) + 0.25 * np.clip(rng.standard_t(3, n) / math.sqrt(3.0), -8.0, 8.0)
    grad_norm = np.exp(log_g) * (1.0 - 0.3 * t / n)
    for i in rng.choice(n, size=int(rng.integers(0, 4)), replace=False):
        grad_norm[i] *= float(rng.uniform(3.0, 6.0))
    kl = float(rng.uniform(0.005, 0.08)) * (1.0 - np.exp(-t / (0.3 * n)))
    kl = np.abs(kl * (1.0 + 0.1 * _noise(rng, noise_kind, n)))
    loss = 0.02 * _noise(rng, noise_kind, n)
    lr = np.full(n, 1e-6)
    heldout = np.clip(acc * float(rng.uniform(0.8, 0.95)), 0.0, 1.0)
    heldout = np.clip(heldout + 0.01 * rng.normal(0.0, 1.0, n), 0.0, 1.0)

    every = int(rng.choice([5, 10, 20])) if rng.random() < 0.3 else 1
    if every > 1:
        shapes.append(f"every_{every}")
    eval_every = int(rng.choice([10, 20, 25]))
    series = {
        "reward": reward,
        "reward_std": reward_std,
        "zero_std": zero_std,
        "entropy": entropy,
        "length": length,
        "length_min": length_min,
        "length_max": length_max,
        "clip": clip,
        "kl": kl,
        "grad_norm": grad_norm,
        "loss": loss,
        "lr": lr,
    }
    run_id = f"family-{seed}"
    events = []
    for step in range(1, n):
        if step % every:
            continue
        metrics = {names[k]: float(v[step]) for k, v in series.items() if k in names}
        if step % eval_every == 0:
            metrics[names["heldout"]] = float(heldout[step])
        events.append(Event(run_id=run_id, step=step, metrics=metrics))
    return FamilyRun(run_id, tuple(shapes), len(events), events)
