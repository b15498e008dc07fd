"""A full disk is a degraded sink, not a dead service: the incidents file and the alert state
files write whole lines or none, hold what the disk did not take, and say it. ``/dev/full``
refuses every write with ENOSPC, as a full filesystem does."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
from pathlib import Path

import pytest

from streamwatch.alerting.message import Message
from streamwatch.alerting.spool import Spool
from streamwatch.cli.main import main
from streamwatch.cli.outcome import EXIT_DISK_FULL
from streamwatch.clock import ManualClock
from streamwatch.config import Config
from streamwatch.incidents import Incident, Kind, Severity, Status
from streamwatch.live import Service, ServiceSettings
from streamwatch.live.kafka_tools import TopicSpec
from streamwatch.live.testing import FakeBroker
from streamwatch.sinks import JsonlSink
from streamwatch.sources.kafka import KafkaConnection

FULL = Path("/dev/full")
EXAMPLE = Path(__file__).parent.parent / "examples" / "logs" / "entropy_collapse.jsonl"
needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full here")


def _incident(n: int) -> Incident:
    return Incident(
        id=f"i{n}",
        run_id="r",
        kind=Kind.NONFINITE_METRIC,
        severity=Severity.CRITICAL,
        status=Status.FIRING,
        indicator="loss",
        metric="loss",
        step=n,
        message="loss is nan",
    )


@needs_dev_full
def test_the_sink_on_a_full_disk_counts_holds_and_says_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = JsonlSink(FULL, append=True, max_backlog=3)
    with caplog.at_level(logging.WARNING):
        for n in range(5):
            sink.send(_incident(n))  # does not raise
    assert sink.errors == 5
    assert (len(sink.backlog), sink.dropped, sink.lost) == (3, 2, 5)
    assert sink.failing is not None and sink.failing.errno == errno.ENOSPC
    (said,) = [r.getMessage() for r in caplog.records]  # once, not per line
    assert "/dev/full" in said and "disk full" in said and "ENOSPC" in said
    sink.close()


def test_a_write_cut_short_leaves_no_torn_line_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "incidents.jsonl"
    sink = JsonlSink(path)
    sink.send(_incident(0))
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        if len(data) > 10:
            return real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    sink.send(_incident(1))
    assert sink.failing is not None and sink.lost == 1
    lines = path.read_text().splitlines(keepends=True)
    assert [json.loads(line)["step"] for line in lines] == [0]  # the half line was cut away
    monkeypatch.setattr(os, "write", real_write)
    sink.flush()  # space again: what was held goes out
    assert sink.lost == 0
    assert not sink.errors > 1
    steps = [json.loads(line)["step"] for line in path.read_text().splitlines()]
    assert steps == [0, 1]
    sink.close()


@needs_dev_full
def test_replay_says_disk_full_with_its_own_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["replay", "--quiet", "--incidents-out", str(FULL), str(EXAMPLE)])
    assert code == EXIT_DISK_FULL == 4
    err = capsys.readouterr().err
    assert "disk full writing /dev/full" in err
    assert "Traceback" not in err


def test_replay_writes_whole_lines_up_to_the_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The disk fills part way: every line in the file is whole, and the exit says so."""
    out = tmp_path / "incidents.jsonl"
    real_write, budget = os.write, [600]

    def filling(fd: int, data: bytes) -> int:
        if fd > 2 and os.path.realpath(f"/proc/self/fd/{fd}") == str(out):
            if budget[0] <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            n = real_write(fd, data[: budget[0]])
            budget[0] -= n
            return n
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", filling)
    code = main(["replay", "--quiet", "--incidents-out", str(out), str(EXAMPLE)])
    assert code == EXIT_DISK_FULL
    assert f"disk full writing {out}" in capsys.readouterr().err
    text = out.read_text()
    assert text == "" or text.endswith("\n")
    for line in text.splitlines():
        json.loads(line)


@needs_dev_full
def test_the_service_goes_on_with_a_full_incidents_file(tmp_path: Path) -> None:
    clock = ManualClock(2_000_000_000.0)
    broker = FakeBroker(clock)
    broker.ensure_topics({"metrics": TopicSpec(1)})
    for step in range(5):
        value = {"run_id": "r", "step": step, "metrics": {"loss": math.nan if step else 1.0}}
        broker.produce("metrics", json.dumps(value).encode(), key=b"r")
    settings = ServiceSettings(
        connection=KafkaConnection(bootstrap_servers="in-memory:9092"),
        console=False,
        topic="metrics",
        group="g",
        incidents_topic="",
        dead_letter_topic="",
        state_topic="",
        incidents_out=FULL,
    )
    service = Service(settings, Config(), clock=clock, broker=broker)
    counts = service.run(max_idle=3.0)
    assert counts.events == 5
    assert counts.incidents >= 1
    assert counts.sink_write_errors >= 1 and counts.sink_backlog >= 1
    _, detail = service.vitals.health()
    assert "failing" in detail["incidents_file"]


@needs_dev_full
def test_the_spool_says_per_message_what_it_could_not_keep(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spool = Spool(FULL)
    messages = [
        Message(id=f"m{n}", receiver="slack", group_key="g", labels={}, incidents=(_incident(n),))
        for n in range(8)
    ]
    with caplog.at_level(logging.ERROR):
        kept = [spool.add(m) for m in messages]
    assert kept == [False] * 8
    assert spool.errors == 8
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 8
    assert all("disk full" in line for line in said)
    assert [f"message m{n} for receiver slack" in said[n] for n in range(8)] == [True] * 8
    spool.close()


def test_alerts_on_a_full_state_dir_are_all_delivered_and_each_unspooled_one_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Eight messages, room in memory for four, a disk that takes nothing: every message is
    still delivered from memory, and the log says which ones were not kept on disk."""
    import random

    import streamwatch.alerting.spool as spool_module
    from streamwatch.alerting.config import AlertingConfig
    from streamwatch.alerting.dispatcher import Dispatcher
    from streamwatch.alerting.testing import RecordingReceiver, incident

    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spool_module, "write_whole", full)
    with RecordingReceiver() as rx, caplog.at_level(logging.ERROR):
        cfg = AlertingConfig.model_validate(
            {
                "receivers": [{"name": "hook", "type": "webhook", "url": rx.url}],
                "group_wait": 0.0,
                "delivery": {"queue_size": 4, "backoff_initial": 0.05, "backoff_max": 0.1},
            }
        )
        d = Dispatcher(cfg, state_dir=tmp_path, rng=random.Random(1))
        for r in range(8):
            d.send(incident(f"run-{r}", "metric_spike", step=10))
        report = d.close(timeout=9.0)
    assert report.delivered == 8
    said = [r.getMessage() for r in caplog.records if "not kept on disk" in r.getMessage()]
    spooled = [line for line in said if "for receiver hook" in line]
    assert len(spooled) == 8
    assert all("disk full" in line for line in spooled)
