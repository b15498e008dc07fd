"""What the service has done, counted, and the status line that reports it.

Problems (values set aside) and dead letters are logged one by one for the whole life of the
service, at most :data:`LOG_BURST` lines every :data:`LOG_WINDOW_S` seconds
(:class:`Throttle`); what was not logged is said in one line and is in the counts, which the
status line gives by reason.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from streamwatch.clock import Clock

__all__ = ["LOG_BURST", "LOG_WINDOW_S", "ServiceCounts", "StatusLine", "Throttle"]

log = logging.getLogger(__name__)

#: Problem and dead-letter lines logged at most this many times...
LOG_BURST = 20
#: ...per this many seconds.
LOG_WINDOW_S = 60.0


def _by_reason(counts: Counter[str]) -> str:
    return ", ".join(f"{reason} {n:,}" for reason, n in sorted(counts.items()))


@dataclass
class ServiceCounts:
    events: int = 0
    values: int = 0
    dead_letters: int = 0
    problems: int = 0
    engine_errors: int = 0  # records on which the engine raised (sent to the dead letters)
    incidents: int = 0
    duplicates_dropped: int = 0  # updates a previous owner of the run had published
    skipped: int = 0  # messages already in a restored run's state
    restored_runs: int = 0
    fresh_runs: int = 0  # runs whose checkpoint could not be restored: started afresh
    commits: int = 0
    checkpoint_bytes: int = 0
    lag: int = 0  # messages of the owned partitions not yet read, at the last status
    runs_evicted: int = 0  # runs forgotten at engine.max_runs (the engine's count)
    evicted_open: int = 0  # ...of them with open incidents, each resolved with the reason
    sink_write_errors: int = 0  # writes of the incidents file that failed (a full disk)
    sink_backlog: int = 0  # incident lines held in memory until the file takes them again
    dead_letters_by_reason: Counter[str] = field(default_factory=Counter)
    #: "decoding" (values of a message set aside) or "engine" (repeated or late steps)
    problems_by_stage: Counter[str] = field(default_factory=Counter)
    #: incident updates by (kind, severity, status)
    incidents_by_kind: Counter[tuple[str, str, str]] = field(default_factory=Counter)

    def summary(self) -> str:
        return (
            f"{self.events:,} events, {self.values:,} values, {self.incidents:,} incident "
            f"updates, {self.dead_letters:,} dead letters{self._reasons()}, "
            f"{self.problems:,} problems{self._stages()}, {self.engine_errors:,} engine "
            f"errors; {self.commits:,} commits, {self.restored_runs:,} runs restored, "
            f"{self.fresh_runs:,} runs started afresh, {self.skipped:,} messages skipped, "
            f"{self.duplicates_dropped:,} duplicates dropped"
        )

    def _reasons(self) -> str:
        return f" ({_by_reason(self.dead_letters_by_reason)})" if self.dead_letters else ""

    def _stages(self) -> str:
        return f" ({_by_reason(self.problems_by_stage)})" if self.problems else ""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(vars(self))
        out["dead_letters_by_reason"] = dict(self.dead_letters_by_reason)
        out["problems_by_stage"] = dict(self.problems_by_stage)
        out["incidents_by_kind"] = {"/".join(k): n for k, n in self.incidents_by_kind.items()}
        return out


class Throttle:
    """At most ``burst`` warnings per ``window`` seconds, for as long as the service lives."""

    def __init__(
        self,
        logger: logging.Logger,
        clock: Clock,
        *,
        burst: int = LOG_BURST,
        window: float = LOG_WINDOW_S,
    ) -> None:
        self.logger = logger
        self.clock = clock
        self.burst = burst
        self.window = window
        self._ends = -float("inf")
        self._left = 0
        self.suppressed = 0

    def warning(self, msg: str, *args: object) -> None:
        self.log(logging.WARNING, msg, *args)

    def log(
        self, level: int, msg: str, *args: object, exc_info: BaseException | None = None
    ) -> None:
        """Log the line unless this window's lines are used up (then count it)."""
        now = self.clock.monotonic()
        if now >= self._ends:
            self.report()
            self._ends = now + self.window
            self._left = self.burst
        if self._left > 0:
            self._left -= 1
            self.logger.log(level, msg, *args, exc_info=exc_info)
        else:
            self.suppressed += 1

    def report(self) -> None:
        """Say how many lines were left out since the last time."""
        if self.suppressed:
            self.logger.warning(
                "%d more problem, dead-letter or engine-error line(s) not logged (at most %d "
                "every %.0f s); the status line counts them by reason",
                self.suppressed,
                self.burst,
                self.window,
            )
            self.suppressed = 0


@dataclass(slots=True)
class StatusLine:
    """Where the last status line left off; :meth:`write` logs the next one."""

    at: float
    events: int
    lag: int = 0

    def write(
        self,
        counts: ServiceCounts,
        now: float,
        *,
        lag: int,
        runs: int,
        firing: int,
        interval: float,
        group: str,
    ) -> None:
        """A status line; a warning when the unread input is more than a status interval of
        work (incidents come late: a backlog after downtime, or input faster than this
        process can judge)."""
        rate = (counts.events - self.events) / max(now - self.at, 1e-9)
        log.info(
            "%.0f events/s over the last %.0f s; %d run(s) watched, %d firing incident(s); "
            "%d messages not yet read; since start: %s",
            rate,
            now - self.at,
            runs,
            firing,
            lag,
            counts.summary(),
        )
        if lag and rate > 0 and lag / rate > interval:
            log.warning(
                "falling behind: %d messages not yet read (%+d since the last status), about "
                "%.0f s of work at %.0f events/s: incidents come that late. More processes in "
                "group %s share the partitions (up to one per partition)",
                lag,
                lag - self.lag,
                lag / rate,
                rate,
                group,
            )
        counts.lag = lag
        self.at, self.events, self.lag = now, counts.events, lag
