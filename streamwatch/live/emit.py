"""Where the service's output goes: incident updates to the sinks and the incidents topic
(each update once, across hand-overs), unusable records to the dead-letter topic, problems
to the log.

An update that a previous owner of the run already published (see
:mod:`streamwatch.live.ownership`) is dropped here and counted; every other one goes to each
sink, the live report and the incidents topic, keyed by run id.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from streamwatch.events import Problem
from streamwatch.incidents import Incident
from streamwatch.live.consumer import Record
from streamwatch.live.ownership import Ownership
from streamwatch.live.report import LiveReport
from streamwatch.live.settings import ServiceSettings
from streamwatch.live.status import ServiceCounts, Throttle
from streamwatch.sinks import JsonlSink, Sink
from streamwatch.sinks.kafka import RecordOutbox, dead_letter_record, incident_record

__all__ = ["Emitter"]

log = logging.getLogger(__name__)


class Emitter:
    """Sends what the engine and the decoder give; counts it in ``counts``."""

    def __init__(
        self,
        settings: ServiceSettings,
        counts: ServiceCounts,
        *,
        sinks: Sequence[Sink],
        outbox: RecordOutbox,
        ownership: Ownership,
        throttle: Throttle,
        live: LiveReport | None = None,
        jsonl: JsonlSink | None = None,
    ) -> None:
        self.settings = settings
        self.counts = counts
        self.sinks = list(sinks)
        self.outbox = outbox
        self.ownership = ownership
        self.throttle = throttle
        self.live = live
        self.jsonl = jsonl
        self._jsonl_dirty = False

    def incidents(self, updates: Sequence[Incident]) -> None:
        s = self.settings
        own = self.ownership
        for inc in updates:
            line = inc.to_json()
            if own.already_published(inc.run_id, line):
                self.counts.duplicates_dropped += 1
                continue
            self.counts.incidents += 1
            self.counts.incidents_by_kind[inc.kind, inc.severity.value, inc.status.value] += 1
            for sink in self.sinks:
                sink.send(inc)
            if self.live is not None:
                self.live.incident(inc)
            self._jsonl_dirty = True
            own.changed(inc.run_id)
            if s.incidents_topic:
                q = own.incidents_partition(inc.run_id)
                self.outbox.send(incident_record(inc, s.incidents_topic, q, s.group, line))

    def problems(self, problems: Sequence[Problem], stage: str) -> None:
        """Values set aside at ``stage`` ("decoding" or "engine")."""
        self.counts.problems += len(problems)
        self.counts.problems_by_stage[stage] += len(problems)
        for problem in problems:
            self.throttle.warning("set aside: %s", problem)

    def dead_letter(self, record: Record, reason: str, detail: str) -> None:
        """``record`` unchanged to the dead-letter topic, with why and where it came from."""
        self.counts.dead_letters += 1
        self.counts.dead_letters_by_reason[reason] += 1
        self.throttle.warning(
            "dead letter %s/%d@%d: %s (%s)",
            record.topic,
            record.partition,
            record.offset,
            reason,
            detail,
        )
        topic = self.settings.dead_letter_topic
        if topic:
            self.outbox.send(
                dead_letter_record(
                    topic,
                    value=record.value,
                    key=record.key,
                    reason=reason,
                    detail=detail,
                    source_topic=record.topic,
                    partition=record.partition,
                    offset=record.offset,
                )
            )

    def run_ended(self, run_id: str) -> None:
        """Tell the sinks that care (the alert dispatcher: no more reminders)."""
        for sink in self.sinks:
            ended = getattr(sink, "run_ended", None)
            if ended is not None:
                ended(run_id)

    def flush_file(self) -> None:
        if self.jsonl is not None and self._jsonl_dirty:
            self.jsonl.flush()
            self._jsonl_dirty = False

    def close(self) -> None:
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if close is not None:
                close()
