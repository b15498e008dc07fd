"""The self-contained HTML page that holds the figures: plotly.js inline, no network at all.

plotly.js (4.8 MB minified) is embedded once per file. By default it is embedded gzip-compressed
and base64-encoded (1.9 MB) and unpacked by the browser's ``DecompressionStream`` (Chrome 80,
Firefox 113, Safari 16.4 and later); ``js="plain"`` embeds it as is, for older browsers.
Each figure is a JSON document in its own ``<script type="application/json">`` and is drawn
when it scrolls near the viewport, so a report with dozens of runs opens as fast as one
with a single run.

The page publishes its progress for scripts and tests as ``window.streamwatchReport``
(``ready``: a promise settled once plotly.js is loaded, ``total``, ``rendered``,
``renderAll()``: draws every figure and resolves when done, ``errors``) and as
``<body data-ready data-visible data-first-figure data-rendered="all">`` (``data-visible``:
every figure in or near the viewport at load time is drawn: the page is ready to read).
"""

from __future__ import annotations

import base64
import gzip
import html
import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from streamwatch._install import install_hint

__all__ = ["JsMode", "Page", "figure_json", "plotly_version"]

JsMode = Literal["gzip", "plain"]

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1f2328}
header{padding:16px 24px;border-bottom:1px solid #d0d7de;background:#f6f8fa}
header h1{font-size:20px;margin:0 0 4px}
header p{margin:2px 0;color:#57606a;font-size:13px}
main p{font-size:13.5px}
main{padding:8px 24px 48px}
h2{font-size:17px;margin:28px 0 6px}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0 12px}
th,td{border-bottom:1px solid #d8dee4;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.sev-critical{color:#cf222e;font-weight:600}.sev-warning{color:#bc4c00;font-weight:600}
.sev-info{color:#0969da}.resolved{color:#57606a}
.better{color:#1a7f37;font-weight:600}.worse{color:#cf222e;font-weight:600}
.different{color:#8250df}.muted{color:#57606a}
.sw-figure{width:100%;min-height:200px;border:1px solid #eaeef2;margin:4px 0 18px}
.sw-error{color:#cf222e;font-weight:600}
nav ul{columns:3 320px;margin:4px 0;padding-left:18px;font-size:13px}
"""

_LOADER = """
(function () {
  "use strict";
  var api = {total: 0, rendered: 0, errors: [], ready: null, renderAll: null};
  window.streamwatchReport = api;
  var status = document.getElementById("sw-status");
  function fail(err) {
    api.errors.push(String(err));
    if (status) {
      status.className = "sw-error";
      status.textContent = "The figures could not be drawn: " + err;
    }
    throw err;
  }
  function loadPlotly() {
    if (window.Plotly) { return Promise.resolve(); }
    var packed = document.getElementById("sw-plotly-gzip");
    if (!packed) { return Promise.reject(new Error("plotly.js is missing")); }
    if (typeof DecompressionStream === "undefined") {
      return Promise.reject(new Error(
        "this browser has no DecompressionStream; rebuild the report with plain JavaScript"));
    }
    var text = atob(packed.textContent.trim());
    var bytes = new Uint8Array(text.length);
    for (var i = 0; i < text.length; i++) { bytes[i] = text.charCodeAt(i); }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(function (code) {
      var tag = document.createElement("script");
      tag.textContent = code;
      document.head.appendChild(tag);
    });
  }
  function mark(name) { if (window.performance && performance.mark) { performance.mark(name); } }
  mark("sw-start");
  api.ready = loadPlotly().then(function () {
    mark("sw-plotly-loaded");
    var template = JSON.parse(document.getElementById("sw-template").textContent);
    var config = {responsive: true, displaylogo: false};
    var divs = Array.prototype.slice.call(document.querySelectorAll("div.sw-figure"));
    api.total = divs.length;
    function render(div) {
      if (div._sw) { return div._sw; }
      var fig = JSON.parse(document.getElementById(div.dataset.figure).textContent);
      fig.layout.template = template;
      div._sw = Plotly.newPlot(div, fig.data, fig.layout, config).then(function () {
        div.dataset.state = "rendered";
        api.rendered += 1;
        if (api.rendered === 1) {
          mark("sw-first-figure");
          document.body.dataset.firstFigure = "1";
        }
        if (api.rendered === api.total) { mark("sw-all"); document.body.dataset.rendered = "all"; }
      }, fail);
      return div._sw;
    }
    api.renderAll = function () { return Promise.all(divs.map(render)); };
    if (status) { status.textContent = ""; }
    if (divs.length === 0) { document.body.dataset.rendered = "all"; }
    function visible() { mark("sw-visible"); document.body.dataset.visible = "1"; }
    if ("IntersectionObserver" in window && divs.length) {
      var initial = true;
      var seen = new IntersectionObserver(function (entries) {
        var drawing = [];
        entries.forEach(function (e) {
          if (e.isIntersecting) { seen.unobserve(e.target); drawing.push(render(e.target)); }
        });
        if (initial) { initial = false; Promise.all(drawing).then(visible); }
      }, {rootMargin: "800px 0px"});
      divs.forEach(function (d) { seen.observe(d); });
    } else {
      api.renderAll().then(visible);
    }
    document.body.dataset.ready = "1";
  }, fail);
})();
"""


@cache
def _plotly_js() -> str:
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as exc:
        raise ImportError(
            f"HTML reports need plotly: {install_hint('report')} (or plotly>=6.1)"
        ) from exc
    js: str = get_plotlyjs()
    return js


@cache
def _plotly_gzip_b64() -> str:
    packed = gzip.compress(_plotly_js().encode("utf-8"), compresslevel=9, mtime=0)
    return base64.b64encode(packed).decode("ascii")


@cache
def plotly_version() -> str:
    import plotly

    version: str = plotly.__version__
    return version


@cache
def _template_json() -> str:
    import plotly.io as pio

    template = pio.templates["plotly_white"].to_plotly_json()
    return _safe(json.dumps(template, separators=(",", ":")))


def _safe(text: str) -> str:
    """JSON that can sit inside a <script> element (no '</script>' can appear)."""
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def figure_json(figure: Any) -> str:
    """A plotly figure as compact JSON (numpy arrays as base64 typed arrays), HTML-safe."""
    import plotly.io as pio

    text: str = pio.to_json(figure, validate=False, remove_uids=True, engine="json")
    return _safe(text)


@dataclass
class Page:
    """An HTML document being assembled: body fragments and figures, in order."""

    title: str
    subtitle: list[str] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)
    figures: int = 0
    refresh_seconds: float | None = None

    def add_html(self, fragment: str) -> None:
        self.parts.append(fragment)

    def add_heading(self, text: str, anchor: str | None = None) -> None:
        ident = f' id="{html.escape(anchor, quote=True)}"' if anchor else ""
        self.parts.append(f"<h2{ident}>{html.escape(text)}</h2>")

    def add_figure(self, figure: Any, height: int) -> str:
        """Add a figure (drawn lazily); return its element id."""
        n = self.figures
        self.figures += 1
        self.parts.append(
            f'<div class="sw-figure" id="sw-fig-{n}" data-figure="sw-data-{n}" '
            f'style="height:{height}px"></div>\n'
            f'<script type="application/json" id="sw-data-{n}">{figure_json(figure)}</script>'
        )
        return f"sw-fig-{n}"

    def render(self, js: JsMode = "gzip") -> str:
        if js == "gzip":
            plotly = (
                '<script type="application/octet-stream" id="sw-plotly-gzip">'
                f"{_plotly_gzip_b64()}</script>"
            )
        elif js == "plain":
            plotly = f'<script type="text/javascript">{_plotly_js()}</script>'
        else:
            raise ValueError(f"js must be 'gzip' or 'plain', got {js!r}")
        refresh = (
            f'<meta http-equiv="refresh" content="{max(1, round(self.refresh_seconds))}">'
            if self.refresh_seconds
            else ""
        )
        sub = "".join(f"<p>{html.escape(line)}</p>" for line in self.subtitle)
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">{refresh}'
            f"<title>{html.escape(self.title)}</title><style>{_CSS}</style></head>\n<body>"
            f"<header><h1>{html.escape(self.title)}</h1>{sub}"
            '<p id="sw-status" class="muted">Loading the figures…</p></header>\n<main>'
            + "\n".join(self.parts)
            + f'</main>\n<script type="application/json" id="sw-template">{_template_json()}'
            f"</script>\n{plotly}\n<script>{_LOADER}</script>\n</body></html>\n"
        )
