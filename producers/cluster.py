"""A fake multi-node training cluster publishing its metrics to Kafka.

    python -m producers.cluster --bootstrap-servers 127.0.0.1:19092 \\
        [--topic streamwatch.metrics] [--runs 2] [--hosts 2] [--ranks-per-host 2] \\
        [--steps 400] [--step-seconds 0.05] [--seed 0] [--fault KIND@STEP[:STRENGTH][/RUN] ...]

Starts one process per (host, rank). Each publishes, for every simulated run, the events of
its own rank (:mod:`streamwatch.simulate`) through its own
:class:`~streamwatch.client.publish.Publisher`, as a training process would: host and rank from the
simulated source, ``ts`` from the publisher's clock. The simulated timeline is replayed at
``--step-seconds`` of wall time per nominal step, so slow steps, stragglers and stalls keep
their shape (0: as fast as possible). Runs are named ``sim-<seed>-<i>`` and seeded
``seed * 1000 + i``, like ``streamwatch simulate``. A process that reaches its run's last
step closes with the finished marker; a run that stalls for good ends without it. Each
process prints one summary line at the end. Environment fallbacks:
STREAMWATCH_BOOTSTRAP_SERVERS, STREAMWATCH_TOPIC.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from streamwatch.client.publish import DEFAULT_TOPIC, Publisher
from streamwatch.simulate import FAULT_KINDS, Fault, RunSpec, simulate

__all__ = ["RankJob", "build_specs", "main", "parse_fault", "publish_rank"]


@dataclass(frozen=True)
class RankJob:
    """What one process publishes: its rank's events of every run."""

    bootstrap_servers: str
    topic: str
    rank: int
    specs: tuple[RunSpec, ...]
    step_seconds: float
    close_timeout: float


def parse_fault(text: str) -> tuple[int, Fault]:
    """``KIND@STEP[:STRENGTH][/RUN]`` -> (run index, fault); RUN defaults to 0."""
    spec, _, run = text.partition("/")
    kind, at, rest = spec.partition("@")
    if not at or kind not in FAULT_KINDS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected KIND@STEP[:STRENGTH][/RUN] with KIND one of "
            f"{', '.join(FAULT_KINDS)}"
        )
    step_text, _, strength_text = rest.partition(":")
    try:
        step = int(step_text)
        strength = float(strength_text) if strength_text else 1.0
        run_index = int(run) if run else 0
        return run_index, Fault(kind=kind, step=step, strength=strength)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from exc


def build_specs(
    runs: int,
    hosts: int,
    ranks_per_host: int,
    steps: int,
    seed: int,
    faults: Sequence[tuple[int, Fault]] = (),
) -> tuple[RunSpec, ...]:
    """The simulated runs (``faults``: (run index, fault) pairs)."""
    by_run: dict[int, list[Fault]] = {}
    for index, fault in faults:
        if not 0 <= index < runs:
            raise ValueError(
                f"fault {fault.kind}@{fault.step} names run {index}; runs: 0..{runs - 1}"
            )
        by_run.setdefault(index, []).append(fault)
    return tuple(
        RunSpec(
            run_id=f"sim-{seed}-{i}",
            steps=steps,
            hosts=hosts,
            ranks_per_host=ranks_per_host,
            seed=seed * 1000 + i,
            faults=tuple(by_run.get(i, ())),
        )
        for i in range(runs)
    )


def publish_rank(job: RankJob) -> None:
    """Publish one rank's events of every run in simulated-time order; print a summary."""
    events = [e for e in simulate(list(job.specs)) if e.source and e.source.rank == job.rank]
    spec_of = {spec.run_id: spec for spec in job.specs}
    sources = [e.source for e in events[:1] if e.source is not None and e.source.host]
    host = sources[0].host if sources and sources[0].host else f"rank{job.rank}"
    publishers = {
        spec.run_id: Publisher(
            job.bootstrap_servers, spec.run_id, topic=job.topic, host=host, rank=job.rank
        )
        for spec in job.specs
    }
    last_step: dict[str, int] = {}
    start = time.monotonic()
    for event in events:
        spec = spec_of[event.run_id]
        if job.step_seconds > 0 and event.ts is not None:
            due = start + (event.ts - spec.start_ts) / spec.step_seconds * job.step_seconds
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        publishers[event.run_id].log(event.metrics, step=event.step)
        last_step[event.run_id] = event.step
    sent = dropped = errors = 0
    for run_id, publisher in publishers.items():
        finished = last_step.get(run_id) == spec_of[run_id].steps - 1
        publisher.close(timeout=job.close_timeout, finished=finished)
        stats = publisher.stats
        sent, dropped, errors = sent + stats.sent, dropped + stats.dropped, errors + stats.errors
    # one write of the whole line: the ranks share stdout (print writes the newline apart)
    sys.stdout.write(
        f"{host}/rank{job.rank}: {len(events)} events of {len(publishers)} run(s), "
        f"sent {sent}, dropped {dropped}, errors {errors}\n"
    )
    sys.stdout.flush()


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(
        prog="python -m producers.cluster",
        description="Publish simulated RL training metrics to Kafka, one process per rank.",
    )
    p.add_argument(
        "--bootstrap-servers",
        default=env("STREAMWATCH_BOOTSTRAP_SERVERS"),
        metavar="HOST:PORT",
        help="Kafka bootstrap servers (env STREAMWATCH_BOOTSTRAP_SERVERS)",
    )
    p.add_argument(
        "--topic",
        default=env("STREAMWATCH_TOPIC", DEFAULT_TOPIC),
        help=f"metrics topic (env STREAMWATCH_TOPIC; default {DEFAULT_TOPIC})",
    )
    p.add_argument("--runs", type=int, default=2, help="simulated runs (default 2)")
    p.add_argument("--hosts", type=int, default=2, help="nodes per run (default 2)")
    p.add_argument("--ranks-per-host", type=int, default=2, help="ranks per node (default 2)")
    p.add_argument("--steps", type=int, default=400, help="steps per run (default 400)")
    p.add_argument(
        "--step-seconds",
        type=float,
        default=0.05,
        help="wall time of one nominal step (default 0.05; 0: as fast as possible)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--fault",
        type=parse_fault,
        action="append",
        default=[],
        metavar="KIND@STEP[:STRENGTH][/RUN]",
        help="inject a failure into run RUN (default 0); repeatable",
    )
    p.add_argument(
        "--close-timeout",
        type=float,
        default=30.0,
        help="seconds each process may take to flush at the end (default 30)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.bootstrap_servers:
        parser.error("--bootstrap-servers (or STREAMWATCH_BOOTSTRAP_SERVERS) is required")
    if args.runs < 1 or args.step_seconds < 0:
        parser.error("--runs must be >= 1 and --step-seconds >= 0")
    try:
        specs = build_specs(
            args.runs, args.hosts, args.ranks_per_host, args.steps, args.seed, args.fault
        )
    except ValueError as exc:
        parser.error(str(exc))
    jobs = [
        RankJob(
            bootstrap_servers=args.bootstrap_servers,
            topic=args.topic,
            rank=rank,
            specs=specs,
            step_seconds=args.step_seconds,
            close_timeout=args.close_timeout,
        )
        for rank in range(specs[0].ranks)
    ]
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=publish_rank, args=(job,), name=f"rank{job.rank}") for job in jobs
    ]
    for process in processes:
        process.start()
    failed = 0
    try:
        for process in processes:
            process.join()
            failed += process.exitcode != 0
    except KeyboardInterrupt:
        for process in processes:
            process.terminate()
        for process in processes:
            process.join()
        return 130
    if failed:
        print(f"{failed} of {len(processes)} rank process(es) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
