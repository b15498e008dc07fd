"""Run-state checkpoints in a compacted Kafka topic, for hand-over between service processes.

A partition of the metrics topic owns its runs (messages are keyed by run id), and one
service process owns a partition at a time. When ownership moves (a rebalance, a crash, a
restart) the new owner must continue each run exactly where the old one was, and must not
announce again the incident updates the old owner already published. At every offset commit
the service therefore writes, before committing:

* one **run record** per run that changed: the run's complete engine state (pickled, zlib),
  with the partition, the offset the state includes everything before (``offset``) and the
  incidents-topic offset from which later updates of the run can appear (``floor``);
* one **partition record**: the committed offset and the same floor.

A new owner reads the partition's records (:meth:`Checkpoints.load`), installs the runs,
skips a run's messages below its recorded offset (they are in the state already), and reads
the incidents topic from the floor (:meth:`Checkpoints.published`): the updates found there
were published by the old owner after its last commit, from messages that will now be
processed again, and the engine, being deterministic, produces exactly the same lines; the
service drops those. The result on the incidents topic is each update once, equal to a replay
of the same events, except for ``run_stalled`` (judged on each process's wall clock).

Records are keyed by (group, topic, partition), so one state topic serves many groups. The
state is a pickle: only the service itself may write to the state topic (broker ACLs).
"""

from __future__ import annotations

import logging
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from streamwatch.engine.monitor import Monitor
from streamwatch.live.consumer import Record, TopicReader
from streamwatch.sinks.kafka import HEADER_PREFIX, OutRecord, RecordOutbox

__all__ = ["Checkpoints", "Loaded", "RunCheckpoint"]

log = logging.getLogger(__name__)

_KIND = HEADER_PREFIX + "kind"
_PARTITION = HEADER_PREFIX + "partition"
_OFFSET = HEADER_PREFIX + "offset"
_FLOOR = HEADER_PREFIX + "floor"
_GROUP = HEADER_PREFIX + "group"
_SEP = "\x1f"


@dataclass(frozen=True, slots=True)
class RunCheckpoint:
    run_id: str
    state: bytes  # for Monitor.restore (which says why it cannot be restored)
    offset: int  # the state includes the run's messages below this offset
    floor: int  # incidents-topic offset from which later updates can appear


@dataclass(slots=True)
class Loaded:
    """What the state topic holds for one partition."""

    runs: dict[str, RunCheckpoint] = field(default_factory=dict)
    committed: int | None = None  # offset of the last partition record
    floor: int | None = None  # its incidents floor

    def window_start(self) -> int | None:
        """Where to read the incidents topic from (None: no owner ever committed)."""
        floors = [r.floor for r in self.runs.values()]
        if self.floor is not None:
            floors.append(self.floor)
        return min(floors) if floors else None


def _inflate(value: bytes) -> bytes:
    """A run record's state; a record that is not zlib data is passed on as it is, for
    :meth:`Monitor.restore` to refuse with its reason."""
    try:
        return zlib.decompress(value)
    except zlib.error:
        return value


class Checkpoints:
    """Writes and reads one group's checkpoints of one metrics topic."""

    def __init__(
        self,
        reader: TopicReader,
        *,
        group: str,
        topic: str,
        state_topic: str,
        state_partitions: int,
        incidents_topic: str,
        outbox: RecordOutbox,
    ) -> None:
        self.reader = reader
        self.group = group
        self.topic = topic
        self.state_topic = state_topic
        self.state_partitions = state_partitions
        self.incidents_topic = incidents_topic
        self.outbox = outbox

    # -- writing ----------------------------------------------------------------------------
    def _key(self, partition: int, kind: str, name: str = "") -> bytes:
        return _SEP.join((self.group, self.topic, str(partition), kind, name)).encode()

    def _headers(self, kind: str, partition: int, offset: int, floor: int) -> list[Any]:
        return [
            (_KIND, kind.encode()),
            (_GROUP, self.group.encode()),
            (_PARTITION, str(partition).encode()),
            (_OFFSET, str(offset).encode()),
            (_FLOOR, str(floor).encode()),
        ]

    def save_run(
        self, monitor: Monitor, run_id: str, partition: int, offset: int, floor: int
    ) -> int:
        """Queue one run's state on the outbox; returns its size in bytes."""
        # mid-stream: a step waiting for more ranks stays open, the run exactly as it is
        blob = zlib.compress(monitor.snapshot(run_id, close=False), 1)
        self.outbox.send(
            OutRecord(
                self.state_topic,
                blob,
                self._key(partition, "run", run_id),
                partition % self.state_partitions,
                self._headers("run", partition, offset, floor),
            )
        )
        return len(blob)

    def save_partition(self, partition: int, offset: int, floor: int) -> None:
        """Queue the partition record (``offset`` -1: not known yet); send it after the
        partition's run records."""
        self.outbox.send(
            OutRecord(
                self.state_topic,
                b"",
                self._key(partition, "partition"),
                partition % self.state_partitions,
                self._headers("partition", partition, offset, floor),
            )
        )

    # -- reading ----------------------------------------------------------------------------
    def load(self, partition: int) -> Loaded:
        """The latest checkpoint of every run of a partition and its last partition record."""
        prefix = _SEP.join((self.group, self.topic, str(partition), "")).encode()
        latest: dict[bytes, Record] = {}  # the log is compacted lazily: keep each key's last
        for record in self.reader.read(self.state_topic, partition % self.state_partitions, None):
            key = record.key or b""
            if key.startswith(prefix):
                latest[key] = record
        loaded = Loaded()
        for key, record in latest.items():
            headers = dict(record.headers or ())
            offset = int(headers[_OFFSET])
            floor = int(headers[_FLOOR])
            if headers[_KIND] == b"partition":
                # A first owner records its floor before it knows an offset (-1).
                loaded.committed = offset if offset >= 0 else None
                loaded.floor = floor
            elif record.value:
                run_id = key[len(prefix) :].decode().split(_SEP, 1)[1]
                loaded.runs[run_id] = RunCheckpoint(run_id, _inflate(record.value), offset, floor)
        return loaded

    def published(self, incidents_partition: int, start: int | None) -> dict[str, Counter[str]]:
        """Incident lines this group published on a partition from ``start``, by run id."""
        out: dict[str, Counter[str]] = {}
        group = self.group.encode()
        for record in self.reader.read(self.incidents_topic, incidents_partition, start):
            headers = dict(record.headers or ())
            if headers.get(_GROUP) != group or record.key is None or record.value is None:
                continue
            out.setdefault(record.key.decode(), Counter())[record.value.decode()] += 1
        return out

    def end_offset(self, topic: str, partition: int) -> int:
        return self.reader.end_offset(topic, partition)

    def close(self) -> None:
        self.reader.close()
