"""Per-run step series from events: one value per (run, metric, step), averaged over ranks.

Every process of a run may log the same metric at a step (per-rank step time, say); the
series holds their mean (a non-finite value on any rank makes the step's value non-finite,
so a NaN is never averaged away). Each canonical indicator of a run is drawn from one
*primary* metric: the one its name preset lists first (``critic/score/mean`` before
``critic/rewards/mean``), then the one with most steps.

>>> from streamwatch.events import Event, Source
>>> c = SeriesCollector()
>>> for rank, t in [(0, 10.0), (1, 14.0)]:
...     c.add(Event(run_id="r", step=3, metrics={"timing_s/step": t}, source=Source(rank=rank)))
>>> s = c.runs()["r"].find("step_time")
>>> s.metric, s.steps.tolist(), s.values.tolist(), s.ranks
('timing_s/step', [3], [12.0], 2)
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from streamwatch.config import Config
from streamwatch.engine.indicators import Indicator, IndicatorMap
from streamwatch.events import Event
from streamwatch.sources import read_events

__all__ = [
    "FloatArray",
    "IntArray",
    "MetricFilter",
    "RunData",
    "Series",
    "SeriesCollector",
    "aggregate_steps",
    "choose_primaries",
    "collect_runs",
    "is_indicator",
    "make_ranker",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
_INDICATORS = frozenset(i.value for i in Indicator)


def is_indicator(name: str) -> bool:
    """True for a canonical indicator name (``entropy``), False for a metric name."""
    return name in _INDICATORS


@dataclass(frozen=True)
class Series:
    """One metric of one run: ascending steps and the value at each (mean over ranks)."""

    metric: str
    indicator: str | None
    steps: IntArray
    values: FloatArray
    ranks: int = 1

    def __len__(self) -> int:
        return len(self.steps)

    def value_at(self, step: int) -> float | None:
        """The finite value at ``step`` or, failing that, the nearest finite one before it
        (after it, for a step before the series starts); None if there is none."""
        finite = np.isfinite(self.values)
        if not finite.any():
            return None
        steps, values = self.steps[finite], self.values[finite]
        i = int(np.searchsorted(steps, step, side="right")) - 1
        return float(values[max(i, 0)])


@dataclass
class RunData:
    """The series of one run, by metric name, and the primary metric of each indicator."""

    run_id: str
    series: dict[str, Series] = field(default_factory=dict)
    primary: dict[str, str] = field(default_factory=dict)

    def find(self, name: str) -> Series | None:
        """The series of an indicator (its primary metric) or of a metric name."""
        metric = self.primary.get(name, name)
        return self.series.get(metric)

    def last_step(self) -> int:
        return max((int(s.steps[-1]) for s in self.series.values() if len(s)), default=0)


def make_ranker(config: Config) -> Callable[[str], int]:
    """A metric's rank for its indicator, as the engine binds it (:meth:`IndicatorMap.rank`)."""
    ind = config.indicators
    return IndicatorMap(ind.presets, ind.aliases, ind.patterns).rank


class MetricFilter:
    """Which metrics to keep: every metric that maps to an indicator, every metric named in
    ``metrics`` and every metric matching a glob there (``perf/*``); nothing else, so a run
    logging hundreds of metrics costs only what is drawn or compared."""

    def __init__(self, config: Config | None = None, metrics: Iterable[str] = ()) -> None:
        self.config = config or Config()
        ind = self.config.indicators
        self.map = IndicatorMap(ind.presets, ind.aliases, ind.patterns)
        names = [m for m in metrics if not is_indicator(m)]
        self._exact = {m for m in names if not any(c in m for c in "*?[")}
        self._globs = [m for m in names if m not in self._exact]
        self._seen: dict[str, tuple[bool, str | None]] = {}

    def add(self, metric: str) -> None:
        """Keep ``metric`` from now on."""
        self._exact.add(metric)
        self._seen.pop(metric, None)

    def __call__(self, metric: str) -> tuple[bool, str | None]:
        """(keep it?, its indicator or None)."""
        found = self._seen.get(metric)
        if found is None:
            ind = self.map.resolve(metric)
            wanted = (
                ind is not None
                or metric in self._exact
                or any(fnmatch.fnmatchcase(metric, g) for g in self._globs)
            )
            found = (wanted, ind.value if ind is not None else None)
            if len(self._seen) < 100_000:
                self._seen[metric] = found
        return found


class SeriesCollector:
    """Accumulates events into per-run series (the metrics a :class:`MetricFilter` keeps)."""

    def __init__(self, config: Config | None = None, *, metrics: Iterable[str] = ()) -> None:
        self.config = config or Config()
        self._keep = MetricFilter(self.config, metrics)
        self._data: dict[tuple[str, str], tuple[list[int], list[float], set[str]]] = {}

    def add(self, event: Event) -> None:
        src = event.source
        who = f"{src.host}/{src.rank}" if src is not None else ""
        for metric, value in event.metrics.items():
            if not self._keep(metric)[0]:
                continue
            key = (event.run_id, metric)
            slot = self._data.get(key)
            if slot is None:
                slot = self._data[key] = ([], [], set())
            slot[0].append(event.step)
            slot[1].append(value)
            if len(slot[2]) < 4096:
                slot[2].add(who)

    def add_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.add(event)

    def runs(self) -> dict[str, RunData]:
        """The series collected so far, per run (runs in order of first appearance)."""
        out: dict[str, RunData] = {}
        for (run_id, metric), (steps, values, sources) in self._data.items():
            run = out.get(run_id)
            if run is None:
                run = out[run_id] = RunData(run_id)
            s, v = aggregate_steps(np.asarray(steps, np.int64), np.asarray(values, np.float64))
            indicator = self._keep(metric)[1]
            run.series[metric] = Series(metric, indicator, s, v, max(len(sources), 1))
        rank = make_ranker(self.config)
        for run in out.values():
            choose_primaries(run, rank)
        return out


def aggregate_steps(steps: IntArray, values: FloatArray) -> tuple[IntArray, FloatArray]:
    """Sort by step and average the values logged at the same step (NaN-propagating)."""
    if len(steps) == 0:
        return steps, values
    uniq, inverse = np.unique(steps, return_inverse=True)
    if len(uniq) == len(steps):
        return uniq, values[np.argsort(steps, kind="stable")]
    with np.errstate(invalid="ignore"):
        sums = np.bincount(inverse, weights=values, minlength=len(uniq))
    counts = np.bincount(inverse, minlength=len(uniq))
    means: FloatArray = sums / counts
    return uniq, means


def choose_primaries(run: RunData, rank: Callable[[str], int] | None = None) -> None:
    """Set ``run.primary``: for each indicator, the metric ranked first (see module doc)."""
    by_indicator: dict[str, list[Series]] = {}
    for s in run.series.values():
        if s.indicator is not None:
            by_indicator.setdefault(s.indicator, []).append(s)
    order = rank if rank is not None else make_ranker(Config())
    for indicator, candidates in by_indicator.items():
        best = min(candidates, key=lambda s: (order(s.metric), -len(s), s.metric))
        run.primary[indicator] = best.metric


def collect_runs(
    paths: Sequence[str | Path],
    *,
    config: Config | None = None,
    metrics: Iterable[str] = (),
    format: str | None = None,
) -> dict[str, RunData]:
    """Read recorded files (bad lines are skipped: replay reports them) into per-run series;
    files whose data names no run are told apart by their paths, as a replay of them is."""
    collector = SeriesCollector(config, metrics=metrics)
    collector.add_all(read_events(paths, format=format, on_problem=lambda _p: None))
    return collector.runs()
