"""The publisher against a broker that fails: hung (SIGSTOP), killed and restarted.

Every test here uses one broker of this module's own (docker/kafka.sh on free ports, with
its own state directory), never the shared one: they stop, freeze and kill it. Marked
``kafka`` like the other tests with a real broker (they run where STREAMWATCH_BOOTSTRAP is
set, which says a broker can be started here).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka_broker import OwnBroker

from streamwatch.client.publish import Publisher

PACE_S = 0.02  # a training step's worth of waiting between two events
CPU_SHARE_MAX = 0.05  # of one core, for the whole test process while the broker is away

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:unclosed <socket:ResourceWarning"),
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnBroker]:
    if not os.environ.get("STREAMWATCH_BOOTSTRAP", "").strip():
        pytest.skip("STREAMWATCH_BOOTSTRAP is not set: no Kafka broker can be run here")
    own = OwnBroker(tmp_path_factory.mktemp("faults"))
    own.run("up")
    try:
        yield own
    finally:
        own.close()


def new_topic(servers: str) -> str:
    from kafka.admin import KafkaAdminClient

    name = f"streamwatch-faults-{uuid.uuid4().hex[:12]}"
    admin: Any = KafkaAdminClient(bootstrap_servers=servers, client_id="faults-test-admin")
    try:
        admin.create_topics(
            {name: {"num_partitions": 1, "replication_factor": 1}}, wait_for_metadata=True
        )
    finally:
        admin.close()
    return name


def stored_steps(servers: str, topic: str) -> list[int]:
    """The ``step`` of every event in the topic, in the order the broker stored them."""
    from kafka import KafkaConsumer, TopicPartition

    consumer: Any = KafkaConsumer(bootstrap_servers=servers, group_id=None)
    records: list[Any] = []
    try:
        part = TopicPartition(topic, 0)
        consumer.assign([part])
        consumer.seek_to_beginning()
        end = consumer.end_offsets([part])[part]
        deadline = time.monotonic() + 60
        while len(records) < end and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
    finally:
        consumer.close()
    assert len(records) == end
    return [int(json.loads(r.value)["step"]) for r in records]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Steps:
    """Logs one event per ``PACE_S`` and remembers the steps logged."""

    def __init__(self, pub: Publisher) -> None:
        self.pub = pub
        self.logged: list[int] = []

    def run(self, seconds: float) -> float:
        """Log for ``seconds``; return the process's CPU share over that time."""
        cpu, start = cpu_seconds(), time.monotonic()
        while time.monotonic() - start < seconds:
            step = len(self.logged)
            self.pub.log({"loss": 1.0 / (step + 1), "reward": float(step)}, step=step)
            self.logged.append(step)
            time.sleep(PACE_S)
        return (cpu_seconds() - cpu) / (time.monotonic() - start)


def test_a_hung_broker_costs_no_cpu_is_reported_and_loses_nothing(
    broker: OwnBroker, quiet_kafka_client: None
) -> None:
    topic = new_topic(broker.address)
    pub = Publisher(broker.address, "run-hung", topic=topic, rank=0)
    steps = Steps(pub)
    steps.run(2.0)
    assert pub.flush(timeout=30) and pub.stats.broker == "connected"
    os.kill(broker.pid(), signal.SIGSTOP)
    try:
        share = steps.run(10.0)
        broker_state = pub.stats.broker
    finally:
        os.kill(broker.pid(), signal.SIGCONT)
    assert share < CPU_SHARE_MAX, f"{share:.1%} of a core while the broker was hung"
    assert broker_state == "not_answering"
    steps.run(2.0)
    assert pub.flush(timeout=60), pub.stats
    assert pub.stats.broker == "connected"
    pub.close(finished=False)
    assert pub.stats.dropped == 0, pub.stats
    assert stored_steps(broker.address, topic) == steps.logged  # in order, each once


def test_close_returns_within_its_timeout_while_the_broker_is_hung(
    broker: OwnBroker, quiet_kafka_client: None
) -> None:
    topic = new_topic(broker.address)
    pub = Publisher(broker.address, "run-close", topic=topic, rank=0)
    steps = Steps(pub)
    steps.run(1.0)
    assert pub.flush(timeout=30)
    os.kill(broker.pid(), signal.SIGSTOP)
    try:
        steps.run(1.0)
        started = time.monotonic()
        pub.close(timeout=2.0)
        elapsed = time.monotonic() - started
    finally:
        os.kill(broker.pid(), signal.SIGCONT)
    assert elapsed < 2.3, f"close(timeout=2.0) took {elapsed:.2f} s with the broker hung"
    stats = pub.stats
    assert stats.buffered == stats.in_flight == 0
    assert stats.logged == stats.sent + stats.dropped
    assert set(stats.drops) <= {"unsent_at_close"}, stats.drops


def test_a_killed_and_restarted_broker_gets_every_event_once_in_order(
    broker: OwnBroker, quiet_kafka_client: None
) -> None:
    topic = new_topic(broker.address)
    pub = Publisher(broker.address, "run-killed", topic=topic, rank=0)
    steps = Steps(pub)
    steps.run(2.0)
    argv = broker.kill()
    share = steps.run(8.0)
    broker_state = pub.stats.broker
    broker.start_again(argv)
    steps.run(2.0)
    assert pub.flush(timeout=60), pub.stats
    pub.close(finished=False)
    assert share < CPU_SHARE_MAX, f"{share:.1%} of a core while the broker was down"
    assert broker_state == "unreachable"
    assert pub.stats.dropped == 0, pub.stats
    assert stored_steps(broker.address, topic) == steps.logged  # in order, each once
