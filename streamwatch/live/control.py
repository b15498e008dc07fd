"""The service's side of the control topic: stop requests out, action records back in.

Every action record the service's actor makes becomes one message on the control topic,
keyed by run id (a stop request for a ``stop`` rule that was carried out, a plain record
otherwise), carrying all the run's records so far. When the service takes a partition over,
it reads the control topic's partition (:meth:`ControlChannel.load`) and its actor learns
what the previous owner did, so that a hand-over, a crash or a restart repeats no action.
An action's start (its intent, sent before it runs) is flushed to the brokers at once: a
worker killed while a command runs leaves the start for the next owner to find.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from streamwatch.actions.record import ActionRecord
from streamwatch.client.control import parse, stop_message
from streamwatch.incidents import Incident
from streamwatch.live.consumer import TopicReader
from streamwatch.sinks.kafka import OutRecord, RecordOutbox

__all__ = ["ControlChannel"]

log = logging.getLogger(__name__)
#: seconds to wait for the brokers to hold an action's start before it runs
_START_FLUSH_S = 5.0


class ControlChannel:
    def __init__(
        self,
        topic: str,
        partitions: int,
        *,
        outbox: RecordOutbox,
        reader: TopicReader,
        partition_of: Callable[[str], int],
    ) -> None:
        self.topic = topic
        self.partitions = max(partitions, 1)
        self.outbox = outbox
        self.reader = reader
        self.partition_of = partition_of  # run id -> its metrics partition
        self.sent = 0

    def send(self, record: ActionRecord, inc: Incident, done: list[ActionRecord]) -> None:
        stop = record.do == "stop" and record.status == "done"
        reason = f"{inc.severity.value} {inc.kind} on {inc.indicator}: {inc.message}"
        value = stop_message(
            record.run_id,
            step=record.step,
            reason=reason,
            incident=inc.id,
            record=record.to_dict(),
            done=[r.to_dict() for r in done],
            stop=stop,
        )
        q = self.partition_of(record.run_id) % self.partitions
        self.outbox.send(OutRecord(self.topic, value, record.run_id.encode(), q))
        self.sent += 1
        if record.status == "started" and not self.outbox.flush(_START_FLUSH_S):
            log.warning(
                "the start of action %s on run %s is not on %s yet (the action log holds it)",
                record.key,
                record.run_id,
                self.topic,
            )
        if stop:
            log.warning(
                "stop requested for run %s at step %d: %s", record.run_id, record.step, reason
            )

    def load(self, partition: int) -> list[ActionRecord]:
        """The action records on the control partition of a metrics partition."""
        out: list[ActionRecord] = []
        for message in self.reader.read(self.topic, partition % self.partitions, None):
            body = parse(message.value)
            if body is None:
                continue
            for item in body.get("done", ()):
                try:
                    out.append(ActionRecord.from_dict(item))
                except ValueError as exc:
                    log.warning(
                        "control %s/%d@%d: %s",
                        message.topic,
                        message.partition,
                        message.offset,
                        exc,
                    )
        return out
