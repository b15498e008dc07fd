"""Replay throughput and memory per tracked series.

    python benchmarks/throughput.py [--values 2000000]

1. Builds a streamwatch JSONL file of at least ``--values`` metric values from the six real
   verl runs in tests/data/real (copied under new run ids until big enough: real names, real
   magnitudes, ~60 metrics per event).
2. Raw parse rate: the file read into validated events (JSON + contract), no engine.
3. Replay: the same file through ``replay_files`` (readers + Monitor), no sinks; with the
   compiled core and, for scale, with the pure-Python engine (``STREAMWATCH_NATIVE=0``).
4. Memory: the growth of the process's resident memory while a Monitor takes on 10,000
   (run, metric) series over 200 steps, in a fresh process per engine (the compiled core's
   memory is not Python's, so tracemalloc would not see it).
Targets: replay >= 250,000 values/s on one core; <= 10 KB per series.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
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


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_per_series(n_series: int, compiled: bool, steps: int = 200) -> float:
    """Runs in a fresh process: resident memory the Monitor added, per series."""
    rng = random.Random(0)
    metrics_per_run = 10
    names = [f"custom/metric_{i}" for i in range(metrics_per_run - 4)] + [
        "actor/entropy",
        "critic/score/mean",
        "response_length/mean",
        "actor/grad_norm",
    ]
    runs = n_series // metrics_per_run
    events = [
        [
            Event(
                run_id=f"run-{r}", step=step, metrics={n: 1.0 + 0.05 * rng.random() for n in names}
            )
            for r in range(runs)
        ]
        for step in range(1, 3)
    ]  # built first: the measurement is of the Monitor's state, not of the events
    base = resident_bytes()
    monitor = Monitor(compiled=compiled)
    for step in range(1, steps + 1):
        for event in events[step % 2]:
            monitor.process(event.model_copy(update={"step": step}))
    used = resident_bytes() - base
    series = sum(len(run.series) for run in monitor.runs.values())
    return used / series


def replay_rate_python(path: Path) -> float:
    """Values/s of the same replay with the pure-Python engine (a process of its own)."""
    code = (
        "import sys, time; from streamwatch.replay import replay_files; "
        "t = time.perf_counter(); r = replay_files([sys.argv[1]]); "
        "print(r.values / (time.perf_counter() - t))"
    )
    env = dict(os.environ, STREAMWATCH_NATIVE="0")
    out = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True)
    return float(out.stdout)


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
        python = replay_rate_python(path)
    raw, rep = n_raw / t_raw, n_rep / t_rep
    engine = "compiled core" if Monitor().compiled else "pure Python: the core is not installed"
    print(f"raw parse rate (JSON + event contract): {raw:>12,.0f} values/s  ({t_raw:.1f} s)")
    print(
        f"replay through the Monitor:             {rep:>12,.0f} values/s  ({t_rep:.1f} s; {engine})"
    )
    print(f"  the same, pure-Python engine:         {python:>12,.0f} values/s")
    print(f"replay / raw parse:                     {rep / raw:>12.2f}")
    print("target: replay >= 250,000 values/s")
    spawn = multiprocessing.get_context("spawn")
    for compiled in (True, False):
        with spawn.Pool(1) as pool:
            per = pool.apply(memory_per_series, (args.series, compiled))
        label = "compiled core" if compiled else "pure Python"
        print(
            f"memory per (run, metric) series at {args.series:,} series: {per / 1024:.1f} KB "
            f"({label}; resident memory)"
        )
    print("target: <= 10 KB per series")


if __name__ == "__main__":
    main()
