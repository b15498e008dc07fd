"""Comparing recorded files: read both groups, compare them, draw the overlay plots.

The statistics are :func:`~streamwatch.report.compare.compare_runs`'s; this module only reads
the files and writes the plots, so that the comparison itself imports no drawing code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from streamwatch.config import Config
from streamwatch.report.compare import ComparisonResult, compare_runs, load_group
from streamwatch.report.compare_plot import write_comparison
from streamwatch.report.data import is_indicator

__all__ = ["compare"]


def compare(
    baseline: Sequence[str | Path],
    candidate: Sequence[str | Path],
    *,
    out: Path | None = None,
    indicators: Sequence[str] = (),
    config: Config | None = None,
    window: int | None = None,
    alpha: float = 0.05,
    level: float = 0.95,
) -> ComparisonResult:
    """Compare two groups of recorded runs (see the module doc); write overlay plots to
    ``out`` (HTML) if given. ``indicators``: compare only these indicators or metric
    names (default: every indicator both sides log)."""
    if not baseline or not candidate:
        raise ValueError("compare needs at least one baseline and one candidate file")
    extra = [n for n in indicators if not is_indicator(n)]
    base, cand = load_group(baseline, config, extra), load_group(candidate, config, extra)
    for side, runs in (("baseline", base), ("candidate", cand)):
        if not runs:
            raise ValueError(f"no runs could be read from the {side} file(s)")
    result = compare_runs(
        base, cand, indicators=indicators, window=window, alpha=alpha, level=level
    )
    if out is None:
        return result
    result = replace(result, out=Path(out))
    write_comparison(result, Path(out))
    return result
