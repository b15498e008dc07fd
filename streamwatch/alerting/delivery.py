"""Delivery to one receiver: a queue, a worker thread, retries, the spool.

Every message is appended to the receiver's spool (fsync'd) before it is queued, so nothing
is lost to a crash, a full queue or a receiver that is down. The worker tries messages in
order; a retryable failure (429, 5xx, timeout, connection error) is retried with backoff and
jitter, no sooner than ``Retry-After``; a final one (other 4xx) goes to ``failed.jsonl``; a
message that exhausts ``max_attempts`` or ``max_retry_seconds`` stays in the spool and the
receiver rests for ``retry_spooled_after`` seconds (a ``Retry-After`` beyond that counts),
after which the spool is tried again. A message id in the sent-log is never sent again.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from streamwatch.alerting.config import DeliveryConfig
from streamwatch.alerting.message import Message
from streamwatch.alerting.notify.http import Notifier, Poster
from streamwatch.alerting.redact import Redactor
from streamwatch.alerting.retry import plan_retry
from streamwatch.alerting.spool import FailedLog, SentLog, Spool
from streamwatch.clock import Clock

__all__ = ["Outbox", "Outcome"]

log = logging.getLogger(__name__)
_ABORT_GRACE = 2.0


@dataclass(frozen=True, slots=True)
class Outcome:
    receiver: str
    message_id: str
    action: Literal["delivered", "failed", "spooled", "skipped"]
    reason: str
    status: int | None = None
    attempts: int = 0


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
        self._cond = threading.Condition()
        self._mem: deque[Message] = deque()
        self._known: set[str] = set()  # ids in the spool and not done
        self._spilled = True  # the spool may hold messages that are not in memory
        self._dirty = True
        self._down_until: float | None = None
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
            self.spool.add(message)
            self._dirty = True
            room = len(self._mem) < self.policy.queue_size
            if room and not self._spilled and self._down_until is None:
                self._mem.append(message)
            else:
                self._spilled = True
            self._cond.notify_all()
        return True

    def pending(self) -> int:
        with self._cond:
            return len(self._known)

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
            while (message := self._next()) is not None:
                self._deliver(message)
        except Exception as exc:  # a bug must not kill alerting silently: say so
            text = self.redact(str(exc))
            log.error("receiver %s: delivery stopped: %s: %s", self.name, type(exc).__name__, text)

    def _next(self) -> Message | None:
        with self._cond:
            while not self._stop.is_set():
                if self._down_until is not None:
                    if self._closing:
                        return None
                    left = self._down_until - self.clock.monotonic()
                    if left > 0:
                        self._cond.wait(left)
                        continue
                    self._down_until = None
                    self._spilled = True
                if self._mem:
                    return self._mem.popleft()
                if self._spilled:
                    self._reload()
                    if self._mem:
                        continue
                if self._closing:
                    return None
                if self._dirty:  # everything in the spool is done: empty it
                    self.spool.keep_only([])
                    self._dirty = False
                self._cond.wait()
        return None

    def _pending_in_spool(self) -> list[Message]:
        out: dict[str, Message] = {}
        for m in self.spool.load():
            if m.id not in self.sent and m.id not in self.failed:
                out.setdefault(m.id, m)
        return list(out.values())

    def _reload(self) -> None:
        pending = self._pending_in_spool()
        self.spool.keep_only(pending)
        self._known = {m.id for m in pending}
        cap = self.policy.queue_size
        self._mem = deque(pending[:cap])
        self._spilled = len(pending) > cap
        self._dirty = bool(pending)

    def _deliver(self, message: Message) -> None:
        start = self.clock.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                request = self.notifier.build(message)
            except Exception as exc:
                why = f"could not build the payload: {type(exc).__name__}: {self.redact(str(exc))}"
                self._failed(message, None, why, attempt)
                return
            result = self.poster.post(request)
            if self._stop.is_set() and not result.ok:
                return  # closing: the message stays in the spool
            elapsed = self.clock.monotonic() - start
            u = self.rng.random()
            plan = plan_retry(result, attempt=attempt, elapsed=elapsed, policy=self.policy, u=u)
            if plan.action == "retry":
                log.info("receiver %s: message %s: %s", self.name, message.id, plan.reason)
                if self._stop.wait(plan.delay):
                    return
                continue
            if plan.action == "delivered":
                self.sent.add(message, self.clock.now(), result.status)
                self._done(message)
                log.debug("receiver %s: delivered message %s", self.name, message.id)
            elif plan.action == "fail":
                self._failed(message, result.status, plan.reason, attempt)
                return
            else:
                rest = max(plan.delay, self.policy.retry_spooled_after)
                self._park(rest)
                log.warning(
                    "receiver %s: message %s: %s; kept in the spool, next try in %.0f s",
                    self.name,
                    message.id,
                    plan.reason,
                    rest,
                )
            action: Literal["delivered", "spooled"] = (
                "delivered" if plan.action == "delivered" else "spooled"
            )
            self._report(
                Outcome(self.name, message.id, action, plan.reason, result.status, attempt)
            )
            return

    def _failed(self, message: Message, status: int | None, reason: str, attempts: int) -> None:
        self.failed.add(message, now=self.clock.now(), status=status, reason=reason)
        self._done(message)
        log.error("receiver %s: message %s refused, not retried: %s", self.name, message.id, reason)
        self._report(Outcome(self.name, message.id, "failed", reason, status, attempts))

    def _done(self, message: Message) -> None:
        with self._cond:
            self._known.discard(message.id)

    def _park(self, rest: float) -> None:
        with self._cond:
            self._down_until = self.clock.monotonic() + rest
            self._mem.clear()  # all of it is in the spool
            self._spilled = True

    def _report(self, outcome: Outcome) -> None:
        if self.on_outcome is not None:
            self.on_outcome(outcome)
