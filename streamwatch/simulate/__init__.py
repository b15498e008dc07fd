"""Seeded simulator of RL training runs (GRPO/DAPO/PPO) on a multi-node cluster.

It is the ground truth for tuning and testing detectors, so healthy runs look like real
ones, alarming-looking trends included: entropy falls 3-8x early, response length drifts,
train reward saturates far above held-out, grad norm has isolated 10-100x single-step
spikes, checkpoint and evaluation steps are slower. Every incident kind can be injected at
a chosen step and strength (:class:`Fault`; mechanics in :mod:`streamwatch.simulate.faults`),
fast or, for most kinds, gradual (``Fault(ramp=R)``: the full effect builds linearly over R
steps).

Deterministic for a seed: all randomness comes from ``numpy.random.Generator(PCG64)``
streams keyed by the run's seed, and nothing reads the clock. Each series has its own
stream, so a run with a fault is identical to the same run without it before the onset.

>>> events = list(simulate_run(healthy_spec("demo", seed=1, steps=30)))
>>> list(events[0].metrics)
['val-core/gsm8k/reward/mean@1']
>>> sorted({e.source.rank for e in events if e.source is not None})
[0, 1, 2, 3]
"""

from streamwatch.simulate.curves import Observed, Params
from streamwatch.simulate.emit import (
    METRIC_NAMES,
    observe_run,
    simulate,
    simulate_run,
    write_jsonl,
)
from streamwatch.simulate.faults import TARGETS
from streamwatch.simulate.spec import (
    FAULT_KINDS,
    FRAMEWORKS,
    GRADUAL_KINDS,
    RAMP_RANGE,
    Fault,
    RunSpec,
    healthy_spec,
    random_fault_spec,
)

__all__ = [
    "FAULT_KINDS",
    "FRAMEWORKS",
    "GRADUAL_KINDS",
    "METRIC_NAMES",
    "RAMP_RANGE",
    "TARGETS",
    "Fault",
    "Observed",
    "Params",
    "RunSpec",
    "healthy_spec",
    "observe_run",
    "random_fault_spec",
    "simulate",
    "simulate_run",
    "write_jsonl",
]
