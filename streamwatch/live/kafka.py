"""The service's Kafka clients: kafka-python behind the protocols of
:mod:`streamwatch.live.consumer`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.errors import IllegalStateError, KafkaError, RetriableError
from kafka.structs import MemberState

from streamwatch.clock import Clock, SystemClock
from streamwatch.live.consumer import (
    BrokerUnavailable,
    ClientError,
    NotAssigned,
    Partition,
    Producer,
    RebalanceListener,
    Record,
)
from streamwatch.live.kafka_tools import TopicSpec, ensure_topics
from streamwatch.live.settings import ServiceSettings
from streamwatch.sinks.kafka import make_producer

__all__ = ["KafkaBroker", "KafkaGroupConsumer", "KafkaTopicReader"]

log = logging.getLogger(__name__)

_READ_TIMEOUT_S = 120.0
_CALL_TIMEOUT_MS = 60_000
#: a consumer that has not been a stable member of its group for this many session timeouts
#: (at least ``_STUCK_MIN_S``) is replaced by a new one: a rebalance of members that poll
#: every 0.2 s, as the service's do, takes a few seconds
_STUCK_SESSIONS = 3
_STUCK_MIN_S = 15.0
#: a consumer whose join was left unfinished (see :meth:`KafkaGroupConsumer.join_lost`) for
#: this long is replaced: a join in progress that kafka-python still means to finish says so
_LOST_JOIN_S = 2.0


class KafkaBroker:
    """Clients of one cluster, with the service's consumer settings."""

    def __init__(
        self,
        client_kwargs: dict[str, Any],
        *,
        session_timeout_ms: int = 10_000,
        fetch_max_wait_ms: int = 50,
        max_poll_records: int = 5000,
        max_message_bytes: int = 1_048_576,
        clock: Clock | None = None,
    ) -> None:
        self.client_kwargs = client_kwargs
        self.clock = clock or SystemClock()
        self.session_timeout_ms = session_timeout_ms
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_poll_records = max_poll_records
        self.max_message_bytes = max_message_bytes

    @classmethod
    def for_service(cls, settings: ServiceSettings, clock: Clock | None = None) -> KafkaBroker:
        """The clients a service with these settings uses."""
        return cls(
            settings.connection.client_kwargs(),
            session_timeout_ms=settings.session_timeout_ms,
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
            max_poll_records=settings.max_poll_records,
            max_message_bytes=settings.max_message_bytes,
            clock=clock,
        )

    def ensure_topics(self, specs: Mapping[str, TopicSpec]) -> dict[str, int]:
        return ensure_topics(self.client_kwargs, specs)

    def consumer(self, group: str, topics: Iterable[str]) -> KafkaGroupConsumer:
        names = list(topics)

        def make() -> Any:
            consumer = KafkaConsumer(
                **self.client_kwargs,
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=self.fetch_max_wait_ms,
                max_poll_records=self.max_poll_records,
                session_timeout_ms=self.session_timeout_ms,
                heartbeat_interval_ms=max(self.session_timeout_ms // 4, 250),
                max_partition_fetch_bytes=max(self.max_message_bytes + 4096, 1_048_576),
                metadata_max_age_ms=30_000,
            )
            # With the topics' partitions known before the first join, the first assignment
            # is not empty (an empty one waits for the next metadata refresh to be corrected).
            for topic in names:
                consumer.partitions_for_topic(topic)
            return consumer

        stuck_after = max(_STUCK_SESSIONS * self.session_timeout_ms / 1000, _STUCK_MIN_S)
        return KafkaGroupConsumer(make(), make=make, stuck_after=stuck_after, clock=self.clock)

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
    """A kafka-python ``KafkaConsumer`` as a :class:`~streamwatch.live.consumer.Consumer`.

    With ``make``, a consumer that stays out of its group (not a stable member, and holding
    no partition) for ``stuck_after`` seconds while polling is replaced by a new one,
    subscribed as it was: a
    kafka-python 3.0 consumer was seen to wait on its second JoinGroup for good (the broker
    had dropped the member), idle while its peer owned every partition. So is, after
    ``_LOST_JOIN_S`` seconds, one whose join was left unfinished (:meth:`join_lost`), whether
    or not it holds partitions.
    """

    def __init__(
        self,
        consumer: Any,
        *,
        make: Callable[[], Any] | None = None,
        stuck_after: float = _STUCK_MIN_S,
        clock: Clock | None = None,
    ) -> None:
        self._consumer = consumer
        self._make = make
        self.stuck_after = stuck_after
        self.clock = clock or SystemClock()
        self._stable_at = self.clock.monotonic()
        self._lost_since: float | None = None  # when a lost join was first seen
        self._subscribed: tuple[str, _Listener] | None = None
        self.replaced = 0  # consumers replaced for staying out of the group

    def subscribe(self, topic: str, listener: RebalanceListener) -> None:
        self._subscribed = (topic, _Listener(listener))
        self._consumer.subscribe([topic], listener=self._subscribed[1])

    def poll(self, timeout_ms: int) -> Mapping[Partition, Sequence[Record]]:
        try:
            batch: Mapping[Partition, Sequence[Record]] = self._consumer.poll(timeout_ms=timeout_ms)
        except RetriableError as exc:  # the broker restarts, say: the client reconnects
            raise BrokerUnavailable(str(exc)) from exc
        self._watch()
        return batch  # kafka-python's TopicPartition is a (topic, partition) named tuple too

    def join_lost(self) -> bool:
        """Whether the client is out of its group with no join left to make: kafka-python
        3.0.12 rejoins when a subscribed topic's partitions change from what the last
        assignment saw; when a poll times out with that join in flight and its leader has
        meanwhile assigned the partitions (so that no change is seen any more), no later poll
        finishes the join. The member stays ``<rebalancing>`` for good, its heartbeat off, its
        partitions revoked and never fetched (seen against a fresh broker, whose first
        assignment saw no partitions: no event read for 90 s)."""
        return self._forgot_join(self._consumer.group_metadata())

    def _forgot_join(self, meta: Any) -> bool:
        if meta.state == MemberState.STABLE:
            return False
        need_rejoin = getattr(getattr(self._consumer, "_coordinator", None), "need_rejoin", None)
        return callable(need_rejoin) and not bool(need_rejoin())

    def _watch(self) -> None:
        """Replace a consumer that has stayed out of its group too long."""
        now = self.clock.monotonic()
        meta = self._consumer.group_metadata()
        if self._lost_join(now, meta):
            return
        if meta.state == MemberState.STABLE or self._consumer.assignment():
            self._stable_at = now  # in the group, or still holding partitions
            return
        waited = now - self._stable_at
        if self._make is None or self._subscribed is None or waited < self.stuck_after:
            return
        self._replace(
            f"not a stable member of group {meta.group_id} for {waited:.0f} s ({meta.state}, "
            f"generation {meta.generation_id})"
        )

    def _lost_join(self, now: float, meta: Any) -> bool:
        """Replace a consumer whose join was lost (:meth:`join_lost`) for ``_LOST_JOIN_S``."""
        if self._make is None or self._subscribed is None or not self._forgot_join(meta):
            self._lost_since = None
            return False
        if self._lost_since is None:
            self._lost_since = now
        waited = now - self._lost_since
        if waited < _LOST_JOIN_S:
            return False
        self._replace(
            f"the join of group {meta.group_id} was left unfinished for {waited:.0f} s "
            f"({meta.state}, generation {meta.generation_id})"
        )
        return True

    def _replace(self, why: str) -> None:
        log.warning("%s: a new consumer joins in its place", why)
        assert self._make is not None and self._subscribed is not None
        now = self.clock.monotonic()
        self._lost_since = None
        old, self._consumer = self._consumer, self._make()
        topic, listener = self._subscribed
        self._consumer.subscribe([topic], listener=listener)
        self._stable_at = now
        self.replaced += 1
        try:
            old.close(autocommit=False, timeout_ms=5_000)
        except KafkaError as exc:
            log.warning("closing the replaced consumer: %s", exc)

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

    def membership(self) -> str:
        meta = self._consumer.group_metadata()
        held = sorted(f"{tp.topic}[{tp.partition}]" for tp in self._consumer.assignment())
        return (
            f"{meta.state} in group {meta.group_id}, generation {meta.generation_id}, "
            f"member {meta.member_id or '-'}, holding {', '.join(held) or 'no partition'}; "
            f"replaced {self.replaced} times"
        )

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
