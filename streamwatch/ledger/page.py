"""The ledger as one self-contained HTML page: the ranked table, per indicator the curves of
every candidate over the baseline's seed band, and per candidate its verdicts, its outcome
(or where it is heading) and the incidents its runs raised."""

from __future__ import annotations

import html
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from streamwatch.incidents import Incident, Status
from streamwatch.ledger.entries import INCIDENTS, Entry, Ledger
from streamwatch.ledger.table import SHORT, SINGLE_BASELINE, outcome_text, steps_text, verdict_cell
from streamwatch.report.compare import window_means
from streamwatch.report.compare_plot import BASELINE
from streamwatch.report.data import Series
from streamwatch.report.downsample import downsample
from streamwatch.report.html import SEVERITY_COLOURS
from streamwatch.report.page import JsMode, Page
from streamwatch.report.policy import Verdict
from streamwatch.report.table import format_effect, verdict_text

__all__ = ["CANDIDATE_COLOURS", "ledger_section", "write_ledger"]

CANDIDATE_COLOURS = (
    "#e8710a",
    "#1a7f37",
    "#8250df",
    "#cf222e",
    "#0a9396",
    "#bf8700",
    "#6e40c9",
    "#d63384",
)
_BAND_BUCKETS = 300
_MAX_INCIDENT_ROWS = 200


def _colour(i: int) -> str:
    return CANDIDATE_COLOURS[i % len(CANDIDATE_COLOURS)]


def _band(series: list[Series]) -> tuple[Any, Any, Any, Any] | None:
    """The baseline seeds' lowest, mean and highest per step bucket (x, lo, mean, hi)."""
    lo_step = min(int(s.steps[0]) for s in series)
    hi_step = max(int(s.steps[-1]) for s in series)
    width = max(1, math.ceil((hi_step - lo_step + 1) / _BAND_BUCKETS))
    edges = [*range(lo_step, hi_step + 1, width), hi_step + 1]
    means = np.array([window_means(s, edges, False) for s in series])
    ok = np.isfinite(means).sum(axis=0) >= 1
    if not ok.any():
        return None
    with warnings.catch_warnings():  # a bucket no seed has is NaN, as wanted
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, mid, hi = np.nanmin(means, 0), np.nanmean(means, 0), np.nanmax(means, 0)
    x = (np.asarray(edges[:-1]) + np.asarray(edges[1:]) - 1) / 2.0
    return x[ok], lo[ok], mid[ok], hi[ok]


def _line(s: Series, name: str, colour: str, role: str, max_points: int, width: float) -> Any:
    import plotly.graph_objects as go

    steps, values = downsample(s.steps, s.values, max_points)
    return go.Scatter(
        x=steps.astype(np.int32 if len(steps) == 0 or steps.max() < 2**31 else np.float64),
        y=np.where(np.isfinite(values), values, np.nan).astype(np.float32),
        mode="lines",
        line={"width": width, "color": colour},
        opacity=0.85,
        name=name,
        legendgroup=name,
        hovertemplate=f"{html.escape(name)}<br>step %{{x}}<br>%{{y:.5g}}<extra></extra>",
        meta={"role": role, "run": s.metric},
    )


def _band_traces(series: list[Series], show: bool) -> list[Any]:
    import plotly.graph_objects as go

    band = _band(series)
    if band is None:
        return []
    x, lo, mid, hi = band
    out = []
    if len(series) > 1:
        out.append(
            go.Scatter(
                x=np.concatenate([x, x[::-1]]),
                y=np.concatenate([hi, lo[::-1]]),
                fill="toself",
                fillcolor="rgba(59,110,168,0.18)",
                line={"width": 0},
                hoverinfo="skip",
                name=f"baseline seed range ({len(series)} runs)",
                legendgroup="baseline",
                showlegend=show,
                meta={"role": "band"},
            )
        )
    out.append(
        go.Scatter(
            x=x,
            y=mid,
            mode="lines",
            line={"width": 2.2, "color": BASELINE},
            name="baseline" + (" mean" if len(series) > 1 else ""),
            legendgroup="baseline",
            showlegend=show,
            hovertemplate="baseline<br>step %{x}<br>%{y:.5g}<extra></extra>",
            meta={"role": "baseline"},
        )
    )
    return out


def _indicators(ledger: Ledger) -> list[str]:
    names: list[str] = []
    for e in ledger.entries:
        for c in e.comparison.indicators:
            if c.name not in names:
                names.append(c.name)
    return names


def _figure(ledger: Ledger, max_points: int) -> tuple[Any, int]:
    from plotly.subplots import make_subplots

    names = _indicators(ledger)
    cols = 2 if len(names) > 1 else 1
    rows = max(1, math.ceil(len(names) / cols))
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[SHORT.get(n, n) + f" · {n}" for n in names],
        vertical_spacing=min(0.1, 0.3 / rows),
        horizontal_spacing=0.08,
    )
    for i, name in enumerate(names):
        row, col = i // cols + 1, i % cols + 1
        base = [s for s in (r.find(name) for r in ledger.baseline_data) if s is not None and len(s)]
        for trace in _band_traces(base, show=i == 0):
            fig.add_trace(trace, row=row, col=col)
        for k, e in enumerate(ledger.entries):
            runs = e.comparison.series.get(name, ([], []))[1]
            for j, s in enumerate(runs):
                trace = _line(s, e.arm.name, _colour(k), "candidate", max_points, 1.4)
                trace.showlegend = i == 0 and j == 0
                fig.add_trace(trace, row=row, col=col)
        fig.update_yaxes(title_text=SHORT.get(name, name), title_standoff=2, row=row, col=col)
    for col in range(1, cols + 1):
        fig.update_xaxes(title_text="training step", title_standoff=4, row=rows, col=col)
    height = 120 + 250 * rows
    fig.update_layout(
        height=height,
        margin={"l": 60, "r": 20, "t": 90, "b": 40},
        hovermode="closest",
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0.0},
    )
    fig.update_annotations(font_size=12.5)
    for k in range(2, len(names) + 1):
        fig.layout[f"xaxis{k}"].matches = "x"
    return fig, height


def _cls(v: Verdict | None) -> str:
    if v is None or v is Verdict.INDISTINGUISHABLE:
        return "muted"
    return v.value


def _ranked(ledger: Ledger, status: Mapping[str, str] | None = None, anchor: str = "cand-") -> str:
    """The ranked table; ``status``: per candidate, a column saying how far it is."""
    e = html.escape
    names = [n for n in SHORT if any(verdict_cell(x, n) for x in ledger.entries)]
    head = "".join(f"<th>{e(SHORT[n])}</th>" for n in names)
    status_head = "" if status is None else "<th>status</th>"
    rows = []
    for rank, x in enumerate(ledger.entries, 1):
        now = "" if status is None else f"<td>{e(status.get(x.arm.name, ''))}</td>"
        verdicts = x.verdicts()
        cells = "".join(
            f'<td class="{_cls(verdicts.get(n))}">{e(verdict_cell(x, n))}</td>' for n in names
        )
        outcome = "<br>".join(
            e(f"{SHORT[n]}: {outcome_text(ledger, x, n)}")
            for n in ("train_reward", "heldout_reward")
            if n in x.outcome
        )
        rows.append(
            f'<tr data-candidate="{e(x.arm.name)}"><td class="num">{rank}</td>'
            f'<td><a href="#{anchor}{rank}">{e(x.arm.name)}</a></td>'
            f"<td>{e(x.arm.description)}</td><td>{e(steps_text(ledger, x))}</td>{now}"
            f'<td class="num better">{x.better}</td><td class="num worse">{x.worse}</td>'
            f'{cells}<td class="muted">{outcome}</td></tr>'
        )
    return (
        '<table id="sw-ledger"><thead><tr><th>rank</th><th>candidate</th><th>intervention</th>'
        f"<th>steps</th>{status_head}<th>better</th><th>worse</th>{head}<th>outcome</th>"
        "</tr></thead>"
        "<tbody>" + "".join(rows) + "</tbody></table>"
    )


def _detail(ledger: Ledger, entry: Entry) -> str:
    e = html.escape
    rows = []
    for c in entry.comparison.indicators:
        at = entry.levels.get(c.name)
        rows.append(
            f'<tr><td>{e(c.name)}</td><td class="{_cls(c.verdict)}">{e(verdict_text(c))}</td>'
            f'<td class="num">{"" if c.onset_step is None else c.onset_step}</td>'
            f'<td class="num">{c.baseline_level:.4g}</td>'
            f'<td class="num">{c.candidate_level:.4g}</td><td>{e(format_effect(c))}</td>'
            f'<td class="num">{"kept" if at is None else f"{at:.2g}"}</td></tr>'
        )
    inc = entry.incidents
    at = entry.levels.get(INCIDENTS)
    rows.append(
        f'<tr><td>{INCIDENTS}</td><td class="{_cls(inc.verdict)}">{e(inc.verdict.value)}</td>'
        f'<td></td><td class="num">{inc.baseline_per_run:.3g}/run</td>'
        f'<td class="num">{inc.candidate_per_run:.3g}/run</td>'
        f"<td>{inc.candidate} vs {inc.baseline} (p={inc.p:.2g})</td>"
        f'<td class="num">{"kept" if at is None else f"{at:.2g}"}</td></tr>'
    )
    return (
        "<table><thead><tr><th>indicator</th><th>verdict</th><th>from step</th>"
        f"<th>baseline</th><th>candidate</th><th>effect [{ledger.level:.0%} interval]</th>"
        "<th>level</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _incidents(incidents: tuple[Incident, ...]) -> str:
    firing = [i for i in incidents if i.status is Status.FIRING]
    if not firing:
        return '<p class="muted">No incident fired on its runs.</p>'
    e = html.escape
    rows = []
    for i in sorted(firing, key=lambda i: (i.run_id, i.step))[:_MAX_INCIDENT_ROWS]:
        colour = SEVERITY_COLOURS.get(i.severity.value, "#57606a")
        rows.append(
            f'<tr><td>{e(i.run_id)}</td><td class="num">{i.step}</td>'
            f'<td style="color:{colour}">{e(i.severity.value)}</td><td>{e(i.kind)}</td>'
            f"<td>{e(i.metric)}</td><td>{e(i.message)}</td></tr>"
        )
    more = len(firing) - _MAX_INCIDENT_ROWS
    tail = f'<p class="muted">…and {more} more.</p>' if more > 0 else ""
    return (
        '<table class="sw-cand-incidents"><thead><tr><th>run</th><th>step</th><th>severity</th>'
        "<th>kind</th><th>metric</th><th>message</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + tail
    )


def ledger_section(ledger: Ledger, status: Mapping[str, str], anchor: str = "ledger-") -> str:
    """The ledger as one fragment of another page (the live report's): the ranked table with
    each candidate's ``status``, the basis, and per candidate its indicators and outcome (no
    curves: the page draws every run's)."""
    e = html.escape
    parts = []
    if ledger.single_baseline:
        parts.append(f'<p class="worse" id="sw-single-baseline">{e(SINGLE_BASELINE)}</p>')
    parts.append(_ranked(ledger, status, anchor))
    if ledger.entries:
        parts.append(f'<p class="muted">Basis: {e(ledger.entries[0].comparison.basis)}</p>')
    for rank, x in enumerate(ledger.entries, 1):
        head = f"{rank}. {x.arm.name}" + (f": {x.arm.description}" if x.arm.description else "")
        lines = [f'<b id="{anchor}{rank}">{e(head)}</b>']
        lines.append(f"runs: {e(', '.join(x.runs))}; {e(status.get(x.arm.name, ''))}")
        for n in ("train_reward", "heldout_reward"):
            if n in x.outcome:
                lines.append(e(f"{SHORT[n]}: {outcome_text(ledger, x, n)}"))
        parts.append("<p>" + "<br>".join(lines) + "</p>")
        parts.append(_detail(ledger, x))
    return "".join(parts)


def write_ledger(
    ledger: Ledger,
    out: Path,
    *,
    max_points: int = 1000,
    js: JsMode = "gzip",
    refresh_seconds: float | None = None,
) -> Path:
    """Write the ledger page (see the module doc) as one self-contained HTML file, atomically
    (a reader never sees half of it); ``refresh_seconds``: the page reloads itself."""
    e = html.escape
    page = Page(
        "streamwatch ledger",
        [
            f"baseline: {', '.join(ledger.baseline)} (steps 0-{ledger.baseline_last_step})",
            f"{len(ledger.entries)} candidate(s); {ledger.comparisons} comparisons corrected by "
            f"{ledger.correction_text} at {ledger.alpha:g}",
        ],
        refresh_seconds=refresh_seconds,
    )
    if ledger.single_baseline:
        page.add_html(f'<p class="worse" id="sw-single-baseline">{e(SINGLE_BASELINE)}</p>')
    page.add_heading("Ranked candidates", "ranked")
    page.add_html(_ranked(ledger))
    if ledger.entries:
        page.add_html(f'<p class="muted">Basis: {e(ledger.entries[0].comparison.basis)}</p>')
        page.add_heading("Curves", "curves")
        page.add_html(
            '<p class="muted">Per indicator: the baseline (its mean, and the range of its seeds '
            "as a band when it has several) and every candidate's runs.</p>"
        )
        fig, height = _figure(ledger, max_points)
        page.add_figure(fig, height)
    for rank, x in enumerate(ledger.entries, 1):
        page.add_heading(f"{rank}. {x.arm.name}", f"cand-{rank}")
        lines = [f"<b>{e(x.arm.description)}</b>" if x.arm.description else ""]
        lines.append(f"runs: {e(', '.join(x.runs))}; matched steps {e(steps_text(ledger, x))}")
        for n in ("train_reward", "heldout_reward"):
            if n in x.outcome:
                lines.append(e(f"{SHORT[n]}: {outcome_text(ledger, x, n)}"))
        page.add_html("<p>" + "<br>".join(line for line in lines if line) + "</p>")
        page.add_html(_detail(ledger, x))
        page.add_html(_incidents(x.candidate_incidents))
    if ledger.baseline_incidents:
        page.add_heading("Baseline incidents", "baseline-incidents")
        page.add_html(_incidents(ledger.baseline_incidents))
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(page.render(js), encoding="utf-8")
    os.replace(tmp, out)
    return out
