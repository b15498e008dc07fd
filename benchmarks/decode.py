"""Wire decode: Kafka message bytes to events, the fast path against the validating one.

    python benchmarks/decode.py [--events 20000] [--metrics 20] [--repeat 7]

1. Well-formed events (the service benchmark's: ``--metrics`` metrics at full float
   precision and a ``ts``) decoded by ``decode_message`` with its fast path (msgspec reads
   the bytes into the ``Event`` struct itself, no pydantic object) and without it
   (``fast=False``: orjson, then pydantic's validation), alternating ``--repeat`` times in
   one process; the medians and their ratio. Beside them, the floor: the bytes parsed into
   plain dicts by msgspec (no validation, no event), which no decode can beat. The machine's
   load moves all three; compare the ratios, not the rates, between runs.
2. The malformed flood of ``benchmarks/faults_kafka.py`` (50,000 malformed messages among
   2,000 good events, ``--max-message-bytes 4096`` as there), counted by reason both ways:
   the counts must be equal, and so must every message's reason and detail.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time
from collections import Counter

import msgspec
from faults_kafka import _malformed
from service import event, metric_names

from streamwatch.sources.kafka import decode_message


def rate(values: list[bytes], fast: bool) -> float:
    start = time.perf_counter()
    for value in values:
        decode_message(value, "bench/0@0", fast=fast)
    return len(values) / (time.perf_counter() - start)


def parse_rate(values: list[bytes]) -> float:
    parse = msgspec.json.decode
    start = time.perf_counter()
    for value in values:
        parse(value)
    return len(values) / (time.perf_counter() - start)


def flood(fast: bool, bad: int = 50_000, good: int = 2_000) -> tuple[Counter[str], list[str]]:
    """Counts by reason, and each message's reason and detail in order."""
    got: Counter[str] = Counter()
    details = []
    for n in range(bad + good):
        if n % ((bad + good) // good) == 0:
            value = event(n % 7, n, ["loss"], random.Random(n), 1.7e9)
        else:
            value = _malformed(n)[0]
        decoded = decode_message(value, f"flood/0@{n}", max_bytes=4096, fast=fast)
        rejected = decoded.rejected
        got[rejected.reason if rejected else "event"] += 1
        details.append(f"{rejected.reason}: {rejected.detail}" if rejected else "event")
    return got, details


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--metrics", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    print(f"# {platform.python_implementation()} {platform.python_version()} {platform.machine()}")
    print(f"# load average before: {os.getloadavg()[0]:.2f} (other work on the machine skews this)")
    rng = random.Random(0)
    names = metric_names(args.metrics)
    values = [event(i % 50, i // 50, names, rng, 1.7e9 + i) for i in range(args.events)]
    slow, fast, floor = [], [], []
    for _ in range(args.repeat):
        slow.append(rate(values, fast=False))
        fast.append(rate(values, fast=True))
        floor.append(parse_rate(values))
    s, f, p = statistics.median(slow), statistics.median(fast), statistics.median(floor)
    size = sum(map(len, values)) / len(values)
    print(
        f"well-formed events ({args.metrics} metrics, {size:.0f} bytes), median of {args.repeat}:"
    )
    print(f"  validating path (orjson + pydantic): {s:>9,.0f} events/s")
    print(f"  fast path (msgspec into the struct): {f:>9,.0f} events/s  ({f / s:.2f}x)")
    print(f"  floor (msgspec to dicts, unchecked): {p:>9,.0f} events/s  ({p / s:.2f}x)")
    (by_slow, said_slow), (by_fast, said_fast) = flood(fast=False), flood(fast=True)
    print(f"malformed flood by reason, validating path: {dict(sorted(by_slow.items()))}")
    print(f"malformed flood by reason, fast path:       {dict(sorted(by_fast.items()))}")
    same = by_slow == by_fast and said_slow == said_fast
    print(f"same counts, reasons and details: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
