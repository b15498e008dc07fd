"""End-to-end figures of the live service on a real broker.

    python benchmarks/service.py [--bootstrap-servers 127.0.0.1:19092] [--events 50000]
        [--group-events 200000] [--metrics 20] [--rate 1000] [--seconds 20] [--repeat 5]

1. Throughput: a topic (4 partitions) is filled with ``--events`` events of ``--metrics``
   metrics each (50 runs, named like verl's plus generic ones). The same topic is read by a
   plain kafka-python consumer (no decoding: the client's own ceiling, with the service's
   consumer settings; and once more with kafka-python's defaults, which return at most 500
   records a poll: a slower ceiling) and then by a Service
   (new group; decoding, the engine, checkpoints and commits, incidents to a topic).
   Rates are measured from the first to the last message; the two alternate ``--repeat``
   times and their medians are compared (the machine's noise swings either by 1.5x from one
   run to the next). For scale, the same messages are also decoded and run through a
   Monitor in process, without Kafka, as a replay does (``decode_message`` and
   ``Monitor.process``).
   Scaling out: a topic of ``--group-events`` events read by two Service processes in one
   group (the partitions, and so the runs, shared between them). The first member to join
   reads alone until it hears of the second's join (a 1 s session: within 250 ms) and the
   group rebalances, a one-off pause; the group is timed while every member reads, once a quarter
   of the topic is read, until the first runs out of its partitions (the runs are not spread
   evenly), and compared with one service's rate once a quarter is read. The cores the
   members and the rest of the machine (the broker) used meanwhile are printed, with what the
   cores left to the members allow.
2. Latency: a separate producer process sends ``--rate`` events/s for ``--seconds`` to a fresh
   topic, each stamped with its send time as ``ts``; every 25th step of each run carries a
   NaN loss, so non-finite incidents fire (and resolve) all along. An incident carries the
   ``ts`` of the event that fired it; its latency is the time from that send to the moment
   the service hands the incident to its sinks.
Targets (the compiled build): one service >= 45% of the raw consume rate; two processes in one
group >= 1.6x one; produce -> incident p99 < 100 ms at 1,000 events/s.
The broker runs on the same machine and shares its cores.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import random
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import streamwatch
from streamwatch import build
from streamwatch.config import Config
from streamwatch.engine.monitor import Monitor
from streamwatch.incidents import Incident, Status
from streamwatch.live import Service, ServiceSettings
from streamwatch.live.kafka_tools import TopicSpec, ensure_topics
from streamwatch.sources.kafka import KafkaConnection, decode_message

PARTITIONS = 4
RUNS = 50
#: verl's names at typical healthy levels, then generic metrics (checked for drift).
NAMED = {
    "actor/entropy": 0.4,
    "critic/score/mean": 0.6,
    "response_length/mean": 400.0,
    "response_length/clip_ratio": 0.02,
    "actor/grad_norm": 0.5,
    "actor/pg_loss": 0.05,
    "actor/ppo_kl": 0.001,
    "timing_s/step": 30.0,
    "perf/throughput": 1500.0,
}


def metric_names(n: int) -> list[str]:
    names = list(NAMED) + [f"custom/metric_{i:02d}" for i in range(max(0, n - len(NAMED)))]
    return names[:n]


def event(run: int, step: int, names: list[str], rng: random.Random, ts: float) -> bytes:
    """Stationary noise around each metric's level: a healthy run, no incident open."""
    gauss = rng.gauss
    metrics = {name: NAMED.get(name, 1.0) * (1.0 + 0.02 * gauss(0.0, 1.0)) for name in names}
    body = {"run_id": f"bench-{run:03d}", "step": step, "ts": ts, "metrics": metrics}
    return json.dumps(body).encode()


def fill(kwargs: dict[str, Any], topic: str, events: int, n_metrics: int) -> list[bytes]:
    """Send the events (round-robin over the runs); returns the message values."""
    from kafka import KafkaProducer

    names = metric_names(n_metrics)
    rng = random.Random(0)
    producer: Any = KafkaProducer(**kwargs, acks=1, linger_ms=20, batch_size=256 * 1024)
    values = []
    start_ts = time.time() - 30.0 * (events // RUNS)  # the last steps are recent: no stall
    for i in range(events):
        run, step = i % RUNS, i // RUNS
        value = event(run, step, names, rng, start_ts + 30.0 * step)
        values.append(value)
        producer.send(topic, key=f"bench-{run:03d}".encode(), value=value)
    producer.flush()
    producer.close()
    return values


def in_process(values: list[bytes]) -> tuple[float, float]:
    """Events per second of decoding alone, and of decoding + the engine (no Kafka)."""
    start = time.perf_counter()
    events = [decode_message(v, "bench").event for v in values]
    decode = len(values) / (time.perf_counter() - start)
    monitor = Monitor(Config())
    start = time.perf_counter()
    for e in events:
        assert e is not None
        monitor.process(e, "bench")
    engine = len(values) / (time.perf_counter() - start)
    return decode, 1 / (1 / decode + 1 / engine)


def raw_consume(
    kwargs: dict[str, Any], topic: str, events: int, max_poll_records: int | None = None
) -> float:
    """Messages per second of a plain consumer reading the whole topic (no decoding): with the
    service's consumer settings, or (``max_poll_records=None``) kafka-python's defaults."""
    from kafka import KafkaConsumer

    settings: dict[str, Any] = {}
    if max_poll_records is not None:
        settings["max_poll_records"] = max_poll_records
    consumer: Any = KafkaConsumer(
        topic,
        **kwargs,
        **settings,
        group_id=f"bench-raw-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
    )
    seen = 0
    first = last = 0.0
    try:
        while seen < events:
            batch = consumer.poll(timeout_ms=500)
            for records in batch.values():
                if not seen:
                    first = time.perf_counter()
                seen += len(records)
                last = time.perf_counter()
    finally:
        consumer.close()
    return (seen - 1) / (last - first)


def service_settings(
    bootstrap: str, topic: str, tag: str, session_ms: int = 10_000
) -> ServiceSettings:
    """Each measured group has a state topic of its own: a process taking over partitions
    reads its group's checkpoints, which the earlier groups' would only bury. A member hears
    within a heartbeat (a quarter of ``session_ms``) that another joined."""
    return ServiceSettings(
        connection=KafkaConnection(bootstrap_servers=bootstrap, client_id="bench"),
        topic=topic,
        group=f"bench-{tag}",
        incidents_topic=f"{topic}.incidents",
        dead_letter_topic=f"{topic}.dlq",
        state_topic=f"{topic}.state.{tag}",
        partitions=PARTITIONS,
        console=False,
        session_timeout_ms=session_ms,
    )


def busy_seconds() -> float:
    """CPU time the whole machine has spent busy since boot, all processes (/proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(t) for t in f.readline().split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle and waiting for I/O
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def service_consume(
    bootstrap: str, topic: str, events: int, tag: str
) -> tuple[float, float, float, float]:
    """Events and values per second of the Service over the whole topic; its events per
    second once a quarter is read (every run under way: what a group's members are timed
    on), and the cores its process used then."""
    service = Service(service_settings(bootstrap, topic, tag), Config())
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    counts = service.counts
    while counts.events == 0:
        time.sleep(0.005)
    first, first_events, first_values = time.perf_counter(), counts.events, counts.values
    while counts.events < events // 4:
        time.sleep(0.005)
    steady, steady_events, cpu = time.perf_counter(), counts.events, time.process_time()
    while counts.events < events:
        time.sleep(0.005)
    end = time.perf_counter()
    cores = (time.process_time() - cpu) / (end - steady)
    stop.set()
    thread.join()
    elapsed = end - first
    return (
        (counts.events - first_events) / elapsed,
        (counts.values - first_values) / elapsed,
        (counts.events - steady_events) / (end - steady),
        cores,
    )


def _group_member(
    bootstrap: str, topic: str, tag: str, done: Any, cpu: Any, ready: Any, go: Any, stop: Any
) -> None:
    """Runs in its own process: one Service of the group, its event count and CPU time
    shared."""
    import logging

    logging.basicConfig(level=logging.ERROR)
    # the shortest session the broker allows: the first member to join, which reads alone
    # until the others' joins are heard, hears of them within 250 ms
    service = Service(service_settings(bootstrap, topic, tag, session_ms=1000), Config())
    ready.release()
    go.wait()  # all members join together: one assignment, no rebalance mid-measurement
    halt = threading.Event()
    thread = threading.Thread(target=service.run, args=(halt,), daemon=True)
    thread.start()
    while not stop.is_set():
        done.value = service.counts.events
        cpu.value = time.process_time()
        time.sleep(0.005)
    halt.set()
    thread.join()


def group_consume(
    bootstrap: str, topic: str, events: int, tag: str, members: int
) -> tuple[float, float, float, float]:
    """Events per second of ``members`` Service processes sharing the topic in one group;
    the cores the members used meanwhile, and those the rest of the machine did (the broker,
    mostly)."""
    context = multiprocessing.get_context("spawn")
    stop, go, ready = context.Event(), context.Event(), context.Semaphore(0)
    counts = [context.Value("q", 0) for _ in range(members)]
    cpus = [context.Value("d", 0.0) for _ in range(members)]
    procs = [
        context.Process(
            target=_group_member,
            args=(bootstrap, topic, tag, c, cpu, ready, go, stop),
            daemon=True,
        )
        for c, cpu in zip(counts, cpus, strict=True)
    ]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.acquire()
    go.set()
    # sampled every 5 ms; the group's rate is taken over the time every member reads, once a
    # quarter of the topic is read (as one service's steady rate): from the moment each has
    # read (the first to join reads alone until the second's join makes the group
    # rebalance: a one-off pause, not the group's rate) to the moment the first of them
    # stops (its partitions read: the runs are not spread evenly over them)
    samples: list[tuple[float, list[int], float, float]] = []
    deadline = time.perf_counter() + 300
    while time.perf_counter() < deadline:
        now = [c.value for c in counts]
        samples.append((time.perf_counter(), now, busy_seconds(), sum(c.value for c in cpus)))
        if sum(now) >= events:
            break
        time.sleep(0.005)
    stop.set()
    for proc in procs:
        proc.join(60)
    return _window(samples, events)


def _window(
    samples: list[tuple[float, list[int], float, float]], events: int
) -> tuple[float, float, float, float]:
    """The group's events/s while every member read, the cores its members used meanwhile,
    those the rest of the machine did, and for how many seconds (NaN if they never read
    together)."""
    start = next(
        (i for i, (_, n, _, _) in enumerate(samples) if min(n) > 0 and sum(n) >= events // 4),
        None,
    )
    if start is None:
        return math.nan, math.nan, math.nan, 0.0
    members = len(samples[0][1])
    # each member's last sample with a new count: the first of those ends the window
    last = [max(i for i, s in enumerate(samples) if i == 0 or s[1][m] > samples[i - 1][1][m])
            for m in range(members)]  # fmt: skip
    end = min(last)
    if end <= start:
        return math.nan, math.nan, math.nan, 0.0
    t0, n0, busy0, cpu0 = samples[start]
    t1, n1, busy1, cpu1 = samples[end]
    elapsed = t1 - t0
    used = cpu1 - cpu0
    rate = (sum(n1) - sum(n0)) / elapsed
    return rate, used / elapsed, (busy1 - busy0 - used) / elapsed, elapsed


def steady_producer(bootstrap: str, topic: str, rate: int, seconds: float, runs: int) -> None:
    """Runs in its own process: ``rate`` events/s, each ``ts`` = its send time."""
    from kafka import KafkaProducer

    producer: Any = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks=1, linger_ms=0)
    names = metric_names(20)
    rng = random.Random(1)
    step = [0] * runs
    start = time.perf_counter()
    wall0 = time.time()
    total = int(rate * seconds)
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        run = i % runs
        s = step[run]
        step[run] += 1
        now = wall0 + (time.perf_counter() - start)
        body = json.loads(event(run, s, names, rng, now))
        if s % 25 == 0 and s > 0:
            body["metrics"]["actor/pg_loss"] = float("nan")
        producer.send(topic, key=body["run_id"].encode(), value=json.dumps(body).encode())
    producer.flush()
    producer.close()


class LatencySink:
    """Send time (the firing event's ts) to the moment the service emits the incident."""

    def __init__(self) -> None:
        self.latencies: list[float] = []

    def send(self, inc: Incident) -> None:
        if inc.status is Status.FIRING and inc.kind == "nonfinite_metric" and inc.ts:
            self.latencies.append(time.time() - inc.ts)


def latency(bootstrap: str, rate: int, seconds: float, tag: str) -> list[float]:
    topic = f"bench-latency-{tag}"
    ensure_topics({"bootstrap_servers": bootstrap.split(",")}, {topic: TopicSpec(PARTITIONS)})
    sink = LatencySink()
    service = Service(service_settings(bootstrap, topic, tag), Config(), sinks=[sink])
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    service.started.wait(60)
    time.sleep(3.0)  # the group's first assignment
    context = multiprocessing.get_context("spawn")
    runs = 20
    producer = context.Process(
        target=steady_producer, args=(bootstrap, topic, rate, seconds, runs), daemon=True
    )
    producer.start()
    producer.join()
    expected = int(rate * seconds)
    deadline = time.monotonic() + 60
    while service.counts.events < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join()
    return sink.latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("STREAMWATCH_BOOTSTRAP", "127.0.0.1:19092"),
    )
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--metrics", type=int, default=20)
    p.add_argument("--group-events", type=int, default=200_000, help="the group's topic")
    p.add_argument("--rate", type=int, default=1000, help="events/s in the latency test")
    p.add_argument("--seconds", type=float, default=20.0, help="length of the latency test")
    p.add_argument("--repeat", type=int, default=5, help="raw and service runs, alternating")
    args = p.parse_args()
    import logging

    logging.basicConfig(level=logging.ERROR)
    kwargs = {"bootstrap_servers": args.bootstrap_servers.split(",")}
    tag = uuid.uuid4().hex[:8]
    print(f"# {platform.python_implementation()} {platform.python_version()} {platform.machine()}")
    print(f"# cpus: {os.cpu_count()}; broker {args.bootstrap_servers} on the same machine")
    print(f"# engine: {build()} ({Path(streamwatch.__file__).parent})")
    print(f"# load average before: {os.getloadavg()[0]:.2f} (other work on the machine skews this)")

    topic = f"bench-throughput-{tag}"
    ensure_topics(kwargs, {topic: TopicSpec(PARTITIONS)})
    values = fill(kwargs, topic, args.events, args.metrics)
    size = sum(len(v) for v in values)
    print(f"topic: {args.events:,} events x {args.metrics} metrics, {size / 2**20:.1f} MiB")
    # raw and service alternate, --repeat times each (every service run a new group, from
    # the start of the topic): the machine's noise hits both, and the medians are compared
    raws, defaults, services = [], [], []
    same = ServiceSettings.model_fields["max_poll_records"].default
    for i in range(args.repeat):
        raws.append(raw_consume(kwargs, topic, args.events, same))
        defaults.append(raw_consume(kwargs, topic, args.events))
        services.append(service_consume(args.bootstrap_servers, topic, args.events, f"{tag}-{i}"))
    raw = statistics.median(raws)
    default_raw = statistics.median(defaults)
    events_s = statistics.median(e for e, _, _, _ in services)
    values_s = statistics.median(v for _, v, _, _ in services)
    steady_s = statistics.median(e for _, _, e, _ in services)
    one_cores = statistics.median(c for _, _, _, c in services)
    members = 2
    # a topic of its own, long enough that the members read together for seconds once a
    # quarter of it is read (the first to join reads alone until it hears of the other)
    group_topic = f"bench-group-{tag}"
    ensure_topics(kwargs, {group_topic: TopicSpec(PARTITIONS)})
    fill(kwargs, group_topic, args.group_events, args.metrics)
    group_s, group_cores, rest_cores, window = group_consume(
        args.bootstrap_servers, group_topic, args.group_events, f"{tag}-g", members
    )
    decode, replay = in_process(values)
    each = ", ".join(f"{r:,.0f}" for r in raws)
    print(f"raw kafka-python consumer (no decoding): {raw:>9,.0f} messages/s (median of {each})")
    each = ", ".join(f"{r:,.0f}" for r in defaults)
    print(
        f"  the same, kafka-python's defaults:      {default_raw:>9,.0f} messages/s "
        f"(max_poll_records 500, not {same:,}; median of {each})"
    )
    each = ", ".join(f"{e:,.0f}" for e, _, _, _ in services)
    print(
        f"service, end to end:                     {events_s:>9,.0f} events/s "
        f"({values_s:,.0f} values/s; median of {each})"
    )
    each = ", ".join(f"{e:,.0f}" for _, _, e, _ in services)
    print(
        f"  the same, once a quarter is read:       {steady_s:>9,.0f} events/s (median of {each})"
    )
    print(
        f"{f'{members} service processes, one group:':<41}{group_s:>9,.0f} events/s "
        f"(a topic of {args.group_events:,}, over the {window:.1f} s all read; "
        f"{os.cpu_count()} cpus, the broker's too)"
    )
    # what the cores allow: one service's process used ``one_cores`` at its rate; the group's
    # members can have what the rest of the machine (the broker serving them) leaves
    room = (os.cpu_count() or 1) - rest_cores
    print(
        f"  cores while the group read: its members {group_cores:.2f}, the rest of the "
        f"machine (the broker) {rest_cores:.2f}; one service alone used {one_cores:.2f}: "
        f"the cores left allow at most {room / one_cores:.2f}x one"
    )
    print(f"in process, no Kafka: decoding alone     {decode:>9,.0f} events/s")
    print(f"in process, no Kafka: decoding + engine  {replay:>9,.0f} events/s")
    ratio = events_s / raw
    on_defaults = events_s / default_raw
    print(f"service / raw consumer: {ratio:.0%} (target >= 45%: "
          f"{'met' if ratio >= 0.45 else 'NOT met'}; "
          f"{on_defaults:.0%} of the raw consumer on kafka-python's defaults)")  # fmt: skip
    scale = group_s / steady_s
    print(f"{members} processes / one: {scale:.2f}x (target >= 1.6x: "
          f"{'met' if scale >= 1.6 else 'NOT met'})")  # fmt: skip

    lat = latency(args.bootstrap_servers, args.rate, args.seconds, tag)
    if not lat:
        print("latency: no incidents measured")
        delete_topics(kwargs, [topic, group_topic, f"bench-latency-{tag}"])
        return 1
    p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
    print(
        f"produce -> incident at {args.rate:,} events/s: {len(lat)} incidents, "
        f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms, "
        f"mean {statistics.mean(lat) * 1000:.0f} ms"
    )
    print(f"target p99 < 100 ms: {'met' if p99 < 0.1 else 'NOT met'}")
    delete_topics(kwargs, [topic, group_topic, f"bench-latency-{tag}"])
    return 0


def delete_topics(kwargs: dict[str, Any], topics: list[str]) -> None:
    from kafka.admin import KafkaAdminClient

    admin: Any = KafkaAdminClient(**kwargs)
    try:
        # the topics and the service's own (incidents, dead letters, state)
        names = [n for n in admin.list_topics() if any(n.startswith(t) for t in topics)]
        admin.delete_topics(names)
    finally:
        admin.close()


if __name__ == "__main__":
    raise SystemExit(main())
