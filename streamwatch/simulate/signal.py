"""Learning-signal and rollout/train mismatch series: their run parameters and what is logged.

GRPO learns from the differences between the rewards of a prompt's completions (a group).
Four series show whether it has any, and whether the rollout engine samples from the
policy being trained:

- the fraction of groups whose completions all got the same reward (TRL's
  ``frac_reward_zero_std``). In a healthy run it rises slowly as prompts get solved, from
  0.05-0.15 to 0.35-0.6 (time constant 100-400 steps), and is a count over the step's
  groups (``batch_responses / group_size`` of them), so it is noisy;
- the batch's highest and lowest score (verl's ``critic/score/max`` and ``/min``): 1 and 0
  for a 0/1 reward as long as any group still varies, as in verl's recorded GSM8K runs;
- the rollout/train probability mismatch, small and noisy: verl's
  ``training/rollout_probs_diff_mean`` (mean absolute difference of token probabilities;
  0.002-0.005: verl's FAQ calls below 0.005 normal and above 0.01 a precision problem) or
  TRL's ``sampling/sampling_logp_difference/mean`` (mean absolute log-probability
  difference; 0.006-0.015, three times as large), with a lognormal noise of sd 0.08-0.2.

Every draw comes from streams of its own (parameters: stream 50; noise: the series' own
streams in :mod:`streamwatch.simulate.curves`), so the other series of a run are the same
with or without these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamwatch.simulate.spec import RunSpec, stream_rng

__all__ = [
    "SignalParams",
    "draw_signal_params",
    "healthy_zero_variance",
    "observed_mismatch",
    "score_bounds",
    "zero_variance",
]

Array = npt.NDArray[np.float64]

#: framework -> the healthy range of its mismatch metric (log-uniform draw)
_MISMATCH_RANGE: dict[str, tuple[float, float]] = {
    "verl": (0.002, 0.005),  # |p_rollout - p_train| per token
    "trl": (0.006, 0.015),  # |log p_rollout - log p_train| per token
}


@dataclass(frozen=True)
class SignalParams:
    """The learning-signal and mismatch character of a run (ranges: module docstring)."""

    group_size: int  # completions per prompt
    zero_var0: float  # zero-variance fraction at the start
    zero_var_end: float  # ... that it rises towards
    zero_var_tau: float  # steps
    mismatch0: float  # the healthy mismatch level, in the framework's metric
    mismatch_noise: float  # lognormal sd

    def groups(self, batch_responses: int) -> int:
        """Prompt groups in a step's batch."""
        return max(1, batch_responses // self.group_size)


def draw_signal_params(spec: RunSpec) -> SignalParams:
    """Draw the parameters from the run's seed (the same for every framework but the scale)."""
    rng = stream_rng(spec.seed, 50)
    u = rng.uniform
    group_size = int(rng.choice([5, 8, 16]))
    zero_var0 = u(0.05, 0.15)
    zero_var_end = u(0.35, 0.6)
    zero_var_tau = u(100.0, 400.0)
    low, high = _MISMATCH_RANGE[spec.framework]
    mismatch0 = math.exp(u(math.log(low), math.log(high)))
    return SignalParams(
        group_size=group_size,
        zero_var0=zero_var0,
        zero_var_end=zero_var_end,
        zero_var_tau=zero_var_tau,
        mismatch0=mismatch0,
        mismatch_noise=u(0.08, 0.2),
    )


def healthy_zero_variance(sp: SignalParams, n: int) -> Array:
    """The healthy level of the zero-variance fraction, one value per step."""
    t = np.arange(n, dtype=np.float64)
    out: Array = sp.zero_var_end + (sp.zero_var0 - sp.zero_var_end) * np.exp(-t / sp.zero_var_tau)
    return out


def zero_variance(level: Array, dead: Array, groups: int, z: Array) -> Array:
    """The logged fraction: a count over ``groups`` groups of the share ``level`` of healthy
    groups without variance plus the share ``dead`` whose completions all got one reward.

    >>> zero_variance(np.array([0.25, 0.25]), np.array([0.0, 1.0]), 64, np.zeros(2)).tolist()
    [0.25, 1.0]
    """
    share = np.clip(dead + (1.0 - dead) * level, 0.0, 1.0)
    noisy = share + np.sqrt(share * (1.0 - share) / groups) * z
    out: Array = np.round(np.clip(noisy, 0.0, 1.0) * groups) / groups
    return out


def score_bounds(dead: Array, dead_reward: Array, groups: int) -> tuple[Array, Array]:
    """The batch's highest and lowest score: 1 and 0 while any group still varies, the one
    reward every completion got once none does.

    >>> high, low = score_bounds(np.array([0.0, 0.9, 1.0]), np.zeros(3), groups=64)
    >>> high.tolist(), low.tolist()
    ([1.0, 1.0, 0.0], [0.0, 0.0, 0.0])
    """
    none_left = np.round(groups * (1.0 - dead)) < 1.0
    high: Array = np.where(none_left, dead_reward, 1.0)
    low: Array = np.where(none_left, dead_reward, 0.0)
    return high, low


def observed_mismatch(sp: SignalParams, factor: Array, z: Array) -> Array:
    """The logged mismatch: the run's level times ``factor`` (1 healthy), lognormal noise."""
    out: Array = sp.mismatch0 * factor * np.exp(sp.mismatch_noise * z)
    return out
