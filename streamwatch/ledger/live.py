"""The ledger as a live view of the runs the service consumes.

The baseline and the candidates are chosen as ``streamwatch ledger`` chooses them
(:mod:`streamwatch.ledger.runs`): a selector is ``tag:KEY=VALUE`` (a run any of whose events carries
the tag) or a glob on the run id, and a candidate is ``[NAME=]SELECTOR`` with a one-line description
of its intervention. The verdicts are :func:`~streamwatch.ledger.entries.build_ledger`'s, on the
series the live report already holds (:class:`~streamwatch.live.report.LiveReport`): every run
judged on the steps it has so far. It is computed when the report is written, never per event, over
at most ``max_runs`` runs (the first seen that a selector chooses).

>>> view = LedgerView.parse(["tag:arm=base"], [("kl=tag:arm=kl", "KL coefficient 0.01")])
>>> [(a.name, a.selector, a.description) for a in view.candidates]
[('kl', 'tag:arm=kl', 'KL coefficient 0.01')]
>>> from streamwatch.report.data import RunData
>>> live_ledger(view, {"r1": RunData("r1")}, {}, set(), []).notes
("waiting for the baseline's runs (tag:arm=base)", 'no run yet for candidate(s): kl')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from streamwatch.incidents import Incident
from streamwatch.ledger.entries import Entry, Ledger, build_ledger
from streamwatch.ledger.runs import Arm, RecordedRun, assign, matches, parse_arm
from streamwatch.report.correction import CORRECTIONS
from streamwatch.report.data import RunData

__all__ = ["LedgerView", "LiveLedger", "live_ledger"]


@dataclass(frozen=True)
class LedgerView:
    """Which runs the live ledger judges, and how (the options of ``streamwatch ledger``)."""

    baseline: tuple[str, ...]
    candidates: tuple[Arm, ...]
    correction: str = "holm"
    alpha: float = 0.05
    max_runs: int = 64

    def __post_init__(self) -> None:
        if not self.baseline or not self.candidates:
            raise ValueError("a live ledger needs a baseline selector and at least one candidate")
        if self.correction not in CORRECTIONS:
            raise ValueError(
                f"unknown correction {self.correction!r}; known: {', '.join(CORRECTIONS)}"
            )
        if self.max_runs < 2:
            raise ValueError(f"max_runs must be >= 2, got {self.max_runs}")

    @classmethod
    def parse(
        cls,
        baseline: Iterable[str],
        candidates: Iterable[tuple[str, str]],
        *,
        correction: str = "holm",
        alpha: float = 0.05,
        max_runs: int = 64,
    ) -> LedgerView:
        """From the selectors as written: candidates as ``([NAME=]SELECTOR, DESCRIPTION)``."""
        arms = tuple(parse_arm(sel, text) for sel, text in candidates)
        return cls(tuple(baseline), arms, correction, alpha, max_runs)


@dataclass(frozen=True)
class LiveLedger:
    """The ledger as it stands (None until the baseline and a candidate have runs), each
    candidate's status (``still running, judged on 120 steps (0-119)``), the baseline's, and
    what the view says besides (runs not judged, candidates with no run yet)."""

    ledger: Ledger | None
    status: dict[str, str] = field(default_factory=dict)
    baseline: str = ""
    notes: tuple[str, ...] = ()


def _status(entry: Entry, finished: set[str]) -> str:
    lo, hi = entry.comparison.steps
    running = [k for k in entry.runs if k not in finished]
    n = hi - lo + 1
    if running:
        return f"still running, judged on {n} steps ({lo}-{hi})"
    return f"ended, judged on {n} steps ({lo}-{hi})"


def _baseline_status(base: Sequence[RecordedRun], finished: set[str]) -> str:
    running = sum(r.key not in finished for r in base)
    last = max(r.last_step for r in base)
    state = f"{running} still running" if running else "all ended"
    return (
        f"baseline: {len(base)} run(s) ({', '.join(r.key for r in base)}), {state}, at step {last}"
    )


def live_ledger(
    view: LedgerView,
    runs: Mapping[str, RunData],
    tags: Mapping[str, Mapping[str, str]],
    finished: set[str],
    incidents: Sequence[Incident],
) -> LiveLedger:
    """The ledger of the ``runs`` held now (see the module doc). ``tags``: per run, the tags
    its events carried; ``finished``: the runs whose end-of-run marker came."""
    by_run: dict[str, list[Incident]] = {}
    for inc in incidents:
        by_run.setdefault(inc.run_id, []).append(inc)
    selectors = [*view.baseline, *(a.selector for a in view.candidates)]
    chosen = []
    for run_id, data in runs.items():
        run = RecordedRun(run_id, None, data, dict(tags.get(run_id, {})), by_run.get(run_id, []))
        if any(matches(s, run) for s in selectors):
            chosen.append(run)
    notes = []
    if len(chosen) > view.max_runs:
        notes.append(
            f"{len(chosen) - view.max_runs} more run(s) match the selectors; the ledger judges "
            f"the first {view.max_runs} seen"
        )
        chosen = chosen[: view.max_runs]
    chosen.sort(key=lambda r: r.key)  # the same ledger whatever order the runs arrived in
    arms = [a for a in view.candidates if any(matches(a.selector, r) for r in chosen)]
    waiting = [a.name or a.selector for a in view.candidates if a not in arms]
    if waiting:
        notes.append(f"no run yet for candidate(s): {', '.join(waiting)}")
    if not any(matches(s, r) for s in view.baseline for r in chosen):
        why = f"waiting for the baseline's runs ({', '.join(view.baseline)})"
        return LiveLedger(None, notes=(why, *notes))
    if not arms:
        return LiveLedger(None, notes=tuple(notes))
    try:
        base, groups, _ = assign(chosen, view.baseline, arms)
        ledger = build_ledger(base, groups, correction=view.correction, alpha=view.alpha)
    except ValueError as exc:  # a run chosen by two arms: said on the page, until it is fixed
        return LiveLedger(None, notes=(str(exc), *notes))
    status = {e.arm.name: _status(e, finished) for e in ledger.entries}
    return LiveLedger(ledger, status, _baseline_status(base, finished), tuple(notes))
