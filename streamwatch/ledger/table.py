"""The ledger as text: the ranked table, then each candidate's indicators (what ``streamwatch
ledger`` prints; ``docs/ledger.md`` holds one)."""

from __future__ import annotations

import math
import textwrap

from streamwatch.ledger.entries import INCIDENTS, Entry, Ledger
from streamwatch.report.compare import IndicatorComparison
from streamwatch.report.policy import Verdict
from streamwatch.report.table import comparison_cells

__all__ = [
    "SHORT",
    "SINGLE_BASELINE",
    "format_ledger",
    "outcome_text",
    "steps_text",
    "verdict_cell",
]

#: column headings of the ranked table
SHORT = {
    "heldout_reward": "held-out",
    "train_reward": "reward",
    "entropy": "entropy",
    "response_length": "length",
    "truncation_ratio": "trunc",
    "reward_std": "r-std",
    "kl": "kl",
    "step_time": "step-time",
    INCIDENTS: "incidents",
}
#: what a ledger with one baseline run says first
SINGLE_BASELINE = (
    "CAUTION: the baseline is one run, so there is no seed spread: a candidate of one run is "
    "judged against within-run noise only, and seeds of one setup differ by more than that "
    "(benchmarks/ledger.py). Read such verdicts as leads; run 2+ baseline seeds for findings."
)
_CELL = {
    Verdict.BETTER: "better",
    Verdict.WORSE: "WORSE",
    Verdict.DIFFERENT: "differs",
    Verdict.INDISTINGUISHABLE: ".",
}


def verdict_cell(entry: Entry, name: str) -> str:
    v = entry.verdicts().get(name)
    return "" if v is None else _CELL[v]


def _num(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else "-"


def outcome_text(ledger: Ledger, entry: Entry, name: str) -> str:
    """``on course for 0.62 (0.58 to 0.66); baseline 0.58`` or ``ended at 0.9; baseline ...``."""
    got = entry.outcome.get(name)
    if got is None:
        return ""
    kind, value, f = got
    base = ledger.baseline_final.get(name, math.nan)
    if kind == "ended":
        head = f"ended at {_num(value)}"
    elif f is None:
        head = "on course for ? (too few points to forecast)"
    else:
        head = (
            f"on course for {f.value:.3g}, {f.lo:.3g} to {f.hi:.3g} "
            f"({f.level:.0%}, {f.method} forecast from step {f.seen})"
        )
    return f"{head}; baseline {_num(base)}"


def steps_text(ledger: Ledger, entry: Entry) -> str:
    lo, hi = entry.comparison.steps
    if entry.partial:
        return f"{lo}-{hi} of {ledger.baseline_last_step} (running)"
    return f"{lo}-{hi}"


def _level(entry: Entry, name: str) -> str:
    at = entry.levels.get(name)
    return "kept" if at is None else f"{at:.2g}"


def _row(c: IndicatorComparison, entry: Entry) -> tuple[str, ...]:
    return (*comparison_cells(c), _level(entry, c.name))


def _grid(rows: list[tuple[str, ...]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, r in enumerate(rows):
        cells = [
            r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i]) for i in range(len(r))
        ]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def _detail(ledger: Ledger, rank: int, entry: Entry) -> list[str]:
    arm = entry.arm
    lines = [
        "",
        f"{rank}. {arm.name}" + (f": {arm.description}" if arm.description else ""),
        f"   runs: {', '.join(entry.runs)}; matched steps {steps_text(ledger, entry)}; "
        f"{entry.comparison.window}-step windows, "
        + ("between-seed spread" if entry.comparison.mode == "seeds" else "within-run noise only"),
    ]
    for name in ("train_reward", "heldout_reward"):
        text = outcome_text(ledger, entry, name)
        if text:
            lines.append(f"   {SHORT[name]}: {text}")
    header = ("indicator", "verdict", "from step", "baseline", "candidate", "effect", "level")
    rows = [header, *(_row(c, entry) for c in entry.comparison.indicators)]
    inc = entry.incidents
    rows.append(
        (
            INCIDENTS,
            inc.verdict.value,
            "-",
            f"{inc.baseline_per_run:.3g}/run",
            f"{inc.candidate_per_run:.3g}/run",
            f"{inc.candidate} vs {inc.baseline} (p={inc.p:.2g})",
            _level(entry, INCIDENTS),
        )
    )
    lines.extend("   " + line for line in _grid(rows, {2, 3, 4}))
    for s in entry.comparison.skipped:
        lines.append(f"   skipped {s}")
    return lines


def format_ledger(ledger: Ledger, width: int = 100) -> str:
    """The ranked table, each candidate's detail and the basis underneath."""
    base = ", ".join(ledger.baseline)
    lines = [
        f"baseline: {len(ledger.baseline)} run(s): {base} (steps 0-{ledger.baseline_last_step})",
        f"{len(ledger.entries)} candidate(s); {ledger.comparisons} comparisons corrected by "
        f"{ledger.correction_text} at {ledger.alpha:g}",
    ]
    if ledger.single_baseline:
        lines.extend(textwrap.wrap(SINGLE_BASELINE, width))
    lines.append("")
    names = [n for n in SHORT if any(verdict_cell(e, n) for e in ledger.entries)]
    header = ("rank", "candidate", "steps", "+", "-", *(SHORT[n] for n in names))
    rows: list[tuple[str, ...]] = [header]
    for rank, e in enumerate(ledger.entries, 1):
        rows.append(
            (
                str(rank),
                e.arm.name,
                steps_text(ledger, e),
                str(e.better),
                str(e.worse),
                *(verdict_cell(e, n) for n in names),
            )
        )
    lines.extend(_grid(rows, {0, 3, 4}))
    for rank, e in enumerate(ledger.entries, 1):
        lines.extend(_detail(ledger, rank, e))
    if ledger.unassigned:
        lines.append("")
        lines.append(f"not in the ledger (no selector chose them): {', '.join(ledger.unassigned)}")
    basis = ledger.entries[0].comparison.basis if ledger.entries else ""
    lines.append("")
    lines.extend(
        textwrap.wrap(
            "+/-: better/worse verdicts; '.': not distinguishable from the baseline; WORSE, "
            "better, differs: significant after the correction. Ranked by better minus worse, "
            "then the held-out effect. effect: candidate vs baseline over the windows from "
            f"the onset on (without one: the last quarter), {ledger.level:.0%} interval; x = "
            "ratio. level: the corrected level the comparison was rejected at (kept: not "
            "rejected). incidents: distinct warning/critical incidents within the matched "
            "steps, exact binomial test on their split between the sides. Running candidates "
            "are judged on the steps they have; their outcome is a forecast to the "
            f"baseline's last step. Basis: {basis}",
            width,
        )
    )
    return "\n".join(lines)
