"""The live service against a real broker: live equals replay, hand-over between processes,
dead letters, stalls on an injected clock, clean shutdown, broker restart.

Needs the development broker: `make kafka-up`, then STREAMWATCH_BOOTSTRAP=127.0.0.1:19092.
Without it the broker tests are skipped. Every test uses its own topics and group.
"""

from __future__ import annotations

import json
import logging
import math
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka_broker import OwnBroker

from streamwatch.cli.kafka import main as kafka_main
from streamwatch.clock import ManualClock
from streamwatch.config import Config, EngineConfig
from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event, Source, finished_event
from streamwatch.incidents import Incident
from streamwatch.live import Service, ServiceSettings
from streamwatch.live.kafka import KafkaBroker
from streamwatch.live.kafka_tools import _Pacer, record_topic
from streamwatch.live.testing import NoListener, delete_topics
from streamwatch.replay.files import replay_files
from streamwatch.simulate import Fault, RunSpec, simulate, write_jsonl
from streamwatch.sources import FileSource
from streamwatch.sources.kafka import KafkaConnection

pytestmark = [
    pytest.mark.kafka,
    # kafka-python 3.0 loads its protocol schemas with importlib.resources.read_text and open_text,
    # deprecated since Python 3.11.
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 90.0
#: Stalls are judged on each process's wall clock; every comparison with a replay leaves them out.
NO_STALLS = Config(engine=EngineConfig(disabled_kinds=("run_stalled",)))
NO_STALLS_TOML = '[engine]\ndisabled_kinds = ["run_stalled"]\n'


# -- fixtures and helpers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Names:
    topic: str
    group: str
    incidents: str
    dead_letters: str
    state: str

    @classmethod
    def fresh(cls) -> Names:
        tag = uuid.uuid4().hex[:10]
        topic = f"sw-test-{tag}"
        return cls(topic, f"sw-group-{tag}", f"{topic}.incidents", f"{topic}.dlq", f"{topic}.state")

    def all(self) -> list[str]:
        return [self.topic, self.incidents, self.dead_letters, self.state]

    def run_args(self, bootstrap: str) -> list[str]:
        return [
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            self.topic,
            "--group",
            self.group,
            "--incidents-topic",
            self.incidents,
            "--dead-letter-topic",
            self.dead_letters,
            "--state-topic",
            self.state,
        ]


@pytest.fixture
def names(bootstrap: str) -> Iterator[Names]:
    created = Names.fresh()
    yield created
    delete_topics(bootstrap, created.all())


def settings(bootstrap: str, names: Names, **overrides: Any) -> ServiceSettings:
    values: dict[str, Any] = {
        "connection": KafkaConnection(bootstrap_servers=bootstrap, client_id="test-service"),
        "topic": names.topic,
        "group": names.group,
        "incidents_topic": names.incidents,
        "dead_letter_topic": names.dead_letters,
        "state_topic": names.state,
        "console": False,
        "session_timeout_ms": 6000,
    }
    values.update(overrides)
    return ServiceSettings(**values)


def kafka_kwargs(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap_servers": bootstrap.split(","), "client_id": "test-client"}


class Background:
    """A service running in a thread, its exception (if any) kept for the test."""

    def __init__(self, service: Service, *, max_idle: float | None = None) -> None:
        self.service = service
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(max_idle,), daemon=True)
        self.thread.start()

    def _run(self, max_idle: float | None) -> None:
        try:
            self.service.run(self.stop, max_idle=max_idle)
        except BaseException as exc:  # reported by join()
            self.error = exc

    def join(self, timeout: float = TIMEOUT_S) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the service did not stop"
        if self.error is not None:
            raise self.error

    def finish(self) -> None:
        self.stop.set()
        self.join()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def read_topic(bootstrap: str, topic: str) -> list[Any]:
    """Every record of a topic now, partition by partition, in offset order."""
    from kafka import KafkaConsumer, TopicPartition

    consumer: Any = KafkaConsumer(**kafka_kwargs(bootstrap), enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        records: list[Any] = []
        deadline = time.monotonic() + TIMEOUT_S
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"reading {topic} timed out"
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer: Any = KafkaConsumer(**kafka_kwargs(bootstrap))
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from kafka.admin import KafkaAdminClient

    admin: Any = KafkaAdminClient(**kafka_kwargs(bootstrap))
    try:
        offsets = admin.list_group_offsets(group).get(group, {})
    finally:
        admin.close()
    return {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic}


def all_committed(bootstrap: str, group: str, topic: str) -> bool:
    ends = end_offsets(bootstrap, topic)
    committed = committed_offsets(bootstrap, group, topic)
    return all(committed.get(p, 0) == end for p, end in ends.items() if end > 0)


def assert_same_incidents(got: Sequence[str], expected: Sequence[str]) -> None:
    """The same lines, each as many times, and in the same order within every run."""
    assert Counter(got) == Counter(expected), diff(got, expected)
    for run_id in {json.loads(line)["run_id"] for line in expected}:
        assert runs_lines(got, run_id) == runs_lines(expected, run_id), run_id


def runs_lines(lines: Sequence[str], run_id: str) -> list[str]:
    return [line for line in lines if json.loads(line)["run_id"] == run_id]


def diff(got: Sequence[str], expected: Sequence[str]) -> str:
    extra = Counter(got) - Counter(expected)
    missing = Counter(expected) - Counter(got)
    return f"extra: {list(extra.elements())[:5]}\nmissing: {list(missing.elements())[:5]}"


def replayed(path: Path, config: Config = NO_STALLS) -> list[str]:
    return [inc.to_json() for inc in replay_files([path], config).incidents]


def unflushed(path: Path, config: Config = NO_STALLS) -> list[str]:
    """A replay without its end-of-input step: what a service that keeps running has said."""
    monitor = Monitor(config)
    return [inc.to_json() for event in FileSource(path) for inc in monitor.process(event)]


def simulated_file(path: Path, tag: str, steps: int = 200) -> tuple[Path, list[str]]:
    """Two runs of 2 hosts x 2 ranks: an entropy collapse in one, non-finite values in both."""
    specs = [
        RunSpec(
            f"collapse-{tag}",
            steps=steps,
            seed=11,
            faults=(Fault("entropy_collapse", steps // 2), Fault("nonfinite_metric", steps // 4)),
        ),
        RunSpec(
            f"nan-{tag}", steps=steps, seed=12, faults=(Fault("nonfinite_metric", steps // 3),)
        ),
    ]
    write_jsonl(simulate(specs), path)
    return path, [spec.run_id for spec in specs]


def jsonl_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def publish(bootstrap: str, topic: str, *paths: Path) -> None:
    args = [str(p) for p in paths]
    assert kafka_main(["publish", *args, "--bootstrap-servers", bootstrap, "--topic", topic]) == 0


def produce(bootstrap: str, topic: str, messages: Sequence[tuple[bytes, bytes]]) -> list[int]:
    """Send (key, value) messages in order to one topic; returns their offsets."""
    from kafka import KafkaProducer

    producer: Any = KafkaProducer(**kafka_kwargs(bootstrap), acks="all")
    try:
        futures = [producer.send(topic, key=k, value=v) for k, v in messages]
        producer.flush()
        return [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(timeout=10)


def event_bytes(run_id: str, step: int, ts: float | None = None, **metrics: float) -> bytes:
    event = Event(run_id=run_id, step=step, ts=ts, metrics=metrics)
    return json.dumps(event.to_json_dict()).encode()


def python(*args: str) -> list[str]:
    return [sys.executable, "-W", "ignore::DeprecationWarning", *args]


# -- live equals replay -----------------------------------------------------------------------


def test_live_incidents_equal_a_replay_of_the_same_file(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Published file -> service until idle: its incident file and the incidents topic hold
    exactly the updates `streamwatch replay` gives, in the same order within each run."""
    path, _ = simulated_file(tmp_path / "sim.jsonl", names.group)
    expected = replayed(path)
    assert any('"entropy_collapse"' in line for line in expected)
    assert any('"nonfinite_metric"' in line for line in expected)

    publish(bootstrap, names.topic, path)
    out = tmp_path / "incidents.jsonl"
    counts = Service(settings(bootstrap, names, incidents_out=out), NO_STALLS).run(max_idle=3.0)

    events = sum(1 for _ in FileSource(path))
    assert (counts.events, counts.dead_letters, counts.duplicates_dropped) == (events, 0, 0)
    assert_same_incidents(jsonl_lines(out), expected)
    recorded = tmp_path / "recorded-incidents.jsonl"
    command = ["record", "--bootstrap-servers", bootstrap, "--topic", names.incidents]
    assert (
        kafka_main([*command, "-o", str(recorded), "--from-beginning", "--idle-timeout", "2"]) == 0
    )
    assert_same_incidents(jsonl_lines(recorded), expected)
    assert all_committed(bootstrap, names.group, names.topic)


def test_the_service_keeps_an_html_report_of_the_runs_it_watches(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    path, _ = simulated_file(tmp_path / "sim.jsonl", names.group, steps=120)
    publish(bootstrap, names.topic, path)
    report = tmp_path / "live.html"
    run_ids = {event.run_id for event in FileSource(path)}
    Service(settings(bootstrap, names, report_out=report), NO_STALLS).run(max_idle=3.0)
    html = report.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") or html.lstrip().lower().startswith("<!doctype")
    for run_id in run_ids:
        assert run_id in html


def test_a_restarted_service_continues_each_run_where_it_stopped(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Stopped mid-stream (not at a step boundary) and started again as a new process would,
    the service restores every run from its checkpoint: together both say what a replay does."""
    path, _ = simulated_file(tmp_path / "sim.jsonl", names.group)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = len(lines) // 2 + 3
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("".join(lines[:cut]), encoding="utf-8")
    second.write_text("".join(lines[cut:]), encoding="utf-8")
    out = tmp_path / "incidents.jsonl"
    config = settings(bootstrap, names, incidents_out=out, commit_interval=3600.0)

    publish(bootstrap, names.topic, first)
    before = Background(Service(config, NO_STALLS))
    wait_for(lambda: before.service.counts.events == cut, "the first half")
    before.finish()
    assert all_committed(bootstrap, names.group, names.topic)

    publish(bootstrap, names.topic, second)
    after = Service(config, NO_STALLS).run(max_idle=3.0)
    assert after.restored_runs == 2
    assert after.events == len(lines) - cut
    assert_same_incidents(jsonl_lines(out), replayed(path))


def test_a_new_owner_drops_the_updates_its_predecessor_published_but_never_committed(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """A crash between publishing incident updates and committing the offsets: the next
    owner restores the runs from the last checkpoint, processes those messages again and
    drops exactly the updates already on the incidents topic. The topic ends up equal to a
    replay, each update once."""
    path, _ = simulated_file(tmp_path / "sim.jsonl", names.group)
    expected = replayed(path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = len(lines) * 2 // 5
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("".join(lines[:cut]), encoding="utf-8")
    second.write_text("".join(lines[cut:]), encoding="utf-8")

    publish(bootstrap, names.topic, first)
    crashing = Background(Service(settings(bootstrap, names, commit_interval=0.2), NO_STALLS))
    service = crashing.service
    wait_for(lambda: service.counts.events == cut, "the first part")
    wait_for(lambda: all_committed(bootstrap, names.group, names.topic), "its commit")

    def crash_before_commit(stop: threading.Event, only: set[int] | None = None) -> None:
        """From here on nothing more is committed, as if the process died each time."""

    service.committer.commit = crash_before_commit  # type: ignore[method-assign]
    published_before = service.counts.incidents
    publish(bootstrap, names.topic, second)
    wait_for(lambda: service.counts.events == len(lines), "the second part")
    crashing.finish()
    uncommitted = service.counts.incidents - published_before
    assert uncommitted > 0

    successor = Service(settings(bootstrap, names), NO_STALLS).run(max_idle=3.0)
    assert successor.restored_runs == 2
    assert successor.events == len(lines) - cut
    assert successor.duplicates_dropped == uncommitted
    on_topic = [r.value.decode() for r in read_topic(bootstrap, names.incidents)]
    assert_same_incidents(on_topic, expected)


# -- bad input --------------------------------------------------------------------------------


def test_unusable_messages_go_to_the_dead_letter_topic_with_the_reason(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    good = [event_bytes("ok", step, loss=1.0 + step) for step in range(1, 6)]
    good[2] = event_bytes("ok", 3, loss=math.nan)
    oversized = event_bytes("ok", 99, **{f"m{i:04d}": float(i) for i in range(300)})
    bad = {
        "not_json": b'{"run_id": "ok", "step": ',
        "not_an_object": b"[1, 2, 3]",
        "invalid_event": b'{"run_id": "ok", "step": 4}',
        "oversized": oversized,
    }
    messages = [
        good[0],
        bad["not_json"],
        good[1],
        bad["not_an_object"],
        good[2],
        bad["invalid_event"],
        good[3],
        bad["oversized"],
        good[4],
    ]
    offsets = produce(bootstrap, names.topic, [(b"ok", m) for m in messages])
    out = tmp_path / "incidents.jsonl"
    counts = Service(
        settings(bootstrap, names, incidents_out=out, max_message_bytes=4096), NO_STALLS
    ).run(max_idle=3.0)

    assert (counts.events, counts.dead_letters) == (5, 4)
    letters = read_topic(bootstrap, names.dead_letters)
    by_reason = {}
    for record in letters:
        headers = {k: v.decode() for k, v in record.headers}
        by_reason[headers["streamwatch.reason"]] = (record, headers)
    assert set(by_reason) == set(bad)
    for reason, value in bad.items():
        record, headers = by_reason[reason]
        assert record.value == value
        assert record.key == b"ok"
        assert headers["streamwatch.topic"] == names.topic
        assert int(headers["streamwatch.offset"]) == offsets[messages.index(value)]
        assert headers["streamwatch.partition"].isdigit()
        assert headers["streamwatch.detail"]
    assert "metrics" in by_reason["invalid_event"][1]["streamwatch.detail"]
    fired = [Incident.model_validate_json(line) for line in jsonl_lines(out)]
    assert [(i.kind, i.status.value, i.step) for i in fired] == [("nonfinite_metric", "firing", 3)]


class PoisonedMonitor(Monitor):
    """The engine raising on one event (``run_id`` at ``step``), as a bug in a check would."""

    def __init__(self, run_id: str, step: int, config: Config) -> None:
        super().__init__(config, sweep_seconds=math.inf)
        self.poison = (run_id, step)

    def process(self, event: Event, origin: str = "<event>") -> list[Incident]:
        if (event.run_id, event.step) == self.poison:
            raise ZeroDivisionError("a check divided by zero")
        return super().process(event, origin)


def test_a_poll_returns_at_most_max_poll_records_and_every_record_in_turn(
    bootstrap: str, names: Names
) -> None:
    """The service reads in batches of at most ``max_poll_records`` (large by default, so a
    poll that empties the client's buffer sends the next fetches before the batch is judged)."""
    offsets = produce(
        bootstrap, names.topic, [(b"r", event_bytes("r", s, loss=1.0)) for s in range(30)]
    )
    broker = KafkaBroker.for_service(settings(bootstrap, names, max_poll_records=7))
    consumer = broker.consumer(names.group, [names.topic])
    consumer.subscribe(names.topic, NoListener())
    sizes: list[int] = []
    seen: list[int] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(seen) < len(offsets) and time.monotonic() < deadline:
            batch = consumer.poll(200)
            sizes.append(sum(len(records) for records in batch.values()))
            seen += [r.offset for records in batch.values() for r in records]
    finally:
        consumer.close()
    assert sorted(seen) == sorted(offsets)
    assert max(sizes) == 7
    assert ServiceSettings.model_fields["max_poll_records"].default == 5000


def test_a_record_the_engine_raises_on_goes_to_the_dead_letter_topic_and_the_service_goes_on(
    bootstrap: str,
    names: Names,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug in a check that raises on one event: that record goes to the dead letters with
    the exception, and every later record of every run is judged (no redelivery loop)."""
    caplog.set_level(logging.ERROR, logger="streamwatch.live")
    poisoned = [(b"poison", event_bytes("poison", s, 1.7e9 + s, loss=1.0)) for s in range(5)]
    fine = [(b"fine", event_bytes("fine", s, 1.7e9 + s, loss=math.nan)) for s in range(3)]
    offsets = produce(bootstrap, names.topic, poisoned + fine)
    out = tmp_path / "incidents.jsonl"

    service = Service(settings(bootstrap, names, incidents_out=out), NO_STALLS)
    service.monitor = PoisonedMonitor("poison", 2, NO_STALLS)
    counts = service.run(max_idle=3.0)

    assert (counts.events, counts.engine_errors, counts.dead_letters) == (7, 1, 1)
    [letter] = read_topic(bootstrap, names.dead_letters)
    headers = {k: v.decode() for k, v in letter.headers}
    assert headers["streamwatch.reason"] == "engine_error"
    assert headers["streamwatch.detail"] == "ZeroDivisionError: a check divided by zero"
    assert int(headers["streamwatch.offset"]) == offsets[2]
    assert (letter.key, letter.value) == poisoned[2]
    fired = [Incident.model_validate_json(line) for line in jsonl_lines(out)]
    assert ("fine", "nonfinite_metric") in {(i.run_id, i.kind) for i in fired}
    assert all_committed(bootstrap, names.group, names.topic)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("run 'poison' step 2" in line for line in errors), errors


def test_checkpoints_that_cannot_be_restored_are_logged_and_their_runs_start_afresh(
    bootstrap: str, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    """One run's checkpoint replaced by a snapshot of another version, one by damaged bytes:
    the next service says so for each, starts them afresh, restores the third, goes on."""
    import zlib

    from kafka import KafkaProducer

    from streamwatch.engine.snapshot import VERSION

    caplog.set_level(logging.INFO, logger="streamwatch.live")
    runs = ("foreign", "damaged", "intact")
    first = [(r.encode(), event_bytes(r, s, 1.7e9 + s, loss=1.0)) for s in range(4) for r in runs]
    produce(bootstrap, names.topic, first)
    before = Background(Service(settings(bootstrap, names, commit_interval=3600.0), NO_STALLS))
    wait_for(lambda: before.service.counts.events == len(first), "the first events")
    before.finish()
    latest = {}
    for record in read_topic(bootstrap, names.state):
        kind = dict(record.headers)["streamwatch.kind"]
        if kind == b"run":
            latest[record.key.decode().rsplit("\x1f", 1)[1]] = record
    assert set(latest) == set(runs)
    head, _, body = zlib.decompress(latest["foreign"].value).partition(b"\n")
    header = json.loads(head)
    assert header["version"] == VERSION
    header["version"] = VERSION + 1  # as the next version of streamwatch would write it
    bad = {
        "foreign": zlib.compress(json.dumps(header).encode() + b"\n" + body, 1),
        "damaged": b"\x00 not a checkpoint",
    }
    producer: Any = KafkaProducer(**kafka_kwargs(bootstrap), acks="all")
    try:
        for run_id, value in bad.items():
            cp = latest[run_id]
            producer.send(
                names.state, key=cp.key, value=value, partition=cp.partition, headers=cp.headers
            )
        producer.flush()
    finally:
        producer.close(timeout=10)
    second = [(r.encode(), event_bytes(r, s, 1.7e9 + s, loss=1.0)) for s in (4, 5) for r in runs]
    produce(bootstrap, names.topic, second)

    counts = Service(settings(bootstrap, names, status_seconds=0.5), NO_STALLS).run(max_idle=3.0)

    assert (counts.restored_runs, counts.fresh_runs) == (1, 2)
    assert counts.events == len(second)  # the runs afresh from where their checkpoints were
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    for run_id in bad:
        assert any(f"run {run_id}: checkpoint not restored" in line for line in errors), errors
    said = f"run 'foreign' is version {VERSION + 1}; this streamwatch reads version {VERSION}"
    assert any(said in line for line in errors if line.startswith("run foreign")), errors
    assert "2 runs started afresh" in counts.summary()


def test_metrics_scraped_from_a_running_service_are_present_and_moving(
    bootstrap: str, names: Names
) -> None:
    """/metrics parsed by prometheus_client's own text parser: every counter there, and the
    counts moving between two scrapes; /healthz says ok; both go away with the service."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    def scrape(path: str) -> tuple[int, str]:
        address = service.metrics_address
        assert address is not None
        url = f"http://{address[0]}:{address[1]}{path}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()

    def values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    first = [(b"m", event_bytes("m", s, 1.7e9 + s, loss=1.0)) for s in range(5)]
    produce(bootstrap, names.topic, [*first, (b"m", b"[1, 2]")])
    service = Service(settings(bootstrap, names, metrics_port=0, tick_seconds=0.1), NO_STALLS)
    background = Background(service)
    try:
        wait_for(lambda: service.counts.events == 5, "the first events")
        wait_for(lambda: service.counts.lag == 0 and service.counts.commits > 0, "a commit")
        before = values(scrape("/metrics")[1])
        status, health = scrape("/healthz")
        produce(bootstrap, names.topic, [(b"m", event_bytes("m", 5, 1.7e9 + 5, loss=math.nan))])
        wait_for(lambda: service.counts.incidents == 1, "the incident")
        wait_for(lambda: values(scrape("/metrics")[1])[("streamwatch_events_total", ())] == 6, "6")
        after = values(scrape("/metrics")[1])
    finally:
        background.finish()
    address = service.metrics_address
    assert address is None

    assert (status, json.loads(health)["status"]) == (200, "ok")
    counters = {name for name, _ in after if name.endswith("_total")}
    expected = {
        "events", "values", "dead_letters", "engine_errors", "incident_updates",
        "duplicates_dropped", "skipped_messages", "runs_restored", "runs_fresh", "commits",
        "checkpoint_bytes",
    }  # fmt: skip
    assert {f"streamwatch_{name}_total" for name in expected} <= counters
    for gauge in ("consumer_lag_messages", "runs_watched", "partitions_owned", "up"):
        assert (f"streamwatch_{gauge}", ()) in after, gauge
    assert "streamwatch_checkpoint_age_seconds" in {name for name, _ in after}
    assert before[("streamwatch_events_total", ())] == 5
    assert after[("streamwatch_values_total", ())] > before[("streamwatch_values_total", ())]
    assert before[("streamwatch_dead_letters_total", (("reason", "not_an_object"),))] == 1
    firing = (("kind", "nonfinite_metric"), ("severity", "critical"), ("status", "firing"))
    assert after[("streamwatch_incident_updates_total", firing)] == 1
    assert after[("streamwatch_runs_watched", ())] == 1
    assert after[("streamwatch_up", ())] == 1


# -- stalls on an injected clock --------------------------------------------------------------


def ten_steps_on_a_manual_clock(
    bootstrap: str, names: Names, out: Path, run: str, clock_ahead: float
) -> tuple[Service, Background, ManualClock]:
    """Steps 0-9 of ``run``, 30 s apart, and a service whose clock reads ``clock_ahead``
    seconds past the last event's time (stall limit: 150 s)."""
    start = 1_700_000_000.0
    messages = [(run.encode(), event_bytes(run, s, start + 30.0 * s, loss=1.0)) for s in range(10)]
    produce(bootstrap, names.topic, messages)
    clock = ManualClock(start + 30.0 * 9 + clock_ahead)
    service = Service(settings(bootstrap, names, incidents_out=out, tick_seconds=0.05), clock=clock)
    background = Background(service)
    try:
        wait_for(lambda: service.counts.events == len(messages), "the first events")
    except BaseException:
        background.finish()
        raise
    return service, background, clock


def test_stall_fires_on_the_service_clock_and_resolves_when_events_return(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    out = tmp_path / "incidents.jsonl"
    _, background, clock = ten_steps_on_a_manual_clock(bootstrap, names, out, "slow", 1.0)
    try:
        clock.advance(10.0)  # the service's schedule runs on its clock too: a tick is due
        time.sleep(0.3)
        assert jsonl_lines(out) == []  # 11 s of silence: no stall yet
        clock.advance(990.0)
        wait_for(lambda: len(jsonl_lines(out)) == 1, "the stall")
        stalled = Incident.model_validate_json(jsonl_lines(out)[0])
        assert (stalled.kind, stalled.status.value, stalled.step) == ("run_stalled", "firing", 9)
        assert stalled.ts == clock.now()
        # silence on the service's clock: from when the last event arrived
        assert stalled.evidence["silent_seconds"] == pytest.approx(1000.0)

        produce(bootstrap, names.topic, [(b"slow", event_bytes("slow", 10, clock.now(), loss=1.0))])
        wait_for(lambda: len(jsonl_lines(out)) == 2, "the resolution")
        resolved = Incident.model_validate_json(jsonl_lines(out)[1])
        assert (resolved.kind, resolved.status.value, resolved.step) == (
            "run_stalled",
            "resolved",
            10,
        )
    finally:
        background.finish()


def test_a_node_whose_clock_is_behind_is_not_taken_for_stalled(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """The training node's clock is 10 minutes behind the service's: its newest event looks
    10 minutes old on arrival (the limit is 150 s) but the run is not silent. The stall is
    reported once the service itself has heard nothing for longer than the limit."""
    out = tmp_path / "incidents.jsonl"
    _, background, clock = ten_steps_on_a_manual_clock(bootstrap, names, out, "skew", 600.0)
    try:
        clock.advance(100.0)  # still within the limit since the events arrived
        time.sleep(0.5)  # a tick (due on the service's clock)
        assert jsonl_lines(out) == []
        clock.advance(100.0)
        wait_for(lambda: len(jsonl_lines(out)) == 1, "the stall")
        stalled = Incident.model_validate_json(jsonl_lines(out)[0])
        assert (stalled.kind, stalled.step) == ("run_stalled", 9)
        assert stalled.evidence["silent_seconds"] == pytest.approx(200.0)
    finally:
        background.finish()


class EndedRuns:
    """A sink that notes which runs the service said finished."""

    def __init__(self) -> None:
        self.ended: list[str] = []
        self.incidents: list[Incident] = []

    def send(self, inc: Incident) -> None:
        self.incidents.append(inc)

    def run_ended(self, run_id: str) -> None:
        self.ended.append(run_id)


def test_the_end_of_run_marker_reaches_the_sinks(bootstrap: str, names: Names) -> None:
    """So that the alert dispatcher stops reminding of a finished run's open incidents."""
    marker = finished_event("done", 3, 1_700_000_090.0, Source(host="n0", rank=0))
    messages = [
        (b"done", event_bytes("done", s, 1_700_000_000.0 + 30 * s, loss=1.0)) for s in range(3)
    ]
    messages += [(b"done", json.dumps(marker.to_json_dict()).encode())]
    messages += [(b"on", event_bytes("on", 0, 1_700_000_000.0, loss=1.0))]
    produce(bootstrap, names.topic, messages)
    sink = EndedRuns()
    service = Service(settings(bootstrap, names), sinks=[sink])
    background = Background(service)
    try:
        wait_for(lambda: service.counts.events == len(messages), "the events")
        assert sink.ended == ["done"]
    finally:
        background.finish()


# -- status and lag ---------------------------------------------------------------------------


STATUS_LOGGERS = ("streamwatch.live.status", "streamwatch.live.service")


def status_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name in STATUS_LOGGERS and r.levelno == level
    ]


def test_status_lines_report_rate_runs_and_lag(
    bootstrap: str, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="streamwatch.live")
    messages = [
        (run.encode(), event_bytes(run, step, 1_700_000_000.0 + step, loss=1.0))
        for step in range(100)
        for run in ("a", "b", "c")
    ]
    produce(bootstrap, names.topic, messages)
    service = Service(settings(bootstrap, names, status_seconds=0.2))
    background = Background(service)
    try:
        wait_for(lambda: service.counts.events == len(messages), "the events")
        wait_for(
            lambda: any(
                "3 run(s) watched" in line and "; 0 messages not yet read;" in line
                for line in status_lines(caplog, logging.INFO)
            ),
            "a status line after catching up",
        )
        assert sum(service.lag().values()) == 0
        assert service.lag(), "no partition with a known high watermark"
    finally:
        background.finish()


def test_a_service_far_behind_its_input_says_so(
    bootstrap: str, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    """A backlog of wide events (1,000 metrics each) takes longer to judge than a status
    interval: the service warns that incidents come late, then catches up."""
    caplog.set_level(logging.INFO, logger="streamwatch.live")
    metrics = {f"m/{i}": float(i) for i in range(1000)}
    messages = [
        (
            b"wide",
            json.dumps(
                Event(run_id="wide", step=step, ts=1.7e9 + step, metrics=metrics).to_json_dict()
            ).encode(),
        )
        for step in range(600)
    ]
    produce(bootstrap, names.topic, messages)
    service = Service(settings(bootstrap, names, status_seconds=0.2))
    background = Background(service)
    try:
        wait_for(lambda: bool(status_lines(caplog, logging.WARNING)), "the warning")
        warning = status_lines(caplog, logging.WARNING)[0]
        assert warning.startswith("falling behind: ")
        assert f"group {names.group}" in warning
        unread = int(warning.split()[2])
        assert 0 < unread < len(messages)
        wait_for(lambda: service.counts.events == len(messages), "catching up")
    finally:
        background.finish()


# -- signals ----------------------------------------------------------------------------------


def test_sigterm_finishes_commits_and_exits_0(bootstrap: str, names: Names, tmp_path: Path) -> None:
    """SIGTERM mid-stream: the batch in hand is finished, its outputs flushed and exactly
    the processed messages committed (no commit happened before: the interval is an hour)."""
    path, _ = simulated_file(tmp_path / "sim.jsonl", names.group, steps=160)
    expected = Counter(unflushed(path))
    publish(bootstrap, names.topic, path)
    config = tmp_path / "engine.toml"
    config.write_text(NO_STALLS_TOML, encoding="utf-8")
    out = tmp_path / "incidents.jsonl"
    args = [*names.run_args(bootstrap), "--config", str(config), "--incidents-out", str(out)]
    service = subprocess.Popen(
        python("-m", "streamwatch.cli.kafka", "run", *args, "--commit-interval", "3600"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: len(jsonl_lines(out)) > 0, "the first incident")
        assert committed_offsets(bootstrap, names.group, names.topic) == {}
        service.send_signal(signal.SIGTERM)
        stdout, stderr = service.communicate(timeout=TIMEOUT_S)
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()
    assert service.returncode == 0, stderr
    found = re.search(r"streamwatch run: ([\d,]+) events", stdout)
    assert found is not None, stdout
    processed = int(found.group(1).replace(",", ""))
    assert processed > 0
    assert sum(committed_offsets(bootstrap, names.group, names.topic).values()) == processed
    assert not Counter(jsonl_lines(out)) - expected


# -- two service processes, one killed --------------------------------------------------------


def _partition(run_id: str, partitions: int) -> int:
    from kafka.partitioner.default import murmur2

    return int((murmur2(run_id.encode()) & 0x7FFFFFFF) % partitions)


def _seed_with_runs_apart(partitions: int) -> int:
    """A seed whose runs sim-<seed>-0 and -1 hash to different halves of the partitions, so
    that with the range assignor each of two consumers owns one run."""
    half = partitions // 2
    for seed in range(1000):
        p0, p1 = (_partition(f"sim-{seed}-{i}", partitions) for i in range(2))
        if (p0 < half) != (p1 < half):
            return seed
    raise AssertionError("no seed found")


def _cluster_producers(bootstrap: str, topic: str, seed: int, steps: int) -> subprocess.Popen[str]:
    """The fake cluster: 2 runs on 2 hosts x 2 ranks, one process per rank."""
    return subprocess.Popen(
        python(
            "-m",
            "producers.cluster",
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            topic,
            "--runs",
            "2",
            "--hosts",
            "2",
            "--ranks-per-host",
            "2",
            "--steps",
            str(steps),
            "--step-seconds",
            "0.04",
            "--seed",
            str(seed),
            "--fault",
            f"entropy_collapse@{steps // 2}/0",
            "--fault",
            f"nonfinite_metric@{steps // 4}/0",
            "--fault",
            f"nonfinite_metric@{steps // 3}/1",
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _rank_file_producers(
    bootstrap: str, topic: str, seed: int, steps: int, tmp_path: Path
) -> list[subprocess.Popen[str]]:
    """Without producers/cluster.py: one `publish` process per rank, paced like training."""
    first = (Fault("entropy_collapse", steps // 2), Fault("nonfinite_metric", steps // 4))
    second = (Fault("nonfinite_metric", steps // 3),)
    specs = [
        RunSpec(f"sim-{seed}-0", steps=steps, seed=seed * 1000, faults=first),
        RunSpec(f"sim-{seed}-1", steps=steps, seed=seed * 1000 + 1, faults=second),
    ]
    events = list(simulate(specs))
    procs = []
    for rank in range(4):
        path = tmp_path / f"rank{rank}.jsonl"
        write_jsonl((e for e in events if e.source and e.source.rank == rank), path)
        procs.append(
            subprocess.Popen(
                python(
                    "-m",
                    "streamwatch.cli.kafka",
                    "publish",
                    str(path),
                    "--bootstrap-servers",
                    bootstrap,
                    "--topic",
                    topic,
                    "--speed",
                    "750",
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def _owned(log: Path) -> list[int] | None:
    found = re.findall(r"assigned partitions of \S+: \[([\d, ]*)\]", log.read_text())
    if not found:
        return None
    return [int(x) for x in found[-1].split(",") if x.strip()]


@pytest.mark.slow
def test_two_services_one_killed_every_event_processed_no_update_twice(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """Four producer processes (2 hosts x 2 ranks, 2 runs) and two service processes in one
    group; one service is SIGKILLed mid-stream and the other takes over its partitions.

    What the product guarantees, and this test checks:
    * every produced event is processed: the group's committed offsets equal the end offsets
      of every partition;
    * the incidents topic holds each incident update exactly once, and exactly the updates a
      replay of the same events gives (each run in its partition's order), for the run that
      moved too: the survivor restores the run from the last checkpoint, processes again the
      messages the killed process had not committed, and drops the updates the killed process
      had already published (it reads them from the incidents topic).
    Not guaranteed: each process's own incident file holds what that process emitted, so the
    union of both files may repeat an update the killed process wrote to its file but never
    published; run_stalled (wall clock) is left out here.
    """
    partitions = 4
    seed = _seed_with_runs_apart(partitions)
    steps = 160
    from streamwatch.live.kafka_tools import TopicSpec, ensure_topics

    ensure_topics(kafka_kwargs(bootstrap), {names.topic: TopicSpec(partitions)})
    config = tmp_path / "engine.toml"
    config.write_text(NO_STALLS_TOML, encoding="utf-8")

    services: list[subprocess.Popen[str]] = []
    logs = [tmp_path / f"service{i}.log" for i in range(2)]

    def start(i: int) -> None:
        with logs[i].open("w") as log_file:
            args = [
                *names.run_args(bootstrap),
                "--config",
                str(config),
                "--incidents-out",
                str(tmp_path / f"incidents{i}.jsonl"),
                "--partitions",
                str(partitions),
                "--commit-interval",
                "0.5",
                "--session-timeout-ms",
                "6000",
                "--max-idle",
                "30",
                "--client-id",
                f"service{i}",
                "--quiet",
            ]
            services.append(
                subprocess.Popen(
                    python("-m", "streamwatch.cli.kafka", "run", *args),
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )

    producers: list[subprocess.Popen[str]] = []
    try:
        # one after the other: once, with both joining a new group at the same instant, one
        # got no assignment at all within 20 s; joining a running group is what this tests
        start(0)
        wait_for(lambda: _owned(logs[0]) == list(range(partitions)), "the first service")
        start(1)
        wait_for(
            lambda: all((o := _owned(p)) is not None and len(o) == 2 for p in logs),
            "both services to own two partitions",
        )
        owned = [set(_owned(p) or ()) for p in logs]
        assert owned[0] | owned[1] == set(range(partitions))
        if (ROOT / "producers" / "cluster.py").exists():
            producers = [_cluster_producers(bootstrap, names.topic, seed, steps)]
        else:
            producers = _rank_file_producers(bootstrap, names.topic, seed, steps, tmp_path)

        victim = 0
        victim_parts = owned[victim]

        def victim_committed_some() -> bool:
            committed = committed_offsets(bootstrap, names.group, names.topic)
            return any(committed.get(p, 0) > 0 for p in victim_parts)

        wait_for(victim_committed_some, "the victim's first commits")
        time.sleep(1.2)  # mid-stream, with uncommitted work in the victim
        print("committed at kill:", committed_offsets(bootstrap, names.group, names.topic))
        services[victim].send_signal(signal.SIGKILL)
        services[victim].wait()

        for producer in producers:
            _, err = producer.communicate(timeout=TIMEOUT_S)
            assert producer.returncode == 0, err
        survivor = services[1 - victim]
        survivor.wait(timeout=TIMEOUT_S)
        assert survivor.returncode == 0, logs[1 - victim].read_text()[-3000:]
    finally:
        for proc in [*services, *producers]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    survivor_log = logs[1 - victim].read_text()
    assert sorted(_owned(logs[1 - victim]) or ()) == list(range(partitions)), survivor_log[-2000:]
    assert all_committed(bootstrap, names.group, names.topic)

    recording = tmp_path / "metrics-recorded.jsonl"
    record_topic(
        kafka_kwargs(bootstrap), names.topic, recording, from_beginning=True, idle_timeout=2.0
    )
    expected = replayed(recording)
    on_topic = [r.value.decode() for r in read_topic(bootstrap, names.incidents)]
    assert_same_incidents(on_topic, expected)
    assert max(Counter(on_topic).values()) == 1
    summary = re.findall(r"streamwatch run: .*", survivor_log)
    print(f"survivor: {summary[-1] if summary else survivor_log[-500:]}")


# -- broker restart ---------------------------------------------------------------------------


@pytest.fixture
def own_broker(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnBroker]:
    broker = OwnBroker(tmp_path_factory.mktemp("broker"))
    broker.run("up")
    try:
        yield broker
    finally:
        broker.close()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:unclosed <socket:ResourceWarning")
def test_the_service_reconnects_after_a_broker_restart_and_loses_nothing(
    own_broker: OwnBroker, tmp_path: Path, quiet_kafka_client: None
) -> None:
    bootstrap = own_broker.address
    names = Names.fresh()
    path, _ = simulated_file(tmp_path / "sim.jsonl", names.group, steps=160)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = len(lines) // 2
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("".join(lines[:cut]), encoding="utf-8")
    second.write_text("".join(lines[cut:]), encoding="utf-8")
    out = tmp_path / "incidents.jsonl"
    service = Service(settings(bootstrap, names, incidents_out=out, commit_interval=0.5), NO_STALLS)
    background = Background(service)
    try:
        publish(bootstrap, names.topic, first)
        wait_for(lambda: service.counts.events == cut, "the first half")
        wait_for(lambda: all_committed(bootstrap, names.group, names.topic), "its commit")

        own_broker.restart()

        publish(bootstrap, names.topic, second)
        wait_for(lambda: all_committed(bootstrap, names.group, names.topic), "the second half")
    finally:
        background.finish()
    # The restart may cost the service its group membership; it then takes its partitions
    # back from the checkpoints and processes the uncommitted messages again (at least
    # once), dropping the updates it had already published: each update is written once.
    print(service.counts.summary())
    assert service.counts.events >= len(lines)
    assert_same_incidents(jsonl_lines(out), unflushed(path))


# -- without a broker -------------------------------------------------------------------------


def test_publish_keeps_the_original_gaps_divided_by_speed() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = _Pacer(10.0, monotonic=lambda: now[0], sleep=sleep)
    for ts in (1000.0, 1030.0, None, 1030.0, 1090.0):
        pacer.wait(ts)
    assert slept == pytest.approx([3.0, 6.0])
    with pytest.raises(ValueError, match="speed"):
        _Pacer(0.0)


def test_every_run_option_reads_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from streamwatch.cli.kafka import add_commands, apply_env, dispatch

    monkeypatch.setenv("STREAMWATCH_BOOTSTRAP_SERVERS", "broker:9092")
    monkeypatch.setenv("STREAMWATCH_GROUP", "team-a")
    monkeypatch.setenv("STREAMWATCH_TICK_SECONDS", "2.5")
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["run", "--topic", "t"])
    apply_env(args)  # what dispatch() does first: the running command's variables only
    assert (args.bootstrap_servers, args.group, args.tick_seconds, args.topic) == (
        "broker:9092",
        "team-a",
        2.5,
        "t",
    )
    assert dispatch(argparse.Namespace(command="replay")) is None


def test_doctests_of_the_kafka_modules() -> None:
    import doctest

    import streamwatch.sources.kafka

    result = doctest.testmod(streamwatch.sources.kafka)
    assert result.attempted > 0
    assert result.failed == 0


def test_a_checkpoint_taken_mid_step_continues_exactly(tmp_path: Path) -> None:
    """Checkpoints leave pending steps pending, so a restored run continues as if never cut,
    wherever the cut falls (Monitor.snapshot would judge the pending step early)."""

    path, run_ids = simulated_file(tmp_path / "sim.jsonl", "cut", steps=120)
    events = list(FileSource(path))
    whole = Monitor(NO_STALLS)
    expected = [i.to_json() for e in events for i in whole.process(e)]
    expected += [i.to_json() for i in whole.flush()]
    for cut in (len(events) // 3 + 1, len(events) // 2 + 2):
        first = Monitor(NO_STALLS)
        got = [i.to_json() for e in events[:cut] for i in first.process(e)]
        second = Monitor(NO_STALLS)
        for run_id in run_ids:
            second.restore(first.snapshot(run_id, close=False))
        got += [i.to_json() for e in events[cut:] for i in second.process(e)]
        got += [i.to_json() for i in second.flush()]
        assert got == expected, cut


class _Future:
    def __init__(self, offset: int | None, error: Exception | None = None) -> None:
        self.is_done = True
        self.exception = error
        self.value = None if offset is None else _Meta("t", 0, offset)

    def retriable(self) -> bool:
        return getattr(self.exception, "retriable", False) is True


@dataclass
class _Meta:
    topic: str
    partition: int
    offset: int


class _FlakyProducer:
    """Fails the first send of every value with a retriable error, then acknowledges."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.offset = 0

    def send(self, topic: str, **record: Any) -> _Future:
        from kafka.errors import KafkaTimeoutError

        value = record["value"]
        if value not in self.sent:
            self.sent.append(value)
            return _Future(None, KafkaTimeoutError("delivery timed out"))
        self.offset += 1
        return _Future(self.offset - 1)

    def flush(self, timeout: float | None = None) -> None:
        pass


def test_the_outbox_resends_what_failed_and_remembers_acknowledged_offsets() -> None:
    from streamwatch.sinks.kafka import OutRecord, RecordOutbox

    outbox = RecordOutbox(_FlakyProducer())
    outbox.send(OutRecord("t", b"a", None, 0))
    outbox.send(OutRecord("t", b"b", None, 0))
    assert not outbox.flush()  # both failed: sent again, not yet acknowledged
    assert len(outbox) == 2
    assert outbox.flush()
    assert outbox.acked == {("t", 0): 2}
    assert outbox.undeliverable == 0
