"""Hostile input: wall clocks set forward and back, events stamped in the far future, floods
of new runs. Stalls are decided on the process's monotonic clock; event times are data."""

from __future__ import annotations

import json
import math
from pathlib import Path

from streamwatch.clock import ManualClock
from streamwatch.config import Config, EngineConfig
from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event
from streamwatch.incidents import Incident, Status
from streamwatch.live import Service, ServiceSettings
from streamwatch.live.testing import FakeBroker
from streamwatch.replay.watch import Watcher
from streamwatch.sources.kafka import KafkaConnection

START = 1_800_000_000.0
TOPIC = "metrics"


class SteppingClock(ManualClock):
    """A manual clock whose wall clock is set ``by`` seconds once ``at`` seconds have passed."""

    def __init__(self, start: float, at: float, by: float) -> None:
        super().__init__(start)
        self.at, self.by, self.stepped = at, by, False

    def now(self) -> float:
        if not self.stepped and self.monotonic() >= self.at:
            self.stepped = True
            self.step(self.by)
        return super().now()


def _event(run: str, step: int, ts: float, **metrics: float) -> Event:
    return Event(run_id=run, step=step, ts=ts, metrics=metrics or {"loss": 1.0})


def _stalls(updates: list[Incident]) -> list[Incident]:
    return [u for u in updates if u.kind == "run_stalled"]


# -- the service --------------------------------------------------------------------------------


def _service(clock: ManualClock, out: Path, runs: dict[str, list[float]]) -> Service:
    """A service over a fake broker holding ``runs``: run id -> its events' times."""
    broker = FakeBroker(clock)
    from streamwatch.live.kafka_tools import TopicSpec

    broker.ensure_topics({TOPIC: TopicSpec(2)})
    for run, times in runs.items():
        for step, ts in enumerate(times):
            value = {"run_id": run, "step": step, "ts": ts, "metrics": {"loss": 1.0}}
            broker.produce(TOPIC, json.dumps(value).encode(), key=run.encode())
    settings = ServiceSettings(
        connection=KafkaConnection(bootstrap_servers="in-memory:9092"),
        console=False,
        topic=TOPIC,
        group="g",
        incidents_topic="",
        dead_letter_topic="",
        state_topic="",
        incidents_out=out,
    )
    return Service(settings, Config(), clock=clock, broker=broker)


def _lines(out: Path) -> list[Incident]:
    text = out.read_text() if out.exists() else ""
    return [Incident.model_validate_json(line) for line in text.splitlines()]


def _ten_steps(end: float) -> list[float]:
    """Ten steps 30 s apart, the last at ``end`` (the stall limit is 150 s)."""
    return [end - 30.0 * (9 - s) for s in range(10)]


def test_a_wall_clock_set_forward_an_hour_is_no_stall(tmp_path: Path) -> None:
    clock = SteppingClock(START, at=20.0, by=3600.0)
    out = tmp_path / "incidents.jsonl"
    service = _service(clock, out, {"r": _ten_steps(START)})
    service.run(max_idle=100.0)  # 100 s of silence on the monotonic clock: under the limit
    assert clock.stepped
    assert _stalls(_lines(out)) == []


def test_a_wall_clock_set_back_an_hour_hides_no_stall(tmp_path: Path) -> None:
    clock = SteppingClock(START, at=20.0, by=-3600.0)
    out = tmp_path / "incidents.jsonl"
    service = _service(clock, out, {"r": _ten_steps(START)})
    service.run(max_idle=200.0)  # 200 s of real silence: past the limit of 150 s
    assert clock.stepped
    (stall,) = _stalls(_lines(out))
    assert (stall.status, stall.severity.value, stall.step) == (Status.FIRING, "warning", 9)
    assert stall.ts is not None and stall.ts < START  # stamped with the wall clock, set back


def test_an_event_stamped_in_the_far_future_is_judged_without_its_time(tmp_path: Path) -> None:
    clock = ManualClock(START)
    out = tmp_path / "incidents.jsonl"
    far = START + 86_400.0
    runs = {"r": _ten_steps(START), "forged": [far, far + 30.0, far + 60.0]}
    service = _service(clock, out, runs)
    counts = service.run(max_idle=100.0)
    assert counts.events == 13  # accepted
    assert counts.problems_by_stage["decoding"] == 1  # said once for the run
    found = _lines(out)
    assert _stalls(found) == []
    assert all(i.ts is None or i.ts < far for i in found)


def test_a_wall_clock_set_forward_does_not_end_the_service_early(
    tmp_path: Path,
) -> None:
    """--idle-exit and the service's max_idle run on the monotonic clock."""
    clock = SteppingClock(START, at=1.0, by=7200.0)
    service = _service(clock, tmp_path / "i.jsonl", {"r": _ten_steps(START)})
    service.run(max_idle=30.0)
    assert 30.0 <= clock.monotonic() < 40.0


# -- watch --------------------------------------------------------------------------------------


def _log(path: Path, run: str, times: list[float], first: int = 0) -> None:
    with path.open("a") as f:
        for step, ts in enumerate(times, start=first):
            f.write(
                json.dumps({"run_id": run, "step": step, "ts": ts, "metrics": {"loss": 1.0}}) + "\n"
            )


def _poll_for(watcher: Watcher, clock: ManualClock, seconds: float) -> list[Incident]:
    found: list[Incident] = []
    for _ in range(int(seconds / 10.0)):
        clock.advance(10.0)
        found.extend(watcher.poll())
    return found


def test_watch_judges_stalls_on_its_monotonic_clock(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _log(path, "r", _ten_steps(START))
    clock = ManualClock(START)
    watcher = Watcher([path], clock)
    watcher.poll()
    clock.step(3600.0)
    assert _stalls(_poll_for(watcher, clock, 100.0)) == []  # set forward: no stall
    clock.step(-7200.0)
    (stall,) = _stalls(_poll_for(watcher, clock, 100.0))  # set back: 200 s, a stall
    assert stall.status is Status.FIRING


def test_watch_is_not_fooled_by_an_event_in_the_far_future(tmp_path: Path) -> None:
    live, forged = tmp_path / "live.jsonl", tmp_path / "forged.jsonl"
    _log(live, "live", _ten_steps(START))
    _log(forged, "forged", [START + 86_400.0])
    clock = ManualClock(START)
    watcher = Watcher([live, forged], clock)
    assert _stalls(watcher.poll() + _poll_for(watcher, clock, 100.0)) == []


class TickingClock(ManualClock):
    """Each monotonic reading is a second later; the wall clock is set an hour forward at the
    first."""

    def monotonic(self) -> float:
        if super().monotonic() == 0.0:
            self.step(3600.0)
        self.advance(1.0)
        return super().monotonic()


def test_a_wall_clock_set_forward_does_not_end_watch_idle_exit(tmp_path: Path) -> None:
    import argparse
    import threading

    from streamwatch.cli.watch import _follow

    path = tmp_path / "r.jsonl"
    _log(path, "r", _ten_steps(START))
    clock = TickingClock(START)
    watcher = Watcher([path], clock)
    args = argparse.Namespace(status_seconds=0.0, idle_exit=30.0, poll=0.001)
    _follow(watcher, clock, args, threading.Event())
    assert watcher.stats.polls >= 10  # idle for 30 s of the monotonic clock, not at once
    assert clock.monotonic() >= 30.0


# -- replay (the engine on event time) ----------------------------------------------------------


def _replay(events: list[Event], config: Config | None = None) -> tuple[Monitor, list[Incident]]:
    monitor = Monitor(config)
    out: list[Incident] = []
    for event in sorted(events, key=lambda e: e.ts or 0.0):
        out.extend(monitor.process(event))
    return monitor, out


def test_one_far_future_event_does_not_make_every_other_run_stalled() -> None:
    events = [_event(r, s, START + 30.0 * s) for r in ("a", "b") for s in range(20)]
    events.append(_event("forged", 0, START + 30.0 * 10 + 86_400.0))
    events.sort(key=lambda e: (e.step, e.run_id))  # as they arrive: the forged one mid-way
    monitor = Monitor()
    out: list[Incident] = []
    for event in events:
        out.extend(monitor.process(event))
    assert _stalls(out) == []
    assert monitor.now < START + 86_400.0
    problems = monitor.drain_problems()
    assert [p.run_id for p in problems] == ["forged"]
    assert "not trusted" in problems[0].reason


def test_a_run_that_resumes_after_a_long_pause_is_believed_at_its_next_event() -> None:
    """A replay's only clock is the events': a run silent for two hours, then speaking again,
    is a stall known once it is over, and its new times are the engine's now."""
    times = [START + 30.0 * s for s in range(10)]
    times += [times[-1] + 7200.0 + 30.0 * s for s in range(1, 4)]
    monitor, out = _replay([_event("r", s, ts) for s, ts in enumerate(times)])
    assert monitor.now == times[-1]
    assert any(i.status is Status.FIRING for i in _stalls(out))


def test_replay_still_judges_stalls_on_event_time() -> None:
    events = [_event("quiet", s, START + 30.0 * s) for s in range(10)]
    events += [_event("busy", s, START + 30.0 * s) for s in range(20)]
    _, out = _replay(events)
    (stall,) = _stalls(out)
    assert (stall.run_id, stall.status) == ("quiet", Status.FIRING)


# -- eviction -----------------------------------------------------------------------------------


def _bounded(max_runs: int) -> Monitor:
    return Monitor(Config(engine=EngineConfig(max_runs=max_runs)), sweep_seconds=math.inf)


def test_a_flood_of_future_stamped_runs_keeps_the_run_with_an_open_critical() -> None:
    monitor = _bounded(10)
    fired = monitor.process(_event("live", 1, START, loss=math.nan))
    assert [(i.kind, i.severity.value) for i in fired] == [("nonfinite_metric", "critical")]
    out: list[Incident] = []
    for n in range(100):
        out.extend(monitor.process(_event(f"flood-{n}", 1, START + 1e9 + n)))
    assert "live" in monitor.runs
    assert monitor.stats.runs_evicted >= 90
    assert monitor.stats.evicted_open == 0
    assert [i for i in out if i.run_id == "live"] == []


def test_a_run_evicted_with_an_open_incident_is_resolved_with_the_reason() -> None:
    monitor = _bounded(10)
    out: list[Incident] = []
    for n in range(30):  # every run of the flood fires: some must go, each is resolved
        out.extend(monitor.process(_event(f"nan-{n}", 1, START + n, loss=math.nan)))
    resolved = [i for i in out if i.status is Status.RESOLVED]
    assert monitor.stats.evicted_open == len(resolved) > 0
    assert all("evicted: 10 runs held, the limit" in i.message for i in resolved)
    assert {i.run_id for i in resolved}.isdisjoint(monitor.runs)
    assert resolved[0].run_id == "nan-0"  # the least recently received first
    problems = [p for p in monitor.drain_problems() if "evicted" in p.reason]
    assert len(problems) == len(resolved)


def test_eviction_follows_receipt_order_not_event_time() -> None:
    monitor = _bounded(10)
    for n in range(10):
        monitor.process(_event(f"r{n}", 1, START + 1e9 if n == 0 else START + n))
    monitor.process(_event("r1", 2, START + 20.0))  # r1 heard again: it is recent now
    monitor.process(_event("new", 1, START + 30.0))
    assert "r0" not in monitor.runs  # stamped far in the future, yet heard from first
    assert "r1" in monitor.runs


def test_every_eviction_is_said_and_counted() -> None:
    monitor = _bounded(10)
    for n in range(11):
        monitor.process(_event(f"r{n}", 1, START + n))
    assert monitor.stats.runs_evicted == 1
    (said,) = monitor.drain_problems()
    assert "1 run(s) forgotten: 10 runs held, the limit (engine.max_runs)" in said.reason


def test_the_default_run_bound_fits_the_machine() -> None:
    from streamwatch.config import BYTES_PER_SERIES, default_max_runs

    engine = EngineConfig()
    assert 100 <= engine.max_runs <= 10_000
    memory = 24 * 2**30  # 10,000 runs of 2,000 series would want ~100 GB here
    bound = default_max_runs(engine.max_series_per_run, memory)
    assert bound * engine.max_series_per_run * BYTES_PER_SERIES <= memory / 2
    assert EngineConfig(max_runs=10_000).max_runs == 10_000  # a setting still wins
