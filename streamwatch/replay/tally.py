"""What a replay keeps for its summary, in bounded memory whatever the input.

Per run: its incidents (one per firing episode of a fingerprint: a rise from warning to
critical is the same incident) counted by the most severe level each reached, whether each
is still firing or resolved, and only the few worth printing (the most severe, the most
recent among equals); runs beyond a limit are counted together. Per file: the step range of
each run it holds, so that two files carrying the same run id over the same steps are
refused instead of silently merged.

>>> from streamwatch.incidents import Incident, Severity, Status
>>> def update(id, step, sev, status=Status.FIRING):
...     return Incident(id=id, run_id="r", kind="k", severity=sev, status=status,
...                     indicator="i", metric="m", step=step, ts=None, message="")
>>> tally = Tally(shown_per_run=1)
>>> for inc in [update("a", 5, Severity.WARNING), update("a", 9, Severity.CRITICAL),
...             update("a", 14, Severity.CRITICAL, Status.RESOLVED),
...             update("b", 12, Severity.WARNING)]:
...     tally.add(inc)
>>> run = tally.runs["r"]
>>> run.counts[Severity.WARNING], run.counts[Severity.CRITICAL], run.open_count, run.resolved
(1, 1, 1, 1)
>>> [(i.first.step, i.worst.step, i.resolved_step) for i in run.shown()]
[(5, 9, 14)]
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import count

from streamwatch.incidents import Incident, Severity, Status

__all__ = ["FileRuns", "Overlap", "RunIdClash", "RunIncident", "RunTally", "Tally"]

#: Runs tallied one by one; the rest are counted together.
MAX_RUNS = 10_000
#: Firing incidents followed per tally (of the runs counted together: beyond it, each firing
#: update counts as an incident).
_MAX_OPEN = 10_000


@dataclass
class RunIncident:
    """One incident of a run: its first firing update, its most severe, and when it
    resolved (None while it fires)."""

    first: Incident
    worst: Incident
    seq: int
    resolved_step: int | None = None

    @property
    def key(self) -> tuple[int, int]:
        """Most severe first, then the most recent."""
        return (self.worst.severity.rank, self.seq)


@dataclass
class RunTally:
    """One run's incidents: counts by the most severe level each reached, the firing ones,
    and the few to print (bounded)."""

    limit: int
    counts: Counter[Severity] = field(default_factory=Counter)
    resolved: int = 0
    #: incidents that rose in severity while firing (each counted once, at its worst)
    rose: int = 0
    open: dict[str, RunIncident] = field(default_factory=dict)
    _kept: list[RunIncident] = field(default_factory=list)

    def add(self, inc: Incident, seq: int) -> None:
        current = self.open.get(inc.id)
        if inc.status is not Status.FIRING:
            if current is not None:
                current.resolved_step = inc.step
                del self.open[inc.id]
                self.resolved += 1
            return
        if current is None:
            current = RunIncident(inc, inc, seq)
            if len(self.open) < _MAX_OPEN:
                self.open[inc.id] = current
            self.counts[inc.severity] += 1
        elif inc.severity.rank > current.worst.severity.rank:  # the same incident, worse
            self.counts[current.worst.severity] -= 1
            self.counts[inc.severity] += 1
            self.rose += current.worst.severity is current.first.severity
            current.worst, current.seq = inc, seq
        else:
            return
        self._keep(current)

    def _keep(self, item: RunIncident) -> None:
        if not any(k is item for k in self._kept):
            self._kept.append(item)
        if len(self._kept) > self.limit:
            self._kept.remove(min(self._kept, key=lambda k: k.key))

    @property
    def fired(self) -> int:
        return sum(self.counts.values())

    @property
    def open_count(self) -> int:
        return len(self.open)

    def shown(self) -> list[RunIncident]:
        """The kept incidents, in step order."""
        return sorted(self._kept, key=lambda i: (i.first.step, i.first.kind))


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
            f"run id {self.run_id!r} is given by both {self.first} (steps {a[0]}-{a[1]}) and"
            f" {self.second} (steps {b[0]}-{b[1]} so far): their steps overlap, and their"
            " values would be mixed into one run; refused. Give each file its own run id"
            " (--run-id-from path names each after its path), or read them apart"
        )


class RunIdClash(ValueError):
    """Two files would give one run over overlapping steps (:class:`Overlap`)."""

    def __init__(self, overlap: Overlap) -> None:
        super().__init__(str(overlap))
        self.overlap = overlap


@dataclass
class FileRuns:
    """The step range of each run in each file read so far (bounded by :data:`MAX_RUNS`),
    so that a file whose run id an earlier file gave over overlapping steps is refused."""

    ranges: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    current: dict[str, list[int]] = field(default_factory=dict)
    _size: int = 0

    def step(self, run_id: str, step: int, name: str) -> None:
        """Note a step of ``run_id`` in file ``name``; raises :class:`RunIdClash` once its
        steps overlap those of an earlier file with that run id."""
        span = self.current.get(run_id)
        if span is None:
            if len(self.current) + self._size >= MAX_RUNS:
                return
            span = self.current[run_id] = [step, step]
        elif step < span[0]:
            span[0] = step
        elif step > span[1]:
            span[1] = step
        else:
            return
        earlier = self.ranges.get(run_id)
        if earlier:
            lo, hi = span
            for other, a, b in earlier:
                if lo <= b and a <= hi:
                    raise RunIdClash(Overlap(run_id, other, (a, b), name, (lo, hi)))

    def end_file(self, name: str) -> None:
        for run_id, (lo, hi) in self.current.items():
            self.ranges.setdefault(run_id, []).append((name, lo, hi))
            self._size += 1
        self.current = {}
