"""Reports and comparisons of recorded runs.

- :func:`build_report`: one self-contained HTML file (opens offline) with, per run, the
  DAPO-style panel (response length, train reward, entropy, token probability, held-out
  score) and the engine's incidents drawn where they fired.
- :func:`compare`: a candidate against a baseline, per indicator better / worse / different /
  indistinguishable, from which step and by how much; :func:`format_table` prints it.

Drawing needs plotly (the ``report`` extra); comparing does not.
"""

from streamwatch.report.compare import (
    POLICIES,
    ComparisonResult,
    IndicatorComparison,
    Policy,
    Verdict,
    WindowStat,
)
from streamwatch.report.compare_files import compare
from streamwatch.report.compare_plot import write_comparison
from streamwatch.report.data import RunData, Series, SeriesCollector, collect_runs
from streamwatch.report.downsample import downsample, m4_indices
from streamwatch.report.html import DEFAULT_PANELS, ReportSummary, build_report, render_report
from streamwatch.report.table import format_effect, format_table

__all__ = [
    "DEFAULT_PANELS",
    "POLICIES",
    "ComparisonResult",
    "IndicatorComparison",
    "Policy",
    "ReportSummary",
    "RunData",
    "Series",
    "SeriesCollector",
    "Verdict",
    "WindowStat",
    "build_report",
    "collect_runs",
    "compare",
    "downsample",
    "format_effect",
    "format_table",
    "m4_indices",
    "render_report",
    "write_comparison",
]
