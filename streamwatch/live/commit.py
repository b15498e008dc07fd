"""The commit protocol: checkpoint, flush, commit offsets, in that order.

Delivery is at-least-once with no loss: a partition's offset is committed only after every
record sent for its processed messages (incident updates, dead letters, the checkpoints of
its changed runs) is acknowledged by the brokers and the incidents file is flushed. Each
partition has its own schedule, spread over ``commit_interval``, so that a commit
checkpoints a share of the runs, not all of them at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from streamwatch.clock import Clock
from streamwatch.engine.monitor import Monitor
from streamwatch.live.checkpoints import Checkpoints
from streamwatch.live.consumer import ClientError, Consumer, Partition
from streamwatch.live.ownership import Ownership
from streamwatch.live.status import ServiceCounts
from streamwatch.sinks.kafka import RecordOutbox

__all__ = ["SHUTDOWN_GRACE_S", "Committer"]

log = logging.getLogger(__name__)

#: Once stopping, how long to wait for the brokers to acknowledge what was sent.
SHUTDOWN_GRACE_S = 30.0
_SLOW_ACK_S = 5.0
_REVOKE_FLUSH_S = 10.0


class Committer:
    """Commits the processed offsets of the owned partitions, with their checkpoints."""

    def __init__(
        self,
        *,
        topic: str,
        partitions: int,
        interval: float,
        consumer: Consumer,
        ownership: Ownership,
        monitor: Monitor,
        outbox: RecordOutbox,
        checkpoints: Checkpoints | None,
        counts: ServiceCounts,
        clock: Clock,
        flush_file: Callable[[], None],
    ) -> None:
        self.topic = topic
        self.partitions = max(partitions, 1)
        self.interval = interval
        self.consumer = consumer
        self.ownership = ownership
        self.monitor = monitor
        self.outbox = outbox
        self.checkpoints = checkpoints
        self.counts = counts
        self.clock = clock
        self.flush_file = flush_file
        self._next: dict[int, float] = {}
        #: when (monotonic) a commit last left its partitions committed (or it was made)
        self.last_commit = clock.monotonic()

    def deliver(self, stop: threading.Event) -> bool:
        """Wait until every record sent so far is acknowledged (back-pressure while the
        brokers are away); once stopping, give up after a grace period."""
        outbox = self.outbox
        since = self.clock.monotonic()
        while not outbox.flush(timeout=1.0):
            waiting = self.clock.monotonic() - since
            if stop.is_set() and waiting > SHUTDOWN_GRACE_S:
                log.error("%d record(s) not acknowledged; offsets not committed", len(outbox))
                return False
            if waiting > _SLOW_ACK_S:
                log.warning("waiting %.0f s for the brokers to acknowledge records", waiting)
        self.flush_file()
        return True

    def flush_on_revoke(self) -> None:
        """Called on the consumer's thread when partitions are taken away: what was
        published for them must be on the brokers before their next owner reads it back."""
        error = self.outbox.flush_sent(timeout=_REVOKE_FLUSH_S)
        if error is not None:
            log.warning("records not flushed before handing partitions over: %s", error)

    def due(self, now: float) -> set[int]:
        """Partitions whose commit is due at ``now`` (monotonic seconds)."""
        due: set[int] = set()
        for p in self.ownership.owned:
            at = self._next.get(p)
            if at is None:
                self._next[p] = now + self.interval * (p % self.partitions + 1) / self.partitions
            elif at <= now:
                due.add(p)
                self._next[p] = now + self.interval
        return due

    def commit(self, stop: threading.Event, only: set[int] | None = None) -> None:
        """Checkpoint and commit what was processed (of ``only`` these partitions)."""
        if not self.deliver(stop):
            return
        own = self.ownership
        offsets: dict[Partition, int] = {}
        saved: list[int] = []
        partitions = own.owned - own.parked  # parked: being revoked, cannot commit
        for p in sorted(partitions if only is None else partitions & only):
            position = own.position.get(p)
            dirty = own.dirty.get(p)
            if position is None or (position <= own.committed.get(p, -1) and not dirty):
                continue
            self._checkpoint(p, position, dirty or set())
            saved.append(p)
            if position > own.committed.get(p, -1):
                offsets[Partition(self.topic, p)] = position
        if not saved:
            self.last_commit = self.clock.monotonic()  # nothing new to commit: up to date
            return
        if not self.deliver(stop):
            return
        if offsets:
            try:
                self.consumer.commit(offsets)
            except ClientError as exc:
                log.warning("offset commit failed (%s); the next commit will cover it", exc)
                return
            self.counts.commits += 1
        self.last_commit = self.clock.monotonic()
        for p in saved:
            own.dirty.pop(p, None)
        for tp, offset in offsets.items():
            own.committed[tp.partition] = offset

    def _checkpoint(self, p: int, position: int, dirty: set[str]) -> None:
        """Queue the state of the partition's changed runs, then its partition record."""
        if self.checkpoints is None:
            return
        own = self.ownership
        floor = own.floor(p)
        for run_id in sorted(dirty):
            if run_id in self.monitor.runs:
                offset = max(position, own.skip_below.get(run_id, 0))
                self.counts.checkpoint_bytes += self.checkpoints.save_run(
                    self.monitor, run_id, p, offset, floor
                )
        self.checkpoints.save_partition(p, position, floor)
