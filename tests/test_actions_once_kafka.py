"""Actions once across a worker SIGKILL, against a real broker: the service runs a command
that counts its runs and sleeps; killed mid-command, the next process (another host: an
empty action log) learns the start from the control topic and reports the action as
interrupted instead of running it again.

Needs a broker: STREAMWATCH_BOOTSTRAP=127.0.0.1:<port> (see test_service.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streamwatch.client.control import parse
from streamwatch.live.testing import delete_topics
from streamwatch.simulate import RunSpec, random_fault_spec, simulate_run

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 90.0


@pytest.fixture
def topic(bootstrap: str) -> Iterator[str]:
    t = f"sw-once-{uuid.uuid4().hex[:10]}"
    yield t
    delete_topics(bootstrap, [t, f"{t}.incidents", f"{t}.dlq", f"{t}.state", f"{t}.control"])


def wait_for(what: Callable[[], bool], why: str) -> None:
    end = time.monotonic() + TIMEOUT_S
    while not what():
        assert time.monotonic() < end, f"timed out waiting for {why}"
        time.sleep(0.1)


def service(bootstrap: str, topic: str, config: Path, state: Path) -> subprocess.Popen[str]:
    args = ["--bootstrap-servers", bootstrap, "--topic", topic, "--group", f"{topic}-g"]
    args += ["--incidents-topic", f"{topic}.incidents", "--dead-letter-topic", f"{topic}.dlq"]
    args += ["--state-topic", f"{topic}.state", "--control-topic", f"{topic}.control"]
    args += ["--config", str(config), "--alert-state-dir", str(state)]
    args += ["--session-timeout-ms", "6000", "--commit-interval", "0.5", "--partitions", "1"]
    argv = [sys.executable, "-W", "ignore::DeprecationWarning", "-m", "streamwatch.cli.kafka"]
    with (state.parent / f"{state.name}.log").open("w") as err:  # the child keeps its copy
        return subprocess.Popen(
            [*argv, "run", *args],
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )


def control_records(bootstrap: str, topic: str) -> list[dict[str, object]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: list[dict[str, object]] = []
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for batch in consumer.poll(timeout_ms=500).values():
                out.extend(m["record"] for r in batch if (m := parse(r.value)) is not None)
        return out
    finally:
        consumer.close()


def stop(proc: subprocess.Popen[str], how: signal.Signals) -> None:
    proc.send_signal(how)
    try:
        proc.wait(TIMEOUT_S)
    finally:
        proc.kill()


def test_a_worker_killed_mid_command_leaves_the_action_interrupted_not_repeated(
    bootstrap: str, topic: str, tmp_path: Path
) -> None:
    from streamwatch.client.publish import Publisher

    counter, pids = tmp_path / "counter", tmp_path / "pids"
    command = f'echo $$ >> {pids}; echo "$STREAMWATCH_ACTION_ID" >> {counter}; sleep 60'
    config = tmp_path / "sw.toml"
    config.write_text(
        '[engine]\ndisabled_kinds = ["run_stalled"]\n\n[[actions]]\ndo = "command"\n'
        f"command = {json.dumps(command)}\ndry_run = false\n"
    )
    fault = random_fault_spec("entropy_collapse", 0)
    spec = RunSpec("grpo-kill", steps=600, hosts=1, ranks_per_host=1, seed=0, faults=fault.faults)
    steps = [(e.step, dict(e.metrics)) for e in simulate_run(spec)]
    first = service(bootstrap, topic, config, tmp_path / "state1")
    pub = Publisher(bootstrap, "grpo-kill", topic=topic, host="n0", rank=0)
    try:
        for step, metrics in steps[:300]:
            pub.log(metrics, step=step)
        pub.flush()
        wait_for(counter.exists, "the command")
        stop(first, signal.SIGKILL)
        second = service(bootstrap, topic, config, tmp_path / "state2")
        for step, metrics in steps[300:]:
            pub.log(metrics, step=step)
        pub.flush()
        wait_for(
            lambda: any(
                r["status"] == "interrupted" for r in control_records(bootstrap, f"{topic}.control")
            ),
            "the interrupted record",
        )
        stop(second, signal.SIGTERM)
    finally:
        pub.close()
        first.kill()
        for line in pids.read_text().split() if pids.exists() else ():
            with contextlib.suppress(OSError):
                os.killpg(int(line), signal.SIGKILL)
    assert len(counter.read_text().split()) == 1  # run once, across the kill
    statuses = [r["status"] for r in control_records(bootstrap, f"{topic}.control")]
    assert statuses == ["started", "interrupted"]
