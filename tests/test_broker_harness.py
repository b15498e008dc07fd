"""The development brokers (docker/kafka.sh) work end to end with kafka-python.

Single node: `make kafka-up`, then run with STREAMWATCH_BOOTSTRAP=127.0.0.1:19092.
Three nodes: `make kafka-cluster-up`, then run with STREAMWATCH_CLUSTER_BOOTSTRAP set to
the address it prints; that test SIGKILLs one node and starts it again.
Without those variables the tests are skipped.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.kafka,
    # kafka-python 3.0 loads its protocol schemas with importlib.resources.read_text and open_text,
    # deprecated since Python 3.11.
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]

N_MESSAGES = 100
N_PARTITIONS = 4
N_KEYS = 10
TIMEOUT_S = 60.0
KAFKA_SH = Path(__file__).resolve().parent.parent / "docker" / "kafka.sh"


@pytest.fixture
def topic(bootstrap: str) -> Iterator[str]:
    from kafka.admin import KafkaAdminClient

    name = f"streamwatch-harness-{uuid.uuid4().hex[:12]}"
    admin: Any = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="harness-admin")
    try:
        admin.create_topics(
            {name: {"num_partitions": N_PARTITIONS, "replication_factor": 1}},
            wait_for_metadata=True,
        )
        yield name
        admin.delete_topics([name])
    finally:
        admin.close()


def test_keyed_round_trip_through_a_consumer_group(bootstrap: str, topic: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient

    sent: list[tuple[bytes, bytes]] = [
        (f"run-{i % N_KEYS}".encode(), f"event-{i}".encode()) for i in range(N_MESSAGES)
    ]

    producer: Any = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [producer.send(topic, key=k, value=v) for k, v in sent]
        producer.flush(timeout=TIMEOUT_S)
        produced = [f.get(timeout=TIMEOUT_S) for f in futures]
    finally:
        producer.close(timeout=10)

    partition_of_key: dict[bytes, int] = {}
    for (key, _), meta in zip(sent, produced, strict=True):
        assert meta.topic == topic
        assert 0 <= meta.partition < N_PARTITIONS
        assert partition_of_key.setdefault(key, meta.partition) == meta.partition
    assert len(partition_of_key) == N_KEYS
    # Ten keys spread over more than one of the four partitions.
    assert len(set(partition_of_key.values())) > 1

    group = f"streamwatch-harness-{uuid.uuid4().hex[:12]}"
    consumer: Any = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    received: list[Any] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(received) < N_MESSAGES and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                received.extend(records)
        consumer.commit()
    finally:
        consumer.close()

    assert len(received) == N_MESSAGES, f"got {len(received)} of {N_MESSAGES} messages"
    assert sorted((r.key, r.value) for r in received) == sorted(sent)

    by_partition: dict[int, list[Any]] = defaultdict(list)
    for record in received:
        assert record.topic == topic
        assert record.partition == partition_of_key[record.key]
        by_partition[record.partition].append(record)
    # Within a partition the messages come back in the order they were sent.
    send_index = {value: i for i, (_, value) in enumerate(sent)}
    for records in by_partition.values():
        offsets = [r.offset for r in records]
        assert offsets == sorted(offsets)
        assert [send_index[r.value] for r in records] == sorted(
            send_index[r.value] for r in records
        )

    admin: Any = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="harness-admin")
    try:
        committed = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    expected = {TopicPartition(topic, p): len(records) for p, records in by_partition.items()}
    assert {tp: meta.offset for tp, meta in committed.items() if tp.topic == topic} == expected


@pytest.fixture
def cluster_bootstrap() -> str:
    servers = os.environ.get("STREAMWATCH_CLUSTER_BOOTSTRAP", "").strip()
    if not servers:
        pytest.skip(
            "STREAMWATCH_CLUSTER_BOOTSTRAP is not set: start three brokers with "
            "`make kafka-cluster-up` and export the address it prints"
        )
    return servers


def kafka_sh(*args: str) -> None:
    subprocess.run(["bash", str(KAFKA_SH), *args], check=True, timeout=150)


def leaders(admin: Any, topic: str) -> dict[int, int]:
    (info,) = admin.describe_topics([topic])
    return {p["partition_index"]: p["leader_id"] for p in info["partitions"]}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:unclosed <socket:ResourceWarning")
def test_cluster_keeps_accepting_acks_all_writes_when_a_leader_is_killed(
    cluster_bootstrap: str, quiet_kafka_client: None
) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient

    topic = f"streamwatch-harness-{uuid.uuid4().hex[:12]}"
    admin: Any = KafkaAdminClient(bootstrap_servers=cluster_bootstrap, client_id="harness-admin")
    producer: Any = KafkaProducer(bootstrap_servers=cluster_bootstrap, acks="all", linger_ms=5)
    victim = -1
    try:
        admin.create_topics(
            {topic: {"num_partitions": 3, "replication_factor": 3}}, wait_for_metadata=True
        )
        before = [
            producer.send(topic, key=f"run-{i % N_KEYS}".encode(), value=f"a-{i}".encode())
            for i in range(50)
        ]
        for future in before:
            future.get(timeout=TIMEOUT_S)

        victim = leaders(admin, topic)[0]
        kafka_sh("kill-node", str(victim))

        started = time.monotonic()
        after = [
            producer.send(topic, key=f"run-{i % N_KEYS}".encode(), value=f"b-{i}".encode())
            for i in range(50)
        ]
        for future in after:
            future.get(timeout=TIMEOUT_S)
        recovered_s = time.monotonic() - started
        print(f"acks=all writes resumed {recovered_s:.1f}s after node {victim} was killed")

        # Every partition the killed node led gets a new leader among the survivors.
        deadline = time.monotonic() + TIMEOUT_S
        while victim in leaders(admin, topic).values() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert victim not in leaders(admin, topic).values()

        consumer: Any = KafkaConsumer(
            topic,
            bootstrap_servers=cluster_bootstrap,
            group_id=f"streamwatch-harness-{uuid.uuid4().hex[:12]}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        values: list[bytes] = []
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while len(values) < 100 and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    values.extend(r.value for r in records)
            consumer.commit()
        finally:
            consumer.close()
        expected = [f"a-{i}".encode() for i in range(50)] + [f"b-{i}".encode() for i in range(50)]
        assert sorted(values) == sorted(expected)
    finally:
        producer.close(timeout=10)
        try:
            if victim > 0:
                kafka_sh("start-node", str(victim))
            admin.delete_topics([topic])
        finally:
            admin.close()
