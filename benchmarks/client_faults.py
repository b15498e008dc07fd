"""What the publisher costs a training loop while the broker is up, killed or hung.

    python benchmarks/client_faults.py [--steps 400] [--blocks 20] [--step-ms 30] [--metrics 20]

Runs one toy training loop (a fixed CPU-bound step of ``--step-ms`` milliseconds, then
``log()`` of ``--metrics`` floats) with a publisher while the broker is up, hung (SIGSTOP:
connections accepted, nothing answered) and killed (SIGKILL: connections refused). A
shared machine's load drifts, and a baseline taken minutes apart would measure the drift:
so each setting's steps come in ``--blocks`` blocks, each next to a block of the same
loop that does not call the client (while the publisher, idle, is still there), which are
its baseline: the ratio is the median over the pairs of blocks of the pair's ratio of
medians, which follows the load as it drifts; a second baseline is the loop with no
publisher at all, just before and after the setting. The machine's load average is printed
at the start and the end: with more runnable processes than cores, step times drift by
more than the 2% looked for. The broker is one of this benchmark's own
(docker/kafka.sh on free ports and a temporary state directory, stopped at the end); the
shared development broker is never touched. For each setting it prints the median and p95
step time, the median's ratio to each baseline's, the share of a core the publisher's threads
used (process CPU time less the loop's own thread), the broker state the publisher
reported and how long ``close()`` took. Target: every median within 2% of no client, and
no spinning core (a publisher share of a few percent at most).
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from kafka_broker import OwnBroker

from streamwatch.client.publish import Publisher

TARGET_RATIO = 1.02
WARMUP_STEPS = 20


@dataclass
class Figures:
    name: str
    steps_ms: list[float]
    base_ms: list[float]  #: interleaved blocks that do not call the client
    none_ms: list[float]  #: before and after, with no publisher
    pair_ratios: list[float]  #: per pair of blocks: median with the client / without
    publisher_share: float = 0.0
    broker: str = "-"
    close_s: float = 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.steps_ms)

    @property
    def ratio(self) -> float:
        return statistics.median(self.pair_ratios)

    @property
    def ratio_none(self) -> float:
        return self.median / statistics.median(self.none_ms)

    @property
    def p95(self) -> float:
        return statistics.quantiles(self.steps_ms, n=20)[-1]


def calibrate(step_ms: float) -> int:
    """How many rounds of the toy step's work take ``step_ms`` milliseconds here (the
    median of nine timings, the machine being shared)."""
    rounds = 10_000
    took = []
    for _ in range(9):
        start = time.perf_counter()
        work(rounds)
        took.append((time.perf_counter() - start) * 1e3)
    return max(int(rounds * step_ms / statistics.median(took)), 1)


def work(rounds: int) -> float:
    """The toy training step: pure Python arithmetic, holding the GIL as a step's Python does."""
    total = 0.0
    for i in range(rounds):
        total += (i % 7) * 0.5
    return total


def process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_loop(
    steps: int, rounds: int, n_metrics: int, pub: Publisher | None, warmup: int = WARMUP_STEPS
) -> tuple[list[float], float]:
    """The loop; returns its step times (ms) and the share of a core used by other threads."""
    names = [f"actor/metric_{i}" for i in range(n_metrics)]
    times: list[float] = []
    cpu, own, wall = process_cpu(), time.thread_time(), time.monotonic()
    for step in range(steps + warmup):
        start = time.perf_counter()
        value = work(rounds)
        if pub is not None:
            pub.log({name: value + i for i, name in enumerate(names)}, step=step)
        if step >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    others = (process_cpu() - cpu) - (time.thread_time() - own)
    return times, max(others, 0.0) / (time.monotonic() - wall)


def with_client(
    name: str,
    broker: OwnBroker,
    args: argparse.Namespace,
    rounds: int,
    fault: Callable[[], object] | None = None,
) -> Figures:
    """A publisher that connected while the broker was up; ``fault`` then strikes the broker;
    blocks that log and blocks that do not alternate."""
    none = run_loop(args.base_steps, rounds, args.metrics, None)[0]
    pub = Publisher(broker.address, f"bench-{name}", topic=f"client-faults-{uuid.uuid4().hex[:8]}")
    for step in range(10):
        pub.log({"warmup": float(step)}, step=step)
    pub.flush(timeout=30)
    if fault is not None:
        fault()
    block = max(args.steps // args.blocks, 1)
    times: list[float] = []
    base: list[float] = []
    pairs: list[float] = []
    used, wall = 0.0, 0.0
    for i in range(args.blocks):
        got: dict[bool, list[float]] = {}
        for logs in (True, False) if i % 2 == 0 else (False, True):
            start = time.monotonic()
            got[logs], share = run_loop(block, rounds, args.metrics, pub if logs else None, 2)
            used += share * (time.monotonic() - start)
            wall += time.monotonic() - start
        times += got[True]
        base += got[False]
        pairs.append(statistics.median(got[True]) / statistics.median(got[False]))
    state = pub.stats.broker
    start = time.monotonic()
    pub.close(timeout=5.0)
    closing = time.monotonic() - start
    none += run_loop(args.base_steps, rounds, args.metrics, None)[0]
    return Figures(name, times, base, none, pairs, used / wall, state, closing)


def load() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg())


def report(rows: list[Figures]) -> None:
    print(load())
    print(
        f"{'setting':<14}{'median ms':>10}{'blocks':>8}{'ratio':>7}{'none':>8}{'ratio':>7}"
        f"{'p95 ms':>8}{'publisher CPU':>15}{'broker state':>15}{'close s':>9}"
    )
    for r in rows:
        print(
            f"{r.name:<14}{r.median:>10.2f}{statistics.median(r.base_ms):>8.2f}{r.ratio:>7.3f}"
            f"{statistics.median(r.none_ms):>8.2f}{r.ratio_none:>7.3f}{r.p95:>8.2f}"
            f"{r.publisher_share:>14.1%}{r.broker:>15}{r.close_s:>9.2f}"
        )
    worst = max(r.ratio for r in rows)
    busiest = max(r.publisher_share for r in rows)
    verdict = "met" if worst <= TARGET_RATIO and busiest < 0.05 else "NOT met"
    print(
        f"worst median ratio to the interleaved baseline {worst:.3f} (target <= {TARGET_RATIO}); "
        f"busiest publisher {busiest:.1%} of a core (target < 5%): {verdict}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--base-steps", type=int, default=100)
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--step-ms", type=float, default=30.0)
    parser.add_argument("--metrics", type=int, default=20)
    args = parser.parse_args()
    rounds = calibrate(args.step_ms)
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores; toy step {args.step_ms} ms "
        f"({rounds} rounds), {args.steps} steps per setting, {args.metrics} metrics a step"
    )
    print(load())
    rows: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="client-faults-") as tmp:
        broker = OwnBroker(Path(tmp))
        print("starting a broker of this benchmark's own...", flush=True)
        broker.run("up")
        try:
            rows.append(with_client("broker up", broker, args, rounds))
            pid = broker.pid()
            rows.append(
                with_client(
                    "broker hung",
                    broker,
                    args,
                    rounds,
                    lambda: os.kill(pid, signal.SIGSTOP),
                )
            )
            os.kill(pid, signal.SIGCONT)
            rows.append(with_client("broker killed", broker, args, rounds, broker.kill))
        finally:
            if alive(broker.pid()):
                os.kill(broker.pid(), signal.SIGCONT)
            try:
                broker.run("down")
            except AssertionError as exc:
                print(f"stopping the broker: {exc}", file=sys.stderr)
    report(rows)
    return 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
