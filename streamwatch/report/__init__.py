"""Reports and comparisons of recorded runs.

- :func:`build_report`: one self-contained HTML file (opens offline) with, per run, the
  DAPO-style panel (response length, train reward, entropy, token probability, held-out
  score) and the engine's incidents drawn where they fired.
- :func:`compare`: a candidate against a baseline, per indicator better / worse / different /
  indistinguishable, from which step and by how much; :func:`format_table` prints it.
- :class:`LiveReport`: the same report kept fresh by the live service, with bounded memory.
- :func:`add_report_commands` / :func:`run_report_command`: the ``report`` and ``compare``
  sub-commands.

Drawing needs plotly (the ``report`` extra); comparing does not.
"""

from .cli import add_report_commands, run_report_command
from .compare import (
    POLICIES,
    ComparisonResult,
    IndicatorComparison,
    Policy,
    Verdict,
    WindowStat,
)
from .compare_files import compare
from .compare_plot import write_comparison
from .data import RunData, Series, SeriesCollector, collect_runs
from .downsample import downsample, m4_indices
from .html import DEFAULT_PANELS, ReportSummary, build_report, render_report
from .live import LiveReport
from .table import format_effect, format_table

__all__ = [
    "DEFAULT_PANELS",
    "POLICIES",
    "ComparisonResult",
    "IndicatorComparison",
    "LiveReport",
    "Policy",
    "ReportSummary",
    "RunData",
    "Series",
    "SeriesCollector",
    "Verdict",
    "WindowStat",
    "add_report_commands",
    "build_report",
    "collect_runs",
    "compare",
    "downsample",
    "format_effect",
    "format_table",
    "m4_indices",
    "render_report",
    "run_report_command",
    "write_comparison",
]
