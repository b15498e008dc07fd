"""What the service needs from Kafka, as small protocols: the group consumer, a reader of
whole partitions, a producer, and topic creation.

:mod:`streamwatch.live.kafka` implements them with kafka-python;
:mod:`streamwatch.live.testing` implements them in memory, so the service's logic is tested
without a broker. Client errors cross these protocols as the three exceptions below, never as
a client library's own types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from streamwatch.live.kafka_tools import TopicSpec

__all__ = [
    "Broker",
    "BrokerUnavailable",
    "ClientError",
    "Consumer",
    "Future",
    "NotAssigned",
    "Partition",
    "Producer",
    "RebalanceListener",
    "Record",
    "TopicReader",
]


class ClientError(Exception):
    """A request to the brokers failed (a commit refused, a close that timed out...)."""


class BrokerUnavailable(ClientError):
    """The brokers cannot be reached for now (restarting, say); the client reconnects."""


class NotAssigned(ClientError):
    """The partition is no longer assigned to this consumer (revoked meanwhile)."""


class Partition(NamedTuple):
    topic: str
    partition: int


class Record(Protocol):
    """One consumed message (kafka-python's ``ConsumerRecord`` is one)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]] | None: ...


class RebalanceListener(Protocol):
    """Told of partitions taken away, given and lost (on the consumer's own thread)."""

    def on_revoked(self, partitions: set[Partition]) -> None: ...
    def on_assigned(self, partitions: set[Partition]) -> None: ...
    def on_lost(self, partitions: set[Partition]) -> None: ...


class Consumer(Protocol):
    """A group member: what the poll loop, the commits and the hand-over of runs use."""

    def subscribe(self, topic: str, listener: RebalanceListener) -> None: ...

    def poll(self, timeout_ms: int) -> Mapping[Partition, Sequence[Record]]:
        """Records by partition; raises :class:`BrokerUnavailable` while the brokers are away."""
        ...

    def seek(self, partition: Partition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next; raises :class:`NotAssigned`."""
        ...

    def commit(self, offsets: Mapping[Partition, int]) -> None:
        """Commit next offsets to read; raises :class:`ClientError`."""
        ...

    def highwater(self, partition: Partition) -> int | None:
        """The partition's end offset as the last fetch reported (None: not fetched yet)."""
        ...

    def membership(self) -> str:
        """The member's group state in a line (state, generation, partitions), for errors."""
        ...

    def close(self) -> None: ...


class TopicReader(Protocol):
    """Reads partitions whole, outside any group (checkpoints, published incidents)."""

    def read(self, topic: str, partition: int, start: int | None) -> list[Record]:
        """Every record from ``start`` (None: the beginning) to the partition's end now."""
        ...

    def end_offset(self, topic: str, partition: int) -> int: ...

    def close(self) -> None: ...


class Future(Protocol):
    """A send in flight (kafka-python's ``FutureRecordMetadata`` is one)."""

    @property
    def is_done(self) -> bool: ...
    @property
    def exception(self) -> BaseException | None: ...
    @property
    def value(self) -> Any: ...  # .topic, .partition, .offset once acknowledged
    def retriable(self) -> bool: ...


class Producer(Protocol):
    def send(
        self,
        topic: str,
        *,
        value: bytes,
        key: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes]] | None,
    ) -> Future: ...

    def flush(self, timeout: float | None = None) -> None: ...

    def close(self, timeout: float | None = None) -> None: ...


class Broker(Protocol):
    """Where the service's clients come from."""

    def ensure_topics(self, specs: Mapping[str, TopicSpec]) -> dict[str, int]:
        """Create the missing topics; returns every topic's partition count."""
        ...

    def consumer(self, group: str, topics: Iterable[str]) -> Consumer:
        """A group member (not subscribed yet) that knows the topics' partitions."""
        ...

    def reader(self) -> TopicReader: ...

    def producer(self) -> Producer: ...
