"""What a fault injector works with: the run, the fault, and its progress since the onset."""

from __future__ import annotations

import numpy as np

from streamwatch.simulate.curves import Array, Latent, Params, rise
from streamwatch.simulate.spec import Fault, RunSpec

__all__ = ["Ctx", "freeze"]


class Ctx:
    """What an injector needs: the run, its parameters, the fault and time since onset."""

    def __init__(self, spec: RunSpec, p: Params, fault: Fault, rng: np.random.Generator) -> None:
        self.spec, self.p, self.fault, self.rng = spec, p, fault, rng
        self.s = fault.strength
        self.on = fault.step
        self.ramp = fault.ramp
        self.dt = np.arange(spec.steps, dtype=np.float64) - fault.step
        self.after = self.dt >= 0

    def linear(self) -> Array:
        """The gradual fault's progress: 0 before the onset, (dt + 1) / ramp, then 1."""
        assert self.ramp is not None
        out: Array = np.where(self.after, np.clip((self.dt + 1.0) / self.ramp, 0.0, 1.0), 0.0)
        return out

    def progress(self, fast: Array) -> Array:
        """``fast`` (the fast form's weight), or the linear ramp for a gradual fault."""
        return fast if self.ramp is None else self.linear()

    def exp_ramp(self, tau: float) -> Array:
        """0 before the onset, then 1 - exp(-(dt + 1) / tau)."""
        since = np.maximum(self.dt + 1.0, 0.0)  # before the onset: 0 (exp of huge numbers)
        out: Array = np.where(self.after, -np.expm1(-since / tau), 0.0)
        return out

    def lin_ramp(self, steps: float) -> Array:
        """0 before the onset, a smoothstep to 1 over ``steps``."""
        x = np.clip((self.dt + 1.0) / steps, 0.0, 1.0)
        out: Array = np.where(self.after, x * x * (3.0 - 2.0 * x), 0.0)
        return out

    def logistic_ramp(self, steps: float) -> Array:
        out: Array = np.where(self.after, rise(np.maximum(self.dt + 1.0, 0.0), steps), 0.0)
        return out


def freeze(lat: Latent, c: Ctx, w: Array, names: tuple[str, ...] = ("reward", "heldout")) -> None:
    """The series ``names`` stop changing: pulled towards their onset level by weight ``w``
    (by default, reward stops improving)."""
    for name in names:
        arr = getattr(lat, name)
        setattr(lat, name, arr + w * (arr[c.on] - arr))
