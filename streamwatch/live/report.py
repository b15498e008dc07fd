"""A report the live service keeps fresh: bounded per-run series, rewritten on demand.

The service feeds every event (:meth:`LiveReport.observe`) and incident update
(:meth:`LiveReport.incident`) and calls :meth:`LiveReport.write` every N seconds. Memory
stays bounded however long the runs last: each series keeps at most ``2 * max_points``
points (older history is compacted with the same spike-keeping M4 downsampling as the
report), at most ``max_runs`` runs (the one idle longest is dropped) and the newest
``max_incidents`` incident updates. The page reloads itself every ``refresh_seconds``.

With a ``ledger`` (:class:`~streamwatch.ledger.live.LedgerView`) the page opens with the
intervention ledger of the runs held: the baseline and candidates chosen by tag or run id, each
judged on the steps it has so far. Only the runs' tags (at most 64 a run) and end-of-run markers are
kept for it per event; the ledger itself is computed when the page is written.

>>> import tempfile, pathlib
>>> from streamwatch.events import Event
>>> live = LiveReport(pathlib.Path(tempfile.mkdtemp()) / "live.html", max_points=100)
>>> for step in range(1, 1001):
...     live.observe(Event(run_id="r", step=step, metrics={"actor/entropy": 1.0 / step}))
>>> len(live.snapshot()["r"].find("entropy")) <= 200
True
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from streamwatch.config import Config
from streamwatch.events import Event, is_finished
from streamwatch.incidents import Incident
from streamwatch.ledger.live import LedgerView, LiveLedger, live_ledger
from streamwatch.ledger.page import ledger_section
from streamwatch.report.data import MetricFilter, RunData, Series, choose_primaries, make_ranker
from streamwatch.report.downsample import m4_indices
from streamwatch.report.html import ReportSummary, render_report
from streamwatch.report.page import JsMode

__all__ = ["LiveReport"]

_OPEN_STEPS = 3  # steps kept open for late ranks before their mean is final
_MAX_TAGS = 64  # tags kept per run, for the ledger's selectors


class _Buffer:
    """One metric of one run: final (step, value) points plus the few newest steps still open."""

    __slots__ = ("indicator", "open", "sources", "steps", "values")

    def __init__(self, indicator: str | None) -> None:
        self.indicator = indicator
        self.steps: list[int] = []
        self.values: list[float] = []
        self.open: dict[int, list[float]] = {}  # step -> [sum, count]
        self.sources: set[str] = set()

    def add(self, step: int, value: float, source: str, max_points: int, keep: set[int]) -> None:
        slot = self.open.get(step)
        if slot is None:
            self.open[step] = [value, 1.0]
            if len(self.open) > _OPEN_STEPS:
                self._close(max(self.open) - _OPEN_STEPS, max_points, keep)
        else:
            slot[0] += value
            slot[1] += 1.0
        if len(self.sources) < 4096:
            self.sources.add(source)

    def _close(self, before: int, max_points: int, keep: set[int]) -> None:
        for step in sorted(s for s in self.open if s <= before):
            total, count = self.open.pop(step)
            if self.steps and step <= self.steps[-1]:
                continue  # a step that came back after it was final: drawn once, as first seen
            self.steps.append(step)
            self.values.append(total / count)
        if len(self.steps) > 2 * max_points:
            steps = np.asarray(self.steps, np.int64)
            values = np.asarray(self.values, np.float64)
            idx = m4_indices(steps, values, max_points, keep)
            self.steps = steps[idx].tolist()
            self.values = values[idx].tolist()

    def series(self, metric: str) -> Series:
        pending = sorted((s, t / c) for s, (t, c) in self.open.items())
        last = self.steps[-1] if self.steps else -1
        steps = self.steps + [s for s, _ in pending if s > last]
        values = self.values + [v for s, v in pending if s > last]
        return Series(
            metric,
            self.indicator,
            np.asarray(steps, np.int64),
            np.asarray(values, np.float64),
            max(len(self.sources), 1),
        )


class LiveReport:
    """Bounded series and incidents of the runs seen so far, written as the HTML report."""

    def __init__(
        self,
        out: Path,
        *,
        config: Config | None = None,
        indicators: Sequence[str] = (),
        max_points: int = 2000,
        max_runs: int = 200,
        max_incidents: int = 5000,
        refresh_seconds: float | None = 30.0,
        title: str = "streamwatch live report",
        js: JsMode = "gzip",
        ledger: LedgerView | None = None,
    ) -> None:
        if max_points < 4 or max_runs < 1 or max_incidents < 1:
            raise ValueError("max_points must be >= 4, max_runs and max_incidents >= 1")
        self.out = Path(out)
        self.config = config or Config()
        self.indicators = tuple(indicators)
        self.max_points = max_points
        self.max_runs = max_runs
        self.refresh_seconds = refresh_seconds
        self.title = title
        self.js: JsMode = js
        self._filter = MetricFilter(self.config, indicators)
        self._rank = make_ranker(self.config)
        self._runs: dict[str, dict[str, _Buffer]] = {}
        self._touched: dict[str, int] = {}
        self._clock = 0
        self._incidents: deque[Incident] = deque(maxlen=max_incidents)
        self._keep: dict[str, set[int]] = {}
        self.ledger = ledger
        self._tags: dict[str, dict[str, str]] = {}
        self._finished: set[str] = set()
        self._lock = threading.Lock()

    def observe(self, event: Event) -> None:
        """Add one event's metrics (those an indicator or ``indicators`` names)."""
        src = event.source
        who = f"{src.host}/{src.rank}" if src is not None else ""
        with self._lock:
            run = self._run(event.run_id)
            keep = self._keep.get(event.run_id, set())
            for metric, value in event.metrics.items():
                wanted, indicator = self._filter(metric)
                if not wanted:
                    continue
                buf = run.get(metric)
                if buf is None:
                    buf = run[metric] = _Buffer(indicator)
                buf.add(event.step, value, who, self.max_points, keep)
            if self.ledger is not None and event.tags:
                self._tag(event)

    def _tag(self, event: Event) -> None:
        if is_finished(event):
            self._finished.add(event.run_id)
            return
        seen = self._tags.setdefault(event.run_id, {})
        if len(seen) < _MAX_TAGS:
            for k, v in event.tags.items():
                if k not in seen and len(seen) < _MAX_TAGS:
                    seen[k] = v

    def observe_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.observe(event)

    def incident(self, inc: Incident) -> None:
        """Record an incident update; its metric is kept from now on so it can be drawn."""
        with self._lock:
            self._incidents.append(inc)
            self._filter.add(inc.metric)
            self._keep.setdefault(inc.run_id, set()).add(inc.step)

    def _run(self, run_id: str) -> dict[str, _Buffer]:
        self._clock += 1
        run = self._runs.get(run_id)
        if run is None:
            if len(self._runs) >= self.max_runs:
                idle = min(self._touched, key=self._touched.__getitem__)
                del self._runs[idle], self._touched[idle]
                self._keep.pop(idle, None)
                self._tags.pop(idle, None)
                self._finished.discard(idle)
            run = self._runs[run_id] = {}
        self._touched[run_id] = self._clock
        return run

    def snapshot(self) -> dict[str, RunData]:
        """The series as they stand (steps still open included), per run."""
        with self._lock:
            out: dict[str, RunData] = {}
            for run_id, buffers in self._runs.items():
                run = RunData(run_id, {m: b.series(m) for m, b in buffers.items()})
                choose_primaries(run, self._rank)
                out[run_id] = run
            return out

    def incidents(self) -> list[Incident]:
        with self._lock:
            return [i for i in self._incidents if i.run_id in self._runs]

    def judge(
        self, runs: Mapping[str, RunData] | None = None, incidents: Sequence[Incident] = ()
    ) -> LiveLedger | None:
        """The ledger of the runs held now (None without a ``ledger`` view)."""
        if self.ledger is None:
            return None
        if runs is None:
            runs, incidents = self.snapshot(), self.incidents()
        with self._lock:
            tags = {r: dict(t) for r, t in self._tags.items()}
            finished = set(self._finished)
        return live_ledger(self.ledger, runs, tags, finished, incidents)

    def write(self, spent: Mapping[str, Mapping[str, Any]] | None = None) -> ReportSummary:
        """Write the report now (atomically: readers never see a half-written file);
        ``spent``: per run, the compute after its first critical incident (the engine's)."""
        runs, incidents = self.snapshot(), self.incidents()
        judged = self.judge(runs, incidents)
        sections = [] if judged is None else [("Intervention ledger", "ledger", _section(judged))]
        return render_report(
            runs,
            incidents,
            self.out,
            indicators=self.indicators,
            max_points=self.max_points,
            js=self.js,
            title=self.title,
            refresh_seconds=self.refresh_seconds,
            spent=spent,
            sections=sections,
        )


def _section(judged: LiveLedger) -> str:
    """The ledger's part of the page: what it waits for, or the ledger with each candidate's
    status."""
    parts = []
    if judged.baseline:
        parts.append(f'<p id="sw-ledger-baseline">{escape(judged.baseline)}</p>')
    parts.extend(f'<p class="muted sw-ledger-note">{escape(n)}</p>' for n in judged.notes)
    if judged.ledger is not None:
        parts.append(ledger_section(judged.ledger, judged.status))
    parts.append(
        '<p class="muted">Judged on the series this page holds: each run on the steps it has '
        "so far (a series longer than twice the page's points is thinned, keeping its spikes, "
        "and judged on the points kept).</p>"
    )
    return "".join(parts)
