"""Watch growing logs live: the zero-code integration (point it at what the trainer writes).

A :class:`Watcher` follows files and TensorBoard directories (:mod:`streamwatch.sources.
follow`), runs what is new through the engine at each :meth:`~Watcher.poll`, and checks
every run for stalls on the watcher's own clock: a run is silent from when its last event was
*read*, whatever the clocks of the training nodes say. Events that carry no time of their
own (verl's file logger, trainer_state.json) are stamped with the time they were read, once
the watcher has caught up with what the files held when it started, so that a run's cadence
is learnt from its live steps.

Time comes from the clock passed in (:mod:`streamwatch.clock`); tests pass a manual one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streamwatch.clock import Clock
from streamwatch.config import Config
from streamwatch.events import Event, Problem
from streamwatch.incidents import Incident
from streamwatch.monitor import Monitor
from streamwatch.replay_tally import Tally
from streamwatch.sinks.base import Sink
from streamwatch.sources.follow import Follower, follow

__all__ = ["Watcher"]

_KEPT_PROBLEMS = 1000


@dataclass
class WatchStats:
    polls: int = 0
    events: int = 0
    problems: int = 0
    kept: list[Problem] = field(default_factory=list)


class Watcher:
    """Follow ``paths`` (files and TensorBoard directories) through one Monitor."""

    def __init__(
        self,
        paths: Sequence[str | Path],
        clock: Clock,
        config: Config | None = None,
        *,
        sinks: Iterable[Sink] = (),
        format: str | None = None,
        run_id: str | None = None,
    ) -> None:
        self.clock = clock
        self.monitor = Monitor(config)
        self.sinks = list(sinks)
        self.stats = WatchStats()
        self.tally = Tally()
        self.heard: dict[str, float] = {}
        self._pending_paths = [Path(p) for p in paths]
        self._format = format
        self._run_id = run_id
        self.followers: list[Follower] = []
        #: paths not followed (yet), and why: a file whose start is no known format
        self.not_followed: dict[Path, str] = {}
        self._caught_up = False

    def _problem(self, problem: Problem) -> None:
        self.stats.problems += 1
        if len(self.stats.kept) < _KEPT_PROBLEMS:
            self.stats.kept.append(problem)

    def _open(self) -> None:
        """Start following the paths that can be followed now (a file must hold some bytes
        for its format to be known; a directory is followed at once)."""
        waiting = []
        for path in self._pending_paths:
            if not (path.is_dir() or (path.exists() and path.stat().st_size > 0)):
                waiting.append(path)
                continue
            try:
                follower = follow(
                    path, format=self._format, run_id=self._run_id, on_problem=self._problem
                )
            except ValueError as exc:  # what it holds so far is no known format
                self.not_followed[path] = str(exc)
                waiting.append(path)
                continue
            self.not_followed.pop(path, None)
            self.followers.append(follower)
        self._pending_paths = waiting

    def poll(self) -> list[Incident]:
        """Read what is new everywhere, judge it, check for stalls; the incident updates."""
        self._open()
        now = self.clock.now()
        out: list[Incident] = []
        for follower in self.followers:
            for event in follower.poll():
                out.extend(self._process(event, now))
        out.extend(self.monitor.tick(now, self.heard))
        self._caught_up = True
        self.stats.polls += 1
        self._emit(out)
        return out

    def _process(self, event: Event, now: float) -> list[Incident]:
        self.stats.events += 1
        self.heard[event.run_id] = now
        self.tally.see(event.run_id)
        if event.ts is None and self._caught_up:
            event = event.model_copy(update={"ts": now})
        updates = self.monitor.process(event, "watch")
        for problem in self.monitor.drain_problems():
            self._problem(problem)
        return updates

    def _emit(self, updates: list[Incident]) -> None:
        for inc in updates:
            self.tally.add(inc)
            for sink in self.sinks:
                sink.send(inc)

    def close(self) -> list[Incident]:
        """Stop following: judge what the readers still held and the steps still open."""
        now = self.clock.now()
        out: list[Incident] = []
        for follower in self.followers:
            for event in follower.close():
                out.extend(self._process(event, now))
        out.extend(self.monitor.flush())
        self._emit(out)
        return out
