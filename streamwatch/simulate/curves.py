"""Healthy training curves: per-run parameters, smooth levels, noise, and what gets logged.

A run is simulated in three layers, all vectorised over steps (index = step):

1. :class:`Params`: the run's character, drawn once from the seed within ranges seen in
   real GRPO runs (how far entropy falls and how fast, where reward plateaus, ...).
2. :class:`Latent`: the smooth level of every series. Faults act on this layer.
3. :class:`Noise`: every random draw the observation needs (standard normals, isolated
   blips), each series from its own stream, so a fault never changes the noise.

:func:`observe` combines the last two into the logged values (:class:`Observed`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from streamwatch.simulate.noise import Noise
from streamwatch.simulate.signal import (
    SignalParams,
    draw_signal_params,
    healthy_zero_variance,
    observed_mismatch,
    score_bounds,
    zero_variance,
)
from streamwatch.simulate.spec import RunSpec, stream_rng

__all__ = [
    "Latent",
    "Noise",
    "Observed",
    "Params",
    "draw_params",
    "healthy",
    "observe",
]

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Params:
    """The character of one run (see :func:`draw_params` for the ranges)."""

    entropy0: float  # initial entropy (nats per token)
    entropy_fall: float  # entropy falls to entropy0 / entropy_fall
    entropy_tau: float  # steps
    entropy_noise: float  # multiplicative sd
    prob_slope: float  # mean token prob = exp(-prob_slope * entropy)
    reward0: float
    reward_plateau: float
    reward_rise: float  # steps for the logistic rise
    reward_creep: float  # slow late gain
    reward_creep_tau: float
    reward_noise: float  # additive sd of the batch mean at reward 0.5
    score_std0: float
    score_std_end: float  # fraction of score_std0 left late in the run
    score_std_tau: float
    heldout0: float
    heldout_plateau: float
    heldout_noise: float
    length0: float  # mean response length at the start (before truncation)
    length_drift: float  # relative change over the run
    length_log_shape: bool  # log-like drift (fast early) instead of linear
    length_log_scale: float
    length_noise: float
    length_sigma: float  # log-sd of single response lengths (lognormal)
    max_length: float  # the truncation cap (max_response_length)
    batch_responses: int  # responses per step: the clip ratio's resolution
    kl0: float
    kl_end: float
    kl_tau: float
    grad0: float
    grad_end: float
    grad_tau: float
    grad_noise: float  # lognormal sd
    grad_spike_rate: float  # isolated spikes per step
    pg_noise: float
    clipfrac0: float
    clipfrac_fall: float
    lr: float
    lr_warmup: int
    mfu: float
    gen_fraction: float  # share of the step spent generating (scales with length)
    prompt_length: float
    throughput0: float  # tokens / s / GPU at the start
    time_shared_noise: float
    time_rank_noise: float
    save_every: int  # checkpoint cadence (slower steps)
    save_factor: float
    eval_factor: float  # steps with a held-out evaluation are this much slower
    eval0_seconds: float  # the pre-training evaluation (step 0)
    signal: SignalParams  # learning signal and mismatch (drawn from a stream of their own)


def draw_params(spec: RunSpec) -> Params:
    """Draw a run's parameters from its seed, within ranges seen in real runs."""
    rng = stream_rng(spec.seed, 0)
    u = rng.uniform
    entropy0 = u(0.25, 0.6)
    reward0 = u(0.1, 0.5)
    reward_plateau = u(0.7, 0.97)
    length0 = u(150.0, 600.0)
    drift = u(-0.3, 0.8)
    longest = 3.0 * length0 * max(1.0, 1.0 + drift)
    max_length = float(max(1024, 2 ** math.ceil(math.log2(longest))))
    grad0 = u(0.2, 0.5)
    clipfrac0 = math.exp(u(math.log(5e-4), math.log(4e-3)))
    return Params(
        entropy0=entropy0,
        entropy_fall=u(3.0, 8.0),
        entropy_tau=u(15.0, 60.0),
        entropy_noise=u(0.03, 0.06),
        prob_slope=u(0.4, 0.7),
        reward0=reward0,
        reward_plateau=reward_plateau,
        reward_rise=u(20.0, 80.0),
        reward_creep=u(0.0, 0.02),
        reward_creep_tau=u(100.0, 400.0),
        reward_noise=u(0.01, 0.03),
        score_std0=u(0.2, 0.4),
        score_std_end=u(0.5, 0.8),
        score_std_tau=u(100.0, 400.0),
        heldout0=max(0.02, reward0 - u(0.0, 0.05)),
        heldout_plateau=reward_plateau - u(0.05, 0.15),
        heldout_noise=u(0.005, 0.015),
        length0=length0,
        length_drift=drift,
        length_log_shape=bool(rng.random() < 0.5),
        length_log_scale=u(10.0, 50.0),
        length_noise=u(0.02, 0.04),
        length_sigma=u(0.5, 0.7),
        max_length=max_length,
        batch_responses=int(rng.choice([1024, 2048, 4096, 5120])),
        kl0=u(0.001, 0.004),
        kl_end=u(0.02, 0.1),
        kl_tau=u(10.0, 60.0),
        grad0=grad0,
        grad_end=u(0.03, 0.08),
        grad_tau=u(20.0, 100.0),
        grad_noise=u(0.08, 0.15),
        grad_spike_rate=u(0.005, 0.015),
        pg_noise=u(0.01, 0.025),
        clipfrac0=clipfrac0,
        clipfrac_fall=u(5.0, 15.0),
        lr=float(rng.choice([5e-7, 1e-6, 2e-6, 3e-6])),
        lr_warmup=0 if rng.random() < 0.5 else int(rng.integers(5, 31)),
        mfu=u(0.25, 0.5),
        gen_fraction=u(0.15, 0.4),
        prompt_length=u(50.0, 300.0),
        throughput0=u(200.0, 2000.0),
        time_shared_noise=u(0.02, 0.035),
        time_rank_noise=u(0.01, 0.02),
        save_every=int(rng.choice([20, 25, 50, 100])),
        save_factor=u(1.25, 1.35),
        eval_factor=u(1.1, 1.3),
        eval0_seconds=u(0.2, 0.6) * spec.step_seconds,
        signal=draw_signal_params(spec),
    )


@dataclass
class Latent:
    """Smooth levels of every series, one value per step; faults edit these arrays."""

    entropy: Array
    reward: Array  # train reward (batch mean) level
    reward_noise: Array  # multiplies the sampling sd of the batch mean
    reward_chaos: Array  # extra sd of the batch mean (a broken reward)
    score_std: Array  # within-batch reward spread
    heldout: Array
    length: Array  # mean length the policy would write (before truncation at the cap)
    length_sigma: Array  # log-sd of single response lengths
    kl: Array
    grad_norm: Array
    pg_noise: Array
    pg_offset: Array
    clipfrac: Array
    mfu: Array
    lr: Array
    rank_slowdown: Array  # (ranks, steps) multiplicative
    stall_seconds: Array  # extra wall time before a step's events (a hang)
    zero_var: Array  # share of the healthy groups whose completions all got one reward
    dead: Array  # share of all groups that get one reward whatever the completion (a fault)
    dead_reward: Array  # ... and that reward
    mismatch: Array  # rollout/train mismatch, as a multiple of the run's healthy level
    stop_at: int  # no events from this step on
    overrides: list[tuple[str, int, float]] = field(default_factory=list)  # (series, step, value)

    def arrays(self) -> dict[str, Array]:
        """Every array field by name (for blending a recovering fault back to health)."""
        return {k: v for k, v in vars(self).items() if isinstance(v, np.ndarray)}


def _sigmoid(x: Array) -> Array:
    out: Array = 0.5 * (1.0 + np.tanh(0.5 * x))
    return out


def rise(t: Array, duration: float) -> Array:
    """A logistic 0 -> 1 rise over about ``duration`` steps, exactly 0 at t = 0."""
    width = duration / 8.0
    s = _sigmoid((t - duration / 2.0) / width)
    s0 = 1.0 / (1.0 + math.exp(4.0))
    out: Array = np.clip((s - s0) / (1.0 - s0), 0.0, 1.0)
    return out


_erf = np.vectorize(math.erf, otypes=[np.float64])


def norm_cdf(x: Array) -> Array:
    """The standard normal distribution function, element-wise."""
    out: Array = 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))
    return out


def truncated(lat: Latent, cap: float) -> tuple[Array, Array]:
    """Mean logged length and truncated share at the cap.

    Single response lengths are lognormal with mean ``lat.length`` and log-sd
    ``lat.length_sigma``; responses longer than ``cap`` are cut at the cap.
    """
    sigma = lat.length_sigma
    log_median = np.log(lat.length) - 0.5 * sigma**2
    a = (math.log(cap) - log_median) / sigma
    clipped = 1.0 - norm_cdf(a)
    mean: Array = lat.length * norm_cdf(a - sigma) + cap * clipped
    return mean, clipped


def batch_extremes(
    lat: Latent, cap: float, batch: int, clip: Array, noise: Array
) -> tuple[Array, Array]:
    """The longest and the shortest of a step's ``batch`` response lengths (lognormal as in
    :func:`truncated`): the quantiles 1 / (batch + 1) from either end, times the step's
    length noise; the cap once any response was cut (``clip`` > 0), and both at the cap when
    every one was. No random draws of their own: the other series stay as they were."""
    sigma = lat.length_sigma
    log_median = np.log(lat.length) - 0.5 * sigma**2
    q = NormalDist().inv_cdf(1.0 - 1.0 / (batch + 1))
    high = np.minimum(np.exp(log_median + q * sigma) * noise, cap)
    low = np.minimum(np.exp(log_median - q * sigma) * noise, cap)
    longest: Array = np.round(np.where(clip > 0.0, cap, high)).astype(np.float64)
    shortest: Array = np.round(np.where(clip >= 1.0, cap, low)).astype(np.float64)
    return longest, shortest


def healthy(spec: RunSpec, p: Params) -> Latent:
    """The smooth levels of a healthy run."""
    n = spec.steps
    t = np.arange(n, dtype=np.float64)
    ent_end = p.entropy0 / p.entropy_fall
    entropy = ent_end + (p.entropy0 - ent_end) * np.exp(-t / p.entropy_tau)

    shape = rise(t, p.reward_rise)
    creep = p.reward_creep * (1.0 - np.exp(-t / p.reward_creep_tau))
    reward = np.minimum(p.reward0 + (p.reward_plateau - p.reward0) * shape + creep, 0.995)
    score_std = p.score_std0 * (
        p.score_std_end + (1.0 - p.score_std_end) * np.exp(-t / p.score_std_tau)
    )
    heldout = np.clip(
        p.heldout0 + (p.heldout_plateau - p.heldout0) * shape + 0.5 * creep, 0.0, 0.99
    )

    if p.length_log_shape:
        drift = np.log1p(t / p.length_log_scale) / math.log1p(n / p.length_log_scale)
    else:
        drift = t / n
    length = p.length0 * (1.0 + p.length_drift * drift)

    kl = p.kl0 + (p.kl_end - p.kl0) * (1.0 - np.exp(-t / p.kl_tau))
    grad_norm = p.grad_end + (p.grad0 - p.grad_end) * np.exp(-t / p.grad_tau)
    clipfrac = p.clipfrac0 * (
        1.0 / p.clipfrac_fall + (1.0 - 1.0 / p.clipfrac_fall) * np.exp(-t / p.grad_tau)
    )
    lr = np.full(n, p.lr)
    if p.lr_warmup:
        lr = p.lr * np.minimum(1.0, np.maximum(t, 1.0) / p.lr_warmup)
    return Latent(
        entropy=entropy,
        reward=reward,
        reward_noise=np.ones(n),
        reward_chaos=np.zeros(n),
        score_std=score_std,
        heldout=heldout,
        length=length,
        length_sigma=np.full(n, p.length_sigma),
        kl=kl,
        grad_norm=grad_norm,
        pg_noise=np.full(n, p.pg_noise),
        pg_offset=np.zeros(n),
        clipfrac=clipfrac,
        mfu=np.full(n, p.mfu),
        lr=lr,
        rank_slowdown=np.ones((spec.ranks, n)),
        stall_seconds=np.zeros(n),
        zero_var=healthy_zero_variance(p.signal, n),
        dead=np.zeros(n),
        dead_reward=np.zeros(n),
        mismatch=np.ones(n),
        stop_at=n,
    )


@dataclass(frozen=True)
class Observed:
    """What the run logs: series by canonical name (rank 0), per-rank timing and clocks."""

    series: dict[str, Array]
    step_time: Array  # (ranks, steps)
    throughput: Array  # (ranks, steps)
    ts: Array  # (ranks, steps) event timestamps
    stop_at: int


def observe(spec: RunSpec, p: Params, lat: Latent, nz: Noise) -> Observed:
    """Turn levels and noise into the logged values."""
    n = spec.steps
    z = nz.z
    t = np.arange(n)
    entropy = lat.entropy * np.exp(p.entropy_noise * z["entropy"]) * nz.entropy_blip
    token_prob = np.exp(-p.prob_slope * entropy * np.exp(0.02 * z["token_prob"]))
    # The batch mean of 0/1 rewards is noisier mid-range than near 0 or 1.
    level = np.clip(lat.reward, 0.0, 1.0)
    sampling = p.reward_noise * np.maximum(0.35, 2.0 * np.sqrt(level * (1.0 - level)))
    sd = np.sqrt((sampling * lat.reward_noise) ** 2 + lat.reward_chaos**2)
    reward = np.clip(lat.reward + sd * z["reward"], 0.0, 1.0)
    score_std = np.clip(lat.score_std * np.exp(0.04 * z["score_std"]), 0.0, 0.5)
    heldout = np.clip(lat.heldout + p.heldout_noise * z["heldout"], 0.0, 1.0)
    mean_length, clip_p = truncated(lat, p.max_length)
    length = mean_length * np.exp(nz.length_wander + p.length_noise * z["length"]) * nz.length_blip
    # A mean length cannot pass the cap: squeeze the top 10% smoothly below it.
    knee = 0.9 * p.max_length
    squeezed = knee + 0.1 * p.max_length * np.tanh((length - knee) / (0.1 * p.max_length))
    length = np.where(length > knee, squeezed, length)
    clip = clip_p + np.sqrt(clip_p * (1.0 - clip_p) / p.batch_responses) * z["clip"]
    clip = np.round(np.clip(clip, 0.0, 1.0) * p.batch_responses) / p.batch_responses
    noise = length / np.maximum(mean_length, 1e-9)
    longest, shortest = batch_extremes(lat, p.max_length, p.batch_responses, clip, noise)
    kl = lat.kl * np.exp(0.04 * z["kl"]) * nz.kl_blip
    grad_norm = lat.grad_norm * np.exp(p.grad_noise * z["grad_norm"]) * nz.grad_spike
    pg_loss = lat.pg_offset + lat.pg_noise * np.where(nz.grad_spike > 1.0, 3.0, 1.0) * z["pg_loss"]
    clipfrac = lat.clipfrac * np.exp(0.4 * z["clipfrac"])
    mfu = lat.mfu * np.exp(0.015 * z["mfu"])

    # Step time: a fixed part plus generation, which scales with response length; a shared
    # per-step component (the batch), per-rank noise and bias, slower checkpoint and eval steps.
    work = mean_length / p.length0
    shared = p.time_shared_noise * z["shared_time"]
    gen = spec.step_seconds * p.gen_fraction * work * np.exp(shared + 0.03 * z["gen"])
    event = np.ones(n)
    event[(t % p.save_every == 0) & (t > 0)] *= p.save_factor
    if spec.eval_every:
        event[(t % spec.eval_every == 0) & (t > 0)] *= p.eval_factor
    base = spec.step_seconds * ((1.0 - p.gen_fraction) + p.gen_fraction * work) * event
    log_rank = shared[None, :] + p.time_rank_noise * nz.rank_z + nz.rank_bias[:, None]
    step_time = base[None, :] * np.exp(log_rank) * lat.rank_slowdown
    tokens = (
        p.throughput0
        * spec.step_seconds
        * (p.prompt_length + mean_length)
        / (p.prompt_length + p.length0)
    )
    throughput = tokens[None, :] * np.exp(0.01 * nz.token_z) / step_time

    # Synchronous training: a step ends when its slowest rank is done (plus any hang).
    wall = step_time.max(axis=0) + lat.stall_seconds
    wall[0] = p.eval0_seconds + lat.stall_seconds[0]
    step_end = spec.start_ts + np.cumsum(wall)
    ts = step_end[None, :] + 0.005 * spec.step_seconds * nz.jitter

    groups = p.signal.groups(p.batch_responses)
    score_max, score_min = score_bounds(lat.dead, lat.dead_reward, groups)
    series = {
        "entropy": entropy,
        "token_prob": token_prob,
        "reward": reward,
        "score_std": score_std,
        "heldout": heldout,
        "length": length,
        "length_max": longest,
        "length_min": shortest,
        "clip_ratio": clip,
        "kl": kl,
        "grad_norm": grad_norm,
        "pg_loss": pg_loss,
        "pg_clipfrac": clipfrac,
        "lr": lat.lr.copy(),
        "mfu": mfu,
        "gen_time": gen,
        "zero_variance": zero_variance(lat.zero_var, lat.dead, groups, z["zero_variance"]),
        "score_max": score_max,
        "score_min": score_min,
        "mismatch": observed_mismatch(p.signal, lat.mismatch, z["mismatch"]),
    }
    for name, step, value in lat.overrides:
        series[name][step] = value
    return Observed(series, step_time, throughput, ts, lat.stop_at)
