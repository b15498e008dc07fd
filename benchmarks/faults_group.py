"""The consumer-SIGKILL fault test of ``benchmarks/faults.py``, on the three-node cluster.

Two ``streamwatch run`` processes share a consumer group (run-state checkpoints in a state
topic, incident updates to an incidents topic) while simulated runs, some with faults, are
published keyed by run id. Part way through, one consumer is SIGKILLed; the other takes its
partitions over and restores its runs from their checkpoints. The incident updates on the
topic are compared with a replay of the same events in one process: expected, got, missed,
duplicated (by incident id, status and severity; ``run_stalled`` is left out of the
comparison and counted on its own: the live service judges stalls on its own clock).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from typing import Any

from faults_kafka import BOOTSTRAP, ROOT, _kafka, _running, records

from streamwatch.engine.monitor import Monitor
from streamwatch.simulate import Fault, RunSpec, simulate

Key = tuple[str, str, str]


def _specs(runs: int, steps: int) -> list[RunSpec]:
    kinds = ["entropy_collapse", "length_explosion", "reward_collapse", "nonfinite_metric"]
    return [
        RunSpec(
            f"group-{n}",
            steps=steps,
            hosts=1,
            ranks_per_host=2,
            seed=n,
            faults=(Fault(kinds[n % len(kinds)], steps // 2),) if n % 2 else (),
        )
        for n in range(runs)
    ]


def _key(inc: dict[str, Any]) -> Key:
    return (inc["id"], inc["status"], inc["severity"])


def _expected(specs: list[RunSpec]) -> Counter[Key]:
    monitor = Monitor()
    got: Counter[Key] = Counter()
    for event in simulate(specs):
        for inc in monitor.process(event):
            got[_key(inc.model_dump(mode="json"))] += 1
    for inc in monitor.flush():
        got[_key(inc.model_dump(mode="json"))] += 1
    return got


def _incidents(topic: str) -> tuple[Counter[Key], Counter[str]]:
    got: Counter[Key] = Counter()
    kinds: Counter[str] = Counter()
    for record in records(topic):
        inc = json.loads(record.value)
        kinds[inc["kind"]] += 1
        got[_key(inc)] += 1
    return got, kinds


def consumer_kill(
    runs: int = 8, steps: int = 300, kill_after: float = 12.0, pace: float = 30.0
) -> str:
    """``pace``: seconds over which the events are published; the kill comes part way."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    started = not _running()
    if started:
        _kafka("cluster-up")
    topic = f"group-{uuid.uuid4().hex[:8]}"
    specs = _specs(runs, steps)
    admin: Any = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, client_id="faults")
    procs: list[subprocess.Popen[str]] = []
    try:
        admin.create_topics([NewTopic(topic, 4, 3)])
        args = [sys.executable, "-m", "streamwatch.cli.kafka", "run"]
        args += ["--bootstrap-servers", BOOTSTRAP, "--topic", topic, "--group", topic]
        args += ["--incidents-topic", topic + ".incidents", "--state-topic", topic + ".state"]
        args += ["--dead-letter-topic", "", "--commit-interval", "1", "--quiet"]
        args += ["--session-timeout-ms", "6000", "--max-idle", "25", "--replication-factor", "3"]
        for _ in range(2):
            procs.append(
                subprocess.Popen(
                    args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
                )
            )
        time.sleep(8.0)  # both in the group
        producer: Any = KafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", linger_ms=5)
        events = list(simulate(specs))
        t0, killed = time.monotonic(), False
        for n, event in enumerate(events):
            body = json.dumps(event.to_json_dict()).encode()
            producer.send(topic, body, key=event.run_id.encode())
            if n % 50 == 0:
                time.sleep(pace * 50 / len(events))
            if not killed and time.monotonic() - t0 > kill_after:
                procs[0].kill()  # SIGKILL: no commit, no goodbye to the group
                killed = True
        producer.flush()
        producer.close()
        out, _ = procs[1].communicate(timeout=600)
        procs[0].wait()
        got, kinds = _incidents(topic + ".incidents")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()
        admin.close()
        if started:
            _kafka("cluster-down")
    stall_ids = _stall_ids(specs)
    expected = Counter({k: v for k, v in _expected(specs).items() if k[0] not in stall_ids})
    compared = Counter({k: v for k, v in got.items() if k[0] not in stall_ids})
    missed = sum(max(expected[k] - compared[k], 0) for k in expected)
    kinds_of = _kinds(specs)
    missed_kinds = Counter(
        f"{kinds_of.get(k[0], '?')}/{k[1]}" for k in expected if expected[k] > compared[k]
    )
    duplicated = sum(max(compared[k] - expected[k], 0) for k in compared)
    survivor = out.strip().splitlines()[-1] if out.strip() else "no summary"
    return (
        f"consumer SIGKILL ({runs} runs, {len(events)} events, one of two consumers killed "
        f"after {kill_after:g} s): incident updates expected {sum(expected.values())}, got "
        f"{sum(compared.values())}, missed {missed}, duplicated {duplicated} (run_stalled "
        f"updates apart: {kinds['run_stalled']}; missed by kind {dict(missed_kinds)}); "
        f"killed: {killed}; the survivor: {survivor}"
    )


def _kinds(specs: list[RunSpec]) -> dict[str, str]:
    """incident id -> kind, for every kind and indicator the runs could raise."""
    from streamwatch.incidents import KINDS, fingerprint

    indicators = ["entropy", "response_length", "reward", "run", "loss", "grad_norm"]
    return {
        fingerprint(s.run_id, kind, ind): kind
        for s in specs
        for kind in KINDS
        for ind in indicators
    }


def _stall_ids(specs: list[RunSpec]) -> set[str]:
    from streamwatch.incidents import fingerprint

    return {fingerprint(s.run_id, "run_stalled", "run") for s in specs}
