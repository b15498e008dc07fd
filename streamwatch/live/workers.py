"""``streamwatch run --workers N``: N service processes in one consumer group, one supervisor.

Each worker is a whole :class:`~streamwatch.live.service.Service` in a process of its own (its
own interpreter: the engine's work is spread over the machine's cores), joined to the group
like any other ``streamwatch run``: the group gives it partitions, and with them the runs keyed
to them; runs move between workers by the service's own hand-over (checkpoints, committed
offsets, the incidents already published). The supervisor consumes nothing. It starts the
workers one after the other (each once the one before is polling: members that join a new
group at the same instant can leave one of them without partitions), gathers what each
reports every :data:`REPORT_S` seconds (its counts and gauges), writes the one status line
and serves the one ``/metrics`` and ``/healthz`` for all, and:

- restarts a worker that dies (a crash, a kill): the group hands the dead worker's partitions
  to the others at once or after its session times out, and the new worker joins as a fresh
  member; its runs continue from their checkpoints wherever they land;
- on SIGINT/SIGTERM stops every worker (each finishes its batch, commits and leaves the
  group), then itself;
- dies without stopping them only when it is killed outright (SIGKILL, the out-of-memory
  killer): then each worker sees its lifeline (a pipe only the supervisor can write to)
  reach its end, at once, and stops as on SIGTERM, committing what it owns;
- ends when every worker has ended by itself (``--max-idle``);
- gives up (and stops the rest) when a worker fails :data:`MAX_QUICK_FAILURES` times in a row
  within :data:`QUICK_S` seconds of its start: a bad setting, not a passing fault.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from streamwatch.live.status import ServiceCounts, StatusLine

if TYPE_CHECKING:
    from streamwatch.live.service import Service

__all__ = ["MAX_QUICK_FAILURES", "QUICK_S", "REPORT_S", "Channel", "Pool", "Report", "serve_worker"]

log = logging.getLogger(__name__)

#: Seconds between a worker's reports to the supervisor.
REPORT_S = 1.0
#: A worker that dies this soon after its start...
QUICK_S = 10.0
#: ...this many times in a row is not restarted again: the pool stops.
MAX_QUICK_FAILURES = 3
_STOP_WAIT_S = 60.0
_JOIN_WAIT_S = 30.0


@dataclass
class Report:
    """What a worker last said of itself: its counts since it started, and its gauges."""

    worker: int
    pid: int
    counts: ServiceCounts
    gauges: dict[str, float] = field(default_factory=dict)
    alerts: dict[str, int] = field(default_factory=dict)
    receivers: dict[tuple[str, str], int] = field(default_factory=dict)
    healthy: bool = False
    health: dict[str, Any] = field(default_factory=dict)


@dataclass
class Channel:
    """A worker's line to the supervisor: its reports go up a pipe of its own (a worker killed
    in the middle of a report garbles only its own pipe, which dies with it). The supervisor
    stops a worker with SIGTERM. ``lifeline`` is the reading end of a pipe whose writing end
    only the supervisor holds and never writes to: it reads as ended (EOF) once the
    supervisor is gone, however it died."""

    worker: int
    reports: Connection
    lifeline: Connection | None = None


def add_counts(total: ServiceCounts, more: ServiceCounts) -> None:
    """Add ``more``'s counts to ``total`` (the lag too: it is the sum over the workers)."""
    for f in fields(ServiceCounts):
        mine, theirs = getattr(total, f.name), getattr(more, f.name)
        if isinstance(mine, Counter):
            mine.update(theirs)
        else:
            setattr(total, f.name, mine + theirs)


# -- the worker's side ----------------------------------------------------------------------------


def serve_worker(service: Service, channel: Channel, *, max_idle: float | None) -> None:
    """Run ``service`` until SIGTERM (or the input is idle for ``max_idle``), reporting to the
    supervisor. SIGINT is the supervisor's to handle (a Ctrl-C reaches the whole process
    group: it stops the workers in order). A supervisor that is gone (its lifeline ended, its
    report pipe broken, or, without a lifeline, the worker's parent changed) stops the worker
    as SIGTERM does: it finishes its batch, commits what it owns and leaves the group."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    gone = _Orphaned(stop, os.getppid())
    if channel.lifeline is not None:
        threading.Thread(target=_watch_lifeline, args=(channel.lifeline, gone), daemon=True).start()
    reporter = threading.Thread(target=_report_loop, args=(service, channel, gone), daemon=True)
    reporter.start()
    try:
        service.run(stop, max_idle=max_idle)
    finally:
        stop.set()
        reporter.join(timeout=5)
        if not gone.said:
            _send(service, channel, gone)


@dataclass
class _Orphaned:
    """Stops the worker, once, when its supervisor is gone."""

    stop: threading.Event
    parent: int
    said: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, how: str) -> None:
        with self._lock:
            if self.said:
                return
            self.said = how
        log.warning("the supervisor (pid %d) is gone (%s): stopping", self.parent, how)
        self.stop.set()


def _watch_lifeline(lifeline: Connection, gone: _Orphaned) -> None:
    """Wait for the lifeline to end: nothing is ever sent on it."""
    try:
        while True:
            lifeline.recv()
    except (EOFError, OSError):
        gone("its lifeline ended")


def _report_loop(service: Service, channel: Channel, gone: _Orphaned) -> None:
    while not gone.stop.wait(REPORT_S):
        if os.getppid() != gone.parent:
            gone("the worker's parent changed")
            return
        _send(service, channel, gone)


def _send(service: Service, channel: Channel, gone: _Orphaned) -> None:
    vitals = service.vitals
    for _ in range(3):  # the loop's thread may change a counter while it is copied
        try:
            counts = _copy(vitals.counts)
            break
        except RuntimeError:
            continue
    else:
        return
    healthy, health = vitals.health()
    report = Report(
        channel.worker,
        os.getpid(),
        counts,
        vitals.gauges(),
        vitals.alert_outcomes(),
        vitals.alert_receivers(),
        healthy,
        health,
    )
    try:
        channel.reports.send(report)
    except OSError:  # BrokenPipeError: no one reads the reports any more
        gone("its report pipe is broken")


def _copy(counts: ServiceCounts) -> ServiceCounts:
    out = ServiceCounts()
    add_counts(out, counts)
    return out


# -- the supervisor's side ------------------------------------------------------------------------


@dataclass
class _Slot:
    process: BaseProcess
    reports: Connection
    lifeline: Connection  #: the writing end, held for the worker's life, never written to
    started: float
    quick_failures: int = 0
    done: bool = False  #: ended by itself, with exit code 0


class Pool:
    """N workers, each ``target(*args, worker, channel)`` in a fresh process (spawned: no
    state of the supervisor's is inherited, threads of a Kafka client least of all).

    Implements what the metrics endpoint reads (:class:`streamwatch.live.metrics.Observed`)
    over every worker's last report, plus the counts of the workers that were replaced.
    """

    def __init__(
        self,
        workers: int,
        target: Callable[..., None],
        args: tuple[Any, ...],
        *,
        group: str,
        status_seconds: float = 60.0,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        quick_seconds: float = QUICK_S,
    ) -> None:
        self.workers = workers
        self.quick_seconds = quick_seconds
        self.target = target
        self.args = args
        self.group = group
        self.status_seconds = status_seconds
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self._ctx = multiprocessing.get_context("spawn")
        self._slots: dict[int, _Slot] = {}
        self._last: dict[int, Report] = {}
        self._retired = ServiceCounts()  # counts of workers that died and were replaced
        self._lock = threading.Lock()
        self.restarts = 0
        self.metrics_address: tuple[str, int] | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> tuple[ServiceCounts, bool]:
        """Supervise until ``stop`` is set or every worker has ended; returns the counts over
        all workers and whether the pool gave up on a failing worker."""
        server = self._serve_metrics()
        failed = False
        try:
            for n in range(self.workers):
                self._start(n)
                self._wait_started(n, stop)
            status = StatusLine(time.monotonic(), 0)
            while not stop.is_set():
                self._drain(0.2)
                failed = self._watch()
                if failed or all(s.done for s in self._slots.values()):
                    break
                now = time.monotonic()
                if now - status.at >= self.status_seconds:
                    self._status(status, now)
        finally:
            self._stop_all()
            if server is not None:
                server.close()
        return self.counts, failed

    def _start(self, n: int, quick_failures: int = 0) -> None:
        reports, sender = self._ctx.Pipe(duplex=False)
        lifeline, holder = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(
            target=self.target,
            args=(*self.args, n, Channel(n, sender, lifeline)),
            name=f"streamwatch-worker-{n}",
        )
        process.start()
        # the worker's ends: a dead worker's pipe then reads as closed, and once this process
        # is gone, the lifeline has no writer left (spawned workers inherit no other's end)
        sender.close()
        lifeline.close()
        self._slots[n] = _Slot(process, reports, holder, time.monotonic(), quick_failures)
        log.info("worker %d started (pid %d)", n, process.pid)

    def _wait_started(self, n: int, stop: threading.Event) -> None:
        """Until worker ``n`` is in the group and polling (or dead, or :data:`_JOIN_WAIT_S`):
        members that join a new group at the same instant can leave one without partitions."""
        deadline = time.monotonic() + _JOIN_WAIT_S
        slot = self._slots[n]
        while time.monotonic() < deadline and not stop.is_set() and slot.process.is_alive():
            self._drain(0.2)
            report = self._last.get(n)
            if report is not None and report.health.get("status") != "starting":
                return

    def _watch(self) -> bool:
        """Restart the workers that died; True when one keeps failing at start."""
        for n, slot in list(self._slots.items()):
            if slot.done or slot.process.is_alive():
                continue
            code = slot.process.exitcode
            slot.process.join()
            self._read(slot)
            slot.reports.close()
            slot.lifeline.close()
            if code == 0:
                slot.done = True
                log.info("worker %d (pid %d) ended", n, slot.process.pid)
                continue
            quick = time.monotonic() - slot.started < self.quick_seconds
            failures = slot.quick_failures + 1 if quick else 0
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"
            if failures >= MAX_QUICK_FAILURES:
                log.error(
                    "worker %d (pid %d) failed %d times within %.0f s of its start (%s); "
                    "stopping the other workers",
                    n,
                    slot.process.pid,
                    failures,
                    self.quick_seconds,
                    how,
                )
                slot.done = True
                return True
            log.warning(
                "worker %d (pid %d) died (%s); starting another, the group hands its "
                "partitions and runs over",
                n,
                slot.process.pid,
                how,
            )
            with self._lock:
                last = self._last.pop(n, None)
                if last is not None:
                    last.counts.lag = 0
                    add_counts(self._retired, last.counts)
            self.restarts += 1
            self._start(n, failures)
        return False

    def _drain(self, timeout: float) -> None:
        """Take the reports that came within ``timeout`` (the last of each worker counts)."""
        open_ = {s.reports: s for s in self._slots.values() if not s.reports.closed}
        for ready in wait(list(open_), timeout):
            self._read(open_[ready])  # type: ignore[index]

    def _read(self, slot: _Slot) -> None:
        if slot.reports.closed:
            return
        try:
            while slot.reports.poll():
                report: Report = slot.reports.recv()
                with self._lock:
                    self._last[report.worker] = report
        except (EOFError, OSError):  # the worker has gone, maybe in the middle of a report
            slot.reports.close()

    def _stop_all(self) -> None:
        for slot in self._slots.values():
            if slot.process.is_alive() and slot.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_WAIT_S
        for slot in self._slots.values():
            while slot.process.is_alive() and time.monotonic() < deadline:
                self._drain(0.1)
                slot.process.join(timeout=0.1)
        for n, slot in self._slots.items():
            if slot.process.is_alive():
                log.error("worker %d (pid %d) did not stop; killing it", n, slot.process.pid)
                slot.process.kill()
                slot.process.join()
            self._read(slot)
            slot.reports.close()
            slot.lifeline.close()

    def _serve_metrics(self) -> Any:
        if self.metrics_port is None:
            return None
        from streamwatch.live.metrics import MetricsServer

        server = MetricsServer(self, self.metrics_host, self.metrics_port)
        self.metrics_address = server.address
        host, port = server.address
        log.info(
            "serving /metrics and /healthz of %d workers on http://%s:%d", self.workers, host, port
        )
        return server

    def _status(self, status: StatusLine, now: float) -> None:
        gauges = self.gauges()
        counts = self.counts
        status.write(
            counts,
            now,
            lag=counts.lag,
            runs=int(gauges.get("runs_watched", 0)),
            firing=int(gauges.get("incidents_firing", 0)),
            interval=self.status_seconds,
            group=self.group,
        )

    # -- what /metrics reads ------------------------------------------------------------------
    @property
    def counts(self) -> ServiceCounts:
        total = ServiceCounts()
        with self._lock:
            add_counts(total, self._retired)
            for report in self._last.values():
                add_counts(total, report.counts)
        return total

    def gauges(self) -> Mapping[str, float]:
        out: dict[str, float] = {}
        with self._lock:
            for report in self._last.values():
                for name, value in report.gauges.items():
                    if name == "checkpoint_age_seconds":
                        out[name] = max(out.get(name, 0.0), value)
                    else:
                        out[name] = out.get(name, 0.0) + value
        return out

    def alert_outcomes(self) -> Mapping[str, int]:
        out: Counter[str] = Counter()
        with self._lock:
            for report in self._last.values():
                out.update(report.alerts)
        return dict(out)

    def alert_receivers(self) -> Mapping[tuple[str, str], int]:
        out: Counter[tuple[str, str]] = Counter()
        with self._lock:
            for report in self._last.values():
                out.update(report.receivers)
        return dict(out)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy when every worker is alive and says it is healthy."""
        with self._lock:
            reports = dict(self._last)
            alive = {n: s.process.is_alive() for n, s in self._slots.items() if not s.done}
        workers = {
            str(n): (reports[n].health if n in reports else {"status": "starting"})
            | {"alive": alive[n]}
            for n in alive
        }
        ok = bool(alive) and all(alive[n] and n in reports and reports[n].healthy for n in alive)
        return ok, {
            "status": "ok" if ok else "degraded",
            "workers": workers,
            "restarts": self.restarts,
        }
