"""Detection never waits for delivery: replay throughput with no receiver, with a webhook
that accepts connections and never answers, and with one that answers at once.

    python benchmarks/alerting.py [--runs 24] [--steps 400] [--repeat 3]

1. Simulates ``--runs`` runs of ``--steps`` steps (every other run with a fault, kinds in
   turn) into a streamwatch JSONL file (~200,000 values with the defaults).
2. Replays it through ``replay_files`` three ways, interleaved ``--repeat`` times (median
   reported): no sink; a :class:`~streamwatch.alerting.dispatcher.Dispatcher` whose webhook
   hangs (a listening socket that never accepts: every request waits for its 30 s timeout);
   a Dispatcher whose webhook answers 200 (a receiver in another process). ``group_wait``
   is 0, so messages are made and tried during the replay, not only at the end.
3. Prints the replay rates side by side and their ratio (target ~1), and the time
   ``close(timeout)`` took afterwards (on the hung receiver: the timeout, then everything is
   spooled).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from streamwatch.alerting.config import AlertingConfig
from streamwatch.alerting.dispatcher import Dispatcher
from streamwatch.alerting.testing import SilentListener
from streamwatch.clock import SystemClock
from streamwatch.replay.files import replay_files
from streamwatch.simulate import FAULT_KINDS, Fault, RunSpec, simulate, write_jsonl

clock = SystemClock()
FAULTS = [k for k in FAULT_KINDS if k not in ("metric_drift",)]


@dataclass
class Trial:
    values: int
    replay_s: float
    incidents: int
    messages: int = 0
    close_s: float = 0.0
    delivered: int = 0
    spooled: int = 0

    @property
    def rate(self) -> float:
        return self.values / self.replay_s


_RECEIVER = """
import sys
from streamwatch.alerting.testing import RecordingReceiver
with RecordingReceiver() as rx:
    print(rx.url, flush=True)
    sys.stdin.read()
"""


@contextmanager
def answering_receiver() -> Iterator[str]:
    """A receiver answering 200, in its own process (its work is not on our GIL)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _RECEIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
        proc.stdout.close()


def build(path: Path, runs: int, steps: int) -> int:
    specs = []
    for i in range(runs):
        faults = (Fault(FAULTS[(i // 2) % len(FAULTS)], steps // 2),) if i % 2 else ()
        specs.append(RunSpec(f"bench-{i}", steps=steps, seed=100 + i, faults=faults))
    return write_jsonl(simulate(specs), path)


def config(url: str, timeout: float) -> AlertingConfig:
    return AlertingConfig.model_validate(
        {
            "receivers": [{"name": "hook", "type": "webhook", "url": url}],
            "default_min_severity": "info",
            "group_wait": 0,
            "delivery": {"timeout": timeout, "max_attempts": 3, "backoff_initial": 0.1},
        }
    )


def no_receiver(path: Path) -> Trial:
    result = replay_files([path])
    return Trial(result.values, result.seconds, len(result.incidents))


def with_receiver(url: str, close_timeout: float) -> Callable[[Path], Trial]:
    def trial(path: Path) -> Trial:
        with tempfile.TemporaryDirectory() as state:
            dispatcher = Dispatcher(config(url, timeout=30.0), state_dir=state)
            result = replay_files([path], sinks=[dispatcher])
            start = clock.monotonic()
            report = dispatcher.close(timeout=close_timeout)
            close_s = clock.monotonic() - start
        return Trial(
            result.values,
            result.seconds,
            len(result.incidents),
            dispatcher.stats.messages,
            close_s,
            report.delivered,
            report.spooled,
        )

    return trial


def median(trials: list[Trial]) -> Trial:
    by_rate = sorted(trials, key=lambda t: t.rate)
    return by_rate[len(by_rate) // 2]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=24)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--close-timeout", type=float, default=1.0, help="for the hung receiver")
    args = p.parse_args()
    print(f"# {platform.python_implementation()} {platform.python_version()} {platform.machine()}")
    print(f"# cpus: {os.cpu_count()}; the engine on the caller's thread, delivery on its own")
    with (
        tempfile.TemporaryDirectory() as tmp,
        SilentListener() as hung,
        answering_receiver() as answering_url,
    ):
        path = Path(tmp) / "sim.jsonl"
        events = build(path, args.runs, args.steps)
        setups: dict[str, Callable[[Path], Trial]] = {
            "no receiver": no_receiver,
            "hung webhook": with_receiver(hung.url, args.close_timeout),
            "answering webhook": with_receiver(answering_url, 30.0),
        }
        trials: dict[str, list[Trial]] = {name: [] for name in setups}
        for _ in range(args.repeat):
            for name, run in setups.items():
                trials[name].append(run(path))
    med = {name: median(ts) for name, ts in trials.items()}
    top = {name: max(t.rate for t in ts) for name, ts in trials.items()}
    first = med["no receiver"]
    print(f"file: {events:,} events, {first.values:,} values, {first.incidents} incident updates")
    print(f"{args.repeat} interleaved runs per setup; median run shown, best-of rate beside it")
    head = f"{'setup':<18} {'values/s':>10} {'best':>10} {'replay s':>9} {'messages':>9}"
    print(head + f" {'close s':>8} {'delivered':>9} {'spooled':>8}")
    for name, t in med.items():
        print(
            f"{name:<18} {t.rate:>10,.0f} {top[name]:>10,.0f} {t.replay_s:>9.3f} {t.messages:>9}"
            f" {t.close_s:>8.2f} {t.delivered:>9} {t.spooled:>8}"
        )
    for name in ("hung webhook", "answering webhook"):
        ratio_med = med[name].rate / first.rate
        ratio_top = top[name] / top["no receiver"]
        print(f"{name} / no receiver: {ratio_med:.2f} (median), {ratio_top:.2f} (best)")
    spread = statistics.pstdev(t.rate for t in trials["no receiver"]) / first.rate
    print(f"run-to-run spread of the no-receiver rate: {spread:.1%}; target ratio ~1")


if __name__ == "__main__":
    main()
