"""Stopping a failing run end to end against a real broker: a training loop driving the HF
callback publishes, the service raises a critical incident and, once it is confirmed, sends
a stop request that the loop turns into a checkpoint and a stop; a service restarted in the
middle repeats no stop; ``watch --stop-pid`` stops a local trainer that writes its own log.

Needs a broker: STREAMWATCH_BOOTSTRAP=127.0.0.1:<port> (see test_service.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streamwatch.actions.actor import Actor
from streamwatch.actions.config import ActionRule
from streamwatch.actions.log import ActionLog
from streamwatch.client.control import parse
from streamwatch.client.integrations.hf import StreamwatchCallback
from streamwatch.client.integrations.loop import run_loop
from streamwatch.config import Config, EngineConfig
from streamwatch.events import Event
from streamwatch.incidents import Incident, Severity
from streamwatch.live import Service, ServiceSettings
from streamwatch.live.testing import delete_topics
from streamwatch.simulate import RunSpec, random_fault_spec, simulate_run
from streamwatch.sources.kafka import KafkaConnection

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 90.0
NO_STALLS = Config(engine=EngineConfig(disabled_kinds=("run_stalled",)))
STOP = ActionRule(do="stop", dry_run=False)


@dataclass(frozen=True)
class Names:
    topic: str
    group: str
    control: str

    def all(self) -> list[str]:
        t = self.topic
        return [t, f"{t}.incidents", f"{t}.dlq", f"{t}.state", self.control]


@pytest.fixture
def names(bootstrap: str) -> Iterator[Names]:
    tag = uuid.uuid4().hex[:10]
    created = Names(f"sw-act-{tag}", f"sw-act-group-{tag}", f"sw-act-{tag}.control")
    yield created
    delete_topics(bootstrap, created.all())


def settings(bootstrap: str, names: Names) -> ServiceSettings:
    t = names.topic
    return ServiceSettings(
        connection=KafkaConnection(bootstrap_servers=bootstrap, client_id="test-act"),
        topic=t,
        group=names.group,
        incidents_topic=f"{t}.incidents",
        dead_letter_topic=f"{t}.dlq",
        state_topic=f"{t}.state",
        control_topic=names.control,
        console=False,
        session_timeout_ms=6000,
        commit_interval=0.5,
    )


class Seen:
    """A sink that notes when each update reached it."""

    def __init__(self) -> None:
        self.updates: list[tuple[float, Incident]] = []

    def send(self, inc: Incident) -> None:
        self.updates.append((time.time(), inc))

    def first_critical(self, run_id: str) -> tuple[float, Incident] | None:
        for at, inc in self.updates:
            if inc.run_id == run_id and inc.severity is Severity.CRITICAL and not inc.actions:
                return at, inc
        return None


class Background:
    def __init__(self, service: Service) -> None:
        self.service = service
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.service.started.wait(TIMEOUT_S), "the service did not start"

    def _run(self) -> None:
        try:
            self.service.run(self.stop)
        except BaseException as exc:
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(TIMEOUT_S)
        assert not self.thread.is_alive() and self.error is None, self.error


def start_service(bootstrap: str, names: Names, log: Path) -> tuple[Background, Seen]:
    seen = Seen()
    actor = Actor([STOP], stop=True, action_log=ActionLog(log))
    service = Service(settings(bootstrap, names), NO_STALLS, sinks=[seen], actor=actor)
    return Background(service), seen


def collapse_steps(run_id: str, steps: int = 1200) -> list[tuple[int, dict[str, float]]]:
    """One process's logs of a run whose entropy collapses (critical near step 180)."""
    fault = random_fault_spec("entropy_collapse", 0)
    spec = RunSpec(run_id, steps=steps, hosts=1, ranks_per_host=1, seed=0, faults=fault.faults)
    return [(e.step, dict(e.metrics)) for e in simulate_run(spec)]


def control_messages(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer: Any = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline
            for batch in consumer.poll(timeout_ms=200).values():
                out.extend(m for r in batch if (m := parse(r.value)) is not None)
        return out
    finally:
        consumer.close()


def test_a_confirmed_critical_incident_checkpoints_and_stops_the_training_loop(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    background, seen = start_service(bootstrap, names, tmp_path / "actions.jsonl")
    saved: list[int] = []
    try:
        callback = StreamwatchCallback(
            bootstrap, "grpo-e2e", topic=names.topic, control_topic=names.control
        )
        steps = collapse_steps("grpo-e2e")
        result = run_loop(callback, steps, pace=0.02, save=saved.append)
    finally:
        background.finish()

    first = seen.first_critical("grpo-e2e")
    assert first is not None, "no critical incident"
    _, critical = first
    assert critical.kind == "entropy_collapse"  # the failure the run was given, nothing else
    assert result.stopped, f"the loop ran to its end (step {result.last_step})"
    assert saved == [result.last_step]  # a checkpoint at the step it stopped, then the stop
    assert callback.stopped_at == result.last_step
    # confirmed 10 steps after it turned critical, then on its way: a few steps later
    assert critical.step + STOP.confirm_steps <= result.last_step < steps[-1][0]
    stops = [m for m in control_messages(bootstrap, names.control) if m["type"] == "stop"]
    assert [(m["run_id"], m["incident"], m["step"]) for m in stops] == [
        ("grpo-e2e", critical.id, critical.step + STOP.confirm_steps)
    ]
    assert "entropy_collapse" in stops[0]["reason"]
    (acted,) = [inc for _, inc in seen.updates if inc.actions]
    assert acted.actions[0]["status"] == "done" and acted.id == critical.id


def test_a_service_restarted_after_the_stop_request_sends_no_second_one(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    from streamwatch.client.publish import Publisher

    steps = collapse_steps("grpo-restart", steps=600)
    cut = 162 + 60  # 60 steps after the critical incident
    background, seen = start_service(bootstrap, names, tmp_path / "a1.jsonl")  # makes the topics
    pub = Publisher(bootstrap, "grpo-restart", topic=names.topic, host="n0", rank=0)
    first = background.service.actor
    assert first is not None
    try:
        try:
            # the topic has a leader, the service a partition
            pub.log(steps[0][1], step=steps[0][0])
            wait_for(
                lambda: background.service.counts.events >= 1,
                "the first event",
                lambda: f"{pub.stats}; {service_state(background.service)}",
            )
            for step, metrics in steps[1:cut]:
                pub.log(metrics, step=step)
                time.sleep(0.002)
            pub.flush()
            wait_for(
                lambda: len(first.records) > 0,
                "the stop request",
                lambda: (
                    f"{background.service.counts.events} events; "
                    + str([(i.kind, i.severity.value, i.step) for _, i in seen.updates])
                ),
            )
        finally:
            background.finish()
        # a new process (another host: an empty action log) takes the partitions over
        background, seen = start_service(bootstrap, names, tmp_path / "a2.jsonl")
        second = background.service.actor
        assert second is not None
        rest = steps[cut:]
        try:
            for step, metrics in rest:
                pub.log(metrics, step=step)
            pub.close()  # and the end-of-run marker
            wait_for(
                lambda: background.service.counts.events >= len(rest) + 1,
                "the rest",
                lambda: service_state(background.service),
            )
        finally:
            background.finish()
    finally:
        pub.close()  # a no-op once closed; on a failure, nothing is left open
    assert [(r.rule, r.kind) for r in first.records] == [("stop", "entropy_collapse")]
    assert list(second.records) == []  # nothing done again
    assert [r.rule for r in second.done("grpo-restart")] == ["stop"]  # learnt from the topic
    assert not any(inc.actions for _, inc in seen.updates)
    stops = [m for m in control_messages(bootstrap, names.control) if m["type"] == "stop"]
    assert len(stops) == 1


def service_state(service: Service) -> str:
    """What a timed-out wait shows: the service's counts and its consumer's group state."""
    return f"{service.counts.summary()}; consumer: {service.membership()}"


def wait_for(
    condition: Callable[[], bool], what: str, state: Callable[[], str] = lambda: ""
) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what} {state()}"
        time.sleep(0.05)


TRAINER = """
import json, signal, sys, time
log, ckpt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [json.loads(line) for line in open(sys.argv[4])]
step = -1
def save_and_exit(signum, frame):
    open(ckpt, "w").write(json.dumps({"step": step, "signal": signum}))
    sys.exit(0)
signal.signal(signal.SIGTERM, save_and_exit)
with open(log, "a") as out:
    for row in rows[:n]:
        step = row["step"]
        out.write(json.dumps(row) + "\\n")
        out.flush()
        time.sleep(0.01)
"""


def test_watch_stop_pid_signals_a_local_trainer_writing_its_own_log(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    steps = collapse_steps("grpo-local", steps=1500)
    with rows.open("w") as f:
        for step, metrics in steps:
            event = Event(run_id="grpo-local", step=step, metrics=metrics)
            f.write(json.dumps(event.to_json_dict()) + "\n")
    log, ckpt = tmp_path / "train.jsonl", tmp_path / "checkpoint.json"
    log.touch()
    trainer = subprocess.Popen(
        [sys.executable, "-c", TRAINER, str(log), str(ckpt), str(len(steps)), str(rows)]
    )
    state = tmp_path / "state"
    watch = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from streamwatch.cli.main import main; sys.exit(main())",
            "watch",
            str(log),
            "--stop-pid",
            str(trainer.pid),
            "--poll",
            "0.2",
            "--idle-exit",
            "3",
            "--alert-state-dir",
            str(state),
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert trainer.wait(TIMEOUT_S) == 0
        out, _ = watch.communicate(timeout=TIMEOUT_S)
    finally:
        trainer.kill()
        watch.kill()
    saved = json.loads(ckpt.read_text())
    assert saved["signal"] == signal.SIGTERM
    assert 162 + STOP.confirm_steps <= saved["step"] < steps[-1][0]
    started, record = [
        json.loads(line) for line in (state / "actions.jsonl").read_text().splitlines()
    ]
    assert started["status"] == "started" and started["action_id"] == record["action_id"]
    assert (record["do"], record["status"], record["kind"]) == (
        "signal",
        "done",
        "entropy_collapse",
    )
    assert f"signal sent at step {record['step']}" in out
