"""The actor: follows firing incidents and the runs' steps, and acts once per incident.

The caller (the live service, ``watch``) gives it every event's run, step and tags with the
incident updates the engine returned for it (:meth:`Actor.see`), updates that came without
an event (:meth:`Actor.track`), and calls :meth:`Actor.poll` now and then for the outcomes of
actions running on the executor's thread and for retries that are due. What these return are
incident updates that carry an ``actions`` entry, for the sinks: "stop requested at step 812".

Every rule acts at most once per incident: what was done (or, in a dry run, would have been,
or failed for good) is an :class:`~streamwatch.actions.record.ActionRecord`, kept here, in the
action log, and given to ``on_record`` (the service writes it to the control topic). A
restarted or new owner learns the records (:meth:`Actor.learn`) and repeats none of them.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from streamwatch.actions.config import ActionRule
from streamwatch.actions.decide import ActDecision, ActReason, decide_action
from streamwatch.actions.execute import (
    ActionFailed,
    Executor,
    Outcome,
    run_command,
    run_signal,
    run_stop_file,
    run_wandb_stop,
    wandb_run_path,
)
from streamwatch.actions.log import ActionLog
from streamwatch.actions.record import ActionRecord, Status, describe
from streamwatch.alerting.config import InhibitConfig
from streamwatch.alerting.silence import SilenceFile
from streamwatch.clock import Clock, SystemClock
from streamwatch.incidents import Incident
from streamwatch.incidents import Status as IncidentStatus

__all__ = ["Actor", "check_rules"]

log = logging.getLogger(__name__)
_KEEP_DONE = 256  # records per run
_KEEP_DECISIONS = 10_000

OnRecord = Callable[[ActionRecord, Incident], None]


def check_rules(rules: Sequence[ActionRule], *, stop: bool, pid: int | None = None) -> None:
    """Raise ValueError for rules this process cannot carry out (named, with what to do)."""
    names = [r.name for r in rules]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"actions: duplicate name(s) {dupes}; give each rule its own name")
    for r in rules:
        if r.do == "stop" and not stop:
            raise ValueError(
                f"action {r.name!r}: do = 'stop' needs the live service (streamwatch run) and "
                "its control topic; beside a local trainer use signal (--stop-pid) or stop_file"
            )
        if r.do == "signal" and r.pid is None and pid is None:
            raise ValueError(f"action {r.name!r}: do = 'signal' needs pid (or --stop-pid PID)")


@dataclass(slots=True)
class _Try:
    rule: ActionRule
    incident: Incident
    step: int
    attempts: int = 0
    due: float | None = None  # monotonic time of the next attempt; None: one is running


@dataclass(slots=True)
class _Run:
    step: int = -1
    tags: dict[str, str] = field(default_factory=dict)
    firing: dict[str, Incident] = field(default_factory=dict)  # incident id -> latest update
    since: dict[str, int] = field(default_factory=dict)  # key -> step it reached the rule
    done: dict[str, ActionRecord] = field(default_factory=dict)
    tries: dict[str, _Try] = field(default_factory=dict)
    said: dict[str, ActReason] = field(default_factory=dict)  # last reason logged, per key


class Actor:
    """See the module documentation. ``dry_run`` forces every rule to a dry run; ``stop``
    says whether a stop request can be sent (``on_record`` sends it); ``pid`` is the
    process a ``signal`` rule without its own pid signals (``watch --stop-pid``)."""

    def __init__(
        self,
        rules: Sequence[ActionRule],
        *,
        action_log: ActionLog | None = None,
        on_record: OnRecord | None = None,
        stop: bool = False,
        pid: int | None = None,
        silences: SilenceFile | None = None,
        inhibit: InhibitConfig | None = None,
        clock: Clock | None = None,
        executor: Executor | None = None,
        dry_run: bool = False,
        max_runs: int = 10_000,
    ) -> None:
        check_rules(rules, stop=stop, pid=pid)
        self.rules = tuple(r.model_copy(update={"dry_run": True}) if dry_run else r for r in rules)
        self.action_log = action_log
        self.on_record = on_record
        self.pid = pid
        self.silences = silences
        self.inhibit = inhibit or InhibitConfig()
        self.clock: Clock = clock or SystemClock()
        self.executor = executor or Executor()
        self.max_runs = max_runs
        self.runs: dict[str, _Run] = {}
        self.records: deque[ActionRecord] = deque(maxlen=_KEEP_DECISIONS)  # made here
        self.decisions: deque[tuple[str, ActDecision]] = deque(maxlen=_KEEP_DECISIONS)
        #: (run id, incident id) -> the updates its check has seen health since it last saw
        #: the failure (``Monitor.healthy_updates``); the caller that owns the engine sets it
        self.probe: Callable[[str, str], int | None] | None = None
        self._pending: dict[str, str] = {}  # key -> run id, of attempts running
        self._waiting: dict[str, str] = {}  # key -> run id, of retries to make
        if action_log is not None:
            self.learn(action_log.records())

    # -- what happened ------------------------------------------------------------------------
    def see(
        self,
        run_id: str,
        step: int,
        tags: Mapping[str, str] | None,
        updates: Sequence[Incident] = (),
    ) -> list[Incident]:
        """One event of the run (its step and tags) and the updates the engine gave for it."""
        self.track(updates)
        if not self.rules:
            return []
        run = self._run(run_id)
        if step > run.step:
            run.step = step
        if tags:
            run.tags.update(tags)
        if not run.since:
            return []
        return self._consider(run_id, run)

    def track(self, updates: Iterable[Incident]) -> None:
        """Incident updates (firing, resolved) to follow."""
        for inc in updates:
            if not self.rules:
                return
            run = self._run(inc.run_id)
            if inc.status is IncidentStatus.FIRING:
                run.firing[inc.id] = inc
                for rule in self.rules:
                    if inc.severity.rank >= rule.min_severity.rank:
                        run.since.setdefault(f"{inc.id}/{rule.name}", inc.step)
            else:
                run.firing.pop(inc.id, None)
                prefix = inc.id + "/"
                for key in [k for k in run.since if k.startswith(prefix)]:
                    del run.since[key]

    def adopt(self, run_id: str, firing: Iterable[Incident]) -> None:
        """A run restored from a checkpoint: its incidents still firing (their steps count
        as the steps they reached their severity)."""
        incidents = list(firing)
        self.track(incidents)
        if incidents and self.rules:
            run = self._run(run_id)
            run.step = max(run.step, *(i.step for i in incidents))

    def learn(self, records: Iterable[ActionRecord]) -> int:
        """Records made before (the action log, another process): never repeated here."""
        n = 0
        for r in records:
            run = self._run(r.run_id)
            if r.key not in run.done:
                self._keep(run, r)
                n += 1
        return n

    def forget(self, run_id: str) -> None:
        """The run is another process's now (its records go with the control topic)."""
        self.runs.pop(run_id, None)

    def end_run(self, run_id: str) -> None:
        """The run finished: nothing more to confirm (what was done stays recorded)."""
        run = self.runs.get(run_id)
        if run is not None:
            run.firing.clear()
            run.since.clear()

    def done(self, run_id: str) -> list[ActionRecord]:
        run = self.runs.get(run_id)
        return [] if run is None else list(run.done.values())

    # -- acting -------------------------------------------------------------------------------
    def poll(self) -> list[Incident]:
        """Outcomes of attempts that ended, and retries that are due."""
        out: list[Incident] = []
        for outcome in self.executor.outcomes():
            update = self._outcome(outcome)
            if update is not None:
                out.append(update)
        if self._waiting:
            now = self.clock.monotonic()
            for key, run_id in list(self._waiting.items()):
                run = self.runs.get(run_id)
                t = run.tries.get(key) if run is not None else None
                if run is None or t is None:
                    del self._waiting[key]
                elif t.due is not None and now >= t.due:
                    del self._waiting[key]
                    self._attempt(key, run, t)
        return out

    def close(self, timeout: float = 10.0) -> list[Incident]:
        """Wait for attempts still running (at most ``timeout``); their outcomes."""
        self.executor.close(timeout)
        return self.poll()

    def _consider(self, run_id: str, run: _Run) -> list[Incident]:
        out: list[Incident] = []
        now = self.clock.now()
        silences = self.silences.current(now) if self.silences is not None else ()
        firing = list(run.firing.values())
        for inc in firing:
            for rule in self.rules:
                key = f"{inc.id}/{rule.name}"
                since = run.since.get(key)
                if since is None or key in run.tries:
                    continue
                decision = decide_action(
                    rule,
                    inc,
                    since=since,
                    step=run.step,
                    tags=run.tags,
                    now=now,
                    silences=silences,
                    run_firing=firing,
                    inhibit=self.inhibit,
                    done=key in run.done,
                    healthy=0 if self.probe is None else self.probe(run_id, inc.id),
                )
                self._say(run, key, inc, decision)
                if decision.act:
                    update = self._start(key, run, rule, inc, decision)
                    if update is not None:
                        out.append(update)
        return out

    def _say(self, run: _Run, key: str, inc: Incident, decision: ActDecision) -> None:
        """Keep the decision; log a blocked action once per reason."""
        if run.said.get(key) is decision.reason:
            return
        run.said[key] = decision.reason
        self.decisions.append((key, decision))
        if decision.reason in (ActReason.SILENCED, ActReason.INHIBITED):
            log.info("action %s on run %s (%s) held back: %s", key, inc.run_id, inc.kind, decision)

    def _start(
        self, key: str, run: _Run, rule: ActionRule, inc: Incident, decision: ActDecision
    ) -> Incident | None:
        if decision.reason is ActReason.DRY_RUN:
            what = self._what(rule, inc, run.step)
            log.warning(
                "dry run: action %s would %s for run %s (%s %s on %s, firing since step %d) "
                "at step %d",
                rule.name,
                what,
                inc.run_id,
                inc.severity.value,
                inc.kind,
                inc.indicator,
                run.since[key],
                run.step,
            )
            return self._finish(run, key, rule, inc, run.step, "dry_run", f"would {what}", 0)
        t = _Try(rule, inc, run.step)
        run.tries[key] = t
        if rule.do == "stop":  # the record is the request: on_record sends it
            del run.tries[key]
            return self._finish(run, key, rule, inc, run.step, "done", "stop requested", 1)
        self._attempt(key, run, t)
        return None

    def _what(self, rule: ActionRule, inc: Incident, step: int) -> str:
        if rule.do == "stop":
            return "request a stop on the control topic"
        if rule.do == "signal":
            target = "process group of pid" if rule.process_group else "pid"
            return f"send {rule.signal} to {target} {rule.pid or self.pid}"
        if rule.do == "command":
            return f"run {rule.command!r}"
        if rule.do == "wandb_stop":
            return self._wandb_what(rule, inc)
        from streamwatch.actions.execute import stop_file_path

        try:
            return f"write {stop_file_path(rule, inc, step)}"
        except ValueError as exc:
            return f"not write the stop file: {exc}"

    def _wandb_what(self, rule: ActionRule, inc: Incident) -> str:
        run = self.runs.get(inc.run_id)
        try:
            return f"stop W&B run {wandb_run_path(rule, inc, run.tags if run else {})}"
        except ActionFailed as exc:
            return f"not stop a W&B run: {exc}"

    def _attempt(self, key: str, run: _Run, t: _Try) -> None:
        t.attempts += 1
        t.due = None
        self._pending[key] = t.incident.run_id
        rule, inc, step = t.rule, t.incident, t.step
        if rule.do == "signal":
            pid = rule.pid or self.pid
            self.executor.submit(key, lambda: run_signal(rule, pid))
        elif rule.do == "command":
            self.executor.submit(key, lambda: run_command(rule, inc, step))
        elif rule.do == "wandb_stop":
            tags = dict(run.tags)
            self.executor.submit(key, lambda: run_wandb_stop(wandb_run_path(rule, inc, tags)))
        else:
            self.executor.submit(key, lambda: run_stop_file(rule, inc, step))

    def _outcome(self, outcome: Outcome) -> Incident | None:
        run_id = self._pending.pop(outcome.key, None)
        run = self.runs.get(run_id) if run_id is not None else None
        t = run.tries.get(outcome.key) if run is not None else None
        if run is None or t is None:
            return None
        if outcome.ok:
            del run.tries[outcome.key]
            log.warning("action %s on run %s: %s", outcome.key, t.incident.run_id, outcome.detail)
            return self._finish(
                run, outcome.key, t.rule, t.incident, t.step, "done", outcome.detail, t.attempts
            )
        left = t.rule.retries + 1 - t.attempts
        log.warning(
            "action %s on run %s failed (attempt %d of %d): %s",
            outcome.key,
            t.incident.run_id,
            t.attempts,
            t.rule.retries + 1,
            outcome.detail,
        )
        if left > 0:
            t.due = self.clock.monotonic() + t.rule.retry_seconds
            self._waiting[outcome.key] = t.incident.run_id
            return None
        del run.tries[outcome.key]
        detail = f"{outcome.detail} (set aside after {t.attempts} attempt(s))"
        return self._finish(
            run, outcome.key, t.rule, t.incident, t.step, "failed", detail, t.attempts
        )

    def _finish(
        self,
        run: _Run,
        key: str,
        rule: ActionRule,
        inc: Incident,
        step: int,
        status: Status,
        detail: str,
        attempts: int,
    ) -> Incident:
        record = ActionRecord(
            run_id=inc.run_id,
            incident_id=inc.id,
            kind=inc.kind,
            rule=rule.name,
            do=rule.do,
            status=status,
            step=step,
            detail=detail,
            attempts=attempts,
            ts=self.clock.now(),
        )
        self._keep(run, record)
        self.records.append(record)
        for what, write in (("log", self._log), ("record", self._record)):
            try:
                write(record, inc)
            except Exception as exc:  # recording must not stop the service either
                log.error("action %s: could not %s it: %s: %s", key, what, type(exc).__name__, exc)
        latest = run.firing.get(inc.id, inc)
        entries = [r.entry() for r in run.done.values() if r.incident_id == inc.id]
        log.info("action %s on run %s: %s", key, inc.run_id, describe(record.entry()))
        return latest.model_copy(update={"actions": entries})

    def _log(self, record: ActionRecord, inc: Incident) -> None:
        if self.action_log is not None:
            self.action_log.add(record)

    def _record(self, record: ActionRecord, inc: Incident) -> None:
        if self.on_record is not None:
            self.on_record(record, inc)

    # -- state --------------------------------------------------------------------------------
    def _run(self, run_id: str) -> _Run:
        run = self.runs.get(run_id)
        if run is None:
            if len(self.runs) >= self.max_runs:  # forget the oldest run with nothing running
                for old, state in self.runs.items():
                    if not state.tries:
                        del self.runs[old]
                        break
            run = self.runs[run_id] = _Run()
        return run

    @staticmethod
    def _keep(run: _Run, record: ActionRecord) -> None:
        run.done[record.key] = record
        while len(run.done) > _KEEP_DONE:
            del run.done[next(iter(run.done))]
