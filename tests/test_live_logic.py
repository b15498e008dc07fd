"""The live service's logic on the in-memory broker of its testing kit (no Kafka): live
equals replay, hand-over through checkpoints, rebalances, dead letters, engine errors,
checkpoints that cannot be restored, commits, logging for the whole lifetime.

The same behaviours against the real broker are in test_service.py.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from streamwatch.clock import ManualClock
from streamwatch.config import Config, EngineConfig
from streamwatch.engine.monitor import Monitor
from streamwatch.engine.snapshot import VERSION
from streamwatch.events import Event
from streamwatch.incidents import Incident
from streamwatch.live import ENGINE_ERROR, Service, ServiceCounts, ServiceSettings
from streamwatch.live.consumer import Partition
from streamwatch.live.status import LOG_BURST, LOG_WINDOW_S
from streamwatch.live.testing import FakeBroker, FakeConsumer, NoListener
from streamwatch.replay.files import replay_files
from streamwatch.simulate import Fault, RunSpec, simulate, simulate_run, write_jsonl
from streamwatch.sources import FileSource
from streamwatch.sources.kafka import KafkaConnection

#: Stalls are judged on the service's clock; comparisons with a replay leave them out.
#: A wall clock later than every event time of the data (event times ahead are not trusted).
LATER = 2_000_000_000.0
NO_STALLS = Config(engine=EngineConfig(disabled_kinds=("run_stalled",)))
TOPIC = "metrics"
NAMES = {
    "topic": TOPIC,
    "group": "g",
    "incidents_topic": "incidents",
    "dead_letter_topic": "dlq",
    "state_topic": "state",
}


# -- helpers ----------------------------------------------------------------------------------


def settings(**overrides: Any) -> ServiceSettings:
    values: dict[str, Any] = {
        "connection": KafkaConnection(bootstrap_servers="in-memory:9092"),
        "console": False,
        **NAMES,
    }
    values.update(overrides)
    return ServiceSettings(**values)


def new_broker(partitions: int = 4) -> tuple[FakeBroker, ManualClock]:
    clock = ManualClock(LATER)  # after the data's times: none is in the future
    broker = FakeBroker(clock)
    broker.ensure_topics({TOPIC: _spec(partitions)})
    return broker, clock


def _spec(partitions: int) -> Any:
    from streamwatch.live.kafka_tools import TopicSpec

    return TopicSpec(partitions)


def service(broker: FakeBroker, clock: ManualClock, **overrides: Any) -> Service:
    return Service(settings(**overrides), NO_STALLS, clock=clock, broker=broker)


def simulated_file(path: Path, steps: int = 200) -> Path:
    """Two runs of 2 hosts x 2 ranks: an entropy collapse in one, non-finite values in both."""
    specs = [
        RunSpec(
            "collapse",
            steps=steps,
            seed=11,
            faults=(Fault("entropy_collapse", steps // 2), Fault("nonfinite_metric", steps // 4)),
        ),
        RunSpec("nan", steps=steps, seed=12, faults=(Fault("nonfinite_metric", steps // 3),)),
    ]
    write_jsonl(simulate(specs), path)
    return path


def event_values(path: Path) -> list[tuple[bytes, bytes]]:
    """(key, value) of each event of a file, as ``streamwatch publish`` sends them."""
    out = []
    for event in FileSource(path):
        value = json.dumps(event.to_json_dict(), separators=(",", ":")).encode()
        out.append((event.run_id.encode(), value))
    return out


def publish(broker: FakeBroker, messages: Sequence[tuple[bytes, bytes]]) -> list[int]:
    return [broker.produce(TOPIC, value, key=key) for key, value in messages]


def event_bytes(run_id: str, step: int, **metrics: float) -> bytes:
    event = Event(run_id=run_id, step=step, ts=1_700_000_000.0 + step, metrics=metrics)
    return json.dumps(event.to_json_dict()).encode()


def replayed(path: Path) -> list[str]:
    return [inc.to_json() for inc in replay_files([path], NO_STALLS).incidents]


def by_run(lines: Sequence[str]) -> dict[str, list[str]]:
    """Lines grouped by run, in order (order across runs depends on the partitions)."""
    out: dict[str, list[str]] = {}
    for line in lines:
        out.setdefault(json.loads(line)["run_id"], []).append(line)
    return out


def on_topic(broker: FakeBroker, topic: str) -> list[str]:
    return [r.value.decode() for r in broker.records(topic) if r.value is not None]


def headers(record: Any) -> dict[str, str]:
    return {k: v.decode() for k, v in record.headers or ()}


def all_committed(broker: FakeBroker) -> bool:
    ends = {p: broker.end_offset(TOPIC, p) for p in range(len(broker.logs[TOPIC]))}
    committed = broker.committed("g", TOPIC)
    return all(committed.get(p, 0) == end for p, end in ends.items())


def when(condition: Callable[[], bool], action: Callable[[], None]) -> Callable[[Any], None]:
    """A poll hook that runs ``action`` once, at the first poll where ``condition`` holds."""
    done = False

    def hook(_consumer: Any) -> None:
        nonlocal done
        if not done and condition():
            done = True
            action()

    return hook


def scripted(*steps: tuple[Callable[[], bool], Callable[[], None]]) -> Callable[[Any], None]:
    """A poll hook that runs each step's action once its condition holds, in order."""
    left = list(steps)

    def hook(_consumer: Any) -> None:
        if left and left[0][0]():
            left.pop(0)[1]()

    return hook


def run_until(svc: Service, broker: FakeBroker, events: int) -> ServiceCounts:
    """Run until ``events`` events were processed, then stop as on SIGTERM (commit, leave)."""
    stop = threading.Event()
    broker.on_poll = when(lambda: svc.counts.events >= events, stop.set)
    try:
        return svc.run(stop)
    finally:
        broker.on_poll = None


# -- live equals replay -----------------------------------------------------------------------


def test_live_incidents_equal_a_replay_and_every_offset_is_committed(tmp_path: Path) -> None:
    path = simulated_file(tmp_path / "sim.jsonl")
    expected = replayed(path)
    assert any('"entropy_collapse"' in line for line in expected)
    broker, clock = new_broker()
    messages = event_values(path)
    publish(broker, messages)
    out = tmp_path / "incidents.jsonl"

    counts = service(broker, clock, incidents_out=out).run(max_idle=3.0)

    assert (counts.events, counts.dead_letters, counts.engine_errors) == (len(messages), 0, 0)
    assert by_run(out.read_text().splitlines()) == by_run(expected)
    assert by_run(on_topic(broker, "incidents")) == by_run(expected)
    assert all_committed(broker)
    assert counts.commits > 0


def test_a_restarted_service_continues_each_run_where_it_stopped(tmp_path: Path) -> None:
    path = simulated_file(tmp_path / "sim.jsonl")
    messages = event_values(path)
    cut = len(messages) // 2 + 3
    broker, clock = new_broker()
    out = tmp_path / "incidents.jsonl"
    publish(broker, messages[:cut])
    first = run_until(
        service(broker, clock, incidents_out=out, commit_interval=3600.0), broker, cut
    )
    assert first.events == cut
    assert all_committed(broker)

    publish(broker, messages[cut:])
    second = service(broker, clock, incidents_out=out).run(max_idle=3.0)

    assert (second.restored_runs, second.fresh_runs) == (2, 0)
    assert second.events == len(messages) - cut
    assert by_run(out.read_text().splitlines()) == by_run(replayed(path))


def test_a_new_owner_drops_what_its_predecessor_published_but_never_committed(
    tmp_path: Path,
) -> None:
    path = simulated_file(tmp_path / "sim.jsonl")
    messages = event_values(path)
    cut = len(messages) * 2 // 5
    broker, clock = new_broker()
    publish(broker, messages[:cut])
    crashing = service(broker, clock, commit_interval=0.0)
    stop = threading.Event()
    published: list[int] = []

    def crash_from_now_on() -> None:
        """Nothing more is committed, as if the process died before each commit."""

        def no_commit(stop: threading.Event, only: set[int] | None = None) -> None:
            pass

        crashing.committer.commit = no_commit  # type: ignore[method-assign]
        published.append(crashing.counts.incidents)
        publish(broker, messages[cut:])

    broker.on_poll = scripted(
        (lambda: crashing.counts.events >= cut and all_committed(broker), crash_from_now_on),
        (lambda: crashing.counts.events >= len(messages), stop.set),
    )
    crashing.run(stop)
    broker.on_poll = None
    uncommitted = crashing.counts.incidents - published[0]
    assert uncommitted > 0

    successor = service(broker, clock).run(max_idle=3.0)

    assert successor.restored_runs == 2
    assert successor.events == len(messages) - cut
    assert successor.duplicates_dropped == uncommitted
    assert by_run(on_topic(broker, "incidents")) == by_run(replayed(path))


def test_partitions_taken_away_and_given_back_mid_stream_lose_and_repeat_nothing(
    tmp_path: Path,
) -> None:
    """A second member joins (the service keeps half of the partitions, forgets the other
    half's runs) and leaves again (the service takes them back from their checkpoints and
    drops what it had published since): the incidents topic still equals a replay."""
    path = simulated_file(tmp_path / "sim.jsonl")
    messages = event_values(path)
    broker, clock = new_broker(partitions=2)  # a run in each: the joining member takes one
    assert {broker.partition_for(TOPIC, key) for key, _ in messages} == {0, 1}
    publish(broker, messages)
    svc = service(broker, clock, commit_interval=0.0)
    other = FakeConsumer(broker, "g")
    polls = {"after join": 0}

    def hook(consumer: Any) -> None:
        if other.topics == [] and svc.counts.events >= len(messages) // 3:
            other.subscribe(TOPIC, NoListener())
        elif other.topics and not other.closed and consumer is not other:
            polls["after join"] += 1
            if polls["after join"] == 3:
                other.close()

    broker.on_poll = hook
    counts = svc.run(max_idle=3.0)

    assert other.closed
    assert counts.events >= len(messages)  # some messages processed again after the hand-back
    assert counts.restored_runs >= 1
    assert by_run(on_topic(broker, "incidents")) == by_run(replayed(path))
    assert all_committed(broker)


# -- bad input and engine errors --------------------------------------------------------------


def test_unusable_messages_go_to_the_dead_letters_counted_by_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="streamwatch.live")
    broker, clock = new_broker()
    bad = {
        "not_json": b'{"run_id": "ok", "step": ',
        "not_an_object": b"[1, 2, 3]",
        "invalid_event": b'{"run_id": "ok", "step": 4}',
    }
    good = [event_bytes("ok", step, loss=1.0 + step) for step in range(1, 4)]
    messages = [good[0], bad["not_json"], good[1], bad["not_an_object"], good[2]]
    messages.append(bad["invalid_event"])
    publish(broker, [(b"ok", m) for m in messages])

    counts = service(broker, clock, status_seconds=0.5).run(max_idle=2.0)

    assert (counts.events, counts.dead_letters) == (3, 3)
    assert counts.dead_letters_by_reason == dict.fromkeys(bad, 1)
    letters = {headers(r)["streamwatch.reason"]: r for r in broker.records("dlq")}
    assert {reason: r.value for reason, r in letters.items()} == bad
    status = [r.getMessage() for r in caplog.records if r.name == "streamwatch.live.status"]
    assert any(
        "3 dead letters (invalid_event 1, not_an_object 1, not_json 1)" in line for line in status
    ), status


class PoisonedMonitor(Monitor):
    """The engine raising on one event (``run_id`` at ``step``), as a bug in a check would."""

    def __init__(self, run_id: str, step: int, config: Config) -> None:
        super().__init__(config, sweep_seconds=math.inf)
        self.poison = (run_id, step)

    def process(self, event: Event, origin: str = "<event>") -> list[Incident]:
        if (event.run_id, event.step) == self.poison:
            raise ZeroDivisionError(f"a check divided by zero at step {event.step}")
        return super().process(event, origin)


def test_a_record_the_engine_raises_on_goes_to_the_dead_letters_and_the_service_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="streamwatch.live")
    broker, clock = new_broker()
    offsets = publish(broker, [(b"poison", event_bytes("poison", s, loss=1.0)) for s in range(6)])
    publish(broker, [(b"fine", event_bytes("fine", s, loss=math.nan)) for s in range(3)])
    out = tmp_path / "incidents.jsonl"
    svc = service(broker, clock, incidents_out=out)
    svc.monitor = PoisonedMonitor("poison", 2, NO_STALLS)

    counts = svc.run(max_idle=2.0)

    assert (counts.events, counts.engine_errors, counts.dead_letters) == (8, 1, 1)
    assert counts.dead_letters_by_reason == {ENGINE_ERROR: 1}
    [letter] = broker.records("dlq")
    h = headers(letter)
    assert h["streamwatch.reason"] == ENGINE_ERROR
    assert h["streamwatch.detail"] == "ZeroDivisionError: a check divided by zero at step 2"
    assert int(h["streamwatch.offset"]) == offsets[2]
    assert letter.value == event_bytes("poison", 2, loss=1.0)
    fired = [Incident.model_validate_json(line) for line in out.read_text().splitlines()]
    assert ("fine", "nonfinite_metric") in {(i.run_id, i.kind) for i in fired}
    assert all_committed(broker)  # past the poisoned record: no redelivery loop
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any("run 'poison' step 2" in r.getMessage() and r.exc_info for r in logged)


# -- checkpoints that cannot be restored ------------------------------------------------------


def other_version(blob: bytes) -> bytes:
    """A run snapshot as the next version of streamwatch would write it (its header says so)."""
    head, _, body = blob.partition(b"\n")
    header = json.loads(head)
    assert header["version"] == VERSION
    header["version"] = VERSION + 1
    return json.dumps(header).encode() + b"\n" + body


def test_a_checkpoint_of_another_version_is_logged_and_its_run_starts_afresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="streamwatch.live")
    broker, clock = new_broker()
    first = [(run.encode(), event_bytes(run, s, loss=1.0)) for s in range(5) for run in "ab"]
    publish(broker, first)
    run_until(service(broker, clock), broker, len(first))
    runs = [r for r in broker.records("state") if headers(r)["streamwatch.kind"] == "run"]
    a = next(r for r in reversed(runs) if r.key is not None and r.key.endswith(b"\x1fa"))
    assert a.value is not None
    foreign = zlib.compress(other_version(zlib.decompress(a.value)), 1)
    broker.produce("state", foreign, key=a.key, partition=a.partition, headers=a.headers)

    second = [(run.encode(), event_bytes(run, s, loss=1.0)) for s in range(5, 8) for run in "ab"]
    publish(broker, second)
    svc = service(broker, clock, status_seconds=0.5)
    counts = svc.run(max_idle=2.0)

    assert (counts.restored_runs, counts.fresh_runs) == (1, 1)
    assert counts.events == len(second)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    said = f"snapshot of run 'a' is version {VERSION + 1}; this streamwatch reads version {VERSION}"
    assert any(
        line.startswith("run a: checkpoint not restored") and said in line for line in errors
    )
    assert "1 runs started afresh" in counts.summary()
    status = [r.getMessage() for r in caplog.records if r.name == "streamwatch.live.status"]
    assert any("1 runs started afresh" in line for line in status)


def test_a_damaged_checkpoint_is_logged_and_its_run_starts_afresh() -> None:
    broker, clock = new_broker()
    first = [(b"a", event_bytes("a", s, loss=1.0)) for s in range(4)]
    publish(broker, first)
    run_until(service(broker, clock), broker, len(first))
    [run] = [r for r in broker.records("state") if headers(r)["streamwatch.kind"] == "run"]
    broker.produce(
        "state", b"\x00damaged", key=run.key, partition=run.partition, headers=run.headers
    )
    publish(broker, [(b"a", event_bytes("a", 4, loss=1.0))])

    counts = service(broker, clock).run(max_idle=2.0)

    assert (counts.restored_runs, counts.fresh_runs, counts.events) == (0, 1, 1)


# -- commits, the broker going away, logging --------------------------------------------------


def test_a_refused_commit_is_covered_by_the_next(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="streamwatch.live")
    broker, clock = new_broker()
    publish(broker, [(b"a", event_bytes("a", s, loss=1.0)) for s in range(10)])
    broker.refuse_commits = 1

    counts = service(broker, clock, commit_interval=0.5).run(max_idle=3.0)

    assert counts.events == 10
    assert any("offset commit failed" in r.getMessage() for r in caplog.records)
    assert all_committed(broker)


def test_polls_while_the_broker_is_away_are_waited_out(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="streamwatch.live")
    broker, clock = new_broker()
    publish(broker, [(b"a", event_bytes("a", s, loss=1.0)) for s in range(3)])
    away = {"polls": 0}

    def hook(_consumer: Any) -> None:
        if away["polls"] < 3:
            away["polls"] += 1
            broker.unavailable = away["polls"] < 3

    broker.on_poll = hook
    counts = service(broker, clock).run(max_idle=2.0)

    assert counts.events == 3
    lines = [r.getMessage() for r in caplog.records]
    assert sum("broker unreachable" in line for line in lines) == 1
    assert "broker reachable again" in lines


def test_dead_letters_are_logged_for_the_whole_lifetime_at_a_bounded_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Twice the burst of bad messages, then as many again a window later: each window logs
    its burst and says how many it left out; everything is counted."""
    caplog.set_level(logging.WARNING, logger="streamwatch.live")
    broker, clock = new_broker()
    n = 2 * LOG_BURST
    bad = [(b"x", b"not json %d" % i) for i in range(n)]
    publish(broker, bad)
    svc = service(broker, clock)

    def later() -> None:
        clock.advance(LOG_WINDOW_S + 1)
        publish(broker, bad)

    broker.on_poll = when(lambda: svc.counts.dead_letters == n, later)
    counts = svc.run(max_idle=2.0)

    assert counts.dead_letters == 2 * n
    lines = [r.getMessage() for r in caplog.records]
    logged = [line for line in lines if line.startswith("dead letter ")]
    left_out = [line for line in lines if "not logged" in line]
    assert len(logged) == 2 * LOG_BURST
    assert [int(line.split()[0]) for line in left_out] == [n - LOG_BURST, n - LOG_BURST]
    assert f"{2 * n} dead letters (not_json {2 * n})" in counts.summary()


def test_lag_is_zero_once_caught_up() -> None:
    broker, clock = new_broker()
    publish(broker, [(run.encode(), event_bytes(run, 0, loss=1.0)) for run in "abcdefgh"])
    svc = service(broker, clock)
    lags: list[dict[int, int]] = []
    stop = threading.Event()

    def check() -> None:
        lags.append(svc.lag())
        stop.set()

    broker.on_poll = when(lambda: svc.counts.events == 8, check)
    svc.run(stop)

    assert lags[0] and set(lags[0].values()) == {0}
    assert set(lags[0]) <= {p for p in range(4)}
    assert Partition(TOPIC, 0) == (TOPIC, 0)


# -- /metrics and /healthz --------------------------------------------------------------------


def scrape(svc: Service, path: str = "/metrics") -> tuple[int, str]:
    import urllib.error
    import urllib.request

    address = svc.metrics_address
    assert address is not None
    url = f"http://{address[0]}:{address[1]}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_and_healthz_report_the_counts_as_they_move() -> None:
    broker, clock = new_broker()
    publish(broker, [(b"a", event_bytes("a", s, loss=1.0)) for s in range(3)])
    publish(broker, [(b"a", b"not json")])
    svc = service(broker, clock, metrics_port=0, tick_seconds=0.1)
    seen: list[tuple[str, int, str]] = []
    stop = threading.Event()

    def first() -> None:
        seen.append((scrape(svc)[1], *scrape(svc, "/healthz")))
        publish(broker, [(b"a", event_bytes("a", 3, loss=math.nan))])

    def second() -> None:
        seen.append((scrape(svc)[1], *scrape(svc, "/healthz")))
        stop.set()

    broker.on_poll = scripted(
        (lambda: svc.counts.events == 3 and clock.monotonic() > 1.0, first),
        (lambda: svc.counts.events == 4 and svc.counts.incidents == 1, second),
    )
    svc.run(stop)

    (text1, status1, health1), (text2, status2, _) = seen
    one, two = samples(text1), samples(text2)
    assert one[("streamwatch_events_total", ())] == 3
    assert two[("streamwatch_events_total", ())] == 4
    assert one[("streamwatch_dead_letters_total", (("reason", "not_json"),))] == 1
    firing = (("kind", "nonfinite_metric"), ("severity", "critical"), ("status", "firing"))
    assert ("streamwatch_incident_updates_total", firing) not in one
    assert two[("streamwatch_incident_updates_total", firing)] == 1
    assert two[("streamwatch_runs_watched", ())] == 1
    assert two[("streamwatch_consumer_lag_messages", ())] == 0
    assert two[("streamwatch_up", ())] == 1
    assert (status1, status2) == (200, 200)
    assert json.loads(health1)["status"] == "ok"
    assert svc.metrics_address is None  # closed with the service


def test_healthz_says_503_while_the_broker_is_away() -> None:
    broker, clock = new_broker()
    svc = service(broker, clock, metrics_port=0)
    replies: list[tuple[int, str]] = []
    polls = {"n": 0}
    stop = threading.Event()

    def hook(_consumer: Any) -> None:
        polls["n"] += 1
        if polls["n"] == 2:
            broker.unavailable = True
        elif polls["n"] == 3:
            replies.append(scrape(svc, "/healthz"))
            broker.unavailable = False
        elif polls["n"] == 5:
            replies.append(scrape(svc, "/healthz"))
            stop.set()

    broker.on_poll = hook
    svc.run(stop)

    (away, away_body), (back, back_body) = replies
    assert (away, json.loads(away_body)["status"]) == (503, "broker_unreachable")
    assert (back, json.loads(back_body)["status"]) == (200, "ok")


def test_the_status_line_carries_the_alert_sinks_own_line(caplog: pytest.LogCaptureFixture) -> None:
    class Receivers:
        """A sink with a status line, as the alert dispatcher has."""

        def __init__(self) -> None:
            self.sent = 0

        def send(self, inc: Incident) -> None:
            self.sent += 1

        def status_line(self) -> str:
            return f"alerts: webhook: {self.sent} delivered"

    caplog.set_level(logging.INFO, logger="streamwatch.live")
    broker, clock = new_broker()
    publish(broker, [(b"r", event_bytes("r", step, loss=1.0)) for step in range(1, 4)])
    svc = Service(
        settings(status_seconds=0.5), NO_STALLS, clock=clock, broker=broker, sinks=[Receivers()]
    )
    svc.run(max_idle=2.0)
    lines = [r.getMessage() for r in caplog.records if r.name == "streamwatch.live.service"]
    assert "alerts: webhook: 0 delivered" in lines, lines


def test_metrics_count_alert_messages_per_receiver(tmp_path: Path) -> None:
    """A real dispatcher delivering to a real HTTP receiver on 127.0.0.1: ``/metrics`` says,
    per receiver, what was delivered and what waits."""
    from prometheus_client import CollectorRegistry, generate_latest

    from streamwatch.alerting.config import AlertingConfig
    from streamwatch.alerting.dispatcher import Dispatcher
    from streamwatch.alerting.testing import RecordingReceiver, incident
    from streamwatch.live.metrics import _ServiceCollector
    from streamwatch.live.vitals import Vitals

    with RecordingReceiver() as rx:
        config = AlertingConfig.model_validate(
            {"receivers": [{"name": "hook", "type": "webhook", "url": rx.url}], "group_wait": 0.0}
        )
        dispatcher = Dispatcher(config, state_dir=tmp_path)
        try:
            for run in ("a", "b"):
                dispatcher.send(incident(run, "metric_spike", step=3))
            assert rx.wait_for(lambda r: len(r.accepted()) == 2, timeout=10.0)
            vitals = Vitals(ServiceCounts(), ManualClock(), [dispatcher])
            delivered = ("hook", "delivered")
            deadline = time.monotonic() + 10.0  # the receiver answers before the count moves
            while vitals.alert_receivers().get(delivered, 0) < 2 and time.monotonic() < deadline:
                vitals.measure(runs=0, firing=0, partitions=0, checkpoint_age=0.0)
                time.sleep(0.02)
            registry = CollectorRegistry(auto_describe=False)
            registry.register(_ServiceCollector(vitals))
            got = samples(generate_latest(registry).decode())
        finally:
            dispatcher.close()
    assert (
        got[("streamwatch_alert_messages_total", (("receiver", "hook"), ("state", "delivered")))]
        == 2
    )
    assert got[("streamwatch_alert_pending_messages", (("receiver", "hook"),))] == 0


# -- the report's intervention ledger ---------------------------------------------------------


def sweep_messages(arms: Sequence[tuple[str, str, int, int, tuple[Fault, ...]]]) -> list[Any]:
    """(key, value) of each event of simulated runs (run id, ``arm`` tag, seed, steps written
    so far of 200, faults); a run written to its end closes with its end-of-run marker."""
    out = []
    for run_id, arm, seed, steps, faults in arms:
        spec = RunSpec(
            run_id,
            steps=200,
            seed=seed,
            hosts=1,
            ranks_per_host=1,
            faults=faults,
            finished_marker=True,
        )
        for event in simulate_run(spec):
            if event.step >= steps:
                break
            tagged = event.model_copy(update={"tags": {**event.tags, "arm": arm}})
            value = json.dumps(tagged.to_json_dict(), separators=(",", ":")).encode()
            out.append((run_id.encode(), value))
    return out


def ledger_rows(page: str) -> dict[str, dict[str, str]]:
    """The ranked table of the page: per candidate, its cells by column heading."""
    table = page.split('<table id="sw-ledger">', 1)[1].split("</table>", 1)[0]
    heads = re.findall(r"<th>(.*?)</th>", table)
    rows = {}
    for row in re.findall(r'<tr data-candidate="(.*?)">(.*?)</tr>', table):
        cells = [re.sub("<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row[1])]
        rows[row[0]] = dict(zip(heads, cells, strict=True))
    return rows


def test_the_report_opens_with_the_ledger_of_the_runs_consumed_judged_on_their_steps(
    tmp_path: Path,
) -> None:
    """Three baseline seeds whose held-out falls to its floor from step 40 (reward hacking, 4x
    the typical fall: 0.08 an evaluation) and two candidates still running at step 150: one of
    healthy seeds (held-out kept: better), one of seeds hacking as the baseline does (not
    distinguishable). The baseline is chosen by run id, the candidates by their events' tag,
    as `streamwatch ledger` chooses them."""
    pytest.importorskip("plotly")
    hacking = (Fault("reward_hacking", 40, 4.0),)
    arms = [
        *((f"base-{s}", "baseline", s, 200, hacking) for s in range(3)),
        *((f"kl-{s}", "kl", 10 + s, 150, ()) for s in range(2)),
        *((f"same-{s}", "same", 20 + s, 150, hacking) for s in range(2)),
    ]
    broker, clock = new_broker()
    messages = sweep_messages(arms)
    publish(broker, messages)
    report = tmp_path / "live.html"
    svc = service(
        broker,
        clock,
        report_out=report,
        ledger_baseline=("base-*",),
        ledger_candidates=(
            ("kl=tag:arm=kl", "KL penalty 0.05"),
            ("same=tag:arm=same", "a new seed of the baseline's setup"),
        ),
    )
    counts = svc.run(max_idle=3.0)
    assert counts.events == len(messages)

    page = report.read_text()
    assert 'id="ledger"' in page and "Intervention ledger" in page
    rows = ledger_rows(page)
    assert set(rows) == {"kl", "same"}
    assert rows["kl"]["held-out"] == "better"
    assert rows["same"]["held-out"] == "."
    assert rows["same"]["better"] == rows["same"]["worse"] == "0"
    assert rows["kl"]["rank"] == "1"  # ranked first: more better verdicts
    for name in rows:  # still running: judged on the steps written so far (1-149)
        assert rows[name]["status"] == "still running, judged on 150 steps (0-149)"
    assert "baseline: 3 run(s) (base-0, base-1, base-2), all ended, at step 199" in page


def test_a_ledger_waits_for_its_runs_and_needs_the_report() -> None:
    from streamwatch.ledger.live import LedgerView, live_ledger

    view = LedgerView.parse(["base-*"], [("tag:arm=kl", "KL penalty")])
    assert (
        live_ledger(view, {}, {}, set(), []).notes[0] == "waiting for the baseline's runs (base-*)"
    )
    with pytest.raises(ValueError, match="section of the report"):
        settings(ledger_baseline=("base-*",), ledger_candidates=(("x", ""),))
    with pytest.raises(ValueError, match="a baseline selector and at least one candidate"):
        settings(ledger_candidates=(("x", ""),), report_out=Path("r.html"))


def test_the_run_command_gives_the_service_the_ledgers_selectors(tmp_path: Path) -> None:
    from streamwatch.cli.kafka import _parser, _service, apply_env

    argv = ["run", "--bootstrap-servers", "in-memory:9092", "--report-out"]
    argv += [str(tmp_path / "live.html"), "--ledger-baseline", "tag:arm=base", "base-*"]
    argv += ["--ledger-candidate", "kl=tag:arm=kl", "KL penalty 0.05", "--ledger-correction", "bh"]
    args = _parser().parse_args(argv)
    apply_env(args)
    svc, alerts = _service(args)
    assert alerts is None
    s = svc.settings
    assert s.ledger_baseline == ("tag:arm=base", "base-*")
    assert s.ledger_candidates == (("kl=tag:arm=kl", "KL penalty 0.05"),)
    assert (s.ledger_correction, s.ledger_max_runs) == ("bh", 64)


# -- a consumer that stays out of its group is replaced -------------------------------------


class _StuckClient:
    """Stands for a kafka-python ``KafkaConsumer`` (the third-party client, not our code):
    its group membership state is what the test says."""

    made = 0

    def __init__(self, state: str) -> None:
        self.state = state
        self.subscribed: list[tuple[list[str], Any]] = []
        self.closed = False
        self.assigned: set[Any] = set()
        _StuckClient.made += 1

    def subscribe(self, topics: list[str], listener: Any) -> None:
        self.subscribed.append((topics, listener))

    def poll(self, timeout_ms: int) -> dict[Any, Any]:
        return {}

    def assignment(self) -> set[Any]:
        return self.assigned

    def group_metadata(self) -> Any:
        from kafka.structs import ConsumerGroupMetadata

        return ConsumerGroupMetadata("g", 3, "m-1", None, self.state)

    def close(self, autocommit: bool, timeout_ms: int) -> None:
        self.closed = True


def _watched(first: _StuckClient, clock: ManualClock) -> tuple[Any, list[_StuckClient]]:
    """A group consumer over ``first``, subscribed and polled once, and the clients made to
    replace it (each ``<rebalancing>`` at first)."""
    from kafka.structs import MemberState

    from streamwatch.live.kafka import KafkaGroupConsumer

    made: list[_StuckClient] = []

    def make() -> _StuckClient:
        made.append(_StuckClient(MemberState.REBALANCING))
        return made[-1]

    consumer = KafkaGroupConsumer(first, make=make, stuck_after=30.0, clock=clock)
    consumer.subscribe("metrics", NoListener())
    consumer.poll(10)
    return consumer, made


def test_a_consumer_out_of_its_group_too_long_is_replaced_and_subscribed_as_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from kafka.structs import MemberState

    clock = ManualClock(0.0)
    first = _StuckClient(MemberState.STABLE)
    consumer, made = _watched(first, clock)
    first.state = MemberState.REBALANCING  # out of the group, partitions still held
    first.assigned = {("metrics", 0)}
    clock.advance(40.0)
    consumer.poll(10)
    assert not made  # a broker away, say: nothing a new consumer would mend
    first.assigned = set()  # a rebalance: out of the group for a while
    consumer.poll(10)
    clock.advance(29.0)
    consumer.poll(10)
    assert not made  # a rebalance may take this long
    clock.advance(2.0)
    with caplog.at_level(logging.WARNING, logger="streamwatch.live.kafka"):
        consumer.poll(10)
    [second] = made
    assert first.closed and not second.closed
    assert second.subscribed == [(["metrics"], first.subscribed[0][1])]  # the same listener
    assert "not a stable member of group g for 31 s" in caplog.text
    assert consumer.replaced == 1
    second.state = MemberState.STABLE  # it joins: the clock starts again
    consumer.poll(10)
    clock.advance(25.0)
    second.state = MemberState.REBALANCING
    consumer.poll(10)
    assert len(made) == 1


class _Coordinator:
    """kafka-python's group coordinator as far as the lost join shows: whether it means to
    (re)join."""

    def __init__(self) -> None:
        self.rejoin = True

    def need_rejoin(self) -> bool:
        return self.rejoin


def test_a_consumer_whose_join_was_left_unfinished_is_replaced_within_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """kafka-python 3.0.12 on a fresh broker: a rejoin whose poll timed out is never finished
    once the leader's assignment makes the client see no reason to rejoin. The member stays
    ``<rebalancing>`` holding revoked partitions it never fetches; a rebalance in progress,
    which the client still means to finish, is left alone."""
    from kafka.structs import MemberState

    clock = ManualClock(0.0)
    first = _StuckClient(MemberState.REBALANCING)
    first.assigned = {("metrics", 0), ("metrics", 1)}
    coordinator = _Coordinator()
    first._coordinator = coordinator  # type: ignore[attr-defined]
    consumer, made = _watched(first, clock)
    clock.advance(10.0)
    consumer.poll(10)
    assert not made and not consumer.join_lost()  # joining: the client means to finish
    coordinator.rejoin = False  # the leader assigned; the join's end is never taken up
    assert consumer.join_lost()
    consumer.poll(10)
    clock.advance(1.0)
    consumer.poll(10)
    assert not made  # a moment's grace
    clock.advance(1.5)
    with caplog.at_level(logging.WARNING, logger="streamwatch.live.kafka"):
        consumer.poll(10)
    [second] = made
    assert first.closed and second.subscribed == [(["metrics"], first.subscribed[0][1])]
    assert "the join of group g was left unfinished for 2 s" in caplog.text
    assert consumer.replaced == 1
    clock.advance(5.0)
    consumer.poll(10)  # the new client has no coordinator of that kind: nothing more
    assert len(made) == 1
