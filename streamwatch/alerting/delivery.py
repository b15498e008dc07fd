"""Delivery to one receiver: a worker thread, per-run lanes, retries, the spool.

Every message is appended to the receiver's spool (fsync'd) before it is queued, so nothing
is lost to a crash, a full queue or a receiver that is down. The worker makes one attempt at
a time, taking the next message from :class:`~streamwatch.alerting.lanes.Lanes`: order is
kept per run, and a message waiting for its retry holds up only the later messages of its
own run. A retryable failure (429, 5xx, timeout, connection error) is retried with backoff
and jitter, and every message waits out a receiver's ``Retry-After``; a final one (other
4xx) goes to ``failed.jsonl``. A message that used ``max_attempts`` or ``max_retry_seconds``
on failures that can be its own fault (an HTTP 5xx) while the receiver took other messages
is set aside there too (with its last error); when nothing gets through, or the failures
are the receiver's (429, 503, timeouts, refused connections), the receiver rests
``retry_spooled_after`` seconds and everything stays in the spool. A message id in the
sent-log is never sent again.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from streamwatch.alerting.config import DeliveryConfig
from streamwatch.alerting.lanes import Entry, Lanes, blames_message
from streamwatch.alerting.message import Message
from streamwatch.alerting.notify.http import Notifier, Poster
from streamwatch.alerting.redact import Redactor
from streamwatch.alerting.retry import SendResult, plan_retry
from streamwatch.alerting.spool import FailedLog, SentLog, Spool
from streamwatch.clock import Clock

__all__ = ["Outbox", "Outcome", "ReceiverStatus"]

log = logging.getLogger(__name__)
_ABORT_GRACE = 2.0

Action = Literal["delivered", "failed", "set_aside", "spooled", "skipped"]


@dataclass(frozen=True, slots=True)
class Outcome:
    receiver: str
    message_id: str
    action: Action
    reason: str
    status: int | None = None
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class ReceiverStatus:
    """One receiver at a glance: what went out, what did not, what waits."""

    name: str
    delivered: int
    failed: int  # refused with a final answer (a 4xx)
    set_aside: int  # used its retries while the receiver took other messages
    pending: int
    state: Literal["up", "resting"]

    def __str__(self) -> str:
        rest = " (resting: the receiver is in trouble)" if self.state == "resting" else ""
        return (
            f"{self.name}: {self.delivered} delivered, {self.failed} refused, "
            f"{self.set_aside} set aside, {self.pending} pending{rest}"
        )


class Outbox:
    """The messages of one receiver on their way out."""

    def __init__(
        self,
        name: str,
        notifier: Notifier,
        poster: Poster,
        *,
        spool: Spool,
        sent: SentLog,
        failed: FailedLog,
        policy: DeliveryConfig,
        clock: Clock,
        rng: random.Random,
        redact: Redactor,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.name = name
        self.notifier = notifier
        self.poster = poster
        self.spool = spool
        self.sent = sent
        self.failed = failed
        self.policy = policy
        self.clock = clock
        self.rng = rng
        self.redact = redact
        self.on_outcome = on_outcome
        self.counts: Counter[Action] = Counter()
        self._cond = threading.Condition()
        self._lanes = Lanes()  # at most policy.queue_size messages in memory
        self._known: set[str] = set()  # ids in the spool and not done
        self._spilled = True  # the spool may hold messages that are not in memory
        self._dirty = True
        self._closing = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"alerts-{name}", daemon=True)

    # -- the dispatcher's side --------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def put(self, message: Message) -> bool:
        """Spool and queue a message; False if it was delivered before or is queued already."""
        if message.id in self.sent:
            self._report(Outcome(self.name, message.id, "skipped", "delivered before (sent-log)"))
            return False
        with self._cond:
            if message.id in self._known:
                return False
            self._known.add(message.id)
            kept = self.spool.add(message)  # else said in the log: held in memory only
            self._dirty = True
            if not kept or (not self._spilled and len(self._lanes) < self.policy.queue_size):
                self._lanes.add(message)
            else:
                self._spilled = True
            self._cond.notify_all()
        return True

    def pending(self) -> int:
        with self._cond:
            return len(self._known)

    def status(self) -> ReceiverStatus:
        with self._cond:
            c = self.counts
            state: Literal["up", "resting"] = "resting" if self._lanes.down else "up"
            pending = len(self._known)
            return ReceiverStatus(
                self.name, c["delivered"], c["failed"], c["set_aside"], pending, state
            )

    def close(self, deadline: float) -> int:
        """Deliver what is queued until the monotonic ``deadline``, then stop; what is left
        stays in the spool. Returns the number of messages left there."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(max(0.0, deadline - self.clock.monotonic()))
        if self._thread.is_alive():
            self._stop.set()
            self.poster.abort()
            with self._cond:
                self._cond.notify_all()
            self._thread.join(self.policy.timeout + _ABORT_GRACE)
            if self._thread.is_alive():
                log.warning("receiver %s: a request is still in flight at close", self.name)
        with self._cond:
            left = self._pending_in_spool()
            self.spool.keep_only(left)
            self.spool.close()
            return len(left)

    # -- the worker -------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while (entry := self._next()) is not None:
                self._attempt(entry)
        except Exception as exc:  # a bug must not kill alerting silently: say so
            text = self.redact(str(exc))
            log.error("receiver %s: delivery stopped: %s: %s", self.name, type(exc).__name__, text)

    def _next(self) -> Entry | None:
        with self._cond:
            while not self._stop.is_set():
                if self._spilled and len(self._lanes) <= self.policy.queue_size // 2:
                    self._refill()
                now = self.clock.monotonic()
                entry, wake = self._lanes.pick(now)
                if entry is not None:
                    self._lanes.tried(entry, now)
                    return entry
                if self._closing and (self._lanes.down or not self._known):
                    return None
                if not self._known and self._dirty:  # everything in the spool is done
                    self.spool.keep_only([])
                    self._dirty = False
                self._cond.wait(None if wake is None else max(wake - now, 0.001))
        return None

    def _pending_in_spool(self) -> list[Message]:
        out: dict[str, Message] = {}
        for m in self.spool.load():
            if m.id not in self.sent and m.id not in self.failed:
                out.setdefault(m.id, m)
        return list(out.values())

    def _refill(self) -> None:
        """Compact the spool to what is pending; take into memory, in order, what is not."""
        pending = self._pending_in_spool()
        self.spool.keep_only(pending)
        self._known = {m.id for m in pending}
        room = self.policy.queue_size - len(self._lanes)
        waiting = [m for m in pending if m.id not in self._lanes]
        for m in waiting[:room]:
            self._lanes.add(m)
        self._spilled = len(waiting) > room
        self._dirty = bool(pending)

    def _attempt(self, entry: Entry) -> None:
        message = entry.message
        try:
            request = self.notifier.build(message)
        except Exception as exc:
            why = f"could not build the payload: {type(exc).__name__}: {self.redact(str(exc))}"
            with self._cond:
                self._lanes.remove(entry)
            self._failed(message, None, why, entry.attempts, "failed")
            return
        result = self.poster.post(request)
        if self._stop.is_set() and not result.ok:
            return  # closing: the message stays in the spool
        with self._cond:
            self._settle(entry, result)
            self._cond.notify_all()

    def _settle(self, entry: Entry, result: SendResult) -> None:
        """What one attempt's result means (called under the lock)."""
        message, now = entry.message, self.clock.monotonic()
        elapsed = now - (entry.first_try if entry.first_try is not None else now)
        u = self.rng.random()
        plan = plan_retry(result, attempt=entry.attempts, elapsed=elapsed, policy=self.policy, u=u)
        entry.last_reason, entry.last_status = result.reason, result.status
        if plan.action == "delivered":
            self.sent.add(message, self.clock.now(), result.status)
            self._done(message)
            for bad in self._lanes.delivered(entry, now):
                self._set_aside(bad)
            log.debug("receiver %s: delivered message %s", self.name, message.id)
            self._report(
                Outcome(
                    self.name, message.id, "delivered", plan.reason, result.status, entry.attempts
                )
            )
        elif plan.action == "fail":
            self._lanes.remove(entry)
            self._failed(message, result.status, plan.reason, entry.attempts, "failed")
        elif plan.action == "retry":
            log.info("receiver %s: message %s: %s", self.name, message.id, plan.reason)
            hold = None
            if result.retry_after is not None:
                hold = min(result.retry_after, self.policy.max_retry_after)
            rest = max(plan.delay, self.policy.retry_spooled_after)
            self._lanes.failed(entry, now, plan.delay, hold=hold, rest=rest)
        else:
            self._exhausted(entry, plan.delay, plan.reason, now)

    def _exhausted(self, entry: Entry, delay: float, reason: str, now: float) -> None:
        rest = max(delay, self.policy.retry_spooled_after)
        blame = blames_message(entry.last_status)
        verdict = self._lanes.exhausted(entry, now, rest, blame=blame)
        message = entry.message
        if verdict == "set_aside":
            self._set_aside(entry)
        elif verdict == "down":
            log.warning(
                "receiver %s: resting %.0f s, everything kept in the spool (message %s: %s)",
                self.name,
                rest,
                message.id,
                reason,
            )
            outcome = Outcome(
                self.name, message.id, "spooled", reason, entry.last_status, entry.attempts
            )
            self._report(outcome)
        else:
            log.warning(
                "receiver %s: message %s: %s; the next message of run %s goes on",
                self.name,
                message.id,
                reason,
                message.run_id,
            )

    def _set_aside(self, entry: Entry) -> None:
        why = (
            f"set aside after {entry.attempts} attempt(s) while the receiver took other "
            f"messages: {entry.last_reason}"
        )
        self._failed(entry.message, entry.last_status, why, entry.attempts, "set_aside")

    def _failed(
        self,
        message: Message,
        status: int | None,
        reason: str,
        attempts: int,
        action: Literal["failed", "set_aside"],
    ) -> None:
        if message.id not in self.failed:
            self.failed.add(message, now=self.clock.now(), status=status, reason=reason)
        self._done(message)
        log.error("receiver %s: message %s not delivered: %s", self.name, message.id, reason)
        self._report(Outcome(self.name, message.id, action, reason, status, attempts))

    def _done(self, message: Message) -> None:
        with self._cond:
            self._known.discard(message.id)

    def _report(self, outcome: Outcome) -> None:
        with self._cond:
            self.counts[outcome.action] += 1
        if self.on_outcome is not None:
            self.on_outcome(outcome)
