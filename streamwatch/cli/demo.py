"""The embedded default: a small simulated cluster with a few failures, and the order its
incident lines are printed in."""

from __future__ import annotations

import heapq
from itertools import count

from streamwatch.incidents import Incident
from streamwatch.simulate import Fault, RunSpec

__all__ = ["StepOrder", "demo_specs"]


def demo_specs(steps: int = 400, seed: int = 7) -> list[RunSpec]:
    """Four runs on 2 hosts x 2 ranks: three fail in different ways, one stays healthy."""

    def at(frac: float) -> int:
        return max(1, int(steps * frac))

    return [
        RunSpec(
            "grpo-qwen7b-a",
            steps=steps,
            finished_marker=True,
            seed=seed,
            faults=(Fault("nonfinite_metric", at(0.2)), Fault("entropy_collapse", at(0.5))),
        ),
        RunSpec(
            "grpo-qwen7b-b",
            steps=steps,
            finished_marker=True,
            seed=seed + 1,
            faults=(Fault("reward_hacking", at(0.45)),),
        ),
        RunSpec(
            "dapo-qwen32b-c",
            steps=steps,
            finished_marker=True,
            seed=seed + 2,
            faults=(Fault("rank_straggler", at(0.3)), Fault("length_explosion", at(0.6))),
        ),
        RunSpec("grpo-qwen3b-d", steps=steps, finished_marker=True, seed=seed + 3),
    ]


class StepOrder:
    """Incident updates held until every run still going has read past their step, then
    given in step order (the order of arrival within a step): runs judged side by side, one
    of them behind (a straggling rank), still print as one timeline.

    >>> from streamwatch.incidents import Incident
    >>> def update(run, step):
    ...     return Incident(id=run, run_id=run, kind="k", severity="warning",
    ...                     status="firing", indicator="i", metric="m", step=step, message="")
    >>> order = StepOrder()
    >>> order.read("a", 12); order.read("b", 5)
    >>> order.add(update("a", 11)); order.add(update("b", 4))
    >>> [(i.run_id, i.step) for i in order.ready()]
    [('b', 4)]
    >>> order.read("b", 13)
    >>> [(i.run_id, i.step) for i in order.ready()]
    [('a', 11)]
    """

    def __init__(self) -> None:
        self._held: list[tuple[int, int, Incident]] = []
        self._seq = count()
        self._last: dict[str, int] = {}

    def read(self, run_id: str, step: int, *, finished: bool = False) -> None:
        """A run's event was read (``finished``: its last)."""
        if finished:
            self._last.pop(run_id, None)
        else:
            self._last[run_id] = max(step, self._last.get(run_id, step))

    def add(self, inc: Incident) -> None:
        heapq.heappush(self._held, (inc.step, next(self._seq), inc))

    def ready(self) -> list[Incident]:
        """The updates of the steps every running run has passed."""
        mark = min(self._last.values(), default=None)
        out = []
        while self._held and (mark is None or self._held[0][0] < mark):
            out.append(heapq.heappop(self._held)[2])
        return out

    def rest(self) -> list[Incident]:
        """Everything still held, in step order."""
        out = [item[2] for item in sorted(self._held)]
        self._held = []
        return out
