"""The engine: events in, incident updates out.

Pure and deterministic: no clock reads, no I/O, no randomness. Time comes in with the
events (their ``ts``) and as explicit :meth:`Monitor.tick` calls; the same events give the
same incidents, live or replayed. Each run's state can be snapshotted and restored.

The checks run compiled when the core is installed (:mod:`streamwatch.native`), with the
same results as the Python ones; ``Monitor(compiled=False)`` keeps to Python.

>>> from streamwatch.events import Event
>>> m = Monitor()
>>> updates = m.process(Event(run_id="r", step=1, metrics={"loss": float("nan")}))
>>> [(u.kind, u.severity.value, u.step) for u in updates]
[('nonfinite_metric', 'critical', 1)]
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any

from streamwatch.config import Config, EngineConfig
from streamwatch.events import Event, Problem, is_finished, source_key
from streamwatch.incidents import Incident
from streamwatch.indicators import IndicatorMap
from streamwatch.native import core
from streamwatch.run import RunState

__all__ = ["Monitor", "MonitorStats"]

_SNAPSHOT_VERSION = 4


@dataclass
class MonitorStats:
    events: int = 0
    values: int = 0
    nonfinite: int = 0
    problems: int = 0
    incidents: int = 0


class Monitor:
    """Per-run health state over a stream of events."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        sweep_seconds: float = 1.0,
        compiled: bool | None = None,
    ) -> None:
        self.config = config or Config()
        self.engine: EngineConfig = self.config.engine
        self.indicators = IndicatorMap(
            self.config.indicators.presets, self.config.indicators.aliases
        )
        self.runs: dict[str, RunState] = {}
        self.stats = MonitorStats()
        self.now = -math.inf
        self._swept = -math.inf
        self.sweep_seconds = sweep_seconds
        self._problems: list[Problem] = []
        #: with the compiled core: its checks, and its loop for the common case of an event
        self.compiled = core is not None and compiled is not False
        self._solo = core.process_solo if core is not None and self.compiled else None

    # -- input ----------------------------------------------------------------------------
    def process(self, event: Event, origin: str = "") -> list[Incident]:
        """Feed one event; return the incident updates it caused (firing or resolved)."""
        run = self.runs.get(event.run_id)
        if run is None:
            run = self._new_run(event.run_id)
        step = event.step
        run.observe(step, event.ts)
        if event.tags and is_finished(event):
            # a process says the run completed; a later event from another rank reopens it
            run.stall.ended = True
            self.stats.events += 1
            return self._drain((run,))
        src = source_key(event.source) if event.source is not None else ""
        metrics = event.metrics
        loss = run.loss_metric
        if loss is not None and metrics.get(loss) == 0.0:
            run.loss_zero_step = step  # with a non-finite grad norm: the skipped-step signature
        if not run.series.keys() >= metrics.keys():
            self._new_series(run, metrics)
        items: Iterable[tuple[str, float]] = metrics.items()
        if self._solo is not None and not run.book.open:
            done, found = self._solo(run, run.series, step, src, metrics)
            if found is not None:  # the last value it judged found something
                judged, results = found
                run.settle(judged, step, metrics[judged.metric], results)
            items = islice(items, done, None) if done < len(metrics) else ()
        return self._values(run, step, event.ts, src, items, len(metrics), origin)

    def resume(self, rest: tuple[Any, ...], origin: str = "") -> list[Incident]:
        """Finish an event the compiled batch loop began (``process_records``'s ``rest``):
        report what its checks found, if anything, and judge the rest of its values."""
        run, s, step, ts, src, x, results, items, n = rest
        if results is not None:
            run.settle(s, step, x, results)
        return self._values(run, step, ts, src, items, n, origin)

    def _values(
        self,
        run: RunState,
        step: int,
        ts: float | None,
        src: str,
        items: Iterable[tuple[str, float]],
        n: int,
        origin: str,
    ) -> list[Incident]:
        """The rest of :meth:`process`: the event's values (those ``items`` the compiled
        loop left), then its count and time."""
        series = run.series
        book = run.book
        nonfinite = 0
        for name, x in items:
            s = series.get(name)
            if s is None:
                s = run.new_series(name, *self.indicators.lookup(name))
            if src == s.solo and step > s.pending_step and x - x == 0.0:
                # the hot path: one source, a finite value of a new step
                s.pending_step = step
                if book.open:
                    run.finite(s, step)
                run.judge(s, step, x)
                continue
            if x - x != 0.0:  # nan or inf
                nonfinite += 1
            run.value(s, src, step, x, origin)
        stats = self.stats
        stats.events += 1
        stats.values += n
        stats.nonfinite += nonfinite
        if ts is not None and ts > self.now:
            self.now = ts
            if ts - self._swept >= self.sweep_seconds:
                self._sweep()
                return self._drain(self.runs.values())
        if run.out or run.problems:
            return self._drain((run,))
        return []

    def tick(self, now: float, heard: Mapping[str, float] | None = None) -> list[Incident]:
        """Time passes without events: check every run for stalls.

        ``heard``: when each run was last heard from, on the clock of ``now``. A live service
        passes its own clock and the times it received each run's events, so silence is
        measured on one clock, whatever the clocks of the training nodes say (a node ten
        minutes behind would otherwise look ten minutes silent). Without it, silence is
        ``now`` minus the run's newest event time.
        """
        if heard is None:
            if now > self.now:
                self.now = now
            self._sweep()
        else:
            for run_id, run in self.runs.items():
                run.check_stall(now, heard.get(run_id))
        return self._drain(self.runs.values())

    def flush(self) -> list[Incident]:
        """End of input: judge the steps still waiting for more sources."""
        for run in self.runs.values():
            run.close_all()
        return self._drain(self.runs.values())

    def end_run(self, run_id: str) -> None:
        """The run's input is over (its file ended, it said it finished): no stall check."""
        run = self.runs.get(run_id)
        if run is not None:
            run.stall.ended = True

    def drain_problems(self) -> list[Problem]:
        """Values set aside by the engine (repeated, regressing or late steps)."""
        out, self._problems = self._problems, []
        return out

    # -- state ----------------------------------------------------------------------------
    def snapshot(self, run_id: str, *, close: bool = True) -> bytes:
        """The complete detection state of one run, as bytes.

        ``close`` first judges the steps still waiting for more sources (the run's input is
        at an end: what is pending will not be completed). A live service saving state as it
        goes passes ``close=False``: those steps stay open, and the restored run completes
        them as the remaining sources report.
        """
        run = self.runs[run_id]
        if close:
            run.close_all()
        return pickle.dumps((_SNAPSHOT_VERSION, run), protocol=pickle.HIGHEST_PROTOCOL)

    def forget(self, run_id: str) -> None:
        """Drop a run's state (another process owns it now); a later event starts it afresh."""
        self.runs.pop(run_id, None)

    def restore(self, blob: bytes) -> str:
        """Install a run's state from :meth:`snapshot`; returns its run id."""
        version, run = pickle.loads(blob)
        if version != _SNAPSHOT_VERSION or not isinstance(run, RunState):
            raise ValueError(f"not a streamwatch snapshot of version {_SNAPSHOT_VERSION}")
        self.runs[run.run_id] = run
        return run.run_id

    def firing(self) -> list[Incident]:
        """Incidents firing now, across runs."""
        return [o.incident for run in self.runs.values() for o in run.book.open.values()]

    # -- internals ------------------------------------------------------------------------
    def _new_run(self, run_id: str) -> RunState:
        if len(self.runs) >= self.engine.max_runs:
            stalest = min(self.runs.values(), key=lambda r: r.last_ts or -math.inf)
            del self.runs[stalest.run_id]
        run = RunState(run_id, self.engine, compiled=self.compiled)
        self.runs[run_id] = run
        return run

    def _new_series(self, run: RunState, metrics: Mapping[str, float]) -> None:
        """The series of an event's new metrics, best-ranked first: a metric claims its
        indicator by rank, whatever its place in the event."""
        lookup = self.indicators.lookup
        known = run.series
        for rank, name in sorted((lookup(m)[1], m) for m in metrics if m not in known):
            run.new_series(name, lookup(name)[0], rank)

    def _sweep(self) -> None:
        self._swept = self.now
        for run in self.runs.values():
            run.check_stall(self.now)

    def _drain(self, runs: Iterable[RunState]) -> list[Incident]:
        out: list[Incident] = []
        for run in runs:
            if run.out:
                out.extend(run.out)
                run.out.clear()
            if run.problems:
                self._problems.extend(run.problems)
                self.stats.problems += len(run.problems)
                run.problems.clear()
        self.stats.incidents += len(out)
        return out
