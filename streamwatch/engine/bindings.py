"""Which metric feeds which indicator, and which checks judge it: what ``streamwatch inspect``
and ``replay --verbose`` print, read from the engine itself after the replay."""

from __future__ import annotations

from dataclasses import dataclass, field

from streamwatch.engine.indicators import Indicator
from streamwatch.engine.monitor import Monitor
from streamwatch.engine.run import RunState
from streamwatch.engine.series import Series
from streamwatch.incidents import Kind

__all__ = ["Binding", "RunBindings", "format_bindings", "run_bindings"]

_SHOWN_UNMAPPED = 12
#: Runs whose bindings are kept after a replay.
MAX_RUNS = 1000


@dataclass(frozen=True)
class Binding:
    indicator: str
    metric: str
    kinds: tuple[str, ...]  # the incident kinds its checks can raise
    #: the words it was bound by, when no alias or preset names it (``reward + std``)
    pattern: str | None = None


@dataclass
class RunBindings:
    run_id: str
    bound: list[Binding] = field(default_factory=list)
    #: metrics that match an indicator another metric feeds (generic checks)
    outranked: list[tuple[str, str]] = field(default_factory=list)
    #: metrics that fed an indicator until they stopped being logged: (metric, indicator,
    #: the step it was last logged at), generic checks since
    retired: list[tuple[str, str, int]] = field(default_factory=list)
    #: metrics that match no indicator (generic checks)
    unmapped: list[str] = field(default_factory=list)
    #: the team's own rules: (name, whether a metric it reads was logged, the metrics it reads)
    rules: list[tuple[str, bool, tuple[str, ...]]] = field(default_factory=list)


def _kinds(series: Series, run: RunState) -> tuple[str, ...]:
    """The incident kinds a series' values can raise: its own checks', the generic screen's,
    and those of the run-level checks it feeds."""
    kinds = [str(k) for check in series.checks for k in check.kinds]
    if series.drift is not None:
        kinds.append(Kind.METRIC_DRIFT.value)
    if series.feeds_hacking:
        kinds.extend(str(k) for k in run.hacking.kinds)
    if series.component:
        kinds.extend(str(k) for k in run.components.kinds)
    if series.signal is not None:
        kinds.extend(str(k) for k in run.signal.kinds)
    if series.straggler is not None:
        kinds.extend(str(k) for k in series.straggler.kinds)
    kinds.append(Kind.NONFINITE_METRIC.value)
    return tuple(dict.fromkeys(kinds))


def run_bindings(monitor: Monitor, limit: int = MAX_RUNS) -> list[RunBindings]:
    """The bindings of the monitor's runs (the first ``limit``, by name)."""
    out: list[RunBindings] = []
    resolve = monitor.indicators.resolve
    pattern = monitor.indicators.pattern
    for run_id in sorted(monitor.runs)[:limit]:
        run = monitor.runs[run_id]
        rb = RunBindings(run_id)
        for indicator in Indicator:
            metric = run.bound.get(indicator)
            if metric is not None and metric in run.series:
                kinds = _kinds(run.series[metric], run)
                rb.bound.append(Binding(indicator.value, metric, kinds, pattern(metric)))
        fed = set(run.bound.values())
        for metric in sorted(run.series):
            if metric in fed:
                continue
            ind = resolve(metric)
            if ind is None:
                rb.unmapped.append(metric)
            elif metric in run.retired:
                rb.retired.append((metric, ind.value, run.retired[metric]))
            else:
                rb.outranked.append((metric, ind.value))
        if run.rules is not None:
            for rule, held in zip(run.rules.rules, run.rules.held, strict=True):
                reads = tuple(sorted(rule.condition.metrics))
                bound = held.bound or any(run.rules.tracks[m].logged for m in reads)
                rb.rules.append((rule.name, bound, reads))
        out.append(rb)
    return out


def format_bindings(runs: list[RunBindings], indent: str = "  ") -> list[str]:
    lines: list[str] = []
    for rb in runs:
        lines.append(f"{indent}run {rb.run_id}:")
        width = max((len(b.indicator) for b in rb.bound), default=0)
        mwidth = max((len(b.metric) for b in rb.bound), default=0)
        for b in rb.bound:
            how = f"  (by its words: {b.pattern})" if b.pattern else ""
            lines.append(
                f"{indent}  {b.indicator:<{width}} <- {b.metric:<{mwidth}}  "
                f"{', '.join(b.kinds)}{how}"
            )
        if not rb.bound:
            lines.append(f"{indent}  no metric feeds an indicator (add aliases to the config)")
        for metric, ind in rb.outranked:
            lines.append(f"{indent}  {metric}: matches {ind}, outranked (generic checks)")
        for metric, ind, last in rb.retired:
            lines.append(
                f"{indent}  {metric}: fed {ind} until it stopped being logged after step "
                f"{last} (generic checks)"
            )
        for name, bound, reads in rb.rules:
            said = "binds" if bound else "binds no metric of this run"
            lines.append(f"{indent}  rule {name}: {said} (reads {', '.join(reads)})")
        if rb.unmapped:
            shown = ", ".join(rb.unmapped[:_SHOWN_UNMAPPED])
            extra = len(rb.unmapped) - _SHOWN_UNMAPPED
            more = f" and {extra} more" if extra > 0 else ""
            lines.append(
                f"{indent}  {len(rb.unmapped)} unmapped (generic drift check): {shown}{more}"
            )
    return lines
