"""A small training loop that drives a Trainer callback the way the Hugging Face Trainer does.

For tests and benchmarks of the stop path without transformers: per step it calls
``on_log`` with the step's metrics and ``on_step_end``, then, like the Trainer's inner loop,
saves a checkpoint when ``control.should_save`` is set and leaves the loop when
``control.should_training_stop`` is; ``on_train_end`` ends it either way.

>>> class Stopper:
...     def on_step_end(self, args, state, control, **kw):
...         if state.global_step == 3:
...             control.should_save = control.should_training_stop = True
>>> result = run_loop(Stopper(), ((s, {"loss": 1.0}) for s in range(1, 10)))
>>> result.saved, result.last_step, result.stopped
([3], 3, True)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LoopResult", "TrainerControl", "TrainerState", "run_loop"]


@dataclass(slots=True)
class TrainerControl:
    """The flags of ``transformers.TrainerControl`` that a callback sets."""

    should_save: bool = False
    should_training_stop: bool = False
    should_log: bool = False
    should_evaluate: bool = False
    should_epoch_stop: bool = False


@dataclass(slots=True)
class TrainerState:
    global_step: int = 0
    is_world_process_zero: bool = True


@dataclass(slots=True)
class LoopResult:
    last_step: int = -1
    stopped: bool = False  # left the loop on should_training_stop
    saved: list[int] = field(default_factory=list)  # steps with a checkpoint saved
    stopped_at_wall: float | None = None  # time.time() when it left on the stop


def run_loop(
    callback: Any,
    steps: Iterable[tuple[int, Mapping[str, float]]],
    *,
    pace: float = 0.0,
    save: Callable[[int], None] | None = None,
) -> LoopResult:
    """Run the steps (``pace`` seconds each, on a fixed schedule) through ``callback``."""
    args: Any = None
    state, control, result = TrainerState(), TrainerControl(), LoopResult()
    hooks = {name: getattr(callback, name, None) for name in ("on_train_begin", "on_log")}
    step_end, train_end = (
        getattr(callback, "on_step_end", None),
        getattr(callback, "on_train_end", None),
    )
    if hooks["on_train_begin"] is not None:
        hooks["on_train_begin"](args, state, control)
    start = time.monotonic()
    for n, (step, metrics) in enumerate(steps):
        if pace > 0:
            time.sleep(max(0.0, start + n * pace - time.monotonic()))
        state.global_step = step
        if hooks["on_log"] is not None:
            hooks["on_log"](args, state, control, logs=dict(metrics))
        if step_end is not None:
            step_end(args, state, control)
        result.last_step = step
        if control.should_save:  # the Trainer's _maybe_log_save_evaluate, then on_save
            if save is not None:
                save(step)
            result.saved.append(step)
            control.should_save = False
        if control.should_training_stop:
            result.stopped = True
            result.stopped_at_wall = time.time()
            break
    if train_end is not None:
        train_end(args, state, control)
    return result
