"""Fault mechanics: how each failure kind bends a run's curves from its onset on.

Each injector edits the smooth levels (:class:`~streamwatch.simulate.curves.Latent`) at and
after the onset step only, so a run is identical before the onset with or without the
fault. ``s`` below is :attr:`Fault.strength`; "ramp over T steps" means the effect starts at
the onset step and is nearly complete T steps later.

- entropy_collapse: entropy decays exponentially to a floor of 1e-3 (time constant 15/s
  steps), so the mean token probability rises towards 1; train and held-out reward stop
  improving (frozen at their onset level with the same time constant); the PPO clip
  fraction falls.
- entropy_blowup: entropy grows exponentially, by a factor 1 + 5s over 15/s steps, then
  keeps creeping up (soft cap 6 nats); response length grows with it (entropy factor ** 0.4),
  train and held-out reward drop by min(0.9, 0.5s), KL, clip fraction and grad norm rise.
- reward_chaos: the batch-mean reward gets extra noise: its sd at reward 0.5 becomes
  (1 + 3s) times the healthy sd; the level is unchanged (clipping to [0, 1] aside).
- reward_collapse: train and held-out reward fall by min(0.95, 0.6s) of their onset level
  over 10 steps (smooth ramp) and stay down.
- length_explosion: the length the policy writes doubles every 10/s steps until it is
  max(1 + 3s, s · max response length / onset length) times its onset level (soft
  saturation: at s = 1 it writes about the cap on average); the logged mean can only
  approach the cap, the clip ratio rises accordingly (to ~0.5 at s = 1), reward falls by
  0.6 · the newly truncated share; entropy rises mildly (length factor ** 0.15).
- truncation_saturation: the written length grows (logistic, 15/s steps) until a share of
  0.9-0.99 of the responses hits the cap (s >= 1; proportionally less for s < 1), so the
  clip ratio heads there and the mean length is pinned near the cap; the score std shrinks
  to ~0 (by min(0.98, 0.95s); the completions of a prompt all look alike), the batch-mean
  reward noise by half that, and reward stops improving.
- length_collapse: response length decays to max(0.08, 1 - 0.85s) of its level within 10/s
  steps; the clip ratio falls with it and reward drops by up to 0.15s.

- reward_hacking: train reward keeps rising by 0.05-0.1 (less when it is near 1; time
  constant 20-60 steps) while held-out falls steadily by 0.02s per held-out evaluation
  (floor 0.01); KL grows by up to 50%·s.
- nonfinite_metric: for max(1, round(4s)) steps (or ``duration``) from the onset,
  ``actor/kl_loss`` (NaN, sometimes +inf) and ``actor/grad_norm`` (NaN or +inf) are
  non-finite: always at the onset, with probability 0.6 on the later steps; on half of
  those steps the policy loss is exactly 0. Then everything is finite again.
- metric_spike: grad norm jumps to max(1.5, U(5, 20)·s) times its level and the policy loss
  shifts up by the same multiple of its noise sd, for 10-30 steps (or ``duration``), then
  back to normal: unlike the healthy isolated blips, it persists.
- run_stalled: no event from any rank from the onset on; with ``duration`` the onset step
  completes ``duration`` step-times late and the run carries on (steps stay contiguous).
- rank_straggler: one rank's step time becomes 1 + U(0.5, 2)·s times its usual (its
  throughput falls accordingly); the synchronous step, and so every rank's clock, waits.
- metric_drift: ``perf/mfu/actor`` (no RL-specific check reads it) drops by min(0.9, 0.4s)
  and stays down.
- no_learning_signal: from the onset a share min(1, s) of the prompt groups (every group at
  s >= 1) gets one reward for all its completions: 0 (every completion fails, as with a
  reward function that never matches; 2 faults in 3) or 1 (every completion passes). The
  zero-variance fraction goes to 1, the score std to 0, the batch's score max and min to
  that one reward (once no group varies), train reward to it; the policy loss's mean and
  the PPO clip fraction shrink with the share of groups that still vary, the grad norm and
  the loss's noise with its square root (a batch's gradient is mostly noise; exactly 0 at
  s >= 1); the policy stops changing (entropy, length, KL and held-out reward frozen at
  their onset level).
- policy_mismatch: the rollout/train probability mismatch (verl's
  ``training/rollout_probs_diff_mean``, TRL's ``sampling/sampling_logp_difference/mean``)
  climbs to 1 + U(2, 6)·s times its healthy level (smoothstep over 10/s steps) and stays;
  entropy rises by 30%·s, grad norm by 50%·s, train and held-out reward fall by
  min(0.5, 0.1s) of their level.

Gradual faults (:attr:`Fault.ramp` = R; the kinds in ``GRADUAL_KINDS``): the same mechanics,
but the fault's progress is a linear ramp w = min(1, (dt + 1) / R) instead of the fast
form's few-step rise (1/R of the effect at the onset step, all of it from step onset + R - 1
on). What rises linearly:

- entropy_collapse: w replaces the exponential weight: entropy slides linearly to the 1e-3
  floor, rewards freeze and the clip fraction falls with the same w.
- entropy_blowup: the entropy factor, 1 + 5s · w (length, KL, clip fraction and grad norm
  follow it with the same powers as above, reward drops by min(0.9, 0.5s) · w); after the
  ramp the same creep as the fast form (time constant 15/s steps).
- reward_chaos: the extra sd of the batch-mean reward, 0 -> its full size.
- reward_collapse: the drop, 0 -> min(0.95, 0.6s) of the onset level.
- length_explosion: the written length's factor, 1 -> the same limit as the fast form; the
  clip ratio, reward and entropy follow the length as above.
- truncation_saturation: the log of the written length, from its level to the one that
  puts 0.9-0.99 of the responses at the cap (so the clip ratio is still small in the first
  half of the ramp and climbs faster at its end); the score std shrinks and rewards freeze
  with w.
- length_collapse: the length's fall, 1 -> max(0.08, 1 - 0.85s).
- reward_hacking: the train gain (w instead of the 20-60 step exponential) and KL rise with
  w, and the held-out *rate* of decline ramps up to 0.02s per evaluation, so the decline
  builds slowly and then goes on at the fast form's pace.
- metric_spike: a slowly growing grad norm: its factor 1 -> the same multiple (the loss
  shift and noise follow), held for the episode's 10-30 steps (or ``duration``) after the
  ramp, then back to normal.
- rank_straggler: a slowly slowing rank: its step-time factor 1 -> 1 + U(0.5, 2)·s.
- metric_drift: a slow slide: the MFU drop, 0 -> min(0.9, 0.4s).
- no_learning_signal: the share of groups with one reward, 0 -> min(1, s), and that reward
  is always 1 (every completion passes: the policy solves more and more of its prompts; a
  reward sliding to 0 is reward_collapse): the zero-variance fraction climbs to 1 over the
  ramp, the train reward to 1, grad norm and loss fade to 0 with it.
- policy_mismatch: the mismatch factor, 1 -> 1 + U(2, 6)·s (entropy, grad norm and reward
  follow with the same w).

nonfinite_metric and run_stalled have no gradual form (a value is non-finite or not, a
run is heard or not) and reject a ramp. Random draws are the same as the fast form's, so
a gradual fault has the same sizes as the fast one of the same seed (no_learning_signal's
one reward aside).

With ``duration`` set, the other kinds recover: step-like ones (reward_chaos,
rank_straggler, metric_drift) at once, the others back to the healthy curves with a 10-step
time constant; ``duration`` counts from the onset, fast or gradual.

Lengths: single responses are lognormal around the mean the policy writes; the logged mean
and clip ratio are those of the responses cut at the max response length, so a length
fault moves the clip ratio, step time and throughput consistently.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np

from streamwatch.simulate.context import Ctx, freeze
from streamwatch.simulate.curves import Array, Latent, Params, truncated
from streamwatch.simulate.signal_faults import no_learning_signal, policy_mismatch
from streamwatch.simulate.spec import RunSpec, fault_rng

__all__ = ["TARGETS", "apply_faults"]

#: The logged series (canonical names) each fault kind changes after its onset. Per-rank
#: series are ``step_time`` and ``throughput``; run_stalled removes events instead.
TARGETS: dict[str, tuple[str, ...]] = {
    "entropy_collapse": ("entropy", "token_prob"),
    "entropy_blowup": ("entropy", "length", "reward"),
    "reward_chaos": ("reward",),
    "reward_collapse": ("reward", "heldout"),
    "length_explosion": ("length", "clip_ratio"),
    "truncation_saturation": ("clip_ratio", "length", "score_std"),
    "length_collapse": ("length",),
    "reward_hacking": ("reward", "heldout"),
    "nonfinite_metric": ("kl", "grad_norm"),
    "metric_spike": ("grad_norm", "pg_loss"),
    "run_stalled": (),
    "rank_straggler": ("step_time", "throughput"),
    "metric_drift": ("mfu",),
    "no_learning_signal": ("zero_variance", "score_std", "reward", "grad_norm", "pg_loss"),
    "policy_mismatch": ("mismatch", "entropy", "reward"),
}

_RECOVERY_STEPS = 10.0
_ABRUPT = frozenset({"reward_chaos", "rank_straggler", "metric_drift"})
_OWN_DURATION = frozenset({"run_stalled", "nonfinite_metric", "metric_spike"})


def _softcap(x: Array, cap: float) -> Array:
    """~x well below ``cap``, saturating smoothly at ``cap``."""
    out: Array = x / (1.0 + (x / cap) ** 6) ** (1.0 / 6.0)
    return out


def _clip_share(lat: Latent, p: Params) -> Array:
    return truncated(lat, p.max_length)[1]


def _entropy_collapse(lat: Latent, c: Ctx) -> None:
    w = c.progress(c.exp_ramp(15.0 / c.s))
    floor = 1e-3
    lat.entropy = floor + (lat.entropy - floor) * (1.0 - w)
    freeze(lat, c, w)
    lat.clipfrac = lat.clipfrac * (1.0 - 0.9 * w)


def _blowup_growth(c: Ctx) -> tuple[Array, Array]:
    """(log of the entropy factor, share of the reward drop) of an entropy blow-up."""
    full = math.log1p(5.0 * c.s)
    if c.ramp is None:
        x = np.where(c.after, (c.dt + 1.0) * c.s / 15.0, 0.0)
        shape = np.where(x <= 1.0, x, 1.0 + 0.5 * -np.expm1(-(x - 1.0)))
        return full * shape, np.minimum(x, 1.0)
    w = c.linear()
    beyond = np.maximum(c.dt + 1.0 - c.ramp, 0.0) * c.s / 15.0  # the creep after the ramp
    creep = full * (1.0 + 0.5 * -np.expm1(-beyond))
    return np.where(w < 1.0, np.log1p(5.0 * c.s * w), creep), w


def _entropy_blowup(lat: Latent, c: Ctx) -> None:
    log_factor, dropped = _blowup_growth(c)
    lat.entropy = np.where(c.after, _softcap(lat.entropy * np.exp(log_factor), 6.0), lat.entropy)
    lat.length = lat.length * np.exp(0.4 * log_factor)
    keep = 1.0 - min(0.9, 0.5 * c.s) * dropped
    lat.reward = lat.reward * keep
    lat.heldout = lat.heldout * keep
    lat.kl = lat.kl * np.exp(0.5 * log_factor)
    lat.clipfrac = lat.clipfrac * np.exp(log_factor)
    lat.grad_norm = lat.grad_norm * np.exp(0.3 * log_factor)


def _reward_chaos(lat: Latent, c: Ctx) -> None:
    extra: float | Array = c.p.reward_noise * math.sqrt((1.0 + 3.0 * c.s) ** 2 - 1.0)
    if c.ramp is not None:
        extra = extra * c.linear()
    lat.reward_chaos = np.where(c.after, np.hypot(lat.reward_chaos, extra), lat.reward_chaos)


def _reward_collapse(lat: Latent, c: Ctx) -> None:
    drop = min(0.95, 0.6 * c.s) * c.progress(c.lin_ramp(10.0))
    lat.reward = np.maximum(lat.reward - drop * lat.reward[c.on], 0.0)
    lat.heldout = np.maximum(lat.heldout - drop * lat.heldout[c.on], 0.0)


def _length_explosion(lat: Latent, c: Ctx) -> None:
    old_len, old_clip = lat.length, _clip_share(lat, c.p)
    limit = max(1.0 + 3.0 * c.s, c.s * c.p.max_length / float(lat.length[c.on]))
    if c.ramp is None:
        doublings = np.minimum(np.where(c.after, (c.dt + 1.0) * c.s / 10.0, 0.0), 20.0)
        lat.length = lat.length * _softcap(np.exp2(doublings), limit)
    else:
        lat.length = lat.length * (1.0 + (limit - 1.0) * c.linear())
    keep = 1.0 - 0.6 * np.maximum(_clip_share(lat, c.p) - old_clip, 0.0)
    lat.reward = lat.reward * keep
    lat.heldout = lat.heldout * keep
    lat.entropy = lat.entropy * (lat.length / old_len) ** 0.15


def _truncation_saturation(lat: Latent, c: Ctx) -> None:
    target = float(c.rng.uniform(0.9, 0.99)) * min(1.0, 0.45 + 0.55 * c.s)
    w = c.progress(c.logistic_ramp(15.0 / c.s))
    # The untruncated mean length at which a share ``target`` of responses hits the cap.
    sigma = lat.length_sigma
    log_median = math.log(c.p.max_length) - NormalDist().inv_cdf(1.0 - target) * sigma
    needed = np.maximum(np.exp(log_median + 0.5 * sigma**2), lat.length)
    lat.length = np.exp((1.0 - w) * np.log(lat.length) + w * np.log(needed))
    shrink = w * min(0.98, 0.95 * c.s)
    lat.score_std = lat.score_std * (1.0 - shrink)
    lat.reward_noise = lat.reward_noise * (1.0 - 0.5 * shrink)  # prompts still vary
    freeze(lat, c, w)


def _length_collapse(lat: Latent, c: Ctx) -> None:
    floor = max(0.08, 1.0 - 0.85 * c.s)
    w = c.progress(c.exp_ramp(10.0 / c.s / 3.0))
    lat.length = lat.length * (1.0 - (1.0 - floor) * w)
    keep = 1.0 - 0.15 * min(c.s, 2.0) * w
    lat.reward = lat.reward * keep
    lat.heldout = lat.heldout * keep


def _reward_hacking(lat: Latent, c: Ctx) -> None:
    headroom = max(0.0, 0.995 - float(lat.reward[c.on]))
    gain = min(float(c.rng.uniform(0.05, 0.1)), 0.9 * headroom)
    w = c.progress(c.exp_ramp(float(c.rng.uniform(20.0, 60.0))))
    lat.reward = lat.reward + gain * w
    per_step = 0.02 * c.s / (c.spec.eval_every or 10)
    # steps of decline at the full rate so far (gradual: the rate itself ramps up)
    elapsed = np.where(c.after, c.dt + 1.0, 0.0) if c.ramp is None else np.cumsum(w)
    fallen = lat.heldout - per_step * elapsed
    lat.heldout = np.where(c.after, np.maximum(fallen, 0.01), lat.heldout)
    lat.kl = lat.kl * (1.0 + 0.5 * c.s * w)


def _nonfinite_metric(lat: Latent, c: Ctx) -> None:
    width = c.fault.duration or max(1, round(4.0 * c.s))
    first = max(c.on, 1)  # step 0 logs held-out only
    for step in range(first, min(first + width, c.spec.steps)):
        hit, kl_nan, grad_nan, zero_loss = c.rng.random(4)
        if step != first and hit >= 0.6:
            continue
        lat.overrides.append(("kl", step, math.nan if kl_nan < 0.8 else math.inf))
        lat.overrides.append(("grad_norm", step, math.nan if grad_nan < 0.5 else math.inf))
        if zero_loss < 0.5:
            lat.overrides.append(("pg_loss", step, 0.0))


def _metric_spike(lat: Latent, c: Ctx) -> None:
    mult = max(1.5, float(c.rng.uniform(5.0, 20.0)) * c.s)
    width = c.fault.duration or int(c.rng.integers(10, 31))
    if c.ramp is not None:
        _growing_spike(lat, c, mult, width)
        return
    win = c.after & (c.dt < width)
    lat.grad_norm = np.where(win, lat.grad_norm * mult, lat.grad_norm)
    lat.pg_offset = np.where(win, lat.pg_offset + mult * c.p.pg_noise, lat.pg_offset)
    lat.pg_noise = np.where(win, lat.pg_noise * 2.0, lat.pg_noise)
    lat.clipfrac = np.where(win, lat.clipfrac * math.sqrt(mult), lat.clipfrac)


def _growing_spike(lat: Latent, c: Ctx, mult: float, width: int) -> None:
    """A gradual spike: grows over the ramp, holds ``width`` steps at its full size, ends."""
    assert c.ramp is not None
    g = c.linear()
    win = c.after & (c.dt < c.ramp + width)
    factor = 1.0 + (mult - 1.0) * g
    lat.grad_norm = np.where(win, lat.grad_norm * factor, lat.grad_norm)
    lat.pg_offset = np.where(win, lat.pg_offset + g * mult * c.p.pg_noise, lat.pg_offset)
    lat.pg_noise = np.where(win, lat.pg_noise * (1.0 + g), lat.pg_noise)
    lat.clipfrac = np.where(win, lat.clipfrac * np.sqrt(factor), lat.clipfrac)


def _run_stalled(lat: Latent, c: Ctx) -> None:
    if c.fault.duration is None:
        lat.stop_at = min(lat.stop_at, c.on)
    else:
        lat.stall_seconds[c.on] += c.fault.duration * c.spec.step_seconds


def _rank_straggler(lat: Latent, c: Ctx) -> None:
    rank = c.fault.rank if c.fault.rank is not None else c.spec.ranks - 1
    extra = float(c.rng.uniform(0.5, 2.0)) * c.s
    mult: float | Array = 1.0 + extra if c.ramp is None else 1.0 + extra * c.linear()
    row = lat.rank_slowdown[rank]
    lat.rank_slowdown[rank] = np.where(c.after, row * mult, row)


def _metric_drift(lat: Latent, c: Ctx) -> None:
    drop: float | Array = min(0.9, 0.4 * c.s)
    if c.ramp is not None:
        drop = drop * c.linear()
    lat.mfu = np.where(c.after, lat.mfu * (1.0 - drop), lat.mfu)


_INJECTORS: dict[str, Callable[[Latent, Ctx], None]] = {
    "entropy_collapse": _entropy_collapse,
    "entropy_blowup": _entropy_blowup,
    "reward_chaos": _reward_chaos,
    "reward_collapse": _reward_collapse,
    "length_explosion": _length_explosion,
    "truncation_saturation": _truncation_saturation,
    "length_collapse": _length_collapse,
    "reward_hacking": _reward_hacking,
    "nonfinite_metric": _nonfinite_metric,
    "metric_spike": _metric_spike,
    "run_stalled": _run_stalled,
    "rank_straggler": _rank_straggler,
    "metric_drift": _metric_drift,
    "no_learning_signal": no_learning_signal,
    "policy_mismatch": policy_mismatch,
}


def _recovery_weight(c: Ctx, duration: int) -> Array:
    """1 while the fault lasts, then back to 0 (at once, or with a 10-step time constant)."""
    past = c.dt - duration
    if c.fault.kind in _ABRUPT:
        return np.where(past < 0, 1.0, 0.0)
    out: Array = np.where(past < 0, 1.0, np.exp(-(np.maximum(past, 0.0) + 1.0) / _RECOVERY_STEPS))
    return out


def apply_faults(spec: RunSpec, p: Params, lat: Latent) -> None:
    """Inject ``spec.faults`` into the levels, in onset order (ties: listed order)."""
    order = sorted(range(len(spec.faults)), key=lambda i: (spec.faults[i].step, i))
    for index in order:
        fault = spec.faults[index]
        if fault.step >= spec.steps:
            continue
        c = Ctx(spec, p, fault, fault_rng(spec.seed, index, fault.kind))
        before = {k: v.copy() for k, v in lat.arrays().items()}
        _INJECTORS[fault.kind](lat, c)
        recovers = fault.duration is not None and fault.kind not in _OWN_DURATION
        w = _recovery_weight(c, fault.duration) if fault.duration is not None else None
        for name, old in before.items():
            new = getattr(lat, name)
            if recovers and w is not None:
                new = old + (w if new.ndim == 1 else w[None, :]) * (new - old)
            new[..., : fault.step] = old[..., : fault.step]  # bit-identical before the onset
            setattr(lat, name, new)
