"""Small input and evidence defects: a boolean is not a step (files and Kafka alike), and
evidence keeps the numbers' full precision (a timestamp survives the incident's JSON)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamwatch.engine.monitor import Monitor
from streamwatch.events import decode_event
from streamwatch.incidents import Incident
from streamwatch.replay.files import replay_files
from streamwatch.sources import read_events
from streamwatch.sources.kafka import decode_message


@pytest.mark.parametrize("flag", [True, False])
def test_a_boolean_step_is_rejected_with_its_reason(flag: bool) -> None:
    event, problems = decode_event({"run_id": "r", "step": flag, "metrics": {"loss": 1.0}})
    assert event is None
    [problem] = problems
    word = "true" if flag else "false"
    assert problem.reason == f"'step' {word} is a boolean, not a step number"
    assert problem.run_id == "r"


def test_a_boolean_step_is_set_aside_in_a_replayed_file(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    lines = [
        {"run_id": "r", "step": 0, "metrics": {"loss": 1.0}},
        {"run_id": "r", "step": True, "metrics": {"loss": 0.9}},
        {"run_id": "r", "step": 2, "metrics": {"loss": 0.8}},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    problems: list[str] = []
    steps = [e.step for e in read_events([path], on_problem=lambda p: problems.append(str(p)))]
    assert steps == [0, 2]
    assert problems == [f"{path}:2, run 'r': 'step' true is a boolean, not a step number"]
    result = replay_files([path])
    assert result.events == 2 and result.problem_count == 1


def test_a_boolean_step_in_a_kafka_message_is_a_dead_letter() -> None:
    value = b'{"run_id": "r", "step": true, "metrics": {"loss": 1.0}}'
    decoded = decode_message(value, "metrics/0@5")
    assert decoded.event is None and decoded.rejected is not None
    assert decoded.rejected.reason == "invalid_event"
    assert decoded.rejected.detail == "'step' true is a boolean, not a step number"
    # an integral float step is still a step (some loggers write 3.0)
    ok = decode_message(b'{"run_id": "r", "step": 3.0, "metrics": {"loss": 1.0}}', "m/0@6")
    assert ok.event is not None and ok.event.step == 3


def test_evidence_keeps_full_precision_and_the_stall_time_round_trips() -> None:
    monitor = Monitor()
    start = 1_764_460_800.123456  # 6 significant digits would make this 1764460000.0
    last = 0.0
    for step in range(12):
        last = start + 10.0 * step + step * 1e-6
        monitor.process(
            decode_event({"run_id": "r", "step": step, "ts": last, "metrics": {"loss": 1.0}})[0]
            or pytest.fail("not an event")
        )
    stalls = [i for i in monitor.tick(last + 3_600.0) if i.kind == "run_stalled"]
    assert stalls, "no stall after an hour of silence"
    evidence = stalls[0].evidence
    assert evidence["last_event_ts"] == last
    assert evidence["silent_seconds"] == pytest.approx(3_600.0, abs=1e-6)
    back = Incident.model_validate_json(stalls[0].to_json())
    assert back.evidence["last_event_ts"] == last
    assert back == stalls[0]
