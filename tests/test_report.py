"""The HTML report: series collection, spike-keeping downsampling, the self-contained page,
incidents placed on their curves, the live report and the ``report`` / ``compare`` commands."""

from __future__ import annotations

import argparse
import doctest
import importlib
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamwatch.cli.report import add_report_commands, run_report_command
from streamwatch.events import Event, Source
from streamwatch.incidents import Incident, Severity, Status, fingerprint
from streamwatch.live.report import LiveReport
from streamwatch.replay.files import replay_files
from streamwatch.report import (
    SeriesCollector,
    build_report,
    downsample,
    m4_indices,
    render_report,
)
from streamwatch.simulate import Fault, RunSpec, simulate, write_jsonl

REAL = Path(__file__).parent / "data" / "real"
THREE_FAULTS = (
    Fault("entropy_collapse", 100),
    Fault("length_explosion", 200),
    Fault("reward_hacking", 150),
)


@pytest.fixture(scope="module")
def faulty_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "faulty.jsonl"
    spec = RunSpec("faulty", steps=400, seed=3, faults=THREE_FAULTS)
    write_jsonl(simulate([spec, RunSpec("healthy", steps=400, seed=4)]), path)
    return path


def figures(html: str) -> list[dict[str, Any]]:
    blobs = re.findall(r'<script type="application/json" id="sw-data-\d+">(.*?)</script>', html)
    return [json.loads(b) for b in blobs]


def traces(fig: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [t for t in fig["data"] if t.get("meta", {}).get("role") == role]


# -- doctests -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["data", "downsample", "policy", "stats"])
def test_doctests(name: str) -> None:
    module = importlib.import_module(f"streamwatch.report.{name}")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# -- downsampling ---------------------------------------------------------------------------


def test_short_series_are_kept_whole() -> None:
    steps, values = np.arange(50), np.linspace(0.0, 1.0, 50)
    assert m4_indices(steps, values, 100).tolist() == list(range(50))


def test_every_buckets_extremes_survive_and_the_budget_holds() -> None:
    rng = np.random.default_rng(0)
    steps = np.arange(20_000)
    values = rng.normal(size=20_000).cumsum()
    spikes = [137, 9_999, 15_001]
    values[spikes] += [500.0, -500.0, 300.0]
    s, v = downsample(steps, values, 1000)
    assert len(s) <= 1000 and np.all(np.diff(s) > 0)
    assert set(spikes) <= set(s.tolist())
    assert v.max() == values.max() and v.min() == values.min()
    assert s[0] == 0 and s[-1] == 19_999


def test_kept_steps_and_gaps_survive() -> None:
    steps = np.arange(5_000)
    values = np.sin(steps / 50.0)
    values[[1234, 1235]] = [math.nan, math.inf]
    s, v = downsample(steps, values, 200, keep=[777, 4321])
    assert {777, 4321} <= set(s.tolist())
    assert 1234 in s.tolist() and math.isnan(v[s.tolist().index(1234)])


def test_downsampling_rejects_a_silly_budget() -> None:
    with pytest.raises(ValueError, match="max_points"):
        m4_indices(np.arange(10), np.zeros(10), 3)


# -- series collection ----------------------------------------------------------------------


def test_ranks_are_averaged_and_a_nan_on_one_rank_shows() -> None:
    c = SeriesCollector()
    for rank, (t, pg_loss) in enumerate([(10.0, 1.0), (20.0, math.nan)]):
        src = Source(host="n0", rank=rank)
        c.add(Event(run_id="r", step=1, metrics={"timing_s/step": t}, source=src))
        c.add(Event(run_id="r", step=2, metrics={"actor/pg_loss": pg_loss}, source=src))
    run = c.runs()["r"]
    step_time = run.find("step_time")
    assert step_time is not None and step_time.values.tolist() == [15.0] and step_time.ranks == 2
    loss = run.find("loss")
    assert loss is not None and math.isnan(loss.values[0])


def test_the_primary_metric_is_the_presets_first_and_only_wanted_metrics_are_kept() -> None:
    c = SeriesCollector(metrics=["perf/*", "my/custom"])
    metrics = {
        "critic/rewards/mean": 0.5,
        "critic/score/mean": 0.6,
        "perf/mfu/actor": 0.4,
        "my/custom": 1.0,
        "global_seqlen/min": 9.0,
    }
    for step in range(3):
        c.add(Event(run_id="r", step=step, metrics=metrics))
    run = c.runs()["r"]
    assert run.primary["train_reward"] == "critic/score/mean"
    assert set(run.series) == {
        "critic/rewards/mean",
        "critic/score/mean",
        "perf/mfu/actor",
        "my/custom",
    }


# -- the report -----------------------------------------------------------------------------


def test_report_is_self_contained_with_every_panel_and_incident(
    faulty_log: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    summary = build_report([faulty_log], out, indicators=["kl"])
    html = out.read_text(encoding="utf-8")
    assert summary.path == out and summary.bytes == out.stat().st_size
    assert summary.runs == 2 and summary.figures == 2
    # offline: no external script, stylesheet or font; plotly.js embedded exactly once
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html)
    assert html.count('id="sw-plotly-gzip"') == 1
    incidents = replay_files([faulty_log]).incidents
    assert summary.incidents == len(incidents)
    figs = figures(html)
    faulty = next(f for f in figs if f["layout"]["title"]["text"].startswith("faulty"))
    titles = [a["text"] for a in faulty["layout"]["annotations"]]
    for panel in ("response_length", "train_reward", "entropy", "token_prob", "heldout_reward"):
        assert any(t.startswith(panel) for t in titles), panel
    assert any(t.startswith("kl ·") for t in titles)
    assert len(traces(faulty, "series")) == len(titles)
    markers = sum(len(t["x"]) for t in traces(faulty, "incident"))
    assert markers == sum(1 for i in incidents if i.run_id == "faulty")
    assert summary.incident_markers == len(incidents)
    kinds = {i.kind for i in incidents if i.run_id == "faulty"}
    assert {"entropy_collapse", "length_explosion", "reward_hacking"} <= kinds
    hover = " ".join(h for t in traces(faulty, "incident") for h in t["hovertext"])
    assert "entropy_collapse" in hover and "ratio_to_reference" in hover
    assert "entropy_collapse" in html.split('id="sw-incidents"')[1]


def test_the_report_says_what_its_marks_and_axis_are_and_draws_before_the_table(
    faulty_log: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    build_report([faulty_log], out)
    html = out.read_text(encoding="utf-8")
    legend = html.split('id="sw-legend"')[1].split("</p>")[0]
    for word in ("critical", "warning", "info", "resolved", "training step"):
        assert word in legend
    for fig in figures(html):
        axes = [v for k, v in fig["layout"].items() if k.startswith("xaxis")]
        assert any(a.get("title", {}).get("text") == "training step" for a in axes)
    assert html.index('id="sw-data-0"') < html.index('id="sw-incidents"')


def test_every_panel_names_its_quantity_and_unit_and_the_legend_its_marks(
    faulty_log: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    build_report([faulty_log], out)
    fig = next(
        f
        for f in figures(out.read_text(encoding="utf-8"))
        if f["layout"]["title"]["text"].startswith("faulty")
    )
    layout = fig["layout"]
    series = traces(fig, "series")
    for t in series:  # the y axis of each series' panel says what it is and in what unit
        axis = "yaxis" + t.get("yaxis", "y")[1:]
        metric = t["meta"]["metric"]
        title = layout[axis]["title"]["text"]
        expected = {
            "response_length/mean": "response length (tokens)",
            "actor/entropy": "entropy (nats/token)",
            "critic/score/mean": "train reward",
            "timing_s/step": "step time (s)",
        }
        assert title == expected.get(metric, title) and title, metric
    titles = {layout["yaxis" + t.get("yaxis", "y")[1:]]["title"]["text"] for t in series}
    assert {"response length (tokens)", "entropy (nats/token)", "train reward"} <= titles
    # the legend: the logged line once, then each kind of mark drawn, once, in a fixed order
    assert layout["showlegend"] is True
    shown = [t for t in fig["data"] if t.get("showlegend", True)]
    names = [t["name"] for t in sorted(shown, key=lambda t: t["legendrank"])]
    drawn = {t["meta"]["severity"] for t in traces(fig, "incident")}
    order = ["critical", "warning", "info", "resolved"]
    assert names == ["logged value (mean over ranks)"] + [
        f"{k} incident" for k in order if k in drawn
    ]
    assert len(drawn) >= 3


def test_every_indicator_has_a_unit_decided() -> None:
    from streamwatch.engine.indicators import Indicator
    from streamwatch.report.axes import UNITS

    assert set(UNITS) == {i.value for i in Indicator}


def test_incidents_sit_on_their_curve_at_the_step_they_fired(
    faulty_log: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    build_report([faulty_log], out)
    figs = figures(out.read_text(encoding="utf-8"))
    fig = next(f for f in figs if f["layout"]["title"]["text"].startswith("faulty"))
    axis_of = {
        t["meta"]["metric"]: t.get("xaxis", "x") for t in traces(fig, "series") if "meta" in t
    }
    incidents = [i for i in replay_files([faulty_log]).incidents if i.run_id == "faulty"]
    placed = {(x, t.get("xaxis", "x")) for t in traces(fig, "incident") for x in t["x"]}
    for inc in incidents:
        if inc.metric in axis_of:
            assert (inc.step, axis_of[inc.metric]) in placed, inc


def test_plain_javascript_report_and_many_points(faulty_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "plain.html"
    summary = build_report([faulty_log], out, max_points=40, js="plain")
    html = out.read_text(encoding="utf-8")
    assert 'id="sw-plotly-gzip"' not in html and html.count("plotly.js v") >= 1
    for fig in figures(html):
        for t in traces(fig, "series"):
            assert t["x"]["dtype"] in ("i4", "f8")  # typed arrays, not JSON lists
    assert summary.points <= 40 * summary.panels + summary.incident_markers


def test_real_runs_report(tmp_path: Path) -> None:
    paths = sorted(REAL.glob("*.jsonl"))
    summary = build_report(paths, tmp_path / "real.html", indicators=["perf/*"])
    assert summary.runs == len(paths) and summary.figures == len(paths)
    html = (tmp_path / "real.html").read_text(encoding="utf-8")
    assert "<nav>" in html
    for fig in figures(html):
        assert "perf/mfu/actor" in [a["text"] for a in fig["layout"]["annotations"]]


# -- live report ----------------------------------------------------------------------------


def incident(run_id: str, step: int, metric: str = "actor/entropy") -> Incident:
    return Incident(
        id=fingerprint(run_id, "entropy_collapse", "entropy"),
        run_id=run_id,
        kind="entropy_collapse",
        severity=Severity.CRITICAL,
        status=Status.FIRING,
        indicator="entropy",
        metric=metric,
        step=step,
        message="entropy collapsing",
        evidence={"ratio_to_reference": 0.02},
    )


def test_live_report_is_bounded_keeps_spikes_and_draws_incidents(tmp_path: Path) -> None:
    live = LiveReport(tmp_path / "live.html", max_points=100, max_runs=2, refresh_seconds=5)
    live.incident(incident("a", 4321))
    for step in range(1, 10_001):
        value = 50.0 if step == 6543 else 1.0 / step
        for rank in (0, 1):
            src = Source(host="n", rank=rank)
            metrics = {"actor/entropy": value, "global_seqlen/min": 1.0}
            live.observe(Event(run_id="a", step=step, metrics=metrics, source=src))
    series = live.snapshot()["a"].find("entropy")
    assert series is not None and len(series) <= 200
    assert 6543 in series.steps.tolist() and series.values.max() == 50.0
    assert 4321 in series.steps.tolist() and series.ranks == 2
    assert set(live.snapshot()["a"].series) == {"actor/entropy"}
    summary = live.write()
    html = summary.path.read_text(encoding="utf-8")
    assert '<meta http-equiv="refresh" content="5">' in html
    assert summary.incident_markers == 1
    for run_id in ("b", "c"):  # a third run pushes out the one idle longest
        live.observe(Event(run_id=run_id, step=1, metrics={"actor/entropy": 0.3}))
    assert set(live.snapshot()) == {"b", "c"} and live.incidents() == []


def test_live_report_shows_open_steps_and_keeps_incident_metrics(tmp_path: Path) -> None:
    live = LiveReport(tmp_path / "live.html")
    live.incident(incident("r", 1, metric="my/metric"))
    live.observe(Event(run_id="r", step=1, metrics={"my/metric": 2.0, "actor/entropy": 0.3}))
    run = live.snapshot()["r"]
    assert run.series["my/metric"].values.tolist() == [2.0]
    assert live.write().panels == 2


# -- command line ---------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="streamwatch")
    sub = parser.add_subparsers(dest="command", required=True)
    add_report_commands(sub)
    sub.add_parser("other")
    return parser.parse_args(argv)


def test_report_command(
    faulty_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli.html"
    args = parse(["report", str(faulty_log), "-o", str(out), "--indicator", "grad_norm"])
    assert run_report_command(args) == 0
    assert out.exists() and "2 run(s)" in capsys.readouterr().out
    assert run_report_command(parse(["other"])) is None


def test_compare_command_prints_the_table_and_can_fail_on_worse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = tmp_path / "base.jsonl", tmp_path / "cand.jsonl"
    write_jsonl(simulate([RunSpec(f"b{s}", steps=200, seed=s) for s in range(3)]), base)
    faults = (Fault("entropy_collapse", 100),)
    specs = [RunSpec(f"c{s}", steps=200, seed=10 + s, faults=faults) for s in range(3)]
    write_jsonl(simulate(specs), cand)
    out = tmp_path / "compare.html"
    argv = ["compare", "-b", str(base), "-c", str(cand), "-o", str(out), "--fail-on-worse"]
    assert run_report_command(parse(argv)) == 1
    printed = capsys.readouterr().out
    assert re.search(r"^entropy\s+worse \(lower\)", printed, re.M)
    assert "between-seed variation (3 baseline vs 3 candidate runs)" in printed
    assert out.exists() and len(figures(out.read_text(encoding="utf-8"))) == 1
    (layout,) = [f["layout"] for f in figures(out.read_text(encoding="utf-8"))]
    ytitles = {v["title"]["text"] for k, v in layout.items() if k.startswith("yaxis")}
    assert {"entropy (nats/token)", "response length (tokens)", "step time (s)"} <= ytitles
    assert run_report_command(parse(["compare", "-b", str(base), "-c", str(cand)])) == 0


def test_incidents_on_many_metrics_stay_drawn_within_a_panel_limit(tmp_path: Path) -> None:
    c = SeriesCollector(metrics=["m/*"])
    for step in range(50):
        metrics = {f"m/{k:02d}": float(step + k) for k in range(20)}
        c.add(Event(run_id="r", step=step, metrics={"actor/entropy": 0.3, **metrics}))
    incidents = [incident("r", 10 + k, metric=f"m/{k:02d}") for k in range(20)]
    summary = render_report(c.runs(), incidents, tmp_path / "many.html")
    assert summary.panels == 1 + 12  # entropy, then at most 12 panels for incidents
    assert summary.incident_markers == 20


def test_the_report_counts_incidents_by_id_as_replay_does(tmp_path: Path) -> None:
    from streamwatch.replay.tally import Tally

    c = SeriesCollector()
    for step in range(40):
        c.add(Event(run_id="r", step=step, metrics={"actor/entropy": 1.0 / (step + 1)}))
    first = incident("r", 5)
    updates = [
        first.model_copy(update={"severity": Severity.WARNING}),
        first.model_copy(update={"step": 9}),  # escalated: the same incident
        first.model_copy(update={"step": 20}),  # re-announced: the same incident
        first.model_copy(update={"step": 30, "status": Status.RESOLVED}),
        incident("r", 12).model_copy(update={"id": "other", "severity": Severity.WARNING}),
    ]
    tally = Tally()
    for inc in updates:
        tally.add(inc)
    assert tally.runs["r"].counts == {Severity.CRITICAL: 1, Severity.WARNING: 1}
    out = tmp_path / "report.html"
    render_report(c.runs(), updates, out, js="plain")
    text = out.read_text(encoding="utf-8")
    (fig,) = figures(text)
    assert fig["layout"]["title"]["text"] == "r · 1 critical, 1 warning"
    assert "2 incident(s) fired" in text
    assert "2 incident(s) in 5 update(s): 1 critical, 1 warning, 1 resolved" in text
    assert "2 critical" not in text and "3 critical" not in text


@pytest.mark.parametrize("floor, shown", [(0.01, False), (0.2, True)])
def test_a_projection_is_dropped_once_the_series_has_crossed_its_level(
    tmp_path: Path, floor: float, shown: bool
) -> None:
    c = SeriesCollector()
    for step in range(60):
        c.add(
            Event(run_id="r", step=step, metrics={"actor/entropy": max(floor, 0.3 - 0.01 * step)})
        )
    projection = {"level": 0.05, "rising": False, "step": 35, "low": 33, "high": 38, "made_at": 20}
    inc = incident("r", 20).model_copy(update={"projection": projection})
    out = tmp_path / "report.html"
    render_report(c.runs(), [inc], out, js="plain")
    text = out.read_text(encoding="utf-8")
    assert ("projected to reach 0.05" in text) is shown


def test_an_empty_report_exits_as_replay_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streamwatch.cli.main import main

    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    replayed = main(["replay", str(empty)])
    assert replayed == 3
    out = tmp_path / "report.html"
    assert run_report_command(parse(["report", str(empty), "-o", str(out)])) == replayed
    assert "nothing was checked" in capsys.readouterr().err


@pytest.mark.parametrize("onset", [None, 7])
def test_the_incident_table_gives_remedies_and_an_onset_only_when_known(
    tmp_path: Path, onset: int | None
) -> None:
    c = SeriesCollector()
    for step in range(30):
        c.add(Event(run_id="r", step=step, metrics={"actor/entropy": 1.0 / (step + 1)}))
    remedies = ["raise the entropy bonus", "lower the learning rate"]
    inc = incident("r", 20).model_copy(update={"remedies": remedies, "onset_step": onset})
    out = tmp_path / "report.html"
    render_report(c.runs(), [inc], out, js="plain")
    table = out.read_text(encoding="utf-8").split('id="sw-incidents"')[1].split("</table>")[0]
    head, body = table.split("</thead>")
    headers = re.findall(r"<th>(.*?)</th>", head)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", body)
    assert len(headers) == len(cells)
    row = dict(zip(headers, cells, strict=True))
    assert row["remedy"] == "raise the entropy bonus<br>lower the learning rate"
    if onset is None:
        assert "onset" not in headers  # no column that is always empty
    else:
        assert row["onset"] == "7"
