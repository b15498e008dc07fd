"""The intervention ledger: a baseline (one run or several seeds) and any number of
candidates, each one intervention, judged on every health indicator at once.

Per candidate and indicator, the comparison is ``compare``'s (:mod:`streamwatch.report.compare`):
both sides aligned at matched steps (the steps both have: a candidate still running is judged on the
steps it has), cut into windows, each window tested against the baseline's seed spread (Welch's t
over seeds; a single run per side: within-run noise only). Each comparison gets one p-value, for
"the difference stays to the end of the matched steps"
(:func:`~streamwatch.report.compare.end_p_value`), and the whole family (every candidate x every
indicator, incidents included) is corrected at once (:mod:`streamwatch.report.correction`: Holm by
default, or Benjamini-Hochberg). A rejected comparison is then followed back to its onset at the
level the correction rejected it at; its effect and interval are ``compare``'s.

Incidents raised: the warning and critical incidents (distinct fingerprints) the engine
raised on each side within the matched steps; with equal steps per run, under no effect a
candidate's share of the incidents is binomial with its share of the runs (an exact test).

Candidates are ranked by better minus worse verdicts, then by the held-out effect (the train
reward's without a held-out), then by name. For a candidate that has fewer steps than the baseline,
:func:`~streamwatch.report.forecast.forecast` reads where its train reward and held-out are heading
at the baseline's last step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as _scipy_stats

from streamwatch.incidents import Incident, Severity, Status
from streamwatch.ledger.runs import Arm, RecordedRun
from streamwatch.report.compare import ComparisonResult, PreparedComparison, prepare_comparison
from streamwatch.report.correction import CORRECTIONS, correct
from streamwatch.report.data import RunData
from streamwatch.report.forecast import Forecast, final_value, forecast
from streamwatch.report.policy import Verdict

__all__ = [
    "INCIDENTS",
    "LEDGER_INDICATORS",
    "Entry",
    "IncidentEffect",
    "Ledger",
    "build_ledger",
]

#: the indicators a ledger judges by default (those a run logs), in this order
LEDGER_INDICATORS = (
    "heldout_reward",
    "train_reward",
    "entropy",
    "response_length",
    "truncation_ratio",
    "reward_std",
    "kl",
    "step_time",
)
#: the row of the incidents raised
INCIDENTS = "incidents"
_OUTCOMES = ("heldout_reward", "train_reward")


@dataclass(frozen=True)
class IncidentEffect:
    """Warning and critical incidents raised within the matched steps, per side."""

    baseline: int
    baseline_runs: int
    candidate: int
    candidate_runs: int
    p: float
    verdict: Verdict = Verdict.INDISTINGUISHABLE
    alpha: float | None = None

    @property
    def baseline_per_run(self) -> float:
        return self.baseline / self.baseline_runs

    @property
    def candidate_per_run(self) -> float:
        return self.candidate / self.candidate_runs


@dataclass(frozen=True)
class Entry:
    """One candidate's row of the ledger."""

    arm: Arm
    runs: tuple[str, ...]
    comparison: ComparisonResult
    incidents: IncidentEffect
    candidate_incidents: tuple[Incident, ...]
    last_step: int  # the candidate's last step
    partial: bool  # fewer steps than the baseline: judged on the steps it has
    levels: dict[str, float | None]  # per indicator, the corrected level (None: kept)
    outcome: dict[str, tuple[str, float, Forecast | None]] = field(default_factory=dict)

    def verdicts(self) -> dict[str, Verdict]:
        out = {c.name: c.verdict for c in self.comparison.indicators}
        out[INCIDENTS] = self.incidents.verdict
        return out

    @property
    def better(self) -> int:
        return sum(v is Verdict.BETTER for v in self.verdicts().values())

    @property
    def worse(self) -> int:
        return sum(v is Verdict.WORSE for v in self.verdicts().values())

    def key_effect(self) -> float:
        """The held-out effect (else the train reward's): the tie-break of the ranking."""
        for name in _OUTCOMES:
            c = self.comparison.get(name)
            if c is not None and math.isfinite(c.effect):
                return c.effect
        return 0.0


@dataclass(frozen=True)
class Ledger:
    baseline: tuple[str, ...]
    baseline_last_step: int
    baseline_final: dict[str, float]
    entries: tuple[Entry, ...]  # ranked, best first
    correction: str
    alpha: float
    level: float
    comparisons: int
    unassigned: tuple[str, ...] = ()
    baseline_incidents: tuple[Incident, ...] = ()
    baseline_data: tuple[RunData, ...] = ()

    @property
    def single_baseline(self) -> bool:
        """One baseline run: candidates of one run are judged on within-run noise only."""
        return len(self.baseline) == 1

    @property
    def correction_text(self) -> str:
        return CORRECTIONS[self.correction]

    def verdict_counts(self) -> dict[Verdict, int]:
        counts = dict.fromkeys(Verdict, 0)
        for e in self.entries:
            for v in e.verdicts().values():
                counts[v] += 1
        return counts


def _raised(incidents: Sequence[Incident], last: int) -> int:
    """Distinct warning or critical incidents firing at or before step ``last``."""
    return len(
        {
            i.id
            for i in incidents
            if i.status is Status.FIRING
            and i.severity.rank >= Severity.WARNING.rank
            and i.step <= last
        }
    )


def _incident_p(nb: int, runs_b: int, nc: int, runs_c: int) -> float:
    total = nb + nc
    if total == 0:
        return 1.0
    share = runs_c / (runs_b + runs_c)
    return float(_scipy_stats.binomtest(nc, total, share).pvalue)


def _final(runs: Sequence[RunData], name: str) -> float:
    values = []
    for run in runs:
        s = run.find(name)
        if s is not None and len(s):
            values.append(final_value(s.steps.astype(np.float64), s.values, int(s.steps[-1])))
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _outcome(
    runs: Sequence[RunData], name: str, partial: bool, target: int
) -> tuple[str, float, Forecast | None]:
    """("ended", final value, None), or ("on course", forecast value, the forecast) for a
    candidate with fewer steps: the mean of its runs' forecasts (and of their bounds)."""
    if not partial:
        return "ended", _final(runs, name), None
    found = [f for f in (forecast(r, name, target) for r in runs) if f is not None]
    if not found:
        return "on course", math.nan, None
    if len(found) == 1:
        return "on course", found[0].value, found[0]
    f0 = found[0]
    mean = Forecast(
        f0.method,
        float(np.mean([f.value for f in found])),
        float(np.mean([f.lo for f in found])),
        float(np.mean([f.hi for f in found])),
        min(f.seen for f in found),
        f0.target,
        f0.level,
    )
    return "on course", mean.value, mean


def build_ledger(
    baseline: Sequence[RecordedRun],
    candidates: Sequence[tuple[Arm, Sequence[RecordedRun]]],
    *,
    indicators: Sequence[str] = LEDGER_INDICATORS,
    correction: str = "holm",
    alpha: float = 0.05,
    level: float = 0.95,
    window: int | None = None,
    unassigned: Sequence[str] = (),
) -> Ledger:
    """Judge every candidate against the baseline (see the module doc)."""
    if not baseline:
        raise ValueError("a ledger needs at least one baseline run")
    if not 0 < alpha < 1 or not 0 < level < 1:
        raise ValueError(f"alpha and level must be in (0, 1), got {alpha} and {level}")
    correct({}, alpha, correction)  # an unknown correction fails before any work
    base = {r.key: r.data for r in baseline}
    base_last = max(r.last_step for r in baseline)
    present = {
        n for r in [*baseline, *(r for _, rs in candidates for r in rs)] for n in r.data.primary
    }
    wanted = [n for n in indicators if n in present or n not in LEDGER_INDICATORS]
    preps: list[tuple[Arm, Sequence[RecordedRun], PreparedComparison, IncidentEffect]] = []
    pvalues: dict[tuple[str, str], float] = {}
    for arm, runs in candidates:
        prep = prepare_comparison(
            base, {r.key: r.data for r in runs}, indicators=wanted, window=window
        )
        for name, p in prep.end_p_values().items():
            pvalues[(arm.name, name)] = p
        last = max((p.edges[-1] - 1 for p in prep.prepared), default=base_last)
        nb = sum(_raised(r.incidents, last) for r in baseline)
        nc = sum(_raised(r.incidents, last) for r in runs)
        inc = IncidentEffect(
            nb, len(baseline), nc, len(runs), _incident_p(nb, len(baseline), nc, len(runs))
        )
        pvalues[(arm.name, INCIDENTS)] = inc.p
        preps.append((arm, runs, prep, inc))
    levels = correct({f"{a}\x00{i}": p for (a, i), p in pvalues.items()}, alpha, correction)
    m = len(pvalues)
    tests = (
        f"one test per candidate and indicator (the difference holds over the last two "
        f"windows), {m} in all, corrected by {CORRECTIONS[correction]} at {alpha:g}; a "
        "rejected one's onset: fixed-sequence tests from the last window back at the level "
        "it was rejected at"
    )
    entries = []
    for arm, runs, prep, inc in preps:
        mine = {i: levels[f"{arm.name}\x00{i}"] for (a, i) in pvalues if a == arm.name}
        result = prep.finish(mine, level, alpha, tests)
        at = mine.get(INCIDENTS)
        if at is not None:
            higher = inc.candidate_per_run > inc.baseline_per_run
            inc = IncidentEffect(
                inc.baseline,
                inc.baseline_runs,
                inc.candidate,
                inc.candidate_runs,
                inc.p,
                Verdict.WORSE if higher else Verdict.BETTER,
                at,
            )
        last = max(r.last_step for r in runs)
        partial = last < base_last
        datas = [r.data for r in runs]
        outcome = {n: _outcome(datas, n, partial, base_last) for n in _OUTCOMES if n in present}
        entries.append(
            Entry(
                arm,
                tuple(r.key for r in runs),
                result,
                inc,
                tuple(i for r in runs for i in r.incidents),
                last,
                partial,
                mine,
                outcome,
            )
        )
    entries.sort(key=lambda e: (-(e.better - e.worse), -e.key_effect(), e.arm.name))
    base_data = [r.data for r in baseline]
    return Ledger(
        baseline=tuple(base),
        baseline_last_step=base_last,
        baseline_final={n: _final(base_data, n) for n in _OUTCOMES if n in present},
        entries=tuple(entries),
        correction=correction,
        alpha=alpha,
        level=level,
        comparisons=m,
        unassigned=tuple(unassigned),
        baseline_incidents=tuple(i for r in baseline for i in r.incidents),
        baseline_data=tuple(base_data),
    )


def verdict_of(entry: Entry, name: str) -> Verdict | None:
    """The entry's verdict on ``name`` (an indicator or ``incidents``), None if not judged."""
    return entry.verdicts().get(name)
