"""What an incident costs: the figure checked by hand on a real verl run, where the step time
and the GPU count come from, and where the figure is said (summary, report, Slack)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from streamwatch.alerting.message import Message
from streamwatch.alerting.notify.discord import discord_payload
from streamwatch.alerting.notify.email import email_message
from streamwatch.alerting.notify.slack import check_block_kit, slack_payload
from streamwatch.config import Config, EngineConfig
from streamwatch.engine.monitor import Monitor
from streamwatch.engine.snapshot import dump_run, load_run
from streamwatch.events import Event, Source
from streamwatch.incidents import Incident, Status
from streamwatch.replay.files import format_summary, replay_files

REAL = Path(__file__).parent / "data" / "real" / "verl-grpo-q3b_fsdp_base.jsonl"
NAN_STEP = 60


def _rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in REAL.read_text().splitlines()]


@pytest.fixture
def broken_run(tmp_path: Path) -> Path:
    """The real verl run (healthy, one node of 8 GPUs) with its KL made NaN at step 60: a
    critical incident at a known step of a run whose every step time is logged."""
    out = tmp_path / "q3b-nan.jsonl"
    with out.open("w") as f:
        for row in _rows():
            if row["step"] == NAN_STEP:
                row["metrics"]["actor/kl_loss"] = math.nan
            f.write(json.dumps(row) + "\n")
    return out


def test_the_cost_of_an_incident_on_a_real_verl_run_checked_by_hand(broken_run: Path) -> None:
    result = replay_files([broken_run])
    fired, resolved = result.incidents
    assert (fired.kind, fired.severity.value, fired.step) == ("nonfinite_metric", "critical", 60)
    assert resolved.status is Status.RESOLVED and resolved.step == 80  # resolve_after: 20

    # By hand, from the file itself. verl logs perf/throughput = tokens / (step time x GPUs):
    m = next(r["metrics"] for r in _rows() if r["step"] == 1)
    gpus = m["perf/total_num_tokens"] / (m["perf/throughput"] * m["perf/time_per_step"])
    assert round(gpus) == 8 and abs(gpus - 8) < 1e-6  # the README of the data: 8 GPUs
    times = {r["step"]: r["metrics"]["timing_s/step"] for r in _rows() if r["step"] >= 1}
    # steps 61-80 as logged: 11,914.9 s in all, 595.75 s a step
    seconds = sum(times[s] for s in range(61, 81))
    # 20 steps x 595.75 s x 8 GPUs = 95,319 GPU-seconds = 26.48 GPU-hours
    by_hand = seconds * 8 / 3600
    assert round(seconds / 20, 2) == 595.75 and round(by_hand, 2) == 26.48

    cost = resolved.cost
    assert cost is not None
    assert cost["since_step"] == 60 and cost["steps"] == 20
    assert cost["gpus"] == 8 and cost["gpus_from"] == "verl perf/throughput"
    assert cost["step_time_from"] == "timing_s/step"
    assert cost["step_seconds"] == pytest.approx(seconds / 20, rel=1e-3)
    assert cost["gpu_hours"] == pytest.approx(by_hand, rel=1e-3)
    # raised at its onset: nothing spent yet; what a step burns now, from the mean of the 32
    # newest step times (steps 29-60: 598.34 s): 598.34 x 8 / 3600 = 1.33 GPU-hours a step
    assert fired.cost is not None and fired.cost["steps"] == 0
    now = sum(times[s] for s in range(29, 61)) / 32
    assert fired.cost["step_seconds"] == pytest.approx(now, rel=1e-3)

    # the run's compute after its first critical incident: steps 61-105 as logged,
    # 26,816.5 s x 8 GPUs / 3600 = 59.59 GPU-hours
    last = max(times)
    after = sum(times[s] for s in range(61, last + 1)) * 8 / 3600
    assert last == 105 and round(after, 2) == 59.59
    spent = result.spent[fired.run_id]
    assert spent["gpu_hours"] == pytest.approx(after, rel=1e-3)
    summary = format_summary(result)
    assert "~60 GPU-hours spent after its first critical incident (step 60)" in summary
    assert "burning ~1.3 GPU-hours a step since metrics went non-finite at step 60" in summary


def test_healthy_real_runs_carry_no_cost_and_no_spend() -> None:
    result = replay_files(sorted(REAL.parent.glob("*.jsonl")))
    assert result.incidents == [] and result.spent == {}


def _event(step: int, **kw: Any) -> Event:
    metrics = kw.pop("metrics", {"actor/kl_loss": math.nan if step == 5 else 0.01})
    return Event(run_id="r", step=step, ts=1000.0 + 30.0 * step, metrics=metrics, **kw)


def _first_cost(events: list[Event], config: Config | None = None) -> dict[str, Any]:
    monitor = Monitor(config)
    out: list[Incident] = []
    for e in events:
        out += monitor.process(e)
    out += monitor.flush()
    costs = [i.cost for i in out if i.cost is not None and i.status is Status.RESOLVED]
    assert costs, out
    return costs[0]


def test_step_time_from_timestamps_and_gpus_unknown_from_one_process() -> None:
    cost = _first_cost([_event(s) for s in range(1, 40)])
    # 30 s between events, no step-time metric; one process says nothing of its GPUs
    assert cost["step_time_from"] == "event timestamps" and cost["step_seconds"] == 30.0
    assert cost["gpus"] is None and cost["gpu_hours"] is None
    assert cost["hours"] == pytest.approx(20 * 30 / 3600, rel=1e-3)


def test_gpus_from_a_tag_then_the_config_then_the_processes_seen() -> None:
    tagged = [_event(s, tags={"gpus": "64"}) for s in range(1, 40)]
    assert _first_cost(tagged)["gpus"] == 64
    configured = Config(engine=EngineConfig.model_validate({"cost": {"gpus": 16}}))
    assert _first_cost([_event(s) for s in range(1, 40)], configured)["gpus"] == 16
    assert _first_cost(tagged, configured)["gpus_from"] == "tag gpus"  # the run's own word
    ranks = []
    for step in range(1, 40):
        for rank in range(4):  # each rank logs its step time; rank 0 the rest too
            metrics = {"timing_s/step": 12.0}
            if rank == 0:
                metrics["actor/kl_loss"] = math.nan if step == 5 else 0.01
            ranks.append(_event(step, source=Source(host="n0", rank=rank), metrics=metrics))
    cost = _first_cost(ranks)
    assert (cost["gpus"], cost["gpus_from"]) == (4, "processes seen")
    assert (cost["step_seconds"], cost["step_time_from"]) == (12.0, "timing_s/step")


def test_the_meter_survives_a_snapshot() -> None:
    monitor = Monitor()
    for s in range(1, 30):
        monitor.process(_event(s, tags={"gpus": "8"}))
    run = monitor.runs["r"]
    before = run.price("nonfinite_metric", 5, 29)
    restored = load_run(dump_run(run))
    assert restored.price("nonfinite_metric", 5, 29) == before
    assert before is not None and before["gpus"] == 8


def test_slack_email_and_discord_say_what_the_incident_cost(broken_run: Path) -> None:
    resolved = replay_files([broken_run]).incidents[1]
    msg = Message.build("slack", "g", {"run_id": resolved.run_id}, (resolved,))
    payload = slack_payload(msg)
    assert check_block_kit(payload) == []
    said = "~26 GPU-hours since metrics went non-finite at step 60 (20 steps x 596 s x 8 GPUs)"
    assert said in json.dumps(payload)
    assert said in json.dumps(discord_payload(msg))
    mail = email_message(msg, sender="sw@example.com", to=("ml@example.com",))
    assert said in mail.get_content()


def test_the_report_says_what_each_run_spent(broken_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    from streamwatch.report import build_report

    out = tmp_path / "report.html"
    build_report([broken_run], out)
    page = out.read_text()
    assert "~60 GPU-hours spent after its first critical incident (step 60)" in page
    assert "<th>cost, heading</th>" in page
    assert "~26 GPU-hours since metrics went non-finite at step 60" in page


def test_a_long_run_is_priced_from_a_bounded_clock() -> None:
    from streamwatch.engine.cost import CostMeter

    meter = CostMeter(gpus=2)
    times = [20.0 + (step % 97) * 0.5 + step / 100 for step in range(20_001)]  # slower and slower
    for step in range(1, 20_001):
        meter.observe(step, None)
        meter.timed(times[step], step)
    assert len(meter.work.points) <= 257
    cost = meter.price(since=3_000, until=20_000, sources=0)
    assert cost is not None
    exact = sum(times[3_001:20_001]) * 2 / 3600
    assert cost["gpu_hours"] == pytest.approx(exact, rel=1e-3)
    # the mean of the newest step times alone would say 10% more: the run slowed down
    assert cost["step_seconds"] * 1.05 < sum(times[-32:]) / 32
