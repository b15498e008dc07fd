"""Replay throughput and memory per tracked series.

    python benchmarks/throughput.py [--values 2000000]

1. Builds a streamwatch JSONL file of at least ``--values`` metric values from the six real
   verl runs in tests/data/real (copied under new run ids until big enough: real names, real
   magnitudes, ~60 metrics per event).
2. Raw parse rate: the file read into validated events (JSON + contract), no engine.
3. Replay: the same file through ``replay_files`` (readers + Monitor), no sinks.
4. Memory: tracemalloc over a Monitor holding 10,000 (run, metric) series after 200 steps.
Targets: replay >= 250,000 values/s on one core; <= 10 KB per series.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import tempfile
import time
import tracemalloc
from pathlib import Path

from streamwatch.events import Event
from streamwatch.monitor import Monitor
from streamwatch.replay import replay_files
from streamwatch.sources import FileSource

REAL = Path(__file__).resolve().parent.parent / "tests" / "data" / "real"


def build_file(path: Path, min_values: int) -> int:
    runs = [[json.loads(line) for line in f.open()] for f in sorted(REAL.glob("*.jsonl"))]
    values = 0
    copy = 0
    with path.open("w") as out:
        while values < min_values:
            for rows in runs:
                run_id = f"{rows[0]['run_id']}#{copy}"
                for row in rows:
                    row = dict(row, run_id=run_id)
                    out.write(json.dumps(row) + "\n")
                    values += len(row["metrics"])
            copy += 1
    return values


def raw_rate(path: Path) -> tuple[int, float]:
    start = time.perf_counter()
    n = sum(len(e.metrics) for e in FileSource(path))
    return n, time.perf_counter() - start


def replay_rate(path: Path) -> tuple[int, float]:
    start = time.perf_counter()
    result = replay_files([path])
    return result.values, time.perf_counter() - start


def memory_per_series(n_series: int = 10_000, steps: int = 200) -> float:
    rng = random.Random(0)
    metrics_per_run = 10
    names = [f"custom/metric_{i}" for i in range(metrics_per_run - 4)] + [
        "actor/entropy",
        "critic/score/mean",
        "response_length/mean",
        "actor/grad_norm",
    ]
    runs = n_series // metrics_per_run
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    monitor = Monitor()
    for step in range(1, steps + 1):
        for r in range(runs):
            metrics = {name: 1.0 + 0.05 * rng.random() for name in names}
            monitor.process(Event(run_id=f"run-{r}", step=step, metrics=metrics))
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    series = sum(len(run.series) for run in monitor.runs.values())
    return used / series


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--values", type=int, default=2_000_000)
    p.add_argument("--series", type=int, default=10_000)
    args = p.parse_args()
    print(f"# {platform.python_implementation()} {platform.python_version()} {platform.machine()}")
    print(f"# cpus: {os.cpu_count()}, single-threaded measurement")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "replay.jsonl"
        total = build_file(path, args.values)
        size = path.stat().st_size
        print(f"file: {total:,} values, {size / 2**20:.0f} MiB")
        n_raw, t_raw = raw_rate(path)
        n_rep, t_rep = replay_rate(path)
    raw, rep = n_raw / t_raw, n_rep / t_rep
    print(f"raw parse rate (JSON + event contract): {raw:>12,.0f} values/s  ({t_raw:.1f} s)")
    print(f"replay through the Monitor:             {rep:>12,.0f} values/s  ({t_rep:.1f} s)")
    print(f"replay / raw parse:                     {rep / raw:>12.2f}")
    print("target: replay >= 250,000 values/s")
    per = memory_per_series(args.series)
    print(f"memory per (run, metric) series at {args.series:,} series: {per / 1024:.1f} KB")
    print("target: <= 10 KB per series")


if __name__ == "__main__":
    main()
