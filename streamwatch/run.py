"""Per-run detection state: series of metric values, their checks, the run's incidents.

Several processes may report the same metric at the same step (every rank logs its step
time). A series gathers a step's values and closes the step when as many sources have
reported as did last step, or when a later step arrives; the checks see one value per step
(the mean). Non-finite values are judged on arrival and never reach a check.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streamwatch.checks import (
    REMEDIES,
    Check,
    DriftCheck,
    EntropyCheck,
    HackingCheck,
    LengthCheck,
    PyChecks,
    Results,
    RewardCheck,
    SeriesChecks,
    SpikeCheck,
    StallCheck,
    StragglerCheck,
    TruncationCheck,
)
from streamwatch.config import EngineConfig
from streamwatch.events import Problem
from streamwatch.incidents import Finding, Incident, IncidentBook, Kind, Severity
from streamwatch.indicators import Indicator
from streamwatch.native import core

if TYPE_CHECKING:
    import streamwatch_native

__all__ = ["PySeries", "RunState"]

_CORE = {
    Indicator.LOSS,
    Indicator.GRAD_NORM,
    Indicator.KL,
    Indicator.ENTROPY,
    Indicator.TRAIN_REWARD,
    Indicator.TOKEN_PROB,
}
_PER_SOURCE = {Indicator.STEP_TIME: True, Indicator.THROUGHPUT: False}
_FEEDS_HACKING = {Indicator.TRAIN_REWARD, Indicator.HELDOUT_REWARD}


#: A check as the engine builds it: its class, its settings, and whether it reads 1 - x.
CheckSpec = tuple[type[Any], object, bool]


def check_specs(indicator: Indicator | None, metric: str, cfg: EngineConfig) -> list[CheckSpec]:
    """The checks a series gets, by indicator; metrics without one get generic drift."""
    i = Indicator
    if indicator is i.ENTROPY:
        return [(EntropyCheck, cfg.entropy, False)]
    if indicator is i.TOKEN_PROB:
        return [(EntropyCheck, cfg.entropy, True)]
    if indicator is i.TRAIN_REWARD:
        return [(RewardCheck, cfg.reward, False)]
    if indicator is i.RESPONSE_LENGTH:
        return [(LengthCheck, cfg.length, False)]
    if indicator is i.TRUNCATION_RATIO:
        return [(TruncationCheck, cfg.length, False)]
    if indicator in (i.LOSS, i.GRAD_NORM, i.KL):
        return [(SpikeCheck, cfg.spike, False)]
    if indicator is i.HELDOUT_REWARD:
        return []
    if any(fnmatch.fnmatchcase(metric, pattern) for pattern in cfg.drift.ignore):
        return []
    return [(DriftCheck, cfg.drift, False)]


def make_checks(specs: list[CheckSpec], name: str, metric: str, compiled: bool) -> SeriesChecks:
    """The series' checks: compiled when asked for (the core has a twin of every check)."""
    if compiled and core is not None:
        return core.Checks([(c.__name__, name, metric, s, inv) for c, s, inv in specs])
    checks: list[Check] = [
        cls(name, metric, settings, invert=True) if invert else cls(name, metric, settings)
        for cls, settings, invert in specs
    ]
    return PyChecks(checks)


class PySeries:
    """One metric of one run: its checks, and the gathering of a step's values across sources
    (``streamwatch_native.Series`` is the compiled twin, with the same attributes)."""

    __slots__ = (
        "checks",
        "closed",
        "expected",
        "feeds_hacking",
        "indicator",
        "last_step",
        "metric",
        "name",
        "pending_k",
        "pending_n",
        "pending_step",
        "pending_sum",
        "pending_values",
        "per_source",
        "solo",
        "special",
        "straggler",
    )

    def __init__(
        self,
        metric: str,
        name: str,
        indicator: Indicator | None,
        checks: SeriesChecks,
        straggler: StragglerCheck | None,
        feeds_hacking: bool,
    ) -> None:
        self.metric = metric
        self.name = name
        self.indicator = indicator
        self.checks = checks
        self.straggler = straggler
        self.feeds_hacking = feeds_hacking  # its values go to the run's hacking check
        self.per_source = straggler is not None  # each source's value kept for the straggler
        # judged beyond its checks: the hacking check's inputs, the straggler check
        self.special = feeds_hacking or straggler is not None
        self.last_step: dict[str, int] = {}
        self.pending_step = -1
        self.pending_sum = 0.0
        self.pending_n = 0  # sources heard this step, finite or not
        self.pending_k = 0  # finite values among them
        self.pending_values: list[tuple[str, float]] = []
        self.expected = 1  # sources that reported the previous step
        self.closed = False  # the pending step was judged already
        # the only source, while there is one value a step (its step is not kept in last_step)
        self.solo: str | None = None


if TYPE_CHECKING:
    Series = PySeries | streamwatch_native.Series


@dataclass
class RunState:
    run_id: str
    cfg: EngineConfig
    book: IncidentBook = field(init=False)
    series: dict[str, Series] = field(default_factory=dict)
    bound: dict[Indicator, str] = field(default_factory=dict)
    bound_rank: dict[Indicator, int] = field(default_factory=dict)  # the rank of each bound
    hacking: HackingCheck | streamwatch_native.HackingCheck = field(init=False)
    stall: StallCheck | streamwatch_native.StallCheck = field(init=False)
    out: list[Incident] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    last_ts: float | None = None
    loss_zero_step: int = -1  # step of the last event whose loss was exactly 0
    loss_metric: str | None = None  # the metric bound to the loss indicator
    disabled: frozenset[str] = frozenset()
    compiled: bool = False  # the series' checks from the compiled core, when it has them

    def __post_init__(self) -> None:
        self.book = IncidentBook(self.run_id, self.cfg.resolve_after, REMEDIES)
        if self.compiled and core is not None:
            self.hacking = core.HackingCheck(self.cfg.hacking)
            self.stall = core.StallCheck(self.cfg.stall)
        else:
            self.hacking = HackingCheck(self.cfg.hacking)
            self.stall = StallCheck(self.cfg.stall)
        self.disabled = frozenset(self.cfg.disabled_kinds)

    # -- series -------------------------------------------------------------------------
    def new_series(self, metric: str, indicator: Indicator | None, rank: int = 0) -> Series:
        """The series of a new metric. An indicator is fed by the best-ranked metric of the
        run (:meth:`IndicatorMap.lookup`); a metric that ranks after the one bound gets generic
        checks, and one that ranks before takes the indicator over from it."""
        if indicator is not None:
            owner = self.bound.get(indicator)
            if owner is not None and owner != metric and rank < self.bound_rank[indicator]:
                self._unbind(indicator, owner)
                owner = None
            if owner is None:
                self.bound[indicator] = owner = metric
                self.bound_rank[indicator] = rank
            if owner != metric:
                indicator = None  # a second metric for the same indicator: generic checks
            elif indicator is Indicator.LOSS:
                self.loss_metric = metric
        specs = check_specs(indicator, metric, self.cfg)
        # token probability rising to 1 tells the entropy story again: with the entropy
        # itself logged, it would only raise a second incident for the same collapse
        if indicator is Indicator.TOKEN_PROB and Indicator.ENTROPY in self.bound:
            specs = []
        elif indicator is Indicator.ENTROPY and Indicator.TOKEN_PROB in self.bound:
            self.series[self.bound[Indicator.TOKEN_PROB]].checks = PyChecks([])
        name = indicator.value if indicator else metric
        checks = make_checks(specs, name, metric, self.compiled)
        straggler = (
            StragglerCheck(name, metric, self.cfg.straggler, _PER_SOURCE[indicator])
            if indicator in _PER_SOURCE
            else None
        )
        make = core.Series if self.compiled and core is not None else PySeries
        series = make(metric, name, indicator, checks, straggler, indicator in _FEEDS_HACKING)
        self.series[metric] = series
        return series

    def _unbind(self, indicator: Indicator, owner: str) -> None:
        """A better-ranked metric claims ``indicator``: the one that fed it goes on generic."""
        del self.bound[indicator]
        del self.bound_rank[indicator]
        if indicator is Indicator.LOSS:
            self.loss_metric = None
        if self.series.pop(owner, None) is not None:
            self.new_series(owner, None)

    def value(self, s: Series, src: str, step: int, x: float, origin: str) -> None:
        """One value of one source: repeats, gathering across sources, non-finite values.

        The Monitor handles the common case itself (one source, a finite value of a new
        step: ``Series.solo``) and calls :meth:`judge` directly, without noting the step in
        ``last_step``: the solo source's last step is the pending one, noted here.
        """
        seen = s.last_step
        if s.solo is not None:
            seen[s.solo] = s.pending_step
            s.solo = None
        last = seen.get(src, -1)
        if step <= last:
            self._set_aside_repeat(s, src, step, last, origin)
            return
        seen[src] = step
        if step != s.pending_step:
            if step < s.pending_step:
                self._set_aside_late(s, src, step, x, origin)
                return
            if s.pending_n and not s.closed:
                self.close(s)
            if s.pending_step >= 0:
                s.expected = s.pending_n or 1
            s.pending_step = step
            s.pending_n = 0
            s.closed = False
        s.pending_n += 1
        if x - x == 0.0:  # finite (inf - inf and nan - nan are nan)
            if self.book.open:
                self.finite(s, step)
            if s.closed:
                return  # one source more than last step: counted for the next, not judged
            s.pending_sum += x
            s.pending_k += 1
            if s.per_source:
                s.pending_values.append((src, x))
        else:
            self.nonfinite(s, src, step, x)
        if not s.closed and s.pending_n >= s.expected:
            self.close(s)
            if s.pending_n == 1 and s.expected == 1:
                s.solo = src  # one source, one value a step: the next values take the fast path

    def finite(self, s: Series, step: int) -> None:
        """A finite value: an open non-finite incident on this series is a step nearer to
        resolving."""
        self._healthy(Kind.NONFINITE_METRIC, s.name, step)

    def _set_aside_repeat(self, s: Series, src: str, step: int, last: int, origin: str) -> None:
        why = "repeats step" if step == last else f"goes back from step {last} to"
        who = f" from {src}" if src else ""
        self.problems.append(
            Problem(origin, f"{s.metric!r}{who} {why} {step}", self.run_id, step, s.metric)
        )

    def _set_aside_late(self, s: Series, src: str, step: int, x: float, origin: str) -> None:
        self.problems.append(
            Problem(
                origin,
                f"{s.metric!r} from {src or 'its source'} arrived after step "
                f"{s.pending_step} had started; value {x!r} not judged",
                self.run_id,
                step,
                s.metric,
            )
        )

    def close(self, s: Series) -> None:
        """The step of a series is complete: hand its value to the checks."""
        s.closed = True
        k = s.pending_k
        if k == 0:
            return
        step = s.pending_step
        x = s.pending_sum / k
        s.pending_k = 0
        s.pending_sum = 0.0
        if x - x != 0.0:  # finite values whose sum overflows
            s.pending_values = []
            return
        self.judge(s, step, x)

    def judge(self, s: Series, step: int, x: float) -> None:
        """Hand one step's value of a series to its checks."""
        if self.book.open:
            self.settle(s, step, x, s.checks.judge(step, x))
            return
        results = s.checks.quiet(step, x)
        if results is not None:
            self.settle(s, step, x, results)
        elif s.special:
            self._close_special(s, step, x)

    def settle(self, s: Series, step: int, x: float, results: Results) -> None:
        """What the checks said of one value: findings fire, silence counts as health."""
        book = self.book
        for kinds, found in results:
            if found:
                self._report(kinds, s.name, step, found)
            elif book.open:
                for kind in kinds:
                    self._healthy(kind, s.name, step)
        if s.special:
            self._close_special(s, step, x)

    def _close_special(self, s: Series, step: int, x: float) -> None:
        ind = s.indicator
        if ind is Indicator.TRAIN_REWARD:
            self.hacking.train(x)
        elif ind is Indicator.HELDOUT_REWARD:
            found = self.hacking.heldout(step, s.metric, x)
            self._report(self.hacking.kinds, "heldout_reward", step, found)
        if s.straggler is not None:
            values, s.pending_values = s.pending_values, []
            found = s.straggler.update(step, values)
            self._report(s.straggler.kinds, s.name, step, found)

    def close_all(self) -> None:
        for s in self.series.values():
            if s.pending_n and not s.closed:
                self.close(s)

    # -- findings -> incidents ------------------------------------------------------------
    def nonfinite(self, s: Series, src: str, step: int, x: float) -> None:
        evidence: dict[str, object] = {"value": str(x)}
        if src:
            evidence["source"] = src
        if s.indicator is Indicator.GRAD_NORM and self.loss_zero_step == step:
            evidence["loss_is_zero"] = True
        core = s.indicator in _CORE
        what = "zero loss with a non-finite grad norm" if evidence.get("loss_is_zero") else str(x)
        self.fire(
            Finding(
                Kind.NONFINITE_METRIC,
                s.name,
                s.metric,
                Severity.CRITICAL if core else Severity.WARNING,
                step,
                f"non-finite {s.metric} at step {step}: {what}" + (f" (from {src})" if src else ""),
                evidence,
                onset_step=step,
            )
        )

    def _report(self, kinds: tuple[Kind, ...], name: str, step: int, found: list[Finding]) -> None:
        for f in found:
            self.fire(f)
        if len(found) < len(kinds) and self.book.open:
            seen = {f.kind for f in found}
            for kind in kinds:
                if kind not in seen:
                    self._healthy(kind, name, step)

    def fire(self, finding: Finding, ts: float | None = None) -> None:
        if finding.kind.value in self.disabled:
            return
        update = self.book.fire(finding, self.last_ts if ts is None else ts)
        if update is not None:
            self.out.append(update)

    def _healthy(self, kind: Kind, name: str, step: int) -> None:
        if self.book.open:
            update = self.book.healthy(kind, name, step, self.last_ts)
            if update is not None:
                self.out.append(update)

    def check_stall(self, now: float, heard: float | None = None) -> None:
        finding = self.stall.check(now, heard)
        if finding is not None:
            self.fire(finding, now)

    def observe(self, step: int, ts: float | None) -> None:
        """Every event: note its time; a stalled run that speaks again is resolved."""
        if ts is not None and (self.last_ts is None or ts > self.last_ts):
            self.last_ts = ts
        gap = self.stall.observe(step, ts)
        stalled = bool(self.book.open) and self.book.is_firing(Kind.RUN_STALLED, "run")
        if gap is not None and not stalled:
            self.fire(gap)
            stalled = True
        if stalled:
            fid = self.book.fid(Kind.RUN_STALLED, "run")
            update = self.book.resolve(fid, step, ts, "events arrive again")
            if update is not None:
                self.out.append(update)
