"""The alert dispatcher: the ``send(inc)``/``close()`` sink the engine's callers use.

``send`` only appends to an in-memory intake (when that is full, to ``intake.jsonl``: never
dropped, never waiting on a receiver). A scheduler thread routes each update, groups it, and
when a group is due decides on every update (silences, inhibition, resolve notices), splits
the rest at ``group_max`` and hands the messages to each receiver's :class:`Outbox`, whose
worker delivers them. :meth:`Dispatcher.close` flushes every group at once and returns when
every message is delivered or spooled (or the timeout is up: then they are all spooled).
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from streamwatch.alerting.config import AlertingConfig, Receiver
from streamwatch.alerting.decide import Decision, Reason, decide_update
from streamwatch.alerting.delivery import Outbox, Outcome, ReceiverStatus
from streamwatch.alerting.group import Batch, GroupBook, RepeatBook, split
from streamwatch.alerting.inhibit import FiringSet
from streamwatch.alerting.lock import StateLock
from streamwatch.alerting.message import Message
from streamwatch.alerting.notify.discord import DiscordNotifier
from streamwatch.alerting.notify.email import EmailNotifier, SmtpPoster
from streamwatch.alerting.notify.http import HttpPoster, Notifier, Poster
from streamwatch.alerting.notify.proxy import describe
from streamwatch.alerting.notify.slack import SlackNotifier
from streamwatch.alerting.notify.webhook import WebhookNotifier
from streamwatch.alerting.redact import Redactor, safe_url
from streamwatch.alerting.route import receivers_for
from streamwatch.alerting.silence import Silence, SilenceFile
from streamwatch.alerting.spool import FailedLog, IncidentSpill, SentLog, Spool
from streamwatch.clock import Clock, SystemClock
from streamwatch.incidents import Incident, Status

__all__ = ["CloseReport", "DecisionRecord", "Dispatcher"]

log = logging.getLogger(__name__)
_KEEP_RECORDS = 10_000
_KEEP_ENDED = 10_000  # finished runs remembered (reminders off)
_MAX_SLEEP = 0.5


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    receiver: str
    incident: Incident
    decision: Decision


@dataclass(slots=True)
class CloseReport:
    delivered: int = 0
    failed: int = 0
    skipped: int = 0
    spooled: int = 0
    state_dir: str = ""
    set_aside: int = 0

    def __str__(self) -> str:
        aside = f", {self.set_aside} set aside" if self.set_aside else ""
        return (
            f"alerts: {self.delivered} message(s) delivered, {self.failed} refused{aside}, "
            f"{self.skipped} skipped as sent before, {self.spooled} left in the spool "
            f"({self.state_dir})"
        )


@dataclass(slots=True)
class DispatchStats:
    received: int = 0
    spilled: int = 0
    unrouted: int = 0
    messages: int = 0
    muted: Counter[Reason] = field(default_factory=Counter)  # updates not notified, by why
    outcomes: Counter[str] = field(default_factory=Counter)


def _notifier(receiver: Receiver, config: AlertingConfig) -> Notifier:
    if receiver.type == "slack":
        return SlackNotifier(receiver, config.templates)
    if receiver.type == "discord":
        return DiscordNotifier(receiver, config.templates)
    if receiver.type == "email":
        return EmailNotifier(receiver, config.templates)
    return WebhookNotifier(receiver, config.templates, config.external_url)


def _redactor(receiver: Receiver) -> Redactor:
    secrets = [s.get_secret_value() for s in (receiver.secret, receiver.password) if s is not None]
    urls = [] if receiver.type == "email" else [receiver.url.get_secret_value()]
    return Redactor(urls, secrets)


class Dispatcher:
    """Routes, groups, mutes and delivers incident updates; never blocks its caller.

    ``clock`` gives ``now`` to the decisions (group_wait, reminders, silences); delivery
    timing (timeouts, backoff, Retry-After) uses ``delivery_clock``, the real one by default.
    ``rng`` draws the backoff jitter (seed it for repeatable tests). With
    ``background=False`` no scheduler thread runs and the caller calls :meth:`poll` (tests on
    a :class:`~streamwatch.clock.ManualClock`). ``posters`` replaces the HTTP poster
    of the named receivers (a custom transport).
    """

    def __init__(
        self,
        config: AlertingConfig,
        *,
        state_dir: str | Path | None = None,
        clock: Clock | None = None,
        delivery_clock: Clock | None = None,
        rng: random.Random | None = None,
        background: bool = True,
        posters: Mapping[str, Poster] | None = None,
    ) -> None:
        self.config = config
        self.state_dir = Path(state_dir if state_dir is not None else config.state_dir)
        self.clock = clock or SystemClock()
        self._dclock = delivery_clock or SystemClock()
        self.routes = config.effective_routes()
        self.receivers = {r.name: r for r in config.receivers}
        self.groups = GroupBook(config.group_by, config.group_wait)
        self.repeats = RepeatBook()
        self.firing = FiringSet()
        silences_path = (
            Path(config.silences_file)
            if config.silences_file is not None
            else self.state_dir / "silences.json"
        )
        self.silences = SilenceFile(silences_path)
        self.decisions: deque[DecisionRecord] = deque(maxlen=_KEEP_RECORDS)
        self.outcomes: deque[Outcome] = deque(maxlen=_KEEP_RECORDS)
        self.stats = DispatchStats()
        self._rng = rng or random.Random()

        self._lock = StateLock(self.state_dir)  # raises StateDirInUse: one process a dir
        try:
            self._open_state(config, posters)
        except BaseException:
            self._lock.release()
            raise
        for outbox in self.outboxes.values():
            outbox.start()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._loop, name="alerts-dispatch", daemon=True)
            self._thread.start()

    def _open_state(self, config: AlertingConfig, posters: Mapping[str, Poster] | None) -> None:
        self._sent = SentLog(self.state_dir / "sent.jsonl", config.delivery.sent_log_keep)
        self._failed = FailedLog(self.state_dir / "failed.jsonl", config.delivery.failed_log_keep)
        self._spill = IncidentSpill(self.state_dir / "intake.jsonl")
        self.outboxes = {
            r.name: self._outbox(r, (posters or {}).get(r.name)) for r in config.receivers
        }
        self._warn_orphan_spools()
        self._intake: deque[Incident] = deque(self._spill.take())
        # runs that said they finished -> updates queued by then: reminders stop once routing
        # has reached that point, and a later firing update (the run goes on) lifts it
        self._ended: dict[str, int] = {}
        self._queued = len(self._intake)  # updates taken in, in order
        self._routed = 0  # ...and routed, in the same order
        self._cond = threading.Condition()
        self._state = threading.RLock()
        self._spilling = False
        self._closed = False
        self._stopping = False
        self._report: CloseReport | None = None

    def _outbox(self, receiver: Receiver, poster: Poster | None) -> Outbox:
        redact = _redactor(receiver)
        timeout = receiver.timeout or self.config.delivery.timeout
        url = receiver.url.get_secret_value()
        if poster is None and receiver.type == "email":
            poster = SmtpPoster(receiver, timeout=timeout, redactor=redact, clock=self._dclock)
            via = "SMTP" + (" with STARTTLS" if receiver.starttls else "")
        elif poster is None:
            http = HttpPoster(url, timeout=timeout, redactor=redact, clock=self._dclock)
            via = describe(http.proxy)
            poster = http
        else:
            via = "a custom poster"
        log.info(
            "alerting: receiver %s (%s) -> %s (%s)",
            receiver.name,
            receiver.type,
            safe_url(url),
            via,
        )
        return Outbox(
            receiver.name,
            _notifier(receiver, self.config),
            poster,
            spool=Spool(self.state_dir / "spool" / f"{receiver.name}.jsonl"),
            sent=self._sent,
            failed=self._failed,
            policy=self.config.delivery,
            clock=self._dclock,
            rng=self._rng,
            redact=redact,
            on_outcome=self._on_outcome,
        )

    def _warn_orphan_spools(self) -> None:
        for path in sorted((self.state_dir / "spool").glob("*.jsonl")):
            if path.stem not in self.receivers and path.stat().st_size > 0:
                log.warning(
                    "alerting: %s holds messages for receiver %s, which is not configured; "
                    "they stay there until it is",
                    path,
                    path.stem,
                )

    # -- the engine's side ------------------------------------------------------------------
    def send(self, inc: Incident) -> None:
        """Take an incident update; returns at once (the intake is memory, or the spill file)."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the alert dispatcher is closed")
            self.stats.received += 1
            self._queued += 1
            if not self._spilling and len(self._intake) < self.config.delivery.intake_size:
                self._intake.append(inc)
                self._cond.notify()
                return
            self._spilling = True
            self.stats.spilled += 1
            if not self._spill.add(inc):  # the disk did not take it (said): kept in memory
                self._intake.append(inc)
                self._cond.notify()

    def run_ended(self, run_id: str) -> None:
        """The run finished (its end-of-run marker): its incidents still firing are not
        reminded of any more. Updates sent before this call are handled as usual."""
        with self._cond:
            self._ended.pop(run_id, None)
            self._ended[run_id] = self._queued
            while len(self._ended) > _KEEP_ENDED:
                del self._ended[next(iter(self._ended))]
            self._cond.notify()

    def close(self, timeout: float = 30.0) -> CloseReport:
        """Flush every group now and deliver; returns when all is delivered or spooled."""
        deadline = self._dclock.monotonic() + timeout
        with self._cond:
            if self._report is not None:
                return self._report
            self._closed = self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - self._dclock.monotonic()))
        with self._state:
            now = self.clock.now()
            self._drain(now)
            silences = self.silences.current(now)
            for batch in self.groups.flush_all():
                self._emit(batch, now, silences)
        left = sum(outbox.close(deadline) for outbox in self.outboxes.values())
        for f in (self._spill, self._sent, self._failed):
            f.close()
        self._lock.release()
        counts = self.stats.outcomes
        report = CloseReport(
            counts["delivered"],
            counts["failed"],
            counts["skipped"],
            left,
            str(self.state_dir),
            counts["set_aside"],
        )
        self._report = report
        log.info("%s", report)
        return report

    def status(self) -> list[ReceiverStatus]:
        """Per receiver: delivered, refused, set aside, pending, resting or not."""
        return [outbox.status() for outbox in self.outboxes.values()]

    def status_line(self) -> str:
        """One line for a service's status log, e.g. ``alerts: slack: 12 delivered, ...``."""
        return "alerts: " + "; ".join(str(s) for s in self.status())

    # -- the scheduler ----------------------------------------------------------------------
    def poll(self) -> None:
        """One scheduler step at ``clock.now()``: route what came in, send what is due."""
        with self._state:
            now = self.clock.now()
            self._drain(now)
            silences = self.silences.current(now)
            for batch in self.groups.due(now):
                self._emit(batch, now, silences)
            with self._cond:
                ended = {r for r, at in self._ended.items() if self._routed >= at}
            if ended:
                self.repeats.drop_runs(ended)
            for batch in self.repeats.due(now, self.config.repeat_interval):
                self._remind(batch, now, silences)

    def _loop(self) -> None:
        while True:
            sleep = self._sleep_for()
            with self._cond:
                if not self._intake and not self._stopping:
                    self._cond.wait(sleep)
                stopping = self._stopping
            try:
                self.poll()
            except Exception as exc:  # keep alerting alive; say what broke
                log.error("alert dispatcher step failed: %s: %s", type(exc).__name__, exc)
            if stopping:
                return

    def _sleep_for(self) -> float:
        with self._state:
            now = self.clock.now()
            nexts = [self.groups.next_due(), self.repeats.next_due(self.config.repeat_interval)]
        soonest = min((t for t in nexts if t is not None), default=now + _MAX_SLEEP)
        return min(max(soonest - now, 0.005), _MAX_SLEEP)

    def _drain(self, now: float) -> None:
        while True:
            with self._cond:
                batch = list(self._intake)
                self._intake.clear()
                if not batch and self._spilling:
                    batch = self._spill.take()
                    self._spilling = False
            if not batch:
                return
            for inc in batch:
                self._route(inc, now)
            with self._cond:
                for inc in batch:
                    self._routed += 1
                    at = self._ended.get(inc.run_id)
                    if at is not None and self._routed > at and inc.status is Status.FIRING:
                        del self._ended[inc.run_id]  # fired after its end: the run goes on

    def _route(self, inc: Incident, now: float) -> None:
        self.firing.observe(inc, now)
        targets = receivers_for(inc, self.routes)
        if not targets:
            self.stats.unrouted += 1
            self._decided("-", inc, Decision(False, Reason.NO_ROUTE, "no route matched"))
        for route_index, receiver in targets:
            self.groups.add(receiver, route_index, inc, now)

    # -- decisions -> messages ----------------------------------------------------------------
    def _decide(
        self, receiver: str, inc: Incident, now: float, silences: list[Silence]
    ) -> Decision:
        return decide_update(
            inc,
            now=now,
            silences=silences,
            run_firing=self.firing.of_run(inc.run_id),
            inhibit=self.config.inhibit,
            firing_notified=self.repeats.notified(receiver, inc.id),
            send_resolved=self.receivers[receiver].send_resolved,
        )

    def _emit(self, batch: Batch, now: float, silences: list[Silence]) -> None:
        kept: list[Incident] = []
        for inc in batch.updates:
            decision = self._decide(batch.receiver, inc, now, silences)
            self._decided(batch.receiver, inc, decision)
            if inc.status is Status.RESOLVED:
                self.repeats.drop(batch.receiver, inc.id)
            elif decision.notify:
                self.repeats.record_firing(batch, inc, now)
            if decision.notify:
                kept.append(inc)
        self._post(batch, kept, now)

    def _remind(self, batch: Batch, now: float, silences: list[Silence]) -> None:
        kept: list[Incident] = []
        for inc in batch.updates:
            if not self.firing.is_firing(inc):
                self.repeats.drop(batch.receiver, inc.id)
                continue
            decision = self._decide(batch.receiver, inc, now, silences)
            if decision.notify:
                why = f"reminder {batch.repeat}: still firing"
                decision = Decision(True, Reason.REMINDER, why)
                kept.append(inc)
            self._decided(batch.receiver, inc, decision)
            self.repeats.reminded(batch.receiver, inc.id, now)
        self._post(batch, kept, now)

    def _post(self, batch: Batch, kept: list[Incident], now: float) -> None:
        chunks = split(kept, self.config.group_max)
        for n, chunk in enumerate(chunks, 1):
            starts = {i.id: s for i in chunk if (s := self.firing.since(i.id)) is not None}
            message = Message.build(
                batch.receiver,
                batch.group_key,
                batch.labels,
                tuple(chunk),
                repeat=batch.repeat,
                created=now,
                part=(n, len(chunks)),
                starts=starts,
            )
            self.stats.messages += 1
            self.outboxes[batch.receiver].put(message)

    def _decided(self, receiver: str, inc: Incident, decision: Decision) -> None:
        self.decisions.append(DecisionRecord(receiver, inc, decision))
        if not decision.notify:
            self.stats.muted[decision.reason] += 1
        log.debug(
            "alert %s %s %s -> %s: %s",
            inc.run_id,
            inc.kind,
            inc.status.value,
            receiver,
            decision,
        )

    def _on_outcome(self, outcome: Outcome) -> None:
        with self._cond:
            self.outcomes.append(outcome)
            self.stats.outcomes[outcome.action] += 1
