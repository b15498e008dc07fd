"""Kafka as a sink: one producer for incidents, dead letters and state checkpoints.

:class:`RecordOutbox` wraps a kafka-python producer (idempotent, ``acks=all``) and keeps every
record until the broker has acknowledged it: :meth:`RecordOutbox.flush` waits, re-sends what failed
with a retriable error and says whether everything is delivered. The service commits consumer
offsets only after a successful flush, so a record is never lost between the engine and the
broker. The outbox also remembers the highest acknowledged offset of each partition it wrote,
which a checkpoint records (see :mod:`streamwatch.live.checkpoints`).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from streamwatch.incidents import Incident

__all__ = [
    "DEAD_LETTER_VALUE_BYTES",
    "HEADER_PREFIX",
    "OutRecord",
    "RecordOutbox",
    "dead_letter_record",
    "incident_record",
    "make_producer",
]

log = logging.getLogger(__name__)

HEADER_PREFIX = "streamwatch."
#: Dead letters keep at most this much of the original value (the rest is cut, and said so).
DEAD_LETTER_VALUE_BYTES = 900_000
#: Largest record the producer accepts (state checkpoints of runs with many metrics).
MAX_REQUEST_BYTES = 16 * 2**20


def make_producer(client_kwargs: dict[str, Any], *, linger_ms: int = 2) -> Any:
    """An idempotent, acks=all producer: ordered per partition, no duplicates on retry."""
    from kafka import KafkaProducer

    return KafkaProducer(
        **client_kwargs,
        acks="all",
        enable_idempotence=True,
        linger_ms=linger_ms,
        max_request_size=MAX_REQUEST_BYTES,
        max_block_ms=10_000,
    )


@dataclass(slots=True)
class OutRecord:
    topic: str
    value: bytes
    key: bytes | None = None
    partition: int | None = None
    headers: list[tuple[str, bytes]] | None = None


def incident_record(
    inc: Incident, topic: str, partition: int | None, group: str, line: str | None = None
) -> OutRecord:
    """An incident update as a message: key = run id, value = :meth:`Incident.to_json`."""
    value = (line if line is not None else inc.to_json()).encode()
    return OutRecord(
        topic,
        value,
        inc.run_id.encode(),
        partition,
        [(HEADER_PREFIX + "group", group.encode())],
    )


def dead_letter_record(
    topic: str,
    *,
    value: bytes | None,
    key: bytes | None,
    reason: str,
    detail: str,
    source_topic: str,
    partition: int,
    offset: int,
) -> OutRecord:
    """A message that could not be used, kept as it came with headers saying why and where."""
    original = value or b""
    headers = [
        (HEADER_PREFIX + "reason", reason.encode()),
        (HEADER_PREFIX + "detail", detail.encode()),
        (HEADER_PREFIX + "topic", source_topic.encode()),
        (HEADER_PREFIX + "partition", str(partition).encode()),
        (HEADER_PREFIX + "offset", str(offset).encode()),
    ]
    if len(original) > DEAD_LETTER_VALUE_BYTES:
        headers.append((HEADER_PREFIX + "truncated_from", str(len(original)).encode()))
        original = original[:DEAD_LETTER_VALUE_BYTES]
    return OutRecord(topic, original, key, None, headers)


class RecordOutbox:
    """Records on their way to the brokers, kept until acknowledged."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self._pending: list[tuple[OutRecord, Any]] = []  # (record, future or None if unsent)
        self.acked: dict[tuple[str, int], int] = {}  # (topic, partition) -> last offset + 1
        self.undeliverable = 0

    def __len__(self) -> int:
        return len(self._pending)

    def send(self, record: OutRecord) -> None:
        self._pending.append((record, self._send(record)))

    def _send(self, record: OutRecord) -> Any:
        from kafka.errors import KafkaError

        try:
            return self.producer.send(
                record.topic,
                value=record.value,
                key=record.key,
                partition=record.partition,
                headers=record.headers,
            )
        except KafkaError as exc:  # metadata unavailable while the brokers are away
            log.warning("could not send to %s yet (%s); will retry", record.topic, exc)
            return None

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for acknowledgements; re-send retriable failures. True when nothing is left.

        Records that failed for good (a record too large for the broker, say) are logged,
        counted in :attr:`undeliverable` and dropped so that they cannot block the service.
        """
        from kafka.errors import KafkaTimeoutError

        if not self._pending:
            return True
        with contextlib.suppress(KafkaTimeoutError):
            self.producer.flush(timeout=timeout)
        left: list[tuple[OutRecord, Any]] = []
        retry: list[OutRecord] = []
        acked = self.acked
        for record, future in self._pending:
            if future is None:
                retry.append(record)
            elif not future.is_done:
                left.append((record, future))
            elif future.exception is None:
                meta = future.value
                key = (meta.topic, meta.partition)
                if meta.offset + 1 > acked.get(key, 0):
                    acked[key] = meta.offset + 1
            elif getattr(future.exception, "retriable", False) or future.retriable():
                retry.append(record)
            else:
                self.undeliverable += 1
                log.error(
                    "dropping a record for %s that the broker refused: %s",
                    record.topic,
                    future.exception,
                )
        for record in retry:
            left.append((record, self._send(record)))
        self._pending = left
        return not left

    def flush_sent(self, timeout: float) -> Exception | None:
        """Wait for what was handed to the producer, from any thread (the pending list is
        left to :meth:`flush`); returns the client's error, if any."""
        from kafka.errors import KafkaError

        try:
            self.producer.flush(timeout=timeout)
        except KafkaError as exc:
            error: Exception = exc
            return error
        return None

    def close(self, timeout: float = 10.0) -> None:
        self.producer.close(timeout=timeout)
