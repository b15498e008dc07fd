"""What to simulate: runs (:class:`RunSpec`) and the faults injected into them (:class:`Fault`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamwatch.incidents import KINDS

__all__ = [
    "FAULT_KINDS",
    "FRAMEWORKS",
    "GRADUAL_KINDS",
    "RAMP_RANGE",
    "Fault",
    "RunSpec",
    "fault_rng",
    "healthy_spec",
    "random_fault_spec",
    "stream_rng",
]

#: Every failure kind the simulator can inject: every incident kind but a team's own rule.
FAULT_KINDS: tuple[str, ...] = tuple(k for k in KINDS if k != "user_rule")

#: The kinds with a gradual form (:attr:`Fault.ramp`). A non-finite value and a silence have
#: no "half" version: ``nonfinite_metric`` and ``run_stalled`` keep their one form.
GRADUAL_KINDS: tuple[str, ...] = tuple(
    k for k in FAULT_KINDS if k not in ("nonfinite_metric", "run_stalled")
)

#: The ramp lengths :func:`random_fault_spec` draws from with ``gradual=True`` (inclusive).
RAMP_RANGE: tuple[int, int] = (50, 100)

#: Metric naming schemes the simulator can emit.
FRAMEWORKS: tuple[str, ...] = ("verl", "trl")


@dataclass(frozen=True)
class Fault:
    """One failure injected into a run.

    ``step`` is the onset; ``strength`` scales the effect (1.0 a clear, typical case, 0.5
    subtler, 2.0 violent). ``rank`` is the global rank that slows down for
    ``rank_straggler`` (default: the last rank of the last host). ``duration`` is, for
    ``run_stalled``, the silence in steps (None: the run never logs again); for
    ``metric_spike`` and ``nonfinite_metric`` the length of the episode (None: drawn from
    the seed); for every other kind the number of steps before the run recovers (None:
    never), counted from the onset.

    ``ramp`` makes the fault gradual: the same failure reaches its full effect linearly
    over ``ramp`` steps (1/ramp of it at the onset step, all of it from step
    ``step + ramp - 1`` on) instead of within a few steps; None is the fast form. Only the
    kinds in :data:`GRADUAL_KINDS` have a gradual form. A gradual ``metric_spike`` holds its
    full size for its episode's length after the ramp.
    """

    kind: str
    step: int
    strength: float = 1.0
    rank: int | None = None
    duration: int | None = None
    ramp: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {', '.join(FAULT_KINDS)}")
        if self.step < 0:
            raise ValueError(f"fault {self.kind}: onset step must be >= 0, got {self.step}")
        if not (math.isfinite(self.strength) and self.strength > 0):
            raise ValueError(f"fault {self.kind}: strength must be > 0, got {self.strength}")
        if self.duration is not None and self.duration < 1:
            raise ValueError(f"fault {self.kind}: duration must be >= 1, got {self.duration}")
        if self.rank is not None and self.rank < 0:
            raise ValueError(f"fault {self.kind}: rank must be >= 0, got {self.rank}")
        if self.ramp is not None:
            if self.kind not in GRADUAL_KINDS:
                raise ValueError(f"fault {self.kind}: has no gradual form (ramp), only a fast one")
            if self.ramp < 1:
                raise ValueError(f"fault {self.kind}: ramp must be >= 1 step, got {self.ramp}")


@dataclass(frozen=True)
class RunSpec:
    """One simulated run: its size, cadence, clock, seed and faults.

    Steps run from 0 (the pre-training held-out evaluation only) to ``steps - 1``. Every
    step, each of the ``hosts * ranks_per_host`` ranks emits one event; held-out reward is
    logged every ``eval_every`` steps (0: never).
    """

    run_id: str
    steps: int = 400
    hosts: int = 2
    ranks_per_host: int = 2
    eval_every: int = 10
    step_seconds: float = 30.0
    start_ts: float = 1_764_000_000.0
    seed: int = 0
    faults: tuple[Fault, ...] = ()
    framework: str = "verl"
    finished_marker: bool = False  # end with each rank's end-of-run marker (events.FINISHED_TAG)

    def __post_init__(self) -> None:
        if not self.run_id:
            raise ValueError("run_id must not be empty")
        if self.steps < 2:
            raise ValueError(f"run {self.run_id}: steps must be >= 2, got {self.steps}")
        if self.hosts < 1 or self.ranks_per_host < 1:
            raise ValueError(f"run {self.run_id}: hosts and ranks_per_host must be >= 1")
        if self.eval_every < 0:
            raise ValueError(f"run {self.run_id}: eval_every must be >= 0 (0: never)")
        if not (math.isfinite(self.step_seconds) and self.step_seconds > 0):
            raise ValueError(f"run {self.run_id}: step_seconds must be > 0")
        if not math.isfinite(self.start_ts):
            raise ValueError(f"run {self.run_id}: start_ts must be finite")
        if self.seed < 0:
            raise ValueError(f"run {self.run_id}: seed must be >= 0")
        if self.framework not in FRAMEWORKS:
            raise ValueError(
                f"run {self.run_id}: unknown framework {self.framework!r}; "
                f"known: {', '.join(FRAMEWORKS)}"
            )
        for fault in self.faults:
            if fault.rank is not None and fault.rank >= self.ranks:
                raise ValueError(
                    f"run {self.run_id}: fault {fault.kind} names rank {fault.rank}, "
                    f"but the run has {self.ranks} ranks"
                )

    @property
    def ranks(self) -> int:
        return self.hosts * self.ranks_per_host


def stream_rng(seed: int, *stream: int) -> np.random.Generator:
    """An independent random stream of a run, keyed by the run's seed and a stream id.

    Each series draws from its own stream, so adding a fault never changes the noise of
    the healthy series, and a run is identical before a fault's onset with or without it.
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *stream])))


def fault_rng(seed: int, index: int, kind: str) -> np.random.Generator:
    """The random stream of the ``index``-th fault of a run."""
    return stream_rng(seed, 1000 + index, FAULT_KINDS.index(kind))


def healthy_spec(run_id: str, seed: int, **kw: Any) -> RunSpec:
    """A run without faults (``kw``: any other :class:`RunSpec` field)."""
    return RunSpec(run_id=run_id, seed=seed, **kw)


def random_fault_spec(
    kind: str,
    seed: int,
    *,
    steps: int = 400,
    strength: float = 1.0,
    run_id: str | None = None,
    rank: int | None = None,
    duration: int | None = None,
    gradual: bool = False,
    ramp: int | None = None,
    **kw: Any,
) -> RunSpec:
    """A run with one fault of ``kind`` whose onset is drawn from the seed.

    The onset is uniform on ``[0.25 * steps, 0.75 * steps]`` (the same for a seed, fast or
    gradual); ``kw`` sets any other :class:`RunSpec` field. ``gradual=True`` makes the
    fault gradual with a ramp of ``ramp`` steps, or one drawn from the seed uniformly in
    :data:`RAMP_RANGE` (at the default 400 steps, every ramp is complete by the last step);
    kinds outside :data:`GRADUAL_KINDS` keep their one form.

    >>> spec = random_fault_spec("entropy_blowup", seed=3, gradual=True)
    >>> fault = spec.faults[0]
    >>> fault.step == random_fault_spec("entropy_blowup", seed=3).faults[0].step
    True
    >>> 50 <= fault.ramp <= 100 and fault.step + fault.ramp <= 400
    True
    >>> random_fault_spec("run_stalled", seed=3, gradual=True).faults[0].ramp is None
    True
    """
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
    if ramp is not None and not gradual:
        raise ValueError(f"fault {kind}: ramp={ramp} given without gradual=True")
    low = max(1, math.ceil(0.25 * steps))
    high = max(low, math.floor(0.75 * steps))
    onset = int(stream_rng(seed, 999).integers(low, high + 1))
    if gradual and kind in GRADUAL_KINDS and ramp is None:
        ramp = int(stream_rng(seed, 998).integers(RAMP_RANGE[0], RAMP_RANGE[1] + 1))
    fault = Fault(
        kind=kind,
        step=onset,
        strength=strength,
        rank=rank,
        duration=duration,
        ramp=ramp if kind in GRADUAL_KINDS else None,
    )
    return RunSpec(
        run_id=run_id if run_id is not None else _run_id(fault, seed),
        steps=steps,
        seed=seed,
        faults=(fault,),
        **kw,
    )


def _run_id(fault: Fault, seed: int) -> str:
    return f"{fault.kind}-{seed}" if fault.ramp is None else f"{fault.kind}-gradual-{seed}"
