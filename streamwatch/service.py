"""The live service: metric events from Kafka through the engine to incident sinks.

One :class:`Service` process runs one :class:`~streamwatch.monitor.Monitor` over the
partitions the consumer group gives it (messages are keyed by run id, so a partition owns
its runs). Each message is decoded (:mod:`streamwatch.sources.kafka`); what cannot be used
goes, unchanged, to the dead-letter topic with the reason. Incident updates go to the
console, an append-only JSONL file, extra sinks and the incidents topic.

Delivery is at-least-once with no loss: consumer offsets are committed (every
``commit_interval`` seconds, at shutdown and at end of input) only after every record sent
for the processed messages is acknowledged and the JSONL file is flushed. At each commit the
state of the runs that changed is checkpointed (:mod:`streamwatch.checkpoints`), so when
partitions move to another process (rebalance, crash, restart) the new owner continues each
run where it was and drops the incident updates the old owner had already published.

This module is the one place that reads the wall clock: the engine gets it through
:class:`Clock` (``tick``), so tests pass a :class:`ManualClock`.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.errors import KafkaError, RetriableError
from pydantic import BaseModel, ConfigDict, Field

from streamwatch.checkpoints import Checkpoints
from streamwatch.config import Config
from streamwatch.events import is_finished
from streamwatch.incidents import Incident, Severity
from streamwatch.monitor import Monitor
from streamwatch.ownership import Listener, Ownership
from streamwatch.replay import Sink
from streamwatch.report.live import LiveReport
from streamwatch.sinks import ConsoleSink, JsonlSink
from streamwatch.sinks.kafka import Outbox, dead_letter_record, incident_record, make_producer
from streamwatch.sources.kafka import DEFAULT_MAX_MESSAGE_BYTES, KafkaConnection, decode_message

__all__ = [
    "Clock",
    "ManualClock",
    "Service",
    "ServiceCounts",
    "ServiceSettings",
    "SystemClock",
]

log = logging.getLogger(__name__)

_LOGGED_PROBLEMS = 20
_SHUTDOWN_GRACE_S = 30.0
_REVOKE_FLUSH_S = 10.0
#: Records awaiting acknowledgement beyond which the loop waits for them before going on.
_MAX_PENDING = 10_000


class Clock(Protocol):
    def time(self) -> float: ...


class SystemClock:
    """The wall clock (unix seconds)."""

    def time(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to: for tests of stall detection."""

    def __init__(self, start: float) -> None:
        self.now = start

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class ServiceSettings(BaseModel):
    """Everything the service needs besides the engine config; validated at start-up."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connection: KafkaConnection
    topic: str = Field("streamwatch.metrics", min_length=1)
    group: str = Field("streamwatch", min_length=1)
    incidents_topic: str = Field("streamwatch.incidents", description="'' for none")
    dead_letter_topic: str = Field("streamwatch.deadletter", description="'' for none")
    state_topic: str = Field("streamwatch.state", description="'' turns checkpoints off")
    partitions: int = Field(4, ge=1, description="for topics the service creates")
    replication_factor: int = Field(-1, description="for topics it creates; -1: broker default")
    incidents_out: Path | None = None
    report_out: Path | None = None  # the HTML report of the watched runs, rewritten...
    report_seconds: float = Field(30.0, gt=0)  # ...this often
    tick_seconds: float = Field(1.0, gt=0)
    status_seconds: float = Field(60.0, gt=0, description="between status lines (rate, lag)")
    commit_interval: float = Field(
        5.0, ge=0, description="seconds between offset commits and checkpoints (0: every batch)"
    )
    max_message_bytes: int = Field(DEFAULT_MAX_MESSAGE_BYTES, ge=64)
    session_timeout_ms: int = Field(10_000, ge=1000)
    fetch_max_wait_ms: int = Field(50, ge=0, description="bounds latency at low load")
    console: bool = True
    console_severity: Severity = Severity.WARNING


@dataclass
class ServiceCounts:
    events: int = 0
    values: int = 0
    dead_letters: int = 0
    problems: int = 0
    incidents: int = 0
    duplicates_dropped: int = 0  # updates a previous owner of the run had published
    skipped: int = 0  # messages already in a restored run's state
    restored_runs: int = 0
    commits: int = 0
    checkpoint_bytes: int = 0
    lag: int = 0  # messages of the owned partitions not yet read, at the last status

    def summary(self) -> str:
        return (
            f"{self.events:,} events, {self.values:,} values, {self.incidents:,} incident "
            f"updates, {self.dead_letters:,} dead letters, {self.problems:,} problems; "
            f"{self.commits:,} commits, {self.restored_runs:,} runs restored, "
            f"{self.skipped:,} messages skipped, {self.duplicates_dropped:,} duplicates dropped"
        )

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(slots=True)
class _Status:
    """Where the last status line left off."""

    at: float
    events: int
    lag: int = 0


class Service:
    """Consume, detect, publish. ``run`` blocks until ``stop`` is set or the input is idle."""

    def __init__(
        self,
        settings: ServiceSettings,
        config: Config | None = None,
        *,
        clock: Clock | None = None,
        sinks: Sequence[Sink] = (),
        console: TextIO | None = None,
    ) -> None:
        self.settings = settings
        self.config = config or Config()
        self.clock: Clock = clock or SystemClock()
        # stalls are judged on ticks of this process's clock only (see _tick): sweeps on event
        # time would compare the clocks of different nodes
        self.monitor = Monitor(self.config, sweep_seconds=math.inf)
        self._heard: dict[str, float] = {}  # run id -> when its last event was received
        self.counts = ServiceCounts()
        self._sinks: list[Sink] = []
        if settings.console:
            self._sinks.append(
                ConsoleSink(console or sys.stdout, min_severity=settings.console_severity)
            )
        self._extra_sinks = list(sinks)
        self._live = (
            LiveReport(
                settings.report_out, config=self.config, refresh_seconds=settings.report_seconds
            )
            if settings.report_out is not None
            else None
        )
        self._jsonl: JsonlSink | None = None
        self._consumer: Any = None
        self._outbox: Outbox | None = None
        self._checkpoints: Checkpoints | None = None
        self._partitions: dict[str, int] = {}
        self._own: Ownership | None = None
        self._next_commit: dict[int, float] = {}
        self._jsonl_dirty = False
        self._logged = 0
        self.started = threading.Event()
        self._stop = threading.Event()

    # -- lifecycle ----------------------------------------------------------------------------
    def run(
        self, stop: threading.Event | None = None, *, max_idle: float | None = None
    ) -> ServiceCounts:
        """Serve until ``stop`` is set (commit and leave) or, with ``max_idle``, until no
        message came for that many seconds: then the input counts as finished, and pending
        steps are judged as a replay does at the end of its files."""
        stop = stop or threading.Event()
        self._stop = stop
        self._open()
        try:
            self.started.set()
            self._loop(stop, max_idle)
        finally:
            self._close()
        return self.counts

    def _open(self) -> None:
        from streamwatch.kafka_tools import TopicSpec, ensure_topics

        s = self.settings
        kwargs = s.connection.client_kwargs()
        specs = {s.topic: TopicSpec(s.partitions, s.replication_factor)}
        if s.incidents_topic:
            specs[s.incidents_topic] = TopicSpec(s.partitions, s.replication_factor)
        if s.dead_letter_topic:
            specs[s.dead_letter_topic] = TopicSpec(s.partitions, s.replication_factor)
        if s.state_topic:
            specs[s.state_topic] = TopicSpec.state(s.partitions, s.replication_factor)
        self._partitions = ensure_topics(kwargs, specs)
        self._outbox = Outbox(make_producer(kwargs))
        if s.state_topic:
            self._checkpoints = Checkpoints(
                kwargs,
                group=s.group,
                topic=s.topic,
                state_topic=s.state_topic,
                state_partitions=self._partitions[s.state_topic],
                incidents_topic=s.incidents_topic,
                outbox=self._outbox,
            )
        if s.incidents_out is not None:
            self._jsonl = JsonlSink(s.incidents_out, append=True)
            self._sinks.append(self._jsonl)
        self._sinks.extend(self._extra_sinks)
        self._consumer = KafkaConsumer(
            **kwargs,
            group_id=s.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=s.fetch_max_wait_ms,
            session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=max(s.session_timeout_ms // 4, 250),
            max_partition_fetch_bytes=max(s.max_message_bytes + 4096, 1_048_576),
            metadata_max_age_ms=30_000,
        )
        # With the topic's partitions known before the first join, the first assignment is
        # not empty (an empty one waits for the next metadata refresh to be corrected).
        self._consumer.partitions_for_topic(s.topic)
        outbox = self._outbox
        self._own = Ownership(
            topic=s.topic,
            consumer=self._consumer,
            monitor=self.monitor,
            checkpoints=self._checkpoints,
            incidents_topic=s.incidents_topic,
            incidents_partitions=self._partitions.get(s.incidents_topic, 1),
            acked=lambda q: outbox.acked.get((s.incidents_topic, q), 0),
            deliver=lambda: self._deliver(self._stop),
        )
        self._consumer.subscribe([s.topic], listener=Listener(self._own, self._flush_producer))
        log.info("consuming %s as group %s", s.topic, s.group)

    def _close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close(autocommit=False)
            except KafkaError as exc:
                log.warning("closing the consumer: %s", exc)
        if self._checkpoints is not None:
            self._checkpoints.close()
        if self._outbox is not None:
            self._outbox.close()
        for sink in self._sinks:
            close = getattr(sink, "close", None)
            if close is not None:
                close()

    def _loop(self, stop: threading.Event, max_idle: float | None) -> None:
        s = self.settings
        poll_ms = max(10, int(min(s.tick_seconds, 0.2) * 1000))
        now = time.monotonic()
        last_message = now
        next_tick = now + s.tick_seconds
        next_report = now + s.report_seconds
        status = _Status(now, self.counts.events)
        own = self._ownership()
        away = False  # the broker could not be reached at the last poll
        while not stop.is_set():
            try:
                batch = self._consumer.poll(timeout_ms=poll_ms)
            except RetriableError as exc:  # the broker restarts, say: the client reconnects
                if not away:
                    log.warning("broker unreachable (%s); polling again until it is back", exc)
                    away = True
                stop.wait(0.2)
                continue
            if away:
                log.info("broker reachable again")
                away = False
            own.apply()
            self.counts.restored_runs = own.restored
            if batch:
                self._process(batch)
                last_message = time.monotonic()
                self._flush_file()
                if self._outbox is not None and len(self._outbox) > _MAX_PENDING:
                    self._deliver(stop)
            now = time.monotonic()
            if now >= next_tick:
                self._tick()
                next_tick = now + s.tick_seconds
            if now - status.at >= s.status_seconds:
                self._status(status, now)
            if self._live is not None and now >= next_report:
                self._live.write()
                next_report = now + s.report_seconds
            due = self._due_for_commit(now)
            if due:
                self._commit(stop, due)
            if max_idle is not None and now - last_message >= max_idle:
                self._end_of_input()
                break
        self._commit(stop)
        if self._live is not None:
            self._live.write()
        log.info("stopped: %s", self.counts.summary())

    def lag(self) -> dict[int, int]:
        """Messages not yet read, per owned partition (from the high watermarks the last
        fetches reported; partitions with nothing fetched yet are left out)."""
        own = self._ownership()
        out = {}
        for p in sorted(own.owned):
            high = self._consumer.highwater(TopicPartition(self.settings.topic, p))
            position = own.position.get(p)
            if high is not None and position is not None:
                out[p] = max(0, high - position)
        return out

    def _status(self, status: _Status, now: float) -> None:
        """A status line; a warning when the unread input is more than a status interval of
        work (incidents come late: a backlog after downtime, or input faster than this
        process can judge)."""
        lag = sum(self.lag().values())
        events = self.counts.events
        rate = (events - status.events) / max(now - status.at, 1e-9)
        runs = self.monitor.runs
        firing = sum(len(r.book.open) for r in runs.values())
        log.info(
            "%.0f events/s over the last %.0f s; %d run(s) watched, %d firing incident(s); "
            "%d messages not yet read",
            rate,
            now - status.at,
            len(runs),
            firing,
            lag,
        )
        if lag and rate > 0 and lag / rate > self.settings.status_seconds:
            log.warning(
                "falling behind: %d messages not yet read (%+d since the last status), about "
                "%.0f s of work at %.0f events/s: incidents come that late. More processes in "
                "group %s share the partitions (up to one per partition)",
                lag,
                lag - status.lag,
                lag / rate,
                rate,
                self.settings.group,
            )
        self.counts.lag = lag
        status.at, status.events, status.lag = now, events, lag

    def _tick(self) -> None:
        """Stall checks: each run's silence since its last event arrived, on this clock."""
        now = self.clock.time()
        runs = self.monitor.runs
        heard = self._heard
        if len(heard) > len(runs):  # runs handed to another process
            self._heard = heard = {r: t for r, t in heard.items() if r in runs}
        for run_id in runs:
            heard.setdefault(run_id, now)  # restored from a checkpoint: silent from now on
        self._emit(self.monitor.tick(now, heard))

    # -- messages -----------------------------------------------------------------------------
    def _process(self, batch: Mapping[Any, list[Any]]) -> None:
        monitor = self.monitor
        counts = self.counts
        heard = self._heard
        received = self.clock.time()
        max_bytes = self.settings.max_message_bytes
        own = self._ownership()
        run_partition = own.run_partition
        skip_below = own.skip_below
        for tp, records in batch.items():
            p = tp.partition
            if p not in own.owned:
                own.take({p})
            position = own.position.get(p)
            if position is not None and records[0].offset < position:
                # Fetched from the committed offset before a kept partition was repositioned.
                done = len(records)
                records = [r for r in records if r.offset >= position]
                self.counts.skipped += done - len(records)
                if not records:
                    continue
            prefix = f"{tp.topic}/{p}@"
            dirty = own.dirty.setdefault(p, set())
            for record in records:
                origin = prefix + str(record.offset)
                decoded = decode_message(record.value, origin, max_bytes=max_bytes)
                event = decoded.event
                if event is None:
                    rejected = decoded.rejected
                    assert rejected is not None
                    self._dead_letter(record, rejected.reason, rejected.detail)
                    continue
                if decoded.problems:
                    self._problems(decoded.problems)
                run_id = event.run_id
                if skip_below and record.offset < skip_below.get(run_id, -1):
                    counts.skipped += 1
                    continue
                run_partition[run_id] = p
                heard[run_id] = received
                dirty.add(run_id)
                counts.events += 1
                counts.values += len(event.metrics)
                updates = monitor.process(event, origin)  # reads the end-of-run marker too
                if self._live is not None:
                    self._live.observe(event)
                if updates:
                    self._emit(updates)
                if event.tags and is_finished(event):
                    self._run_ended(run_id)
            own.position[p] = records[-1].offset + 1
        problems = monitor.drain_problems()
        if problems:
            self._problems(problems)

    def _problems(self, problems: Sequence[Any]) -> None:
        self.counts.problems += len(problems)
        for problem in problems:
            if self._logged < _LOGGED_PROBLEMS:
                self._logged += 1
                log.warning("set aside: %s", problem)

    def _dead_letter(self, record: Any, reason: str, detail: str) -> None:
        self.counts.dead_letters += 1
        if self._logged < _LOGGED_PROBLEMS:
            self._logged += 1
            log.warning(
                "dead letter %s/%d@%d: %s (%s)",
                record.topic,
                record.partition,
                record.offset,
                reason,
                detail,
            )
        topic = self.settings.dead_letter_topic
        if topic and self._outbox is not None:
            self._outbox.send(
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

    def _emit(self, updates: Sequence[Incident]) -> None:
        s = self.settings
        own = self._ownership()
        for inc in updates:
            line = inc.to_json()
            if own.already_published(inc.run_id, line):
                self.counts.duplicates_dropped += 1
                continue
            self.counts.incidents += 1
            for sink in self._sinks:
                sink.send(inc)
            if self._live is not None:
                self._live.incident(inc)
            self._jsonl_dirty = True
            own.changed(inc.run_id)
            if s.incidents_topic and self._outbox is not None:
                q = own.incidents_partition(inc.run_id)
                self._outbox.send(incident_record(inc, s.incidents_topic, q, s.group, line))

    def _run_ended(self, run_id: str) -> None:
        """Tell the sinks that care (the alert dispatcher: no more reminders)."""
        for sink in self._sinks:  # the extra sinks among them
            ended = getattr(sink, "run_ended", None)
            if ended is not None:
                ended(run_id)

    def _end_of_input(self) -> None:
        """The input is over: judge pending steps, end every run (no stall checks after)."""
        self._emit(self.monitor.flush())
        for run_id in list(self.monitor.runs):
            self.monitor.end_run(run_id)
            self._ownership().changed(run_id)

    # -- delivery and commits -----------------------------------------------------------------
    def _deliver(self, stop: threading.Event) -> bool:
        """Wait until every record sent so far is acknowledged (back-pressure while the
        brokers are away); once stopping, give up after a grace period."""
        outbox = self._outbox
        if outbox is None:
            return True
        waited_since = time.monotonic()
        while not outbox.flush(timeout=1.0):
            waiting = time.monotonic() - waited_since
            if stop.is_set() and waiting > _SHUTDOWN_GRACE_S:
                log.error("%d record(s) not acknowledged; offsets not committed", len(outbox))
                return False
            if waiting > 5.0:
                log.warning("waiting %.0f s for the brokers to acknowledge records", waiting)
        self._flush_file()
        return True

    def _ownership(self) -> Ownership:
        assert self._own is not None, "the service is not running"
        return self._own

    def _flush_file(self) -> None:
        if self._jsonl is not None and self._jsonl_dirty:
            self._jsonl.flush()
            self._jsonl_dirty = False

    def _flush_producer(self) -> None:
        """Called on the consumer's network thread when partitions are taken away: what was
        published for them must be on the brokers before their next owner reads it back."""
        if self._outbox is None:
            return
        try:
            self._outbox.producer.flush(timeout=_REVOKE_FLUSH_S)
        except KafkaError as exc:
            log.warning("records not flushed before handing partitions over: %s", exc)

    def _due_for_commit(self, now: float) -> set[int]:
        """Partitions whose commit is due. Each partition has its own schedule, spread over
        the interval, so that a commit checkpoints a share of the runs, not all at once."""
        interval = self.settings.commit_interval
        count = self._partitions[self.settings.topic]
        due: set[int] = set()
        for p in self._ownership().owned:
            at = self._next_commit.get(p)
            if at is None:
                self._next_commit[p] = now + interval * (p % count + 1) / count
            elif at <= now:
                due.add(p)
                self._next_commit[p] = now + interval
        return due

    def _commit(self, stop: threading.Event, only: set[int] | None = None) -> None:
        """Checkpoint and commit what was processed (of ``only`` these partitions)."""
        if not self._deliver(stop):
            return
        topic = self.settings.topic
        own = self._ownership()
        offsets: dict[Any, Any] = {}
        saved: list[int] = []
        partitions = own.owned - own.parked  # parked: being revoked, cannot commit
        for p in sorted(partitions if only is None else partitions & only):
            position = own.position.get(p)
            dirty = own.dirty.get(p)
            if position is None or (position <= own.committed.get(p, -1) and not dirty):
                continue
            if self._checkpoints is not None:
                floor = own.floor(p)
                for run_id in sorted(dirty or ()):
                    if run_id in self.monitor.runs:
                        offset = max(position, own.skip_below.get(run_id, 0))
                        self.counts.checkpoint_bytes += self._checkpoints.save_run(
                            self.monitor, run_id, p, offset, floor
                        )
                self._checkpoints.save_partition(p, position, floor)
            saved.append(p)
            if position > own.committed.get(p, -1):
                offsets[TopicPartition(topic, p)] = OffsetAndMetadata(position, "", -1)
        if not saved or not self._deliver(stop):
            return
        if offsets:
            try:
                self._consumer.commit(offsets)
            except KafkaError as exc:
                log.warning("offset commit failed (%s); the next commit will cover it", exc)
                return
            self.counts.commits += 1
        for p in saved:
            own.dirty.pop(p, None)
        for tp, meta in offsets.items():
            own.committed[tp.partition] = meta.offset
