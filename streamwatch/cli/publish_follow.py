"""``streamwatch publish --follow``: a sidecar that sends growing logs to Kafka as training
writes them (the logs the trainer already keeps, no code in the training job).

The paths are followed as ``streamwatch watch`` follows them (:mod:`streamwatch.sources.
follow`); every event read is sent to the metrics topic keyed by its run id, and the producer
is flushed after each poll, so that what was read is on the broker before the next read.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streamwatch.live.kafka_tools import PublishResult, TopicSpec, ensure_topics
from streamwatch.sinks.kafka import MAX_REQUEST_BYTES
from streamwatch.sources.follow import Follower, follow

__all__ = ["follow_and_publish"]


def follow_and_publish(
    paths: Sequence[str | Path],
    client_kwargs: dict[str, Any],
    topic: str,
    *,
    poll_seconds: float = 2.0,
    idle_exit: float | None = None,
    stop: threading.Event | None = None,
    partitions: int | None = None,
    format: str | None = None,
    producer: Any = None,
) -> PublishResult:
    """Follow ``paths`` and send what they gain to ``topic`` until ``stop`` is set, or, with
    ``idle_exit``, until that many seconds of polls found nothing new."""
    from kafka import KafkaProducer

    if poll_seconds <= 0:
        raise ValueError(f"poll_seconds must be > 0, got {poll_seconds}")
    result = PublishResult()
    stop = stop or threading.Event()
    if partitions is not None:
        ensure_topics(client_kwargs, {topic: TopicSpec(partitions)})
    own = producer is None
    if own:
        producer = KafkaProducer(
            **client_kwargs, acks="all", linger_ms=5, max_request_size=MAX_REQUEST_BYTES
        )
    waiting = [Path(p) for p in paths]
    followers: list[Follower] = []
    idle = 0.0
    start = time.perf_counter()
    try:
        while not stop.is_set():
            waiting = _open(waiting, followers, format, result)
            sent = sum(_send(producer, topic, f.poll(), result) for f in followers)
            producer.flush()
            idle = 0.0 if sent else idle + poll_seconds
            if idle_exit is not None and idle >= idle_exit:
                break
            if not any(f.behind for f in followers):  # else a large backlog: read on at once
                stop.wait(poll_seconds)
        for f in followers:
            _send(producer, topic, f.close(), result)
        producer.flush()
    finally:
        if own:
            producer.close(timeout=10)
    result.seconds = time.perf_counter() - start
    return result


def _open(
    waiting: list[Path], followers: list[Follower], format: str | None, result: PublishResult
) -> list[Path]:
    still = []
    for path in waiting:
        try:
            if path.is_dir() or (path.exists() and path.stat().st_size > 0):
                followers.append(follow(path, format=format, on_problem=result.problems.append))
                continue
        except ValueError:
            pass  # no known format yet: try again at the next poll
        still.append(path)
    return still


def _send(producer: Any, topic: str, events: list[Any], result: PublishResult) -> int:
    for event in events:
        value = json.dumps(event.to_json_dict(), separators=(",", ":")).encode()
        producer.send(topic, key=event.run_id.encode(), value=value)
    result.events += len(events)
    return len(events)
