"""Compare a candidate against a baseline: per indicator, better / worse / different /
indistinguishable, from which step, by how much, and on what statistical basis.

Each side is one run or a group of seeds (one file per seed, or several run ids in a file).
Runs are aligned by step over the steps both sides cover, cut into windows of ``window``
steps (default: about 80 windows, at least 5 steps each), and each run contributes its
mean per window (of the logarithm for the indicators whose policy says ``log``: ratios are
what matter). The noise model and the tests are in :mod:`streamwatch.report.stats`:
between-seed variation (Welch's t per window) when a side has several runs, within-run
noise when each side has one. The **onset** is the first window from which the difference
stays significant to the end, over two windows at least (fixed-sequence tests from the last
window back, each indicator at ``alpha / m`` for m indicators). The **effect** is the
difference over the windows from the onset on (without an onset: over the last quarter of
the windows) with its ``level`` interval.

Which direction is better for each indicator: :mod:`streamwatch.report.policy`.

Verdicts: ``better`` / ``worse`` (significant, with a direction that matters),
``different`` (significant, neutral direction), ``indistinguishable`` (not significant at
the end of the common steps; a difference that disappears before the end is one too).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from streamwatch.config import Config
from streamwatch.engine.indicators import Indicator
from streamwatch.report.data import FloatArray, RunData, Series, collect_runs
from streamwatch.report.policy import NEUTRAL, POLICIES, Policy, Verdict, judge
from streamwatch.report.stats import (
    Estimate,
    block_bootstrap_ci,
    onset_index,
    t_interval,
    welch,
    within_run_test,
)

__all__ = [
    "POLICIES",
    "ComparisonResult",
    "IndicatorComparison",
    "Policy",
    "PreparedComparison",
    "Verdict",
    "WindowStat",
    "compare_runs",
    "end_p_value",
    "load_group",
    "prepare_comparison",
    "window_means",
]


@dataclass(frozen=True)
class WindowStat:
    """One step window: [start, stop), the difference on the compared scale, its p-value."""

    start: int
    stop: int
    diff: float
    p: float
    significant: bool


@dataclass(frozen=True)
class IndicatorComparison:
    name: str
    baseline_metric: str
    candidate_metric: str
    verdict: Verdict
    direction: str  # "higher" / "lower" (candidate vs baseline) or "" when indistinguishable
    onset_step: int | None
    log: bool  # effect and interval are log ratios
    effect: float
    ci: tuple[float, float]
    baseline_level: float
    candidate_level: float
    windows: tuple[WindowStat, ...]
    alpha: float
    note: str = ""

    @property
    def significant(self) -> bool:
        return self.verdict is not Verdict.INDISTINGUISHABLE

    @property
    def relative(self) -> float:
        """Candidate level / baseline level - 1 over the effect's windows."""
        if self.log:
            return math.expm1(self.effect)
        if self.baseline_level == 0:
            return math.nan
        return self.candidate_level / self.baseline_level - 1.0


@dataclass(frozen=True)
class ComparisonResult:
    baseline_runs: tuple[str, ...]
    candidate_runs: tuple[str, ...]
    mode: str  # "seeds" (between-seed variation) or "single" (within-run noise)
    window: int
    steps: tuple[int, int]
    alpha: float
    level: float
    basis: str
    indicators: tuple[IndicatorComparison, ...]
    skipped: tuple[str, ...] = ()
    out: Path | None = None
    series: dict[str, tuple[list[Series], list[Series]]] = field(default_factory=dict, repr=False)

    def get(self, name: str) -> IndicatorComparison | None:
        return next((c for c in self.indicators if c.name == name), None)

    def worse(self) -> list[IndicatorComparison]:
        return [c for c in self.indicators if c.verdict is Verdict.WORSE]


def load_group(
    paths: Sequence[str | Path], config: Config | None = None, metrics: Iterable[str] = ()
) -> dict[str, RunData]:
    """The runs of one side: every run id of every file (a repeated id gets its file name)."""
    wanted = list(metrics)
    runs: dict[str, RunData] = {}
    for path in paths:
        found = collect_runs([path], config=config, metrics=wanted)
        for run_id, run in sorted(found.items()):
            key = run_id if run_id not in runs else f"{Path(path).name}:{run_id}"
            run.run_id = key
            runs[key] = run
    return runs


@dataclass
class _Prepared:
    name: str
    policy: Policy
    log: bool
    edges: list[int]
    base: FloatArray  # runs x windows
    cand: FloatArray
    tests: list[Estimate | None]
    metrics: tuple[str, str]


def _edges(lo: int, hi: int, width: int) -> list[int]:
    edges = [*range(lo, hi + 1, width), hi + 1]
    if len(edges) > 2 and edges[-1] - edges[-2] < width / 2:
        del edges[-2]
    return edges


def window_means(s: Series, edges: list[int], log: bool) -> FloatArray:
    k = len(edges) - 1
    ok = np.isfinite(s.values) & (s.steps >= edges[0]) & (s.steps < edges[-1])
    if log:
        ok &= s.values > 0
    idx = np.searchsorted(edges, s.steps[ok], side="right") - 1
    x = np.log(s.values[ok]) if log else s.values[ok]
    sums = np.bincount(idx, weights=x, minlength=k)
    counts = np.bincount(idx, minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        means: FloatArray = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return means


def _span(series: list[Series]) -> tuple[int, int]:
    return min(int(s.steps[0]) for s in series), max(int(s.steps[-1]) for s in series)


def _prepare(
    name: str, base: list[Series], cand: list[Series], width: int, single: bool
) -> _Prepared | str:
    if not base and not cand:
        return f"{name}: logged by neither side"
    if not base or not cand:
        return f"{name}: only in the {'candidate' if not base else 'baseline'}"
    (b_lo, b_hi), (c_lo, c_hi) = _span(base), _span(cand)
    lo, hi = max(b_lo, c_lo), min(b_hi, c_hi)
    if hi <= lo:
        return f"{name}: the two sides share no steps"
    policy = POLICIES.get(name, NEUTRAL)
    log = policy.log and all(
        bool(np.all(s.values[np.isfinite(s.values)] > 0)) for s in [*base, *cand]
    )
    edges = _edges(lo, hi, width)
    b = np.array([window_means(s, edges, log) for s in base])
    c = np.array([window_means(s, edges, log) for s in cand])
    if single:
        tests = within_run_test(c[0] - b[0])
    else:
        tests = [welch(b[:, k], c[:, k]) for k in range(len(edges) - 1)]
    if all(t is None for t in tests):
        return f"{name}: too few windows with data on both sides"
    return _Prepared(name, policy, log, edges, b, c, tests, (base[0].metric, cand[0].metric))


def _effect(
    p: _Prepared, first: int, single: bool, level: float
) -> tuple[float, tuple[float, float], float, float]:
    """Difference over windows [first:], its interval, and the two sides' levels."""
    b, c = p.base[:, first:], p.cand[:, first:]
    with warnings.catch_warnings():  # all-NaN rows give NaN, which is what is wanted
        warnings.simplefilter("ignore", RuntimeWarning)
        b_run, c_run = np.nanmean(b, axis=1), np.nanmean(c, axis=1)
    b_level, c_level = float(np.nanmean(b_run)), float(np.nanmean(c_run))
    if single:
        d = c[0] - b[0]
        d = d[np.isfinite(d)]
        effect = float(d.mean()) if len(d) else math.nan
        if len(d) >= 8:
            ci = block_bootstrap_ci(d, level)
        else:  # too few windows to resample: the windows' noise, taken as independent
            noise = next((t for t in p.tests if t is not None), None)
            sd, df = (noise.se, noise.df) if noise is not None else (math.nan, 1.0)
            ci = t_interval(Estimate(effect, sd / math.sqrt(max(len(d), 1)), df, 1.0), level)
    else:
        est = welch(b_run, c_run)
        effect = c_level - b_level if est is None else est.diff
        ci = (math.nan, math.nan) if est is None else t_interval(est, level)
    if p.log:
        b_level, c_level = math.exp(b_level), math.exp(c_level)
    return effect, ci, b_level, c_level


def end_p_value(p: _Prepared) -> float:
    """The smallest alpha at which :func:`onset_index` finds an onset: the larger p-value of
    the last two testable windows when their differences share a sign, else 1 (a difference
    that has not stayed to the end). One p-value per indicator, for corrections across many
    comparisons."""
    last = [(t.p, t.diff) for t in p.tests if t is not None and math.isfinite(t.p)][-2:]
    if (
        len(last) < 2
        or last[0][1] == 0
        or math.copysign(1.0, last[0][1]) != math.copysign(1.0, last[1][1])
    ):
        return 1.0
    return max(last[0][0], last[1][0])


def _finish(
    p: _Prepared, alpha: float, level: float, single: bool, rejected: bool = True
) -> IndicatorComparison:
    """The indicator's verdict with its windows tested at ``alpha``; ``rejected=False``: the
    family's correction kept the hypothesis of no difference, so there is no onset."""
    pvals = [t.p if t is not None else math.nan for t in p.tests]
    signs = [t.diff if t is not None else 0.0 for t in p.tests]
    first = onset_index(pvals, signs, alpha) if rejected else None
    k = len(p.tests)
    # Without an onset, the effect is the one at the end: over the last quarter of the windows.
    since = first if first is not None else k - max(1, math.ceil(k / 4))
    effect, ci, b_level, c_level = _effect(p, since, single, level)
    windows = tuple(
        WindowStat(
            p.edges[k],
            p.edges[k + 1],
            signs[k] if p.tests[k] is not None else math.nan,
            pvals[k],
            first is not None and k >= first and math.isfinite(pvals[k]),
        )
        for k in range(len(p.tests))
    )
    if first is None:
        verdict, note, direction = Verdict.INDISTINGUISHABLE, "", ""
        early = sum(1 for q in pvals if q <= alpha)
        notes = [f"{early} earlier window(s) p<={alpha:.2g}"] if early else []
        if ci[0] > 0 or ci[1] < 0:
            notes.append("no onset")
        note = "; ".join(notes)
    else:
        verdict, note = judge(p.policy, p.log, effect, b_level, c_level)
        direction = "higher" if effect > 0 else "lower"
    return IndicatorComparison(
        name=p.name,
        baseline_metric=p.metrics[0],
        candidate_metric=p.metrics[1],
        verdict=verdict,
        direction=direction,
        onset_step=p.edges[first] if first is not None else None,
        log=p.log,
        effect=effect,
        ci=ci,
        baseline_level=b_level,
        candidate_level=c_level,
        windows=windows,
        alpha=alpha,
        note=note,
    )


#: bounds of a step's rewards and lengths, read by the no-learning-signal and cap checks:
#: not curves to compare
_NOT_COMPARED = {
    Indicator.REWARD_MAX,
    Indicator.REWARD_MIN,
    Indicator.RESPONSE_LENGTH_MAX,
    Indicator.RESPONSE_LENGTH_MIN,
}


def _names(
    base: Mapping[str, RunData], cand: Mapping[str, RunData], wanted: Sequence[str]
) -> list[str]:
    if wanted:
        return list(dict.fromkeys(wanted))
    present = {n for run in [*base.values(), *cand.values()] for n in run.primary}
    return [i.value for i in Indicator if i.value in present and i not in _NOT_COMPARED]


@dataclass
class PreparedComparison:
    """Both sides cut into windows and tested window by window, before any verdict: what
    :func:`compare_runs` finishes at ``alpha / m`` per indicator, and what a family of
    comparisons (the ledger) finishes at the levels of its own correction."""

    baseline_runs: tuple[str, ...]
    candidate_runs: tuple[str, ...]
    single: bool
    width: int
    prepared: list[_Prepared]
    skipped: list[str]
    series: dict[str, tuple[list[Series], list[Series]]]

    def end_p_values(self) -> dict[str, float]:
        """Per indicator, :func:`end_p_value`."""
        return {p.name: end_p_value(p) for p in self.prepared}

    def finish(
        self, alphas: Mapping[str, float | None], level: float, alpha: float, tests: str
    ) -> ComparisonResult:
        """The result with each indicator's windows tested at ``alphas[name]`` (None: not
        rejected by the correction, so indistinguishable); ``tests`` says how in the basis."""
        results = tuple(
            _finish(p, a if a is not None else alpha, level, self.single, a is not None)
            for p in self.prepared
            for a in [alphas.get(p.name)]
        )
        prepared = self.prepared
        steps = (
            (min(p.edges[0] for p in prepared), max(p.edges[-1] - 1 for p in prepared))
            if prepared
            else (0, 0)
        )
        nb, nc = len(self.baseline_runs), len(self.candidate_runs)
        return ComparisonResult(
            baseline_runs=self.baseline_runs,
            candidate_runs=self.candidate_runs,
            mode="single" if self.single else "seeds",
            window=self.width,
            steps=steps,
            alpha=alpha,
            level=level,
            basis=_basis(self.single, nb, nc, self.width, level, tests),
            indicators=results,
            skipped=tuple(self.skipped),
            series=self.series,
        )


def prepare_comparison(
    baseline: Mapping[str, RunData],
    candidate: Mapping[str, RunData],
    *,
    indicators: Sequence[str] = (),
    window: int | None = None,
) -> PreparedComparison:
    """Align both sides by step, cut the common steps into windows and test each window."""
    if not baseline or not candidate:
        raise ValueError("compare needs at least one run on each side")
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1 step, got {window}")
    single = len(baseline) == 1 and len(candidate) == 1
    width = window if window is not None else _auto_window(baseline, candidate)
    prepared: list[_Prepared] = []
    skipped: list[str] = []
    series: dict[str, tuple[list[Series], list[Series]]] = {}
    for name in _names(baseline, candidate, indicators):
        b = [s for s in (r.find(name) for r in baseline.values()) if s is not None and len(s)]
        c = [s for s in (r.find(name) for r in candidate.values()) if s is not None and len(s)]
        series[name] = (b, c)
        prep = _prepare(name, b, c, width, single)
        if isinstance(prep, str):
            skipped.append(prep)
        else:
            prepared.append(prep)
    return PreparedComparison(
        tuple(baseline), tuple(candidate), single, width, prepared, skipped, series
    )


def compare_runs(
    baseline: Mapping[str, RunData],
    candidate: Mapping[str, RunData],
    *,
    indicators: Sequence[str] = (),
    window: int | None = None,
    alpha: float = 0.05,
    level: float = 0.95,
) -> ComparisonResult:
    """:func:`compare` on runs already collected (run id -> :class:`RunData`, per side)."""
    if not 0 < alpha < 1 or not 0 < level < 1:
        raise ValueError(f"alpha and level must be in (0, 1), got {alpha} and {level}")
    prep = prepare_comparison(baseline, candidate, indicators=indicators, window=window)
    m = max(len(prep.prepared), 1)
    tests = (
        f"onset: fixed-sequence tests from the last window back (2+ windows), each indicator at "
        f"alpha {alpha:g}/{m} (Bonferroni over {m} indicators)"
    )
    return prep.finish({p.name: alpha / m for p in prep.prepared}, level, alpha, tests)


def _auto_window(baseline: Mapping[str, RunData], candidate: Mapping[str, RunData]) -> int:
    """About 80 windows over the steps both sides cover, at least 5 steps each."""
    spans = []
    for runs in (baseline, candidate):
        firsts = [int(s.steps[0]) for r in runs.values() for s in r.series.values() if len(s)]
        lasts = [int(s.steps[-1]) for r in runs.values() for s in r.series.values() if len(s)]
        spans.append((min(firsts, default=0), max(lasts, default=0)))
    n = min(spans[0][1], spans[1][1]) - max(spans[0][0], spans[1][0]) + 1
    return max(5, round(n / 80))


def _basis(single: bool, nb: int, nc: int, width: int, level: float, tests: str) -> str:
    if single:
        return (
            f"one run per side: WITHIN-RUN NOISE ONLY. Each {width}-step window's difference "
            "is judged against the difference's own window-to-window variation; seed-to-seed "
            "variation is not measured, so a significant difference may be a seed effect "
            f"(run 2+ seeds per side to test it). {tests}; {level:.0%} interval: moving-block "
            "bootstrap over the windows from the onset on."
        )
    return (
        f"between-seed variation ({nb} baseline vs {nc} candidate runs): Welch's t on the "
        f"per-run means of {width}-step windows; {tests}; {level:.0%} interval: Welch's t "
        "on the per-run means from the onset on."
    )
