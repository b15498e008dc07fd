"""Kafka helpers for people and tests: create topics, publish recorded files, record a topic.

``publish`` reads recorded logs with :class:`~streamwatch.sources.FileSource` (every format
replay reads) and sends each event as one JSON message keyed by its run id. ``record`` writes
a topic's messages as JSON lines that ``streamwatch replay`` reads back, so what a live
service saw can be replayed, and an incidents topic can be kept as an incidents file.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamwatch.events import Problem
from streamwatch.sinks.kafka import MAX_REQUEST_BYTES
from streamwatch.sources import open_sources

__all__ = [
    "PublishResult",
    "RecordResult",
    "TopicSpec",
    "ensure_topics",
    "publish_files",
    "record_topic",
]

log = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = 36


@dataclass(frozen=True)
class TopicSpec:
    """How to create a topic that does not exist yet (an existing one is left as it is)."""

    partitions: int
    replication_factor: int = -1  # the broker's default.replication.factor
    configs: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def state(cls, partitions: int, replication_factor: int = -1) -> TopicSpec:
        """A compacted topic for run-state checkpoints (records up to 16 MiB)."""
        return cls(
            partitions,
            replication_factor,
            {
                "cleanup.policy": "compact",
                "max.message.bytes": str(MAX_REQUEST_BYTES + 65_536),
                "segment.ms": str(600_000),  # compaction only cleans closed segments
                "min.cleanable.dirty.ratio": "0.2",
            },
        )


def ensure_topics(client_kwargs: dict[str, Any], specs: Mapping[str, TopicSpec]) -> dict[str, int]:
    """Create the topics that are missing; return every topic's partition count."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import for_code

    admin: Any = KafkaAdminClient(**client_kwargs)
    try:
        existing = set(admin.list_topics())
        missing = {
            name: {
                "num_partitions": spec.partitions,
                "replication_factor": spec.replication_factor,
                "configs": dict(spec.configs),
            }
            for name, spec in specs.items()
            if name not in existing
        }
        if missing:
            result = admin.create_topics(missing, raise_errors=False)
            for topic in result["topics"]:
                code = topic["error_code"]
                if code not in (0, _TOPIC_ALREADY_EXISTS):
                    error = for_code(code)
                    raise error(f"creating topic {topic['name']}: {topic['error_message']}")
                if code == 0:
                    log.info("created topic %s", topic["name"])
            admin.wait_for_topics(list(missing))
        described = admin.describe_topics(list(specs))
        return {t["name"]: len(t["partitions"]) for t in described}
    finally:
        admin.close()


# -- publish --------------------------------------------------------------------------------


@dataclass
class PublishResult:
    events: int = 0
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0


class _Pacer:
    """Original gaps between event times, divided by ``speed``; None: as fast as possible."""

    def __init__(
        self,
        speed: float | None,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if speed is not None and not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.speed = speed
        self.monotonic = monotonic
        self.sleep = sleep
        self.origin: tuple[float, float] | None = None  # (first event ts, wall time then)

    def wait(self, ts: float | None) -> None:
        if self.speed is None or ts is None:
            return
        if self.origin is None:
            self.origin = (ts, self.monotonic())
            return
        first_ts, start = self.origin
        delay = start + (ts - first_ts) / self.speed - self.monotonic()
        if delay > 0:
            self.sleep(delay)


def publish_files(
    paths: Sequence[str | Path],
    client_kwargs: dict[str, Any],
    topic: str,
    *,
    speed: float | None = None,
    partitions: int | None = None,
    format: str | None = None,
    producer: Any = None,
) -> PublishResult:
    """Send every event of recorded files to ``topic``, keyed by run id.

    With ``speed`` the original time between events (their ``ts``) is kept, divided by
    ``speed``; without it, or for events without ``ts``, events go as fast as possible.
    ``partitions`` creates the topic when it is missing.
    """
    from kafka import KafkaProducer

    result = PublishResult()
    sources = open_sources(paths, format=format, on_problem=result.problems.append)
    if partitions is not None:
        ensure_topics(client_kwargs, {topic: TopicSpec(partitions)})
    own = producer is None
    if own:
        producer = KafkaProducer(
            **client_kwargs, acks="all", linger_ms=5, max_request_size=MAX_REQUEST_BYTES
        )
    pacer = _Pacer(speed)
    start = time.perf_counter()
    try:
        for source in sources:
            for event in source:
                pacer.wait(event.ts)
                value = json.dumps(event.to_json_dict(), separators=(",", ":")).encode()
                producer.send(topic, key=event.run_id.encode(), value=value)
                result.events += 1
        producer.flush()
    finally:
        if own:
            producer.close(timeout=10)
    result.seconds = time.perf_counter() - start
    return result


# -- record ---------------------------------------------------------------------------------


@dataclass
class RecordResult:
    messages: int = 0
    skipped: int = 0  # not UTF-8 JSON: left out of the file


def _line(value: bytes | None) -> str | None:
    """A message as one JSONL line (None if it is not JSON text)."""
    if value is None:
        return None
    try:
        text = value.decode("utf-8")
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if "\n" in text or "\r" in text:
        return json.dumps(obj, separators=(",", ":"))
    return text.strip()


def record_topic(
    client_kwargs: dict[str, Any],
    topic: str,
    output: str | Path,
    *,
    from_beginning: bool = False,
    max_messages: int | None = None,
    idle_timeout: float | None = None,
    stop: threading.Event | None = None,
) -> RecordResult:
    """Append a topic's messages to a JSONL file, partition order kept, until ``max_messages``,
    ``idle_timeout`` seconds without a message, or ``stop``."""
    from kafka import KafkaConsumer, TopicPartition

    stop = stop or threading.Event()
    result = RecordResult()
    consumer: Any = KafkaConsumer(**client_kwargs, group_id=None, enable_auto_commit=False)
    try:
        parts = _wait_for_partitions(consumer, topic, stop)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        if from_beginning:
            consumer.seek_to_beginning(*tps)
        else:
            consumer.seek_to_end(*tps)
        path = Path(output)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            last = time.monotonic()
            while not stop.is_set():
                batch = consumer.poll(timeout_ms=200)
                if batch:
                    last = time.monotonic()
                    if _write(batch.values(), out, result, max_messages):
                        break
                    out.flush()
                elif idle_timeout is not None and time.monotonic() - last >= idle_timeout:
                    break
    finally:
        consumer.close()
    return result


def _write(batches: Iterable[list[Any]], out: Any, result: RecordResult, limit: int | None) -> bool:
    """Write records; True once ``limit`` messages are written."""
    for records in batches:
        for record in records:
            line = _line(record.value)
            if line is None:
                result.skipped += 1
                continue
            out.write(line + "\n")
            result.messages += 1
            if limit is not None and result.messages >= limit:
                return True
    return False


def _wait_for_partitions(consumer: Any, topic: str, stop: threading.Event) -> set[int]:
    deadline = time.monotonic() + 30.0
    while not stop.is_set():
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return set(parts)
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    raise ValueError(f"topic {topic!r} does not exist")
