"""The parts of a running service, put together: clients, outbox, ownership, emission,
commits. :func:`assemble` opens them; :meth:`Parts.close` closes them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from streamwatch.clock import Clock
from streamwatch.engine.monitor import Monitor
from streamwatch.live.checkpoints import Checkpoints
from streamwatch.live.commit import Committer
from streamwatch.live.consumer import Broker, ClientError, Consumer
from streamwatch.live.emit import Emitter
from streamwatch.live.ownership import Listener, Ownership
from streamwatch.live.report import LiveReport
from streamwatch.live.settings import ServiceSettings
from streamwatch.live.status import ServiceCounts, Throttle
from streamwatch.sinks import JsonlSink, Sink
from streamwatch.sinks.kafka import RecordOutbox

__all__ = ["Parts", "assemble"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Parts:
    """What exists only while the service runs."""

    consumer: Consumer
    outbox: RecordOutbox
    ownership: Ownership
    emitter: Emitter
    committer: Committer
    checkpoints: Checkpoints | None
    partitions: dict[str, int] = field(default_factory=dict)  # of the topics it uses

    def close(self) -> None:
        try:
            self.consumer.close()
        except ClientError as exc:
            log.warning("closing the consumer: %s", exc)
        if self.checkpoints is not None:
            self.checkpoints.close()
        self.outbox.close()
        self.emitter.close()


def assemble(
    s: ServiceSettings,
    broker: Broker,
    *,
    monitor: Monitor,
    counts: ServiceCounts,
    clock: Clock,
    sinks: list[Sink],
    extra_sinks: list[Sink],
    throttle: Throttle,
    live: LiveReport | None,
    stop: Callable[[], threading.Event],
) -> Parts:
    """Create the topics and clients, and subscribe. ``sinks`` (the console) gets the JSONL
    file's sink, then ``extra_sinks``."""
    partitions = broker.ensure_topics(s.topic_specs())
    outbox = RecordOutbox(broker.producer())
    try:
        return _assemble(
            s,
            broker,
            partitions,
            outbox,
            sinks,
            extra_sinks,
            monitor=monitor,
            counts=counts,
            clock=clock,
            throttle=throttle,
            live=live,
            stop=stop,
        )
    except BaseException:
        outbox.close()  # what was opened before the failure
        raise


def _assemble(
    s: ServiceSettings,
    broker: Broker,
    partitions: dict[str, int],
    outbox: RecordOutbox,
    sinks: list[Sink],
    extra_sinks: list[Sink],
    *,
    monitor: Monitor,
    counts: ServiceCounts,
    clock: Clock,
    throttle: Throttle,
    live: LiveReport | None,
    stop: Callable[[], threading.Event],
) -> Parts:
    checkpoints = None
    if s.state_topic:
        checkpoints = Checkpoints(
            broker.reader(),
            group=s.group,
            topic=s.topic,
            state_topic=s.state_topic,
            state_partitions=partitions[s.state_topic],
            incidents_topic=s.incidents_topic,
            outbox=outbox,
        )
    jsonl = None
    if s.incidents_out is not None:
        jsonl = JsonlSink(s.incidents_out, append=True)
        sinks.append(jsonl)
    sinks.extend(extra_sinks)
    consumer = broker.consumer(s.group, [s.topic])
    own = Ownership(
        topic=s.topic,
        consumer=consumer,
        monitor=monitor,
        checkpoints=checkpoints,
        incidents_topic=s.incidents_topic,
        incidents_partitions=partitions.get(s.incidents_topic, 1),
        acked=lambda q: outbox.acked.get((s.incidents_topic, q), 0),
        deliver=lambda: committer.deliver(stop()),
    )
    emitter = Emitter(
        s,
        counts,
        sinks=sinks,
        outbox=outbox,
        ownership=own,
        throttle=throttle,
        live=live,
        jsonl=jsonl,
    )
    committer = Committer(
        topic=s.topic,
        partitions=partitions[s.topic],
        interval=s.commit_interval,
        consumer=consumer,
        ownership=own,
        monitor=monitor,
        outbox=outbox,
        checkpoints=checkpoints,
        counts=counts,
        clock=clock,
        flush_file=emitter.flush_file,
    )
    consumer.subscribe(s.topic, Listener(own, committer.flush_on_revoke))
    return Parts(consumer, outbox, own, emitter, committer, checkpoints, partitions)
