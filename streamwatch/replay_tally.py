"""What a replay keeps for its summary, in bounded memory whatever the input.

Per run: incident updates counted by severity, and only the few firing ones worth printing
(the most severe, the most recent among equals); runs beyond a limit are counted together.
Per file: the step range of each run it holds, so that two files carrying the same run id
over the same steps are reported instead of silently merged.

>>> from streamwatch.incidents import Incident, Severity, Status
>>> tally = Tally(shown_per_run=1)
>>> for step, sev in [(5, Severity.WARNING), (9, Severity.CRITICAL), (12, Severity.WARNING)]:
...     tally.add(Incident(id="x", run_id="r", kind="k", severity=sev, status=Status.FIRING,
...                        indicator="i", metric="m", step=step, ts=None, message=""))
>>> runs = tally.runs["r"]
>>> runs.counts[Severity.WARNING], [i.step for i in runs.shown()]
(2, [9])
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from itertools import count

from streamwatch.incidents import Incident, Severity, Status

__all__ = ["FileRuns", "Overlap", "RunTally", "Tally"]

#: Runs tallied one by one; the rest are counted together.
MAX_RUNS = 10_000


@dataclass
class RunTally:
    """One run's incident updates: counts, and the firing ones to print (bounded)."""

    limit: int
    counts: Counter[Severity] = field(default_factory=Counter)
    resolved: int = 0
    _kept: list[tuple[int, int, Incident]] = field(default_factory=list)

    def add(self, inc: Incident, seq: int) -> None:
        if inc.status is not Status.FIRING:
            self.resolved += 1
            return
        self.counts[inc.severity] += 1
        item = (inc.severity.rank, seq, inc)
        if len(self._kept) < self.limit:
            heapq.heappush(self._kept, item)
        elif item[:2] > self._kept[0][:2]:
            heapq.heapreplace(self._kept, item)

    @property
    def fired(self) -> int:
        return sum(self.counts.values())

    def shown(self) -> list[Incident]:
        """The kept firing updates, in step order."""
        return sorted((inc for _, _, inc in self._kept), key=lambda i: (i.step, i.kind))


@dataclass
class Tally:
    """Every run's :class:`RunTally`, the runs seen, and the worst severity that fired."""

    shown_per_run: int = 10
    max_runs: int = MAX_RUNS
    runs: dict[str, RunTally] = field(default_factory=dict)
    #: runs seen (with or without incidents), up to ``max_runs``
    seen: set[str] = field(default_factory=set)
    runs_beyond: int = 0
    others: RunTally = field(init=False)
    worst: Severity | None = None
    _seq: count[int] = field(default_factory=count)

    def __post_init__(self) -> None:
        self.others = RunTally(self.shown_per_run)

    def see(self, run_id: str) -> bool:
        """Note a run; False when it is beyond the runs tallied one by one."""
        if run_id in self.seen:
            return True
        if len(self.seen) >= self.max_runs:
            self.runs_beyond += 1
            return False
        self.seen.add(run_id)
        return True

    def add(self, inc: Incident) -> None:
        if inc.status is Status.FIRING and (
            self.worst is None or inc.severity.rank > self.worst.rank
        ):
            self.worst = inc.severity
        if not self.see(inc.run_id):
            self.others.add(inc, next(self._seq))
            return
        run = self.runs.get(inc.run_id)
        if run is None:
            run = self.runs[inc.run_id] = RunTally(self.shown_per_run)
        run.add(inc, next(self._seq))

    def quiet(self) -> list[str]:
        """The runs seen that raised nothing, in name order."""
        return sorted(r for r in self.seen if r not in self.runs or not self.runs[r].fired)


@dataclass(frozen=True)
class Overlap:
    """Two files that carry the same run id over overlapping steps."""

    run_id: str
    first: str
    first_steps: tuple[int, int]
    second: str
    second_steps: tuple[int, int]

    def __str__(self) -> str:
        a, b = self.first_steps, self.second_steps
        return (
            f"run {self.run_id!r}: {self.second} (steps {b[0]}-{b[1]}) overlaps {self.first}"
            f" (steps {a[0]}-{a[1]}) under the same run id; their values were merged, repeated"
            " steps set aside. Give each file its own run id: --run-id-from path"
        )


@dataclass
class FileRuns:
    """The step range of each run in each file read so far (bounded by :data:`MAX_RUNS`)."""

    ranges: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    current: dict[str, list[int]] = field(default_factory=dict)
    overlaps: list[Overlap] = field(default_factory=list)
    _size: int = 0

    def step(self, run_id: str, step: int) -> None:
        span = self.current.get(run_id)
        if span is None:
            if len(self.current) + self._size >= MAX_RUNS:
                return
            self.current[run_id] = [step, step]
        elif step < span[0]:
            span[0] = step
        elif step > span[1]:
            span[1] = step

    def end_file(self, name: str) -> None:
        for run_id, (lo, hi) in self.current.items():
            earlier = self.ranges.setdefault(run_id, [])
            for other, a, b in earlier:
                if lo <= b and a <= hi and len(self.overlaps) < 100:
                    self.overlaps.append(Overlap(run_id, other, (a, b), name, (lo, hi)))
            earlier.append((name, lo, hi))
            self._size += 1
        self.current = {}
