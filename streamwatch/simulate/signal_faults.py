"""Injectors of the learning-signal faults: no learning signal and a policy mismatch.

The mechanics are described with the others in :mod:`streamwatch.simulate.faults`.
"""

from __future__ import annotations

import numpy as np

from streamwatch.simulate.context import Ctx, freeze
from streamwatch.simulate.curves import Array, Latent

__all__ = ["no_learning_signal", "policy_mismatch"]

_FAILS_ALL = 2.0 / 3.0  # share of the faults where every completion fails (reward 0)


def no_learning_signal(lat: Latent, c: Ctx) -> None:
    """A share min(1, s) of the groups (all of them at s >= 1) gets one reward for every
    completion: at once (0 or 1), or growing linearly over the ramp (1)."""
    fails = c.rng.random() < _FAILS_ALL
    # A broken reward fails (or passes) everything at once; groups become all-alike
    # gradually as the policy solves more and more prompts (its accuracy heading to 1), a
    # reward sliding to 0 being the reward_collapse kind.
    reward = 0.0 if fails and c.ramp is None else 1.0
    on: Array = np.where(c.after, 1.0, 0.0)
    dead = min(1.0, c.s) * (on if c.ramp is None else c.linear())
    live = 1.0 - dead
    lat.dead = 1.0 - (1.0 - lat.dead) * live
    lat.dead_reward = np.where(c.after, reward, lat.dead_reward)
    lat.reward = dead * reward + live * lat.reward
    lat.reward_noise = lat.reward_noise * np.sqrt(live)  # only the live groups still vary
    lat.score_std = lat.score_std * live
    # Every advantage of a dead group is 0, and so is its share of the gradient and loss,
    # whose mean is over all the batch's tokens. A batch's policy gradient is mostly noise
    # (its sd over the tokens far above its mean), so its norm, like the loss's noise, goes
    # with the square root of the share of tokens that still count; the loss's mean and
    # the share of clipped tokens go with the share itself.
    root = np.sqrt(live)
    lat.grad_norm = lat.grad_norm * root
    lat.pg_noise = lat.pg_noise * root
    lat.pg_offset = lat.pg_offset * live
    lat.clipfrac = lat.clipfrac * live
    # a policy that no longer learns stops changing
    freeze(lat, c, dead, ("entropy", "length", "kl", "heldout"))


def policy_mismatch(lat: Latent, c: Ctx) -> None:
    """The rollout/train mismatch climbs to 1 + U(2, 6)·s times its level (smoothstep over
    10/s steps, or linearly over the ramp) and stays; entropy and grad norm rise a little,
    reward falls a little."""
    extra = float(c.rng.uniform(2.0, 6.0)) * c.s
    w = c.progress(c.lin_ramp(10.0 / c.s))
    lat.mismatch = lat.mismatch * (1.0 + extra * w)
    lat.entropy = lat.entropy * (1.0 + 0.3 * c.s * w)
    lat.grad_norm = lat.grad_norm * (1.0 + 0.5 * c.s * w)
    keep = 1.0 - min(0.5, 0.1 * c.s) * w
    lat.reward = lat.reward * keep
    lat.heldout = lat.heldout * keep
