"""Which partitions of the metrics topic one service process owns, and the runs in them.

The consumer group moves partitions between processes (a process joins, leaves, dies, or
the brokers restart). The consumer reports the changes on its own thread, while the
service's loop waits in ``poll``; :class:`Listener` only queues them, and the loop applies
them (:meth:`Ownership.apply`) before it processes what ``poll`` returned:

* revoked partitions are parked: kept, not processed, until the next assignment says
  whether they come back (a burst that ends with a revocation is a rebalance in progress);
* an assignment keeps the parked partitions it gives back (the consumer is repositioned
  where this process stopped), forgets the others (their runs leave the Monitor) and takes
  the new ones: their runs' checkpoints are installed, the consumer starts after what the
  checkpoints include, and the incident updates the previous owner published after its
  last commit are read back so that they are not published twice. A checkpoint that cannot
  be restored (another snapshot version, a damaged record) is logged and its run starts
  afresh (counted in :attr:`Ownership.fresh`);
* lost partitions (this process was evicted) are forgotten at once.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable

from streamwatch.engine.monitor import Monitor
from streamwatch.live.checkpoints import Checkpoints, Loaded
from streamwatch.live.consumer import Consumer, NotAssigned, Partition

__all__ = ["Listener", "Ownership"]

log = logging.getLogger(__name__)


class Ownership:
    """Partitions held, their runs, positions and unsaved changes; see the module text."""

    def __init__(
        self,
        *,
        topic: str,
        consumer: Consumer,
        monitor: Monitor,
        checkpoints: Checkpoints | None,
        incidents_topic: str,
        incidents_partitions: int,
        acked: Callable[[int], int],
        deliver: Callable[[], object],
    ) -> None:
        self.topic = topic
        self.consumer = consumer
        self.monitor = monitor
        self.checkpoints = checkpoints
        self.incidents_topic = incidents_topic
        self.incidents_partitions = max(incidents_partitions, 1)
        self._acked = acked  # incidents partition -> this process's acknowledged end offset
        self._deliver = deliver
        self._lock = threading.Lock()
        self._events: list[tuple[str, set[int]]] = []
        self._assigning: set[int] | None = None
        self.owned: set[int] = set()
        self.parked: set[int] = set()
        self.run_partition: dict[str, int] = {}
        self.skip_below: dict[str, int] = {}  # a restored run's messages below are in its state
        self.position: dict[int, int] = {}  # next offset to process
        self.committed: dict[int, int] = {}
        self.dirty: dict[int, set[str]] = {}  # runs changed since the last checkpoint
        self.restored = 0
        self.fresh = 0  # runs whose checkpoint could not be restored
        self._published: dict[str, Counter[str]] = {}
        self._floor_at_take: dict[int, int] = {}

    # -- the listener's side (network thread) ----------------------------------------------------
    def queue(self, kind: str, partitions: Iterable[Partition]) -> None:
        ours = {tp.partition for tp in partitions if tp.topic == self.topic}
        with self._lock:
            self._events.append((kind, ours))

    # -- the loop's side ------------------------------------------------------------------------
    def apply(self) -> None:
        """Act on the queued changes, once the last one is an assignment."""
        with self._lock:
            events, self._events = self._events, []
        for kind, partitions in events:
            if kind == "revoked":
                self.parked |= partitions & self.owned
                self._assigning = None
            elif kind == "lost":
                self.drop(partitions)
                self._assigning = None
            else:
                self._assigning = (self._assigning or set()) | partitions
        if not events or events[-1][0] != "assigned" or self._assigning is None:
            return
        assigned, self._assigning = self._assigning, None
        kept = assigned & self.parked
        self.drop(self.parked - assigned)
        self.parked = set()
        for p in sorted(kept):
            position = self.position.get(p)
            if position is not None:
                self._seek(p, position)
        self.take(assigned - self.owned)
        log.info("assigned partitions of %s: %s", self.topic, sorted(self.owned))

    def lag(self) -> dict[int, int]:
        """Messages not yet read, per owned partition (from the high watermarks the last
        fetches reported; partitions with nothing fetched yet are left out)."""
        out = {}
        for p in sorted(self.owned):
            high = self.consumer.highwater(Partition(self.topic, p))
            position = self.position.get(p)
            if high is not None and position is not None:
                out[p] = max(0, high - position)
        return out

    def incidents_partition(self, run_id: str) -> int:
        """Where a run's incident updates go: its own partition number, when counts match."""
        return self.run_partition.get(run_id, 0) % self.incidents_partitions

    def already_published(self, run_id: str, line: str) -> bool:
        """True (once per copy) for an update a previous owner of the run published."""
        seen = self._published.get(run_id)
        if not seen or seen[line] <= 0:
            return False
        seen[line] -= 1
        return True

    def floor(self, p: int) -> int:
        """Incidents-topic offset from which updates published after now can appear."""
        q = p % self.incidents_partitions
        return max(self._acked(q), self._floor_at_take.get(q, 0))

    def changed(self, run_id: str) -> None:
        """A run's state changed outside message processing (a stall, the end of input)."""
        p = self.run_partition.get(run_id)
        if p is not None and p in self.owned:
            self.dirty.setdefault(p, set()).add(run_id)

    def drop(self, partitions: set[int]) -> None:
        """Forget what this process held for partitions another one now owns."""
        gone = partitions & self.owned
        if not gone:
            return
        for run_id in [r for r, p in self.run_partition.items() if p in gone]:
            self.monitor.forget(run_id)
            del self.run_partition[run_id]
            self.skip_below.pop(run_id, None)
            self._published.pop(run_id, None)
        for p in gone:
            self.owned.discard(p)
            self.position.pop(p, None)
            self.committed.pop(p, None)
            self.dirty.pop(p, None)
        log.info("released partitions %s", sorted(gone))

    def take(self, partitions: set[int]) -> None:
        """Become the owner of partitions.

        The partition record of a checkpoint is written just before each offset commit, with
        the same offset, so it is never behind the group's committed offset: the consumer
        starts there (without checkpoints, at the committed offset as usual).
        """
        for p in sorted(partitions):
            loaded = self.checkpoints.load(p) if self.checkpoints is not None else Loaded()
            for cp in loaded.runs.values():
                try:
                    run_id = self.monitor.restore(cp.state)
                except ValueError as exc:  # SnapshotError: another version, damaged bytes
                    log.error(
                        "run %s: checkpoint not restored (%s: %s); the run starts afresh from "
                        "offset %d of partition %d",
                        cp.run_id,
                        type(exc).__name__,
                        exc,
                        cp.offset,
                        p,
                    )
                    self.skip_below[cp.run_id] = cp.offset
                    self.fresh += 1
                    continue
                self.run_partition[run_id] = p
                self.skip_below[run_id] = cp.offset
                self.restored += 1
            start = loaded.committed
            if start is not None:
                self._seek(p, start)
                self.position[p] = start
            # The group's own committed offset may be behind (a commit refused after the
            # checkpoint was written): unknown here, so the next commit is made regardless.
            self.committed[p] = -1
            self.owned.add(p)
            published = self._learn_published(p, loaded, start)
            log.info(
                "took partition %d at offset %s: %d run(s) restored, "
                "%d update(s) already published",
                p,
                start,
                len(loaded.runs),
                published,
            )

    def _seek(self, p: int, offset: int) -> None:
        try:
            self.consumer.seek(Partition(self.topic, p), offset)
        except NotAssigned:  # revoked again meanwhile: the next events say so
            log.info("partition %d is no longer assigned", p)

    def _learn_published(self, p: int, loaded: Loaded, start: int | None) -> int:
        """Read what a previous owner published after its last commit; returns how much."""
        checkpoints = self.checkpoints
        if not self.incidents_topic or checkpoints is None:
            return 0
        q = p % self.incidents_partitions
        end = checkpoints.end_offset(self.incidents_topic, q)
        self._floor_at_take[q] = max(self._floor_at_take.get(q, 0), end)
        window = loaded.window_start()
        if window is None:
            # No owner ever committed here: record where this owner's updates begin, before
            # it publishes any.
            checkpoints.save_partition(p, -1 if start is None else start, end)
            self._deliver()
            return 0
        found = 0
        for run_id, lines in checkpoints.published(q, window).items():
            self._published.setdefault(run_id, Counter()).update(lines)
            found += lines.total()
        return found


class Listener:
    """Runs on the consumer's own thread while the loop waits in ``poll``: flushes what was
    sent (the producer has its own thread) and queues what changed."""

    def __init__(self, ownership: Ownership, flush: Callable[[], None]) -> None:
        self.ownership = ownership
        self.flush = flush

    def on_revoked(self, partitions: set[Partition]) -> None:
        self.flush()  # the next owner reads back what was published for these partitions
        self.ownership.queue("revoked", partitions)

    def on_assigned(self, partitions: set[Partition]) -> None:
        self.ownership.queue("assigned", partitions)

    def on_lost(self, partitions: set[Partition]) -> None:
        self.flush()
        self.ownership.queue("lost", partitions)
