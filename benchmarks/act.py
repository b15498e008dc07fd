"""Time from a critical incident to a stopped training loop, on a real broker at load.

    python benchmarks/act.py [--bootstrap-servers 127.0.0.1:19092] [--rate 1000] [--runs 10]
        [--trials 3]

A service (with one ``[[actions]]`` rule: ``do = "stop"``, ``dry_run = false``, the default
confirmation of 10 steps) consumes ``--rate`` events/s: ``--runs`` - 1 healthy simulated runs
published by one Publisher each, and a run whose entropy collapses, driven through the
Hugging Face callback by a loop that, like the Trainer, saves a checkpoint and stops when the
callback says so. Every run steps at ``rate / runs`` steps a second. Each trial starts a new
failing run; per trial it prints the time from the service handing the critical incident to
its sinks to the loop leaving on the stop (target < 5 s), and the time from the loop logging
the step the incident fired at (which includes the service's detection latency and the
confirmation window: 10 more steps of the run). The broker runs on the same machine and
shares its cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid
from itertools import cycle
from pathlib import Path
from typing import Any

from streamwatch.actions.actor import Actor
from streamwatch.actions.config import ActionRule
from streamwatch.actions.log import ActionLog
from streamwatch.client.integrations.hf import StreamwatchCallback
from streamwatch.client.integrations.loop import run_loop
from streamwatch.client.publish import Publisher
from streamwatch.config import Config
from streamwatch.incidents import Incident, Severity
from streamwatch.live import Service, ServiceSettings
from streamwatch.simulate import RunSpec, healthy_spec, random_fault_spec, simulate_run
from streamwatch.sources.kafka import KafkaConnection

TARGET_S = 5.0
STOP = ActionRule(do="stop", dry_run=False)


class TimedCallback(StreamwatchCallback):
    """The HF callback, noting when each step's logs were handed to it (wall clock)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logged_at: dict[int, float] = {}

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
        self.logged_at[int(state.global_step)] = time.time()
        super().on_log(args, state, control, logs=logs, **kw)


class Seen:
    """When each run's first critical incident reached the sinks (wall clock)."""

    def __init__(self) -> None:
        self.critical: dict[str, tuple[float, Incident]] = {}

    def send(self, inc: Incident) -> None:
        if inc.severity is Severity.CRITICAL and not inc.actions:
            self.critical.setdefault(inc.run_id, (time.time(), inc))


def one_process(spec: RunSpec) -> list[tuple[int, dict[str, float]]]:
    single = RunSpec(
        spec.run_id, steps=spec.steps, hosts=1, ranks_per_host=1, seed=spec.seed, faults=spec.faults
    )
    return [(e.step, dict(e.metrics)) for e in simulate_run(single)]


def load(bootstrap: str, topic: str, runs: int, step_s: float, stop: threading.Event) -> int:
    """The healthy runs, one step each per ``step_s``; returns the events sent."""
    pubs, steps = [], []
    for n in range(runs):
        spec = healthy_spec(f"healthy-{n}", n)
        pubs.append(Publisher(bootstrap, spec.run_id, topic=topic, host=f"h{n}", rank=0))
        steps.append(cycle(one_process(RunSpec(spec.run_id, steps=3000, seed=n))))
    sent, start, tick = 0, time.monotonic(), 0
    step = 0
    while not stop.is_set():
        time.sleep(max(0.0, start + tick * step_s - time.monotonic()))
        tick += 1
        for pub, it in zip(pubs, steps, strict=True):
            _, metrics = next(it)
            pub.log(metrics, step=step)
            sent += 1
        step += 1
    for pub in pubs:
        pub.close(timeout=5.0)
    return sent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--bootstrap-servers", default=os.environ.get("STREAMWATCH_BOOTSTRAP", "127.0.0.1:19092")
    )
    p.add_argument("--rate", type=float, default=1000.0, help="events/s in all")
    p.add_argument("--runs", type=int, default=10, help="runs publishing at once")
    p.add_argument("--trials", type=int, default=3)
    args = p.parse_args()
    bootstrap = args.bootstrap_servers
    step_s = args.runs / args.rate
    tag = uuid.uuid4().hex[:8]
    topic = f"sw-bench-act-{tag}"
    settings = ServiceSettings(
        connection=KafkaConnection(bootstrap_servers=bootstrap, client_id="bench-act"),
        topic=topic,
        group=f"{topic}-group",
        incidents_topic=f"{topic}.incidents",
        dead_letter_topic=f"{topic}.dlq",
        state_topic=f"{topic}.state",
        control_topic=f"{topic}.control",
        console=False,
    )
    seen = Seen()
    with tempfile.TemporaryDirectory() as tmp:
        actor = Actor([STOP], stop=True, action_log=ActionLog(Path(tmp) / "actions.jsonl"))
        service = Service(settings, Config(), sinks=[seen], actor=actor)
        stop = threading.Event()
        thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
        thread.start()
        assert service.started.wait(60), "the service did not start"
        halt = threading.Event()
        sent: list[int] = []
        loader = threading.Thread(
            target=lambda: sent.append(load(bootstrap, topic, args.runs - 1, step_s, halt)),
            daemon=True,
        )
        loader.start()
        time.sleep(3.0)  # the service is consuming the load
        began, events_at_start = time.monotonic(), service.counts.events
        rows: list[dict[str, Any]] = []
        for trial in range(args.trials):
            run_id = f"collapse-{tag}-{trial}"
            fault = random_fault_spec("entropy_collapse", trial)
            steps = one_process(RunSpec(run_id, steps=1500, seed=fault.seed, faults=fault.faults))
            callback = TimedCallback(
                bootstrap, run_id, topic=topic, control_topic=settings.control_topic
            )
            result = run_loop(callback, steps, pace=step_s)
            critical = seen.critical.get(run_id)
            records = [r for r in actor.records if r.run_id == run_id]
            rows.append(
                {
                    "run": run_id,
                    "result": result,
                    "critical": critical,
                    "records": records,
                    "logged_at": callback.logged_at,
                }
            )
        elapsed = time.monotonic() - began
        consumed = service.counts.events - events_at_start
        halt.set()
        loader.join(30)
        stop.set()
        thread.join(60)
        _delete(
            [topic, *(f"{topic}.{s}" for s in ("incidents", "dlq", "state", "control"))], bootstrap
        )
    print(
        f"load: {args.runs} runs at {1 / step_s:.0f} steps/s each; the service consumed "
        f"{consumed / elapsed:,.0f} events/s over {elapsed:.1f} s"
    )
    totals: list[float] = []
    wholes: list[float] = []
    for row in rows:
        result, critical, records = row["result"], row["critical"], row["records"]
        if critical is None or not result.stopped or not records:
            print(
                f"{row['run']}: no stop (critical: {critical is not None}, "
                f"records: {len(records)}, loop ran to step {result.last_step})"
            )
            continue
        at, inc = critical
        logged = row["logged_at"]
        total = result.stopped_at_wall - at
        whole = result.stopped_at_wall - logged[inc.step]
        confirm = logged[records[0].step] - logged[inc.step]
        totals.append(total)
        wholes.append(whole)
        print(
            f"{row['run']}: {inc.kind} critical at step {inc.step}, stop requested at step "
            f"{records[0].step}, checkpoint and stop at step {result.last_step}: incident "
            f"-> stopped {total:.2f} s; from the loop logging step {inc.step}: {whole:.2f} s "
            f"(the 10-step confirmation window {confirm:.2f} s of it)"
        )
    if totals:
        worst = max(totals)
        verdict = "met" if worst < TARGET_S else "NOT met"
        print(
            f"from the logged step: median {statistics.median(wholes):.2f} s, worst "
            f"{max(wholes):.2f} s; incident -> stopped: median "
            f"{statistics.median(totals):.2f} s, worst "
            f"{worst:.2f} s over {len(totals)} trial(s); target < {TARGET_S:g} s: {verdict}"
        )


def _delete(topics: list[str], bootstrap: str) -> None:
    from kafka.admin import KafkaAdminClient

    admin: Any = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="bench-cleanup")
    try:
        existing = set(admin.list_topics())
        admin.delete_topics([t for t in topics if t in existing])
    finally:
        admin.close()


if __name__ == "__main__":
    main()
