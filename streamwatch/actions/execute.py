"""Carrying actions out: a signal, a shell command, a stop file; on a worker thread.

Each ``run_*`` function does one attempt and returns what it did, or raises
:class:`ActionFailed` saying why. :class:`Executor` runs attempts on a small pool of daemon
threads, one at a time per run (a command may take its whole timeout; neither the caller's
loop nor another run's actions must wait for it) and hands the outcomes back when asked: an
action never raises into, or stops, the process that acts.

>>> import os, signal, tempfile
>>> from streamwatch.actions.config import ActionRule
>>> from streamwatch.incidents import Incident
>>> inc = Incident(id="a1", run_id="grpo-7", kind="entropy_collapse", severity="critical",
...     status="firing", indicator="entropy", metric="actor/entropy", step=800, message="m")
>>> d = tempfile.mkdtemp()
>>> rule = ActionRule(do="stop_file", path=d + "/{run_id}.stop")
>>> run_stop_file(rule, inc, 812).startswith("wrote ")
True
>>> run_command(ActionRule(do="command", command="exit 3"), inc, 812)
Traceback (most recent call last):
...
streamwatch.actions.execute.ActionFailed: exit status 3
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streamwatch.actions.args import MAX_CONCURRENT
from streamwatch.actions.config import ActionRule
from streamwatch.incidents import Incident
from streamwatch.names import file_name, for_env, path_inside, template_directory

__all__ = [
    "ACTION_ID_ENV",
    "MAX_CONCURRENT",
    "ActionFailed",
    "Executor",
    "Outcome",
    "incident_env",
    "run_command",
    "run_signal",
    "run_stop_file",
]

log = logging.getLogger(__name__)
_OUTPUT_CHARS = 2000  # of a command's output, logged
_KEEP_OUTCOMES = 10_000


class ActionFailed(Exception):
    """One attempt failed; the message says why (no traceback needed)."""


#: The prefix of the variables a command action gets (:func:`incident_env`).
INCIDENT_ENV_PREFIX = "STREAMWATCH_INCIDENT_"


def run_signal(rule: ActionRule, pid: int | None) -> str:
    if pid is None:
        raise ActionFailed("no pid to signal (give pid in the rule, or --stop-pid)")
    try:
        if rule.process_group:
            group = os.getpgid(pid)
            os.killpg(group, rule.signum)
            return f"{rule.signal} sent to process group {group} (of pid {pid})"
        os.kill(pid, rule.signum)
    except ProcessLookupError:
        raise ActionFailed(f"no process {pid}") from None
    except PermissionError:
        raise ActionFailed(f"not allowed to signal process {pid}") from None
    return f"{rule.signal} sent to pid {pid}"


def incident_env(inc: Incident, step: int) -> dict[str, str]:
    """The incident's main fields as environment variables for a command, all named
    ``STREAMWATCH_INCIDENT_*``: no option of any command reads such a variable, so a command
    that calls ``streamwatch`` again is not configured by the incident. Values pass
    through :func:`~streamwatch.names.for_env` (a NUL would keep the command from starting)."""
    return {
        f"{INCIDENT_ENV_PREFIX}{name}": for_env(value)
        for name, value in (
            ("ID", inc.id),
            ("RUN_ID", inc.run_id),
            ("KIND", inc.kind),
            ("SEVERITY", inc.severity.value),
            ("INDICATOR", inc.indicator),
            ("METRIC", inc.metric),
            ("STEP", str(inc.step)),
            ("ACTION_STEP", str(step)),
            ("MESSAGE", inc.message),
        )
    }


#: The variable that gives a command its action's stable id (the same on a retry).
ACTION_ID_ENV = "STREAMWATCH_ACTION_ID"


def run_command(rule: ActionRule, inc: Incident, step: int, action_id: str = "") -> str:
    """The rule's shell command, the incident as JSON on stdin, its fields and the action's
    stable id (``STREAMWATCH_ACTION_ID``) in the environment; killed (its whole process
    group) after ``timeout`` seconds."""
    assert rule.command is not None
    env = {**os.environ, **incident_env(inc, step), ACTION_ID_ENV: for_env(action_id)}
    try:
        proc = subprocess.Popen(
            rule.command,
            shell=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        raise ActionFailed(f"cannot start the command: {exc}") from exc
    try:
        out, _ = proc.communicate(inc.to_json().encode(), timeout=rule.timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ActionFailed(f"timed out after {rule.timeout:g} s (killed)") from None
    text = out.decode(errors="replace").strip()
    if text:
        log.info("action %s: output of %r: %s", rule.name, rule.command, text[-_OUTPUT_CHARS:])
    if proc.returncode != 0:
        raise ActionFailed(f"exit status {proc.returncode}")
    return "exit status 0"


def stop_file_path(rule: ActionRule, inc: Incident, step: int) -> Path:
    """The rule's path template filled in, each text field as one safe file name
    (:func:`~streamwatch.names.file_name`); raises ValueError when the result is not inside
    the template's fixed directory (the part before its first field).

    >>> from streamwatch.incidents import Incident
    >>> inc = Incident(id="a1", run_id="../../pwned", kind="entropy_collapse",
    ...     severity="critical", status="firing", indicator="entropy", metric="m", step=8,
    ...     message="m")
    >>> stop_file_path(ActionRule(do="stop_file", path="/ckpt/{run_id}.stop"), inc, 8).name
    '%2E.%2F..%2Fpwned.stop'
    """
    assert rule.path is not None
    texts = {"run_id": inc.run_id, "kind": inc.kind, "indicator": inc.indicator, "id": inc.id}
    fields = {k: file_name(v) for k, v in texts.items()}
    path = Path(rule.path.format(**fields, step=step)).absolute()
    return path_inside(template_directory(rule.path), path, inc.run_id)


def run_stop_file(rule: ActionRule, inc: Incident, step: int) -> str:
    """Write the stop file (atomically: the trainer never reads half of it)."""
    try:
        path = stop_file_path(rule, inc, step)
    except ValueError as exc:
        raise ActionFailed(f"not writing the stop file: {exc}") from None
    body = {"run_id": inc.run_id, "step": step, "reason": inc.message, "incident": inc.id}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(body, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise ActionFailed(f"cannot write {path}: {exc.strerror or exc}") from exc
    return f"wrote {path}"


@dataclass(frozen=True, slots=True)
class Outcome:
    key: str
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class _Job:
    key: str
    lane: str
    attempt: Callable[[], str]


class Executor:
    """Runs attempts on a small pool of daemon threads, at most ``max_concurrent`` at once
    (inline with ``background=False``, for tests). Attempts of one lane (a run) run one at a
    time in the order they were submitted, so that a slow command of one run holds back no
    other run and two actions of one run keep their order."""

    def __init__(self, *, background: bool = True, max_concurrent: int = MAX_CONCURRENT) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
        self._jobs: deque[_Job] = deque()
        self._done: deque[Outcome] = deque(maxlen=_KEEP_OUTCOMES)
        self._cond = threading.Condition()
        self._closed = False
        self._busy = 0
        self._lanes: set[str] = set()  # lanes with an attempt running
        self._threads: list[threading.Thread] = []
        self._background = background
        self.max_concurrent = max_concurrent

    def submit(self, key: str, attempt: Callable[[], str], lane: str = "") -> None:
        """Run ``attempt`` after the lane's earlier attempts; its outcome goes to
        :meth:`outcomes`."""
        if not self._background:
            self._done.append(_attempt(key, attempt))
            return
        with self._cond:
            self._jobs.append(_Job(key, lane, attempt))
            self._busy += 1
            if len(self._threads) < self.max_concurrent:
                self._spawn()
            self._cond.notify_all()

    def _spawn(self) -> None:
        n = len(self._threads)
        t = threading.Thread(target=self._loop, name=f"actions-{n}", daemon=True)
        self._threads.append(t)
        t.start()

    def outcomes(self) -> list[Outcome]:
        with self._cond:
            out = list(self._done)
            self._done.clear()
            return out

    def idle(self) -> bool:
        with self._cond:
            return self._busy == 0

    def close(self, timeout: float = 10.0) -> None:
        """No more attempts; wait at most ``timeout`` seconds for those queued or running."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        end = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(end - time.monotonic(), 0.0))

    def _next(self) -> _Job | None:
        """The first queued job whose lane is free (under the lock); None when there is none."""
        for i, job in enumerate(self._jobs):
            if job.lane not in self._lanes:
                del self._jobs[i]
                self._lanes.add(job.lane)
                return job
        return None

    def _take(self) -> _Job | None:
        """Wait for a job to run; None when closed and nothing is left to run."""
        with self._cond:
            while True:
                job = self._next()
                if job is not None:
                    return job
                if self._closed and not self._jobs:
                    return None
                self._cond.wait()

    def _loop(self) -> None:
        while True:
            job = self._take()
            if job is None:
                return
            outcome = _attempt(job.key, job.attempt)
            with self._cond:
                self._done.append(outcome)
                self._busy -= 1
                self._lanes.discard(job.lane)
                self._cond.notify_all()


def _attempt(key: str, attempt: Callable[[], str]) -> Outcome:
    try:
        return Outcome(key, True, attempt())
    except ActionFailed as exc:
        return Outcome(key, False, str(exc))
    except Exception as exc:  # an action must never take the acting process down
        return Outcome(key, False, f"{type(exc).__name__}: {exc}")
