"""The service's Kafka clients: kafka-python behind the protocols of
:mod:`streamwatch.live.consumer`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import IllegalStateError, KafkaError, RetriableError

from streamwatch.clock import Clock, SystemClock
from streamwatch.kafka_tools import TopicSpec, ensure_topics
from streamwatch.live.consumer import (
    BrokerUnavailable,
    ClientError,
    NotAssigned,
    Partition,
    Producer,
    RebalanceListener,
    Record,
)
from streamwatch.live.settings import ServiceSettings
from streamwatch.sinks.kafka import make_producer

__all__ = ["KafkaBroker", "KafkaGroupConsumer", "KafkaTopicReader"]

_READ_TIMEOUT_S = 120.0
_CALL_TIMEOUT_MS = 60_000


class KafkaBroker:
    """Clients of one cluster, with the service's consumer settings."""

    def __init__(
        self,
        client_kwargs: dict[str, Any],
        *,
        session_timeout_ms: int = 10_000,
        fetch_max_wait_ms: int = 50,
        max_message_bytes: int = 1_048_576,
        clock: Clock | None = None,
    ) -> None:
        self.client_kwargs = client_kwargs
        self.clock = clock or SystemClock()
        self.session_timeout_ms = session_timeout_ms
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_message_bytes = max_message_bytes

    @classmethod
    def for_service(cls, settings: ServiceSettings, clock: Clock | None = None) -> KafkaBroker:
        """The clients a service with these settings uses."""
        return cls(
            settings.connection.client_kwargs(),
            session_timeout_ms=settings.session_timeout_ms,
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
            max_message_bytes=settings.max_message_bytes,
            clock=clock,
        )

    def ensure_topics(self, specs: Mapping[str, TopicSpec]) -> dict[str, int]:
        return ensure_topics(self.client_kwargs, specs)

    def consumer(self, group: str, topics: Iterable[str]) -> KafkaGroupConsumer:
        consumer = KafkaConsumer(
            **self.client_kwargs,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=self.fetch_max_wait_ms,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=max(self.session_timeout_ms // 4, 250),
            max_partition_fetch_bytes=max(self.max_message_bytes + 4096, 1_048_576),
            metadata_max_age_ms=30_000,
        )
        # With the topics' partitions known before the first join, the first assignment is
        # not empty (an empty one waits for the next metadata refresh to be corrected).
        for topic in topics:
            consumer.partitions_for_topic(topic)
        return KafkaGroupConsumer(consumer)

    def reader(self) -> KafkaTopicReader:
        return KafkaTopicReader(self.client_kwargs, self.clock)

    def producer(self) -> Producer:
        producer: Producer = make_producer(self.client_kwargs)
        return producer


def _ours(partitions: Iterable[Any]) -> set[Partition]:
    return {Partition(tp.topic, tp.partition) for tp in partitions}


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, listener: RebalanceListener) -> None:
        self.listener = listener

    def on_partitions_revoked(self, revoked: Iterable[Any]) -> None:
        self.listener.on_revoked(_ours(revoked))

    def on_partitions_assigned(self, assigned: Iterable[Any]) -> None:
        self.listener.on_assigned(_ours(assigned))

    def on_partitions_lost(self, lost: Iterable[Any]) -> None:
        self.listener.on_lost(_ours(lost))


class KafkaGroupConsumer:
    """A kafka-python ``KafkaConsumer`` as a :class:`~streamwatch.live.consumer.Consumer`."""

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer

    def subscribe(self, topic: str, listener: RebalanceListener) -> None:
        self._consumer.subscribe([topic], listener=_Listener(listener))

    def poll(self, timeout_ms: int) -> Mapping[Partition, Sequence[Record]]:
        try:
            batch: Mapping[Partition, Sequence[Record]] = self._consumer.poll(timeout_ms=timeout_ms)
        except RetriableError as exc:  # the broker restarts, say: the client reconnects
            raise BrokerUnavailable(str(exc)) from exc
        return batch  # kafka-python's TopicPartition is a (topic, partition) named tuple too

    def seek(self, partition: Partition, offset: int) -> None:
        try:
            self._consumer.seek(TopicPartition(*partition), offset)
        except IllegalStateError as exc:
            raise NotAssigned(f"{partition.topic}[{partition.partition}]") from exc

    def commit(self, offsets: Mapping[Partition, int]) -> None:
        meta = {TopicPartition(*p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        try:
            self._consumer.commit(meta)
        except KafkaError as exc:
            raise ClientError(str(exc)) from exc

    def highwater(self, partition: Partition) -> int | None:
        high: int | None = self._consumer.highwater(TopicPartition(*partition))
        return high

    def close(self) -> None:
        try:
            self._consumer.close(autocommit=False)
        except KafkaError as exc:
            raise ClientError(str(exc)) from exc


class KafkaTopicReader:
    """Reads whole partitions with a consumer outside any group, created on first use."""

    def __init__(self, client_kwargs: dict[str, Any], clock: Clock | None = None) -> None:
        self.client_kwargs = client_kwargs
        self.clock = clock or SystemClock()
        self._reader: Any = None

    def _consumer(self) -> Any:
        if self._reader is None:
            self._reader = KafkaConsumer(
                **self.client_kwargs,
                group_id=None,
                enable_auto_commit=False,
                fetch_max_wait_ms=50,
            )
        return self._reader

    def read(self, topic: str, partition: int, start: int | None) -> list[Record]:
        consumer = self._consumer()
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        end = consumer.end_offsets([tp], timeout_ms=_CALL_TIMEOUT_MS)[tp]
        if start is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, start)
        records: list[Record] = []
        deadline = self.clock.monotonic() + _READ_TIMEOUT_S
        while consumer.position(tp, timeout_ms=_CALL_TIMEOUT_MS) < end:
            if self.clock.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}[{partition}] up to offset {end} timed out")
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(r for r in batch if r.offset < end)
        return records

    def end_offset(self, topic: str, partition: int) -> int:
        tp = TopicPartition(topic, partition)
        return int(self._consumer().end_offsets([tp], timeout_ms=_CALL_TIMEOUT_MS)[tp])

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
