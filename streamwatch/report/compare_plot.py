"""Overlay plots of a comparison: every run of both sides per indicator, the per-window group
means that were tested, and the onset, in one self-contained HTML file."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import numpy as np

from streamwatch.report.axes import axis_title
from streamwatch.report.compare import ComparisonResult, IndicatorComparison, Verdict, window_means
from streamwatch.report.data import Series
from streamwatch.report.downsample import downsample
from streamwatch.report.page import JsMode, Page
from streamwatch.report.table import format_effect, verdict_text

__all__ = ["write_comparison"]

BASELINE, CANDIDATE = "#3b6ea8", "#e8710a"
_VERDICT_COLOURS = {
    Verdict.BETTER: "#1a7f37",
    Verdict.WORSE: "#cf222e",
    Verdict.DIFFERENT: "#8250df",
    Verdict.INDISTINGUISHABLE: "#6e7781",
}


def _group_means(c: IndicatorComparison, series: list[Series]) -> tuple[Any, Any]:
    edges = [w.start for w in c.windows] + [c.windows[-1].stop]
    means = np.array([window_means(s, edges, c.log) for s in series])
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(means)
        level = np.where(
            ok.any(axis=0), np.nansum(means, axis=0) / np.maximum(ok.sum(0), 1), np.nan
        )
    if c.log:
        level = np.exp(level)
    centres = (np.asarray(edges[:-1]) + np.asarray(edges[1:]) - 1) / 2.0
    return centres, level


def _traces(c: IndicatorComparison, side: str, series: list[Series], max_points: int) -> list[Any]:
    import plotly.graph_objects as go

    colour = BASELINE if side == "baseline" else CANDIDATE
    many = len(series) > 1
    out = []
    for s in series:
        steps, values = downsample(s.steps, s.values, max_points)
        out.append(
            go.Scatter(
                x=steps.astype(np.int32),
                y=np.where(np.isfinite(values), values, np.nan).astype(np.float32),
                mode="lines",
                line={"width": 1.0 if many else 1.5, "color": colour},
                opacity=0.45 if many else 0.9,
                name=f"{side}: {s.metric}",
                hovertemplate=f"{side} step %{{x}}<br>%{{y:.5g}}<extra></extra>",
                meta={"role": "run", "side": side},
            )
        )
    if many and c.windows:
        x, y = _group_means(c, series)
        out.append(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                line={"width": 2.6, "color": colour, "shape": "hvh"},
                connectgaps=True,
                name=f"{side} mean per window",
                hovertemplate=f"{side} mean<br>step %{{x}}<br>%{{y:.5g}}<extra></extra>",
                meta={"role": "mean", "side": side},
            )
        )
    return out


def _figure(result: ComparisonResult, max_points: int) -> tuple[Any, int]:
    from plotly.subplots import make_subplots

    comps = list(result.indicators)
    cols = 2 if len(comps) > 1 else 1
    rows = max(1, math.ceil(len(comps) / cols))
    titles = []
    for c in comps:
        since = f" from step {c.onset_step}" if c.onset_step is not None else ""
        titles.append(f"{c.name}: {verdict_text(c)}{since}")
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=titles,
        vertical_spacing=min(0.1, 0.3 / rows),
        horizontal_spacing=0.07,
    )
    for i, c in enumerate(comps):
        row, col = i // cols + 1, i % cols + 1
        base, cand = result.series.get(c.name, ([], []))
        for side, group in (("baseline", base), ("candidate", cand)):
            for trace in _traces(c, side, group, max_points):
                fig.add_trace(trace, row=row, col=col)
        fig.update_yaxes(title_text=axis_title(c.name, c.name), row=row, col=col)
        if c.onset_step is not None and c.windows:
            colour = _VERDICT_COLOURS[c.verdict]
            fig.add_vrect(
                x0=c.onset_step,
                x1=c.windows[-1].stop - 1,
                fillcolor=colour,
                opacity=0.08,
                line_width=0,
                row=row,
                col=col,
            )
            fig.add_vline(
                x=c.onset_step,
                line={"color": colour, "dash": "dash", "width": 1.5},
                row=row,
                col=col,
            )
    fig.update_layout(
        height=90 + 250 * rows,
        margin={"l": 70, "r": 20, "t": 60, "b": 35},
        showlegend=False,
        hovermode="closest",
        title={"text": "baseline (blue) vs candidate (orange)", "x": 0.01},
    )
    fig.update_annotations(font_size=12.5)
    fig.update_yaxes(title_font_size=11, title_standoff=2)
    for k in range(2, len(comps) + 1):
        fig.layout[f"xaxis{k}"].matches = "x"
    return fig, 90 + 250 * rows


def _table(result: ComparisonResult) -> str:
    e = html.escape
    rows = []
    for c in result.indicators:
        cls = c.verdict.value if c.verdict is not Verdict.INDISTINGUISHABLE else "muted"
        verdict = verdict_text(c)
        rows.append(
            f'<tr><td>{e(c.name)}</td><td class="{cls}">{e(verdict)}</td>'
            f'<td class="num">{"" if c.onset_step is None else c.onset_step}</td>'
            f'<td class="num">{c.baseline_level:.4g}</td>'
            f'<td class="num">{c.candidate_level:.4g}</td>'
            f'<td>{e(format_effect(c))}</td><td class="muted">{e(c.note)}</td></tr>'
        )
    skipped = "".join(f"<li>{e(s)}</li>" for s in result.skipped)
    return (
        "<table><thead><tr><th>indicator</th><th>verdict</th><th>from step</th>"
        f"<th>baseline</th><th>candidate</th><th>effect [{result.level:.0%} interval]</th>"
        "<th>note</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + (f'<ul class="muted">{skipped}</ul>' if skipped else "")
        + f'<p class="muted">Basis: {e(result.basis)}</p>'
    )


def write_comparison(
    result: ComparisonResult, out: Path, *, max_points: int = 1000, js: JsMode = "gzip"
) -> Path:
    """Write the comparison (table and overlay plots) as one self-contained HTML file."""
    page = Page(
        "streamwatch compare",
        [
            "baseline: " + ", ".join(result.baseline_runs),
            "candidate: " + ", ".join(result.candidate_runs),
            f"steps {result.steps[0]}-{result.steps[1]} in {result.window}-step windows",
        ],
    )
    page.add_heading("Verdicts")
    page.add_html(_table(result))
    if result.indicators:
        page.add_heading("Overlays")
        fig, height = _figure(result, max_points)
        page.add_figure(fig, height)
    out.write_text(page.render(js), encoding="utf-8")
    return out
