"""The terminal table of a comparison (what ``streamwatch compare`` prints)."""

from __future__ import annotations

import math
import textwrap

from streamwatch.report.compare import ComparisonResult, IndicatorComparison, Verdict

__all__ = ["comparison_cells", "end_shift", "format_effect", "format_table", "verdict_text"]


def _num(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:.4g}"


def format_effect(c: IndicatorComparison) -> str:
    """The effect and its interval: ``x0.42 [0.31, 0.55]`` (ratios) or ``+0.041 [...]``."""
    lo, hi = c.ci
    if not math.isfinite(c.effect):
        return "-"
    if c.log:
        return f"x{math.exp(c.effect):.3g} [{_ratio(lo)}, {_ratio(hi)}]"
    rel = c.relative
    tail = f" ({rel:+.1%})" if math.isfinite(rel) else ""
    return f"{c.effect:+.3g} [{_signed(lo)}, {_signed(hi)}]{tail}"


def _ratio(x: float) -> str:
    return f"{math.exp(x):.3g}" if math.isfinite(x) else "?"


def _signed(x: float) -> str:
    return f"{x:+.3g}" if math.isfinite(x) else "?"


def end_shift(c: IndicatorComparison) -> str:
    """``"higher"``/``"lower"`` when no onset was found but the end's interval excludes 0:
    a shift too small for the window-by-window tests, which is not "indistinguishable"."""
    if c.verdict is not Verdict.INDISTINGUISHABLE:
        return ""
    lo, hi = c.ci
    return "higher" if lo > 0 else "lower" if hi < 0 else ""


def verdict_text(c: IndicatorComparison) -> str:
    """The verdict as the table and the plots print it."""
    if c.verdict is Verdict.INDISTINGUISHABLE:
        shift = end_shift(c)
        return f"end shift ({shift})" if shift else c.verdict.value
    return f"{c.verdict.value} ({c.direction})"


def comparison_cells(c: IndicatorComparison) -> tuple[str, ...]:
    """Indicator, verdict, onset, the two levels and the effect: the cells of a table row."""
    return (
        c.name,
        verdict_text(c),
        "-" if c.onset_step is None else str(c.onset_step),
        _num(c.baseline_level),
        _num(c.candidate_level),
        format_effect(c),
    )


def _note(c: IndicatorComparison) -> str:
    parts = [c.note] if c.note else []
    if c.baseline_metric != c.candidate_metric:
        parts.append(f"{c.baseline_metric} vs {c.candidate_metric}")
    if c.verdict is not Verdict.INDISTINGUISHABLE:
        sig = sum(w.significant for w in c.windows)
        parts.append(f"{sig}/{sum(math.isfinite(w.p) for w in c.windows)} windows")
    return "; ".join(parts)


def format_table(result: ComparisonResult, width: int = 100) -> str:
    """The comparison as a fixed-width table with its statistical basis underneath."""

    def runs(names: tuple[str, ...]) -> str:
        shown = ", ".join(names[:4]) + (f", … ({len(names)} runs)" if len(names) > 4 else "")
        return f"{len(names)} run{'s' if len(names) != 1 else ''}: {shown}"

    lo, hi = result.steps
    lines = [
        f"baseline  {runs(result.baseline_runs)}",
        f"candidate {runs(result.candidate_runs)}",
        f"steps {lo}-{hi} in {result.window}-step windows",
        "",
    ]
    header = (
        "indicator",
        "verdict",
        "from step",
        "baseline",
        "candidate",
        "effect [interval]",
        "note",
    )
    rows: list[tuple[str, ...]] = [header]
    for c in result.indicators:
        rows.append((*comparison_cells(c), _note(c)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    right = {2, 3, 4}
    for r in rows:
        cells = [
            r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i])
            for i in range(len(widths))
        ]
        lines.append(("  ".join(cells) + "  " + r[-1]).rstrip())
    lines.insert(5, "  ".join("-" * w for w in widths))
    for s in result.skipped:
        lines.append(f"skipped {s}")
    lines.append("")
    lines.extend(
        textwrap.wrap(
            f"effect: candidate vs baseline over the windows from the onset on (without an "
            f"onset: over the last quarter of the windows), with its {result.level:.0%} "
            "interval; x = ratio, for quantities compared on a log scale. "
            f"Basis: {result.basis}",
            width,
        )
    )
    if result.out is not None:
        lines.append(f"overlay plots: {result.out}")
    return "\n".join(lines)
