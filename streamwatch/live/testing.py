"""An in-memory Kafka for tests of the service's logic: topics, partitions, offsets, a
consumer group with commits, and rebalances on demand.

>>> broker = FakeBroker()
>>> broker.ensure_topics({"m": TopicSpec(2)})
{'m': 2}
>>> broker.produce("m", b'{"run_id": "a"}', key=b"a", partition=1)
0
>>> consumer = broker.consumer("g", ["m"])
>>> consumer.subscribe("m", NoListener())
>>> [(tp.partition, [r.offset for r in rs]) for tp, rs in consumer.poll(100).items()]
[(1, [0])]
>>> consumer.commit({Partition("m", 1): 1})
>>> broker.committed("g", "m")
{1: 1}

It is not Kafka: no replication, no compaction, no network thread (the rebalance callbacks
run inside :meth:`FakeConsumer.poll`, before the records, as kafka-python calls them), and
partitions are handed out by a simple range assignment whenever a member joins or leaves.
With a :class:`~streamwatch.clock.ManualClock`, a poll that finds nothing moves the clock by
its timeout, as if it had waited: a service's schedules (ticks, commits, ``max_idle``) then run
without any real wait.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamwatch.clock import ManualClock
from streamwatch.live.consumer import (
    BrokerUnavailable,
    ClientError,
    NotAssigned,
    Partition,
    RebalanceListener,
    Record,
)
from streamwatch.live.kafka_tools import TopicSpec

__all__ = [
    "FakeBroker",
    "FakeConsumer",
    "FakeProducer",
    "FakeReader",
    "FakeRecord",
    "NoListener",
    "TopicSpec",
    "blackhole_broker",
    "open_fds",
]

_MAX_POLL_RECORDS = 500


@dataclass(frozen=True, slots=True)
class FakeRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None


@dataclass(frozen=True, slots=True)
class _Meta:
    topic: str
    partition: int
    offset: int


@dataclass(slots=True)
class _Done:
    """A send that is already acknowledged (or refused, with ``exception``)."""

    value: _Meta | None
    exception: BaseException | None = None
    is_done: bool = True

    def retriable(self) -> bool:
        return bool(getattr(self.exception, "retriable", False))


class NoListener:
    """A rebalance listener that ignores everything."""

    def on_revoked(self, partitions: set[Partition]) -> None:
        pass

    def on_assigned(self, partitions: set[Partition]) -> None:
        pass

    def on_lost(self, partitions: set[Partition]) -> None:
        pass


@dataclass
class _Group:
    members: list[FakeConsumer] = field(default_factory=list)
    committed: dict[Partition, int] = field(default_factory=dict)


class FakeBroker:
    """Topics and consumer groups in memory; shared by every client it gives out."""

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.clock = clock
        self.logs: dict[str, list[list[FakeRecord]]] = {}
        self.groups: dict[str, _Group] = {}
        self.unavailable = False  #: polls raise BrokerUnavailable while True
        self.refuse_commits = 0  #: this many next commits fail
        #: called at the start of every poll of every member: a test's script
        self.on_poll: Callable[[FakeConsumer], None] | None = None
        self.lock = threading.RLock()

    # -- topics ---------------------------------------------------------------------------------
    def ensure_topics(self, specs: Mapping[str, TopicSpec]) -> dict[str, int]:
        with self.lock:
            for name, spec in specs.items():
                self.logs.setdefault(name, [[] for _ in range(spec.partitions)])
            return {name: len(self.logs[name]) for name in specs}

    def produce(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> int:
        """Append a record; returns its offset. Without a partition, the key picks one."""
        with self.lock:
            log = self.logs[topic]
            if partition is None:
                partition = self.partition_for(topic, key)
            records = log[partition]
            records.append(FakeRecord(topic, partition, len(records), key, value, headers))
            return len(records) - 1

    def partition_for(self, topic: str, key: bytes | None) -> int:
        return zlib.crc32(key or b"") % len(self.logs[topic])

    def records(self, topic: str) -> list[FakeRecord]:
        """Every record of a topic, partition by partition."""
        with self.lock:
            return [r for records in self.logs[topic] for r in records]

    def end_offset(self, topic: str, partition: int) -> int:
        with self.lock:
            return len(self.logs[topic][partition])

    # -- groups ---------------------------------------------------------------------------------
    def consumer(self, group: str, topics: Iterable[str]) -> FakeConsumer:
        return FakeConsumer(self, group)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        with self.lock:
            g = self.groups.get(group, _Group())
            return {p.partition: o for p, o in sorted(g.committed.items()) if p.topic == topic}

    def join(self, member: FakeConsumer) -> None:
        with self.lock:
            self.groups.setdefault(member.group, _Group()).members.append(member)
            self.rebalance(member.group)

    def leave(self, member: FakeConsumer, *, lost: bool = False) -> None:
        """A member leaves (``lost``: it is evicted, and told so on its next poll)."""
        with self.lock:
            group = self.groups[member.group]
            if member in group.members:
                group.members.remove(member)
                member.reassign(set(), lost=lost)
                self.rebalance(member.group)

    def rebalance(self, group: str) -> None:
        """Hand the subscribed topics' partitions out again (a range assignment)."""
        with self.lock:
            members = self.groups[group].members
            for i, member in enumerate(members):
                mine: set[Partition] = set()
                for topic in member.topics:
                    count = len(self.logs[topic])
                    mine |= {
                        Partition(topic, p) for p in range(count) if p * len(members) // count == i
                    }
                member.reassign(mine)

    def _commit(self, group: str, offsets: Mapping[Partition, int]) -> None:
        with self.lock:
            if self.refuse_commits:
                self.refuse_commits -= 1
                raise ClientError("commit refused (FakeBroker.refuse_commits)")
            self.groups.setdefault(group, _Group()).committed.update(offsets)

    # -- other clients --------------------------------------------------------------------------
    def reader(self) -> FakeReader:
        return FakeReader(self)

    def producer(self) -> FakeProducer:
        return FakeProducer(self)


class FakeConsumer:
    """A group member of a :class:`FakeBroker`."""

    def __init__(self, broker: FakeBroker, group: str) -> None:
        self.broker = broker
        self.group = group
        self.topics: list[str] = []
        self.assigned: set[Partition] = set()
        self.positions: dict[Partition, int] = {}
        self.fetched: set[Partition] = set()
        self.listener: RebalanceListener = NoListener()
        self._changes: list[tuple[str, set[Partition]]] = []
        self.closed = False

    def subscribe(self, topic: str, listener: RebalanceListener) -> None:
        self.topics = [topic]
        self.listener = listener
        self.broker.join(self)

    def reassign(self, partitions: set[Partition], *, lost: bool = False) -> None:
        """Called by the broker: the callbacks run on the next poll."""
        with self.broker.lock:
            if lost:
                self._changes.append(("lost", set(self.assigned)))
            else:
                self._changes.append(("revoked", set(self.assigned)))
                self._changes.append(("assigned", set(partitions)))
            self.assigned = set(partitions)
            # eager rebalancing: every assigned partition starts again at the committed offset
            committed = self.broker.groups.get(self.group, _Group()).committed
            self.positions = {p: committed.get(p, 0) for p in partitions}
            self.fetched &= self.assigned

    def poll(self, timeout_ms: int) -> Mapping[Partition, Sequence[Record]]:
        if self.broker.on_poll is not None:
            self.broker.on_poll(self)
        if self.broker.unavailable:
            raise BrokerUnavailable("FakeBroker.unavailable")
        with self.broker.lock:
            changes, self._changes = self._changes, []
        for kind, partitions in changes:
            if kind == "revoked":
                self.listener.on_revoked(partitions)
            elif kind == "lost":
                self.listener.on_lost(partitions)
            else:
                self.listener.on_assigned(partitions)
        batch = self._fetch()
        if not batch and self.broker.clock is not None:
            self.broker.clock.advance(timeout_ms / 1000)
        return batch

    def _fetch(self) -> dict[Partition, list[Record]]:
        batch: dict[Partition, list[Record]] = {}
        left = _MAX_POLL_RECORDS
        with self.broker.lock:
            for tp in sorted(self.assigned):
                log = self.broker.logs[tp.topic][tp.partition]
                self.fetched.add(tp)
                start = self.positions[tp]
                records = log[start : start + left]
                if records:
                    batch[tp] = list(records)
                    self.positions[tp] = start + len(records)
                    left -= len(records)
                if left <= 0:
                    break
        return batch

    def seek(self, partition: Partition, offset: int) -> None:
        with self.broker.lock:
            if partition not in self.assigned:
                raise NotAssigned(f"{partition.topic}[{partition.partition}]")
            self.positions[partition] = offset

    def commit(self, offsets: Mapping[Partition, int]) -> None:
        self.broker._commit(self.group, offsets)

    def highwater(self, partition: Partition) -> int | None:
        if partition not in self.fetched:
            return None
        return self.broker.end_offset(partition.topic, partition.partition)

    def membership(self) -> str:
        held = sorted(f"{p.topic}[{p.partition}]" for p in self.assigned)
        return f"in group {self.group}, holding {', '.join(held) or 'no partition'}"

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.broker.leave(self)


class FakeReader:
    """Reads whole partitions of a :class:`FakeBroker`."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    def read(self, topic: str, partition: int, start: int | None) -> list[Record]:
        with self.broker.lock:
            return list(self.broker.logs[topic][partition][start or 0 :])

    def end_offset(self, topic: str, partition: int) -> int:
        return self.broker.end_offset(topic, partition)

    def close(self) -> None:
        pass


class FakeProducer:
    """Appends to a :class:`FakeBroker` at once; every send is acknowledged when made."""

    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.sent = 0

    def send(
        self,
        topic: str,
        *,
        value: bytes,
        key: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes]] | None,
    ) -> Any:
        with self.broker.lock:
            if partition is None:
                partition = self.broker.partition_for(topic, key)
            offset = self.broker.produce(
                topic, value, key=key, partition=partition, headers=headers
            )
        self.sent += 1
        return _Done(_Meta(topic, partition, offset))

    def flush(self, timeout: float | None = None) -> None:
        pass

    def close(self, timeout: float | None = None) -> None:
        pass


# -- a broker that never answers ------------------------------------------------------------

_BLACKHOLE = """
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1024)
print(s.getsockname()[1], flush=True)
kept = []
while True:
    kept.append(s.accept()[0])  # take the connection, never say a word
    if len(kept) > 2000:
        kept.pop(0).close()
"""


@contextmanager
def blackhole_broker() -> Iterator[str]:
    """A TCP server on 127.0.0.1, in a child process, that accepts connections and never
    speaks Kafka (a load balancer in front of a dead broker); yields its address."""
    hole = subprocess.Popen([sys.executable, "-c", _BLACKHOLE], stdout=subprocess.PIPE, text=True)
    try:
        assert hole.stdout is not None
        yield f"127.0.0.1:{int(hole.stdout.readline())}"
    finally:
        hole.kill()
        hole.wait()
        if hole.stdout is not None:
            hole.stdout.close()


def open_fds() -> int:
    """The file descriptors this process holds (Linux)."""
    return len(list(Path("/proc/self/fd").iterdir()))


def delete_topics(bootstrap: str, topics: Iterable[str]) -> None:
    """Delete those of ``topics`` that exist on the broker (a test's own, when it ends)."""
    from kafka.admin import KafkaAdminClient

    admin: Any = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="test-cleanup")
    try:
        existing = set(admin.list_topics())
        gone = [t for t in topics if t in existing]
        if gone:
            admin.delete_topics(gone)
    finally:
        admin.close()
