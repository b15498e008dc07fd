"""Grouping: updates of one run (and receiver) that come within ``group_wait`` go out as one
batch; firing incidents that were notified are reminded of after ``repeat_interval``.

Both books are plain state machines: the caller passes ``now`` in and asks what is due.

>>> from streamwatch.incidents import Incident
>>> def inc(n, run="r1"):
...     return Incident(id=f"i{n}", run_id=run, kind="metric_spike", severity="warning",
...         status="firing", indicator=f"m{n}", metric=f"m{n}", step=n, message="")
>>> book = GroupBook(group_by=("run_id",), group_wait=10.0)
>>> book.add("slack", 0, inc(1), now=100.0)
>>> book.add("slack", 0, inc(2), now=105.0)
>>> book.due(now=109.0)
[]
>>> [(b.labels["run_id"], len(b.updates)) for b in book.due(now=110.0)]
[('r1', 2)]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from streamwatch.alerting.decide import decide_repeat
from streamwatch.incidents import Incident

__all__ = ["Batch", "GroupBook", "RepeatBook", "split"]


@dataclass(slots=True)
class Batch:
    """Updates for one receiver and group, ready to become one or more messages."""

    receiver: str
    group_key: str
    labels: dict[str, str]
    updates: list[Incident]
    repeat: int = 0


@dataclass(slots=True)
class _Group:
    batch: Batch
    due: float
    seen: set[tuple[str, str, str, int]] = field(default_factory=set)


def _labels(inc: Incident, group_by: Sequence[str]) -> dict[str, str]:
    values = {
        "run_id": inc.run_id,
        "kind": inc.kind,
        "indicator": inc.indicator,
        "severity": inc.severity.value,
    }
    return {name: values[name] for name in group_by}


def group_key(route_index: int, labels: dict[str, str]) -> str:
    """Alertmanager-style: ``<route>:{run_id="grpo-7"}``."""
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in labels.items())
    return f"route{route_index}:{{{inner}}}"


def split(updates: Sequence[Incident], size: int) -> list[list[Incident]]:
    """Chunks of at most ``size``, in order."""
    return [list(updates[i : i + size]) for i in range(0, len(updates), size)]


class GroupBook:
    """Pending updates per (receiver, group); a group goes out ``group_wait`` after its first
    pending update arrived."""

    def __init__(self, group_by: Sequence[str], group_wait: float) -> None:
        self.group_by = tuple(group_by)
        self.group_wait = group_wait
        self._groups: dict[tuple[str, str], _Group] = {}

    def __len__(self) -> int:
        return sum(len(g.batch.updates) for g in self._groups.values())

    def add(self, receiver: str, route_index: int, inc: Incident, now: float) -> None:
        labels = _labels(inc, self.group_by)
        key = group_key(route_index, labels)
        group = self._groups.get((receiver, key))
        if group is None:
            group = _Group(Batch(receiver, key, labels, []), now + self.group_wait)
            self._groups[(receiver, key)] = group
        if inc.actions:  # the same update, now saying what was done about it: it replaces
            for i, queued in enumerate(group.batch.updates):
                if queued.id == inc.id and queued.status is inc.status:
                    group.batch.updates[i] = inc
                    return
            group.batch.updates.append(inc)
            return
        ident = (inc.id, inc.status.value, inc.severity.value, inc.step)
        if ident not in group.seen:  # the same update twice is one update
            group.seen.add(ident)
            group.batch.updates.append(inc)

    def due(self, now: float) -> list[Batch]:
        ready = [k for k, g in self._groups.items() if g.due <= now]
        return [self._groups.pop(k).batch for k in ready]

    def flush_all(self) -> list[Batch]:
        out = [g.batch for g in self._groups.values()]
        self._groups.clear()
        return out

    def next_due(self) -> float | None:
        return min((g.due for g in self._groups.values()), default=None)


@dataclass(slots=True)
class _Notified:
    incident: Incident
    group_key: str
    labels: dict[str, str]
    last_sent: float
    repeats: int = 0


class RepeatBook:
    """Firing incidents notified to each receiver: the basis of resolve notices (sent only
    after a firing notice) and of reminders."""

    def __init__(self) -> None:
        self._sent: dict[tuple[str, str], _Notified] = {}

    def __len__(self) -> int:
        return len(self._sent)

    def notified(self, receiver: str, incident_id: str) -> bool:
        return (receiver, incident_id) in self._sent

    def record_firing(self, batch: Batch, inc: Incident, now: float) -> None:
        self._sent[(batch.receiver, inc.id)] = _Notified(inc, batch.group_key, batch.labels, now)

    def drop(self, receiver: str, incident_id: str) -> None:
        self._sent.pop((receiver, incident_id), None)

    def drop_runs(self, run_ids: set[str]) -> None:
        """Forget the notified incidents of these runs: no reminders for them."""
        for key in [k for k, e in self._sent.items() if e.incident.run_id in run_ids]:
            del self._sent[key]

    def due(self, now: float, repeat_interval: float) -> list[Batch]:
        """Reminder batches, one per receiver and group. The caller decides on each update
        (silences, inhibition) and then calls :meth:`reminded`."""
        batches: dict[tuple[str, str], Batch] = {}
        for (receiver, _), entry in self._sent.items():
            if not decide_repeat(entry.last_sent, now, repeat_interval).notify:
                continue
            key = (receiver, entry.group_key)
            batch = batches.get(key)
            if batch is None:
                batch = batches[key] = Batch(receiver, entry.group_key, entry.labels, [])
            batch.updates.append(entry.incident)
            batch.repeat = max(batch.repeat, entry.repeats + 1)
        return list(batches.values())

    def reminded(self, receiver: str, incident_id: str, now: float) -> None:
        """A reminder went out, or was muted: either way the next one is an interval away."""
        entry = self._sent.get((receiver, incident_id))
        if entry is not None:
            entry.last_sent = now
            entry.repeats += 1

    def next_due(self, repeat_interval: float) -> float | None:
        if repeat_interval <= 0:
            return None
        return min((e.last_sent + repeat_interval for e in self._sent.values()), default=None)
