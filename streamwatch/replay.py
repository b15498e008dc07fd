"""Replay recorded logs through the Monitor: the same engine as the live service.

Files are read one after another into one Monitor; incidents go to the given sinks as they
happen; problems (unreadable lines, repeated steps...) are counted and kept for the summary.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from streamwatch.config import Config
from streamwatch.events import Problem
from streamwatch.incidents import Incident, Severity, Status
from streamwatch.monitor import Monitor
from streamwatch.sinks.base import Sink
from streamwatch.sources import FileSource

__all__ = ["ReplayResult", "format_summary", "replay_files"]

_KEPT_PROBLEMS = 1000


@dataclass
class ReplayResult:
    incidents: list[Incident] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    problem_count: int = 0
    events: int = 0
    values: int = 0
    files: int = 0
    seconds: float = 0.0

    def worst(self) -> Severity | None:
        fired = [i.severity for i in self.incidents if i.status is Status.FIRING]
        return max(fired, key=lambda s: s.rank) if fired else None


class _Progress:
    """A one-line progress bar on stderr, only for a terminal and only for long files."""

    def __init__(self, path: Path, size: int, stream: TextIO | None) -> None:
        self.stream = stream
        self.path = path
        self.size = max(size, 1)
        self.next = 0.0

    def update(self, done: int, events: int, now: float) -> None:
        if self.stream is None or now < self.next:
            return
        self.next = now + 0.2
        frac = min(done / self.size, 1.0)
        bar = "#" * int(frac * 30)
        line = f"\r{self.path.name[:40]:<40} [{bar:<30}] {frac:6.1%} {events:>10,} events"
        self.stream.write(line)
        self.stream.flush()

    def done(self) -> None:
        if self.stream is not None:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()


def replay_files(
    paths: Sequence[str | Path],
    config: Config | None = None,
    *,
    sinks: Iterable[Sink] = (),
    format: str | None = None,
    progress: TextIO | None = None,
    progress_min_bytes: int = 20 * 2**20,
) -> ReplayResult:
    """Replay files through one Monitor. Missing files or unknown formats raise up front."""
    monitor = Monitor(config)
    result = ReplayResult()
    sink_list = list(sinks)

    def keep(problem: Problem) -> None:
        result.problem_count += 1
        if len(result.problems) < _KEPT_PROBLEMS:
            result.problems.append(problem)

    def emit(updates: list[Incident]) -> None:
        for inc in updates:
            result.incidents.append(inc)
            for sink in sink_list:
                sink.send(inc)

    sources = [FileSource(p, format=format, on_problem=keep) for p in paths]
    start = time.perf_counter()
    for source in sources:
        bar = _Progress(
            source.path, source.size, progress if source.size >= progress_min_bytes else None
        )
        origin = str(source.path)
        process = monitor.process
        seen_runs: set[str] = set()
        for n, event in enumerate(source):
            seen_runs.add(event.run_id)
            updates = process(event, f"{origin}:{source.stats.lines}")
            if updates:
                emit(updates)
            if n & 1023 == 0:
                bar.update(source.stats.bytes_read, n, time.perf_counter())
        bar.done()
        emit(monitor.flush())
        for run_id in seen_runs:
            monitor.end_run(run_id)
        for problem in monitor.drain_problems():
            keep(problem)
        result.files += 1
    result.seconds = time.perf_counter() - start
    result.events = monitor.stats.events
    result.values = monitor.stats.values
    return result


def format_summary(result: ReplayResult) -> str:
    """The end-of-replay report: incidents per run with step and key evidence, problems."""
    lines = [
        f"replayed {result.files} file(s): {result.events:,} events, {result.values:,} values "
        f"in {result.seconds:.2f} s"
    ]
    by_run: dict[str, list[Incident]] = {}
    for inc in result.incidents:
        if inc.status is Status.FIRING:
            by_run.setdefault(inc.run_id, []).append(inc)
    if not by_run:
        lines.append("no incidents")
    for run_id in sorted(by_run):
        fired = by_run[run_id]
        counts = Counter(i.severity.value for i in fired)
        tally = ", ".join(f"{counts[s.value]} {s.value}" for s in Severity if counts[s.value])
        lines.append(f"run {run_id}: {tally}")
        for inc in fired:
            evidence = ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in list(inc.evidence.items())[:4]
            )
            lines.append(
                f"  step {inc.step:>6}  {inc.severity.value:<8} {inc.kind:<22} {inc.indicator}: "
                f"{evidence}"
            )
    if result.problem_count:
        lines.append(f"{result.problem_count:,} problem(s) set aside; first ones:")
        lines.extend(f"  {p}" for p in result.problems[:10])
    return "\n".join(lines)


def progress_stream() -> TextIO | None:
    return sys.stderr if sys.stderr.isatty() else None
