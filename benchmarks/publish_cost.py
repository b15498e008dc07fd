"""What Publisher.log() costs the training loop: time spent in the caller's thread.

    python benchmarks/publish_cost.py [--calls 100000] [--metrics 20]

Times each of ``--calls`` log() calls of ``--metrics`` float metrics with perf_counter_ns,
in two settings: a reachable broker (STREAMWATCH_BOOTSTRAP, else 127.0.0.1:19092; skipped
when nothing listens there), while the background thread sends, and an unreachable broker
(a closed local port), while the buffer fills and drops. Each setting runs ``--repeats``
times (a fresh publisher each time); every run prints the median, p99 and max per call in
microseconds and the events sent and dropped. The loop logs far faster than a training
job, so with the broker up most events are dropped: the sender cannot keep pace with it.
Target: median under 20 us.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import sys
import time
import uuid

from streamwatch.client.publish import Publisher

TARGET_MEDIAN_US = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def reachable(servers: str) -> bool:
    host, _, port = servers.split(",")[0].strip().rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def measure(
    servers: str, calls: int, n_metrics: int, max_buffer: int, *, up: bool
) -> tuple[list[int], str]:
    topic = f"streamwatch-bench-{uuid.uuid4().hex[:8]}"
    names = [f"actor/metric_{i}" for i in range(n_metrics)]
    publisher = Publisher(servers, "bench", topic=topic, rank=0, max_buffer=max_buffer)
    times: list[int] = []
    clock = time.perf_counter_ns
    try:
        for step in range(calls):
            metrics = {name: step * 0.001 + i for i, name in enumerate(names)}
            t0 = clock()
            publisher.log(metrics)
            times.append(clock() - t0)
        if up:
            publisher.flush(timeout=30.0)
    finally:
        publisher.close(timeout=5.0, finished=False)
    s = publisher.stats
    return times, f"sent {s.sent:,}, dropped {s.dropped:,}, errors {s.errors}"


def summary(label: str, times_ns: list[int], outcome: str) -> None:
    ordered = sorted(times_ns)
    median = statistics.median(ordered) / 1000
    p99 = ordered[int(0.99 * (len(ordered) - 1))] / 1000
    verdict = "ok" if median < TARGET_MEDIAN_US else "ABOVE TARGET"
    print(
        f"{label:<22} median {median:6.2f} us   p99 {p99:7.2f} us   "
        f"max {ordered[-1] / 1000:9.1f} us   [{verdict}]   {outcome}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--metrics", type=int, default=20)
    parser.add_argument("--max-buffer", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    servers = os.environ.get("STREAMWATCH_BOOTSTRAP", "").strip() or "127.0.0.1:19092"
    print(
        f"Publisher.log() cost, {args.calls:,} calls x {args.metrics} metrics, "
        f"max_buffer {args.max_buffer:,}; target: median under {TARGET_MEDIAN_US:.0f} us"
    )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} cpu(s), load average {load}, {platform.platform()}"
    )
    settings = [(f"127.0.0.1:{free_port()}", "broker unreachable", False)]
    if reachable(servers):
        settings.insert(0, (servers, "broker up", True))
    else:
        print(f"broker up: skipped, nothing listens at {servers}")
    for address, label, up in settings:
        for _ in range(args.repeats):
            times, outcome = measure(address, args.calls, args.metrics, args.max_buffer, up=up)
            summary(label, times, outcome)
    return 0


if __name__ == "__main__":
    sys.exit(main())
