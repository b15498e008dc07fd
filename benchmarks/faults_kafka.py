"""The Kafka fault tests of ``benchmarks/faults.py``, on the project's three-node cluster.

``leader_kill``:
Publishers (one :class:`~streamwatch.client.publish.Publisher` per simulated rank, ``acks=all``)
write to a topic with three replicas (``min.insync.replicas=2``) while, ``kills`` times, the
leader of one partition is SIGKILLed (``docker/kafka.sh kill-node``) and started again.
Afterwards the topic is read back whole and compared with what the publishers counted:
logged, acknowledged, stored (distinct events), lost (acknowledged but not stored, a lower
bound), duplicated (stored more than once), and the publishers' drops by reason.

``malformed_flood``: good events and a flood of malformed messages (cut-off JSON, not an
object, a boolean step, no metrics, oversized) into one topic; ``streamwatch run`` consumes
it until idle. Counted: events read, dead letters (by the reason in their header, read back
from the dead-letter topic) against what was sent.

The cluster runs on its own ports (``KAFKA_CLUSTER_PORT_BASE``, default here 39092) and
state directory (``.kafka-faults``): a cluster this started is stopped at the end. The shared
development broker (127.0.0.1:19092) is never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streamwatch.client.publish import Publisher

ROOT = Path(__file__).resolve().parent.parent
KAFKA_SH = ROOT / "docker" / "kafka.sh"
PORT_BASE = int(os.environ.get("KAFKA_CLUSTER_PORT_BASE", "39092"))
STATE = Path(os.environ.get("KAFKA_STATE_DIR", str(ROOT / ".kafka-faults")))
BOOTSTRAP = ",".join(f"127.0.0.1:{PORT_BASE + 2 * n}" for n in range(3))


def _kafka(*args: str) -> str:
    env = {**os.environ, "KAFKA_STATE_DIR": str(STATE), "KAFKA_CLUSTER_PORT_BASE": str(PORT_BASE)}
    done = subprocess.run(
        ["bash", str(KAFKA_SH), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _running() -> bool:
    env = {**os.environ, "KAFKA_STATE_DIR": str(STATE), "KAFKA_CLUSTER_PORT_BASE": str(PORT_BASE)}
    out = subprocess.run(
        ["bash", str(KAFKA_SH), "status"], env=env, capture_output=True, text=True
    ).stdout
    return sum(1 for line in out.splitlines() if line.startswith("node") and " up " in line) == 3


def _leaders(admin: Any, topic: str) -> dict[int, int]:
    [desc] = admin.describe_topics([topic])
    return {p["partition_index"]: p["leader_id"] for p in desc["partitions"]}


def _publish(pub: Publisher, stop: threading.Event, rate: float) -> None:
    step = 0
    while not stop.is_set():
        pub.log({"actor/entropy": 1.0 / (step + 1), "critic/score/mean": 0.5}, step=step)
        step += 1
        time.sleep(1.0 / rate)


def records(topic: str, seconds: float = 120.0) -> Iterator[Any]:
    """Every record of ``topic``, from its start to its end now (or until ``seconds``)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer: Any = KafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=None)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        total = sum(consumer.end_offsets(parts).values())
        seen, deadline = 0, time.monotonic() + seconds
        while seen < total and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                seen += len(batch)
                yield from batch
    finally:
        consumer.close()


def _read_back(topic: str) -> Counter[tuple[str, int, int, bool]]:
    """(run, rank, step, end-of-run marker) -> times stored."""
    stored: Counter[tuple[str, int, int, bool]] = Counter()
    for record in records(topic):
        e = json.loads(record.value)
        marker = "streamwatch.state" in e.get("tags", {})
        stored[(e["run_id"], e["source"].get("rank", -1), e["step"], marker)] += 1
    return stored


def leader_kill(kills: int = 3, publishers: int = 4, rate: float = 100.0) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    started = not _running()
    if started:
        _kafka("cluster-up")
    topic = f"faults-{uuid.uuid4().hex[:8]}"
    admin: Any = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, client_id="faults")
    try:
        config = {"min.insync.replicas": "2"}
        admin.create_topics([NewTopic(topic, 3, 3, topic_configs=config)])
        time.sleep(2.0)
        pubs = [
            Publisher(
                BOOTSTRAP,
                f"faults-run-{n % 2}",
                topic=topic,
                host="faults",
                rank=n,
                producer_config={"acks": "all"},
            )
            for n in range(publishers)
        ]
        stop = threading.Event()
        threads = [threading.Thread(target=_publish, args=(p, stop, rate)) for p in pubs]
        for t in threads:
            t.start()
        for k in range(kills):
            time.sleep(5.0)
            node = _leaders(admin, topic)[k % 3]
            _kafka("kill-node", str(node))
            time.sleep(5.0)
            _kafka("start-node", str(node))
        time.sleep(5.0)
        stop.set()
        for t in threads:
            t.join()
        for p in pubs:
            p.close(timeout=30.0)
        stats = [p.stats for p in pubs]
        stored = _read_back(topic)
        admin.delete_topics([topic])
    finally:
        admin.close()
        if started:
            _kafka("cluster-down")
    logged = sum(s.logged for s in stats)
    acked = sum(s.sent for s in stats)
    drops: Counter[str] = Counter()
    for s in stats:
        drops.update(s.drops)
    distinct = len(stored)
    return (
        f"leader kill ({kills} kills, {publishers} publishers, acks=all): {logged} logged, "
        f"{acked} acknowledged, {distinct} stored, {max(acked - distinct, 0)} lost, "
        f"{sum(n - 1 for n in stored.values())} duplicated, dropped by reason {dict(drops)}"
    )


def _malformed(n: int) -> tuple[bytes, str]:
    """The n-th malformed message and the reason it should be set aside for."""
    good = {"run_id": f"flood-{n % 7}", "step": n, "metrics": {"loss": 1.0}}
    kind = n % 5
    if kind == 0:
        return json.dumps(good).encode()[:-9], "not_json"  # a line cut short
    if kind == 1:
        return b"[1, 2, 3]", "not_an_object"
    if kind == 2:
        return json.dumps({**good, "step": True}).encode(), "invalid_event"
    if kind == 3:
        return json.dumps({"run_id": "flood-x", "step": n}).encode(), "invalid_event"
    return json.dumps({**good, "pad": "x" * 8192}).encode(), "oversized"


def _dead_letters(topic: str) -> Counter[str]:
    reasons: Counter[str] = Counter()
    for record in records(topic):
        headers = {k: v.decode() for k, v in record.headers}
        reasons[headers.get("streamwatch.reason", "?")] += 1
    return reasons


def malformed_flood(bad: int = 50_000, good: int = 2_000) -> str:
    from kafka import KafkaProducer

    started = not _running()
    if started:
        _kafka("cluster-up")
    topic = f"flood-{uuid.uuid4().hex[:8]}"
    dead = topic + ".dead"
    try:
        producer: Any = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=20)
        expected: Counter[str] = Counter()
        for n in range(bad + good):
            if n % ((bad + good) // good) == 0:
                event = {"run_id": f"flood-{n % 7}", "step": n, "metrics": {"loss": 0.5}}
                producer.send(topic, json.dumps(event).encode(), key=b"good")
                expected["event"] += 1
            else:
                value, reason = _malformed(n)
                producer.send(topic, value, key=b"bad")
                expected[reason] += 1
        producer.flush()
        producer.close()
        args = [sys.executable, "-m", "streamwatch.cli.kafka", "run"]
        args += ["--bootstrap-servers", BOOTSTRAP, "--topic", topic, "--group", topic]
        args += ["--dead-letter-topic", dead, "--incidents-topic", "", "--state-topic", ""]
        args += ["--max-message-bytes", "4096", "--max-idle", "30", "--quiet"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT)
        summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "no summary"
        summary += f" (exit {done.returncode})"
        Path(ROOT, "artifacts").mkdir(exist_ok=True)
        Path(ROOT, "artifacts", "faults-flood-service.log").write_text(done.stderr)
        got = _dead_letters(dead)
    finally:
        if started:
            _kafka("cluster-down")
    sent_bad = sum(v for k, v in expected.items() if k != "event")
    missed = {k: expected[k] - got[k] for k in expected if k != "event" and got[k] != expected[k]}
    return (
        f"malformed flood: {expected['event']} good events and {sent_bad} malformed messages "
        f"sent; {sum(got.values())} dead letters stored, by reason {dict(got)}; "
        f"differences from what was sent: {missed or 'none'}; the service: {summary}"
    )
