"""The observation layer's random draws: one stream per series, so a fault never changes them.

Stream ids, keyed by the run's seed: 0 the run's parameters, 10-25 the standard normals of
the series below (in their order), 40-48 blips, wander and per-rank noise, 50 the
learning-signal parameters; 998-999 the random spec, 1000 + i the i-th fault.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streamwatch.simulate.spec import RunSpec, stream_rng

__all__ = ["Noise", "draw_noise"]

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Noise:
    """Every random draw of the observation layer (fixed size, one stream per series)."""

    z: dict[str, Array]  # standard normals per series
    entropy_blip: Array  # multiplicative, 1 except on rare single steps
    length_blip: Array
    kl_blip: Array
    grad_spike: Array  # isolated single-step grad-norm spikes (10-100x)
    length_wander: Array  # slow, correlated log-length wander
    rank_bias: Array  # persistent per-rank speed differences (log)
    rank_z: Array  # (ranks, steps) per-rank step-time noise
    token_z: Array  # (ranks, steps) per-rank token-count noise
    jitter: Array  # (ranks, steps) in [0, 1): when in the step's last moments a rank logs


_SERIES = (
    "entropy",
    "token_prob",
    "reward",
    "score_std",
    "heldout",
    "length",
    "clip",
    "kl",
    "grad_norm",
    "pg_loss",
    "clipfrac",
    "mfu",
    "gen",
    "shared_time",
    "zero_variance",  # streams 24 and 25: added last, so the others keep theirs
    "mismatch",
)


def _blips(seed: int, stream: int, n: int, rate: float, low: float, high: float) -> Array:
    """Rare single-step multiplicative blips, log-uniform in [low, high]."""
    rng = stream_rng(seed, stream)
    hit = rng.random(n) < rate
    size = np.exp(rng.uniform(math.log(low), math.log(high), n))
    out: Array = np.where(hit, size, 1.0)
    return out


def draw_noise(spec: RunSpec, grad_spike_rate: float) -> Noise:
    """The run's draws; ``grad_spike_rate``: isolated grad-norm spikes per step."""
    n, ranks, seed = spec.steps, spec.ranks, spec.seed
    z = {name: stream_rng(seed, 10 + i).standard_normal(n) for i, name in enumerate(_SERIES)}
    spike = _blips(seed, 40, n, grad_spike_rate, 10.0, 100.0)
    repeat = np.zeros(n, dtype=bool)
    repeat[1:] = (spike[1:] > 1.0) & (spike[:-1] > 1.0)
    spike = np.where(repeat, 1.0, spike)  # spikes are isolated: never two steps in a row
    wander_rng = stream_rng(seed, 44)
    kernel = np.exp(-np.arange(60) / 20.0)
    kernel /= np.sqrt(np.sum(kernel**2))
    wander = 0.015 * np.convolve(wander_rng.standard_normal(n + 59), kernel, mode="valid")
    rank_rng = stream_rng(seed, 45)
    return Noise(
        z=z,
        entropy_blip=_blips(seed, 41, n, 0.003, 1.2, 1.6),
        length_blip=_blips(seed, 42, n, 0.003, 1.15, 1.4),
        kl_blip=_blips(seed, 43, n, 0.003, 2.0, 4.0),
        grad_spike=spike,
        length_wander=wander[:n],
        rank_bias=0.01 * rank_rng.standard_normal(ranks),
        rank_z=stream_rng(seed, 46).standard_normal((ranks, n)),
        token_z=stream_rng(seed, 47).standard_normal((ranks, n)),
        jitter=stream_rng(seed, 48).random((ranks, n)),
    )
