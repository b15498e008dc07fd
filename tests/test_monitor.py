"""The engine: determinism, snapshot/restore, lifecycle, the incident contract, bad steps,
and a conformance suite every per-step health check passes."""

from __future__ import annotations

import math
import pickle
import random
import tomllib
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

import pytest

from streamwatch.cli.main import main
from streamwatch.config import Config, EngineConfig
from streamwatch.engine.monitor import Monitor
from streamwatch.engine.snapshot import VERSION, SnapshotError
from streamwatch.events import Event, Source
from streamwatch.incidents import KINDS, Incident, Kind, Severity, Status, fingerprint
from streamwatch.simulate import Fault, RunSpec, simulate, simulate_run, write_jsonl
from streamwatch.sources.files import read_events

NAN = math.nan
RANKS = 4  # ranks per simulated run (2 hosts x 2 ranks, the RunSpec default)

MULTI_RUN = (
    RunSpec(
        "run-a",
        seed=1,
        faults=(Fault("nonfinite_metric", 100), Fault("entropy_collapse", 200)),
    ),
    RunSpec("run-b", seed=2, faults=(Fault("nonfinite_metric", 100, duration=1),)),
    RunSpec(
        "run-c",
        seed=3,
        faults=(Fault("metric_spike", 120), Fault("rank_straggler", 250)),
    ),
)


def run_monitor(events: Iterable[Event], config: Config | None = None) -> list[Incident]:
    monitor = Monitor(config)
    out: list[Incident] = []
    for event in events:
        out.extend(monitor.process(event))
    out.extend(monitor.flush())
    return out


@cache
def multi_run_events() -> tuple[Event, ...]:
    return tuple(simulate(MULTI_RUN))


@cache
def multi_run_incidents() -> tuple[Incident, ...]:
    return tuple(run_monitor(multi_run_events()))


def firing(incidents: Iterable[Incident], kind: str, run_id: str | None = None) -> list[Incident]:
    return [
        i
        for i in incidents
        if i.status is Status.FIRING and i.kind == kind and run_id in (None, i.run_id)
    ]


# -- determinism ----------------------------------------------------------------------------


def test_replay_twice_gives_byte_identical_incident_files(tmp_path: Path) -> None:
    log = tmp_path / "cluster.jsonl"
    write_jsonl(simulate(MULTI_RUN), log)
    outs = [tmp_path / "incidents-1.jsonl", tmp_path / "incidents-2.jsonl"]
    for out in outs:
        assert main(["replay", str(log), "--incidents-out", str(out), "--quiet"]) == 0
    first, second = (p.read_bytes() for p in outs)
    assert first, "no incident was written"
    assert first == second


# -- snapshot / restore ---------------------------------------------------------------------


def step_boundaries(events: Sequence[Event]) -> list[tuple[int, int]]:
    """Cut points right after the last event of a step of every run, as (events, step).

    A snapshot closes the run's pending steps, so a step that more sources would still
    complete is judged on the sources heard so far; only at a step boundary does a
    snapshot leave nothing pending and a restored monitor continue exactly as an
    uninterrupted one. Cuts are taken there; ``step`` is the oldest run's last step.
    """
    heard: Counter[tuple[str, int]] = Counter()
    last: dict[str, int] = {}
    cuts = []
    for n, event in enumerate(events, start=1):
        heard[event.run_id, event.step] += 1
        last[event.run_id] = event.step
        complete = all(
            heard[run, step] == (1 if step == 0 else RANKS) for run, step in last.items()
        )
        if len(last) == len(MULTI_RUN) and complete:
            cuts.append((n, min(last.values())))
    return cuts


def cut_after_step(events: Sequence[Event], step: int) -> int:
    """The first step boundary at which every run has completed ``step``."""
    return next(n for n, done in step_boundaries(events) if done >= step)


@pytest.mark.parametrize(
    "step",
    [
        2,  # early: checks still warming up
        100,  # the non-finite values of run-a and run-b
        122,  # mid metric spike in run-c
        215,  # mid entropy collapse in run-a
        390,  # late
    ],
)
def test_snapshot_and_restore_continue_exactly(step: int) -> None:
    events = multi_run_events()
    expected = [i.to_json() for i in multi_run_incidents()]
    cut = cut_after_step(events, step)
    assert 0 < cut < len(events)

    first = Monitor()
    got: list[str] = []
    for event in events[:cut]:
        got.extend(i.to_json() for i in first.process(event))
    blobs = [first.snapshot(run_id) for run_id in sorted(first.runs)]
    assert len(blobs) == len(MULTI_RUN)

    second = Monitor()
    restored = [second.restore(blob) for blob in blobs]
    assert restored == sorted(first.runs)
    for event in events[cut:]:
        got.extend(i.to_json() for i in second.process(event))
    got.extend(i.to_json() for i in second.flush())
    assert got == expected


def test_restore_rejects_what_is_not_a_snapshot() -> None:
    with pytest.raises(SnapshotError, match="not a streamwatch run snapshot"):
        Monitor().restore(pickle.dumps((99, "not a run")))


def test_a_snapshot_of_another_version_names_the_run_and_both_versions() -> None:
    monitor = Monitor()
    monitor.process(Event(run_id="grpo-7b", step=1, metrics={"actor/entropy": 0.4}))
    blob = monitor.snapshot("grpo-7b")
    head, body = blob.split(b"\n", 1)
    old = head.replace(f'"version":{VERSION}'.encode(), b'"version":4')
    with pytest.raises(SnapshotError) as err:
        Monitor().restore(old + b"\n" + body)
    assert str(err.value) == (
        f"snapshot of run 'grpo-7b' is version 4; this streamwatch reads version {VERSION}"
    )
    assert (err.value.run_id, err.value.version) == ("grpo-7b", 4)


def test_a_damaged_snapshot_is_refused_with_the_run_named() -> None:
    monitor = Monitor()
    monitor.process(Event(run_id="r", step=1, metrics={"loss": 0.4}))
    blob = monitor.snapshot("r")
    with pytest.raises(SnapshotError, match="snapshot of run 'r' is damaged"):
        Monitor().restore(blob[:-20])


# -- detection in a run with several faults ---------------------------------------------------


COLLAPSE_AT_200 = Fault("entropy_collapse", 200)


@cache
def seed5_run(nan_first: bool) -> tuple[Incident, ...]:
    faults = (Fault("nonfinite_metric", 100), COLLAPSE_AT_200) if nan_first else (COLLAPSE_AT_200,)
    return tuple(run_monitor(simulate_run(RunSpec("nan-then-collapse", seed=5, faults=faults))))


def test_nan_mid_run_is_critical_at_its_step() -> None:
    nonfinite = firing(seed5_run(nan_first=True), Kind.NONFINITE_METRIC)
    assert nonfinite, "no nonfinite_metric incident"
    first = nonfinite[0]
    assert first.severity is Severity.CRITICAL
    assert first.step == 100  # delay 0
    assert first.onset_step == 100
    assert all(i.step >= 100 for i in nonfinite)


def test_entropy_collapse_after_a_nan_is_still_detected() -> None:
    collapse = firing(seed5_run(nan_first=True), Kind.ENTROPY_COLLAPSE)
    assert collapse, "entropy collapse after the NaN episode was not detected"
    assert {i.indicator for i in collapse} == {"entropy"}
    assert 200 <= collapse[0].step <= 230
    # the NaN episode neither delays nor changes it
    alone = firing(seed5_run(nan_first=False), Kind.ENTROPY_COLLAPSE)
    assert [(i.indicator, i.severity, i.step) for i in collapse] == [
        (i.indicator, i.severity, i.step) for i in alone
    ]


def test_entropy_collapse_is_one_incident_and_token_probability_stands_in_for_entropy() -> None:
    events = list(simulate_run(RunSpec("collapse", seed=5, faults=(COLLAPSE_AT_200,))))
    both = firing(run_monitor(events), Kind.ENTROPY_COLLAPSE)
    assert len({i.id for i in both}) == 1  # one incident, escalated, not one per signal
    without_entropy = [
        e.model_copy(update={"metrics": {k: v for k, v in e.metrics.items() if "entropy" not in k}})
        for e in events
    ]
    logged = [e for e in events if "actor/entropy" in e.metrics]
    assert logged and all("actor/mean_token_prob" in e.metrics for e in logged)
    alone = firing(run_monitor(without_entropy), Kind.ENTROPY_COLLAPSE)
    assert alone, "token probability heading to 1 alone was not taken for a collapse"
    assert {i.indicator for i in alone} == {"token_prob"}
    assert 200 <= alone[0].step <= 230


# -- lifecycle --------------------------------------------------------------------------------


def test_one_firing_incident_per_fingerprint() -> None:
    open_severity: dict[str, Severity] = {}
    for inc in multi_run_incidents():
        if inc.status is Status.RESOLVED:
            assert inc.id in open_severity, f"resolved without firing first: {inc}"
            del open_severity[inc.id]
            continue
        before = open_severity.get(inc.id)
        assert before is None or inc.severity.rank > before.rank, (
            f"{inc.id} ({inc.run_id} {inc.kind} on {inc.indicator}) fired again at step "
            f"{inc.step} as {inc.severity.value} while {before} was open"
        )
        open_severity[inc.id] = inc.severity


@pytest.mark.parametrize("resolve_after", [20, 5])
def test_short_nan_episode_resolves_after_resolve_after_healthy_updates(
    resolve_after: int,
) -> None:
    spec = RunSpec("blip", seed=2, faults=(Fault("nonfinite_metric", 100, duration=1),))
    config = Config(engine=EngineConfig(resolve_after=resolve_after, settle=0.0))
    incidents = [i for i in run_monitor(simulate_run(spec), config) if i.kind == "nonfinite_metric"]
    fired = [i for i in incidents if i.status is Status.FIRING]
    assert fired
    for inc in fired:
        after = [i for i in incidents if i.id == inc.id and i.step > inc.step]
        assert after, f"{inc.metric}: never resolved"
        assert after[0].status is Status.RESOLVED
        assert after[0].step == 100 + resolve_after  # healthy at steps 101..100+resolve_after
        assert (after[0].run_id, after[0].kind, after[0].indicator) == (
            inc.run_id,
            inc.kind,
            inc.indicator,
        )


@pytest.mark.parametrize("settle", [0.1, 0.3])
def test_an_episode_resolves_once_its_health_spans_its_share_of_the_run(settle: float) -> None:
    """A failure that comes back before its health has lasted ``settle`` of the run's steps
    is the same episode: one announcement, one resolve, at the step the share is reached."""
    spec = RunSpec("blip", seed=2, faults=(Fault("nonfinite_metric", 100, duration=1),))
    config = Config(engine=EngineConfig(resolve_after=5, settle=settle))
    incidents = [i for i in run_monitor(simulate_run(spec), config) if i.kind == "nonfinite_metric"]
    for inc in [i for i in incidents if i.status is Status.FIRING]:
        after = [i for i in incidents if i.id == inc.id and i.step > inc.step]
        assert after and after[0].status is Status.RESOLVED
        # healthy from step 101: resolved at the first step s with s - 101 >= settle * s
        assert after[0].step == math.ceil(101 / (1 - settle))


def test_a_recurring_failure_within_its_settling_is_one_incident() -> None:
    events = [
        Event(run_id="r", step=s, metrics={"loss": math.nan if s % 30 == 0 else 1.0})
        for s in range(1, 400)
    ]
    monitor = Monitor()
    out = [u for e in events for u in monitor.process(e)]
    fired = [u for u in out if u.kind == "nonfinite_metric" and u.status is Status.FIRING]
    # back after 29 healthy steps: a new episode only while 29 steps are a tenth of the run
    assert [u.step for u in fired] == [s for s in range(30, 400, 30) if s <= 290]


def test_escalation_reannounces_with_the_same_id() -> None:
    collapse = firing(multi_run_incidents(), Kind.ENTROPY_COLLAPSE, "run-a")
    on_entropy = [i for i in collapse if i.indicator == "entropy"]
    assert [i.severity for i in on_entropy] == [Severity.WARNING, Severity.CRITICAL]
    warning, critical = on_entropy
    assert warning.id == critical.id == fingerprint("run-a", "entropy_collapse", "entropy")
    assert critical.step > warning.step
    resolved_between = [
        i
        for i in multi_run_incidents()
        if i.id == warning.id
        and i.status is Status.RESOLVED
        and warning.step <= i.step <= critical.step
    ]
    assert not resolved_between


# -- the incident contract --------------------------------------------------------------------


def test_every_incident_honours_the_contract() -> None:
    incidents = multi_run_incidents()
    kinds = {i.kind for i in incidents if i.status is Status.FIRING}
    assert {"nonfinite_metric", "entropy_collapse", "metric_spike", "rank_straggler"} <= kinds
    for inc in incidents:
        where = f"{inc.run_id} {inc.kind} step {inc.step}"
        assert inc.id == fingerprint(inc.run_id, inc.kind, inc.indicator), where
        assert inc.run_id in {s.run_id for s in MULTI_RUN}, where
        assert inc.kind in KINDS, where
        assert isinstance(inc.severity, Severity), where
        assert isinstance(inc.status, Status), where
        assert inc.indicator, where
        assert isinstance(inc.metric, str), where
        assert inc.metric or inc.kind == "run_stalled", where
        assert inc.step >= 0, where
        assert inc.message, where
        assert inc.evidence, where
        because = inc.evidence.get("because")
        # why: what raised it, then the decision on its severity, in words
        assert isinstance(because, list) and len(because) >= 2, where
        assert all(isinstance(b, str) and b for b in because), where
        assert because[0].startswith("raised by "), where
        assert because[-1].startswith(f"{inc.severity.value}: "), where
        for key, value in inc.evidence.items():
            assert isinstance(key, str), where
            if key != "because":
                assert isinstance(value, int | float | str), f"{where}: evidence {key}={value!r}"
        assert inc.remedies, where
        assert all(isinstance(r, str) and r for r in inc.remedies), where
        assert Incident.model_validate_json(inc.to_json()).to_json() == inc.to_json(), where


# -- repeated and regressing steps ------------------------------------------------------------


def ev(step: int, value: float, host: str = "node-0", rank: int = 0) -> Event:
    return Event(
        run_id="r",
        step=step,
        ts=1000.0 + step,
        metrics={"actor/pg_loss": value},
        source=Source(host=host, rank=rank),
    )


def test_repeated_steps_are_set_aside_as_problems() -> None:
    monitor = Monitor()
    for step in range(1, 6):
        assert monitor.process(ev(step, 1.0)) == []
    assert monitor.drain_problems() == []
    # a NaN would fire nonfinite_metric if this value reached the checks
    assert monitor.process(ev(5, NAN)) == []
    [problem] = monitor.drain_problems()
    assert (problem.run_id, problem.metric, problem.step) == ("r", "actor/pg_loss", 5)
    text = str(problem)
    assert "'r'" in text and "actor/pg_loss" in text and "step 5" in text
    assert "repeats step 5" in problem.reason
    assert monitor.firing() == []
    # the run goes on normally afterwards
    nan_later = monitor.process(ev(6, NAN))
    assert [(i.kind, i.step) for i in nan_later] == [("nonfinite_metric", 6)]


def test_a_step_that_goes_back_is_a_resume_not_bad_input() -> None:
    monitor = Monitor()
    for step in range(1, 11):
        monitor.process(ev(step, 1.0))
    assert monitor.process(ev(4, 1.0)) == []  # resumed from the checkpoint of step 3
    for step in range(5, 12):
        assert monitor.process(ev(step, 1.0)) == []
    assert monitor.drain_problems() == []
    run = monitor.runs["r"]
    assert (run.resumes, run.grace_until) == (1, 4 + EngineConfig().resume_grace_steps)


def test_another_source_at_the_same_step_is_no_problem() -> None:
    monitor = Monitor()
    for step in range(1, 6):
        for rank in range(3):
            monitor.process(ev(step, 1.0, rank=rank))
    assert monitor.drain_problems() == []
    assert monitor.stats.problems == 0


def test_zero_loss_with_nonfinite_grad_norm_is_named_in_the_evidence() -> None:
    monitor = Monitor()
    nan = float("nan")
    for run_id, loss, expected in (("zero", 0.0, [True]), ("nonzero", 0.2, [None])):
        first = {"actor/pg_loss": 0.1, "actor/grad_norm": 1.0}
        monitor.process(Event(run_id=run_id, step=1, metrics=first))
        bad = {"actor/grad_norm": nan, "actor/pg_loss": loss}
        updates = monitor.process(Event(run_id=run_id, step=2, metrics=bad))
        assert [u.evidence.get("loss_is_zero") for u in updates] == expected


def test_a_finished_run_is_not_reported_stalled() -> None:
    from streamwatch.events import finished_event

    def events(run_id: str, steps: int) -> list[Event]:
        return [
            Event(run_id=run_id, step=s, ts=1000.0 + 30.0 * s, metrics={"loss": 1.0})
            for s in range(1, steps)
        ]

    for finished in (True, False):
        monitor = Monitor()
        short = events("short", 20)
        if finished:
            short.append(finished_event("short", 19, 1000.0 + 30.0 * 19, None))
        stream = sorted(short + events("long", 60), key=lambda e: e.ts or 0.0)
        kinds = [u.kind for e in stream for u in monitor.process(e) if u.run_id == "short"]
        assert ("run_stalled" in kinds) is not finished


def test_steps_too_close_in_time_for_a_cadence_are_judged_without_one() -> None:
    """Event times a few subnormal floats apart: the cadence rounds to zero; the run is not
    judged stalled on it (it divided by zero)."""
    monitor = Monitor()
    for s in range(1, 10):
        monitor.process(Event(run_id="r", step=2 * s, ts=s * 5e-324, metrics={"loss": 1.0}))
    assert monitor.runs["r"].stall.cadence() == 0.0
    assert monitor.tick(1000.0) == []


# -- the order of an event's metrics ------------------------------------------------------------


def _shuffled(events: Iterable[Event], seed: int) -> list[Event]:
    """Each event with its metrics in an order of its own."""
    rng = random.Random(seed)
    out = []
    for e in events:
        names = list(e.metrics)
        rng.shuffle(names)
        out.append(e.model_copy(update={"metrics": {k: e.metrics[k] for k in names}}))
    return out


def _told(incidents: Iterable[Incident]) -> list[tuple[object, ...]]:
    # (not the words: a message names metrics in the order the event gave them)
    return sorted((i.run_id, i.step, i.id, i.status, i.severity, i.onset_step) for i in incidents)


def _failing_real_runs() -> dict[str, Path]:
    """The real runs of the corpus that failed (tests/data/real/runs.toml)."""
    manifest = Path(__file__).parent / "data" / "real" / "runs.toml"
    with manifest.open("rb") as f:
        runs = tomllib.load(f)["run"]
    return {r["id"]: manifest.parent / r["file"] for r in runs if r["label"] == "failing"}


#: the runs of the corpus that failed, on which something is told (on two of the three wordle
#: runs nothing is)
_ORDERS = ["simulated faults", *(r for r in _failing_real_runs() if "wordle" not in r)]


@pytest.mark.parametrize("source", _ORDERS)
def test_an_events_metrics_in_any_order_give_the_same_incidents(source: str) -> None:
    # the engine finds a run's series by the order of an earlier event while it holds, and a
    # check that judges a step at each of its values (the learning signal's) may see health
    # before a later value shows the failure: neither may make the order of an event's
    # metrics change what is told
    if source == "simulated faults":
        events = list(multi_run_events())
    else:
        events = list(read_events([_failing_real_runs()[source]]))
    told = _told(run_monitor(events))
    assert told
    assert _told(run_monitor(_shuffled(events, seed=1))) == told
    # half the events in another order, the rest as logged
    mixed = [
        s if k % 2 else e for k, (e, s) in enumerate(zip(events, _shuffled(events, 2), strict=True))
    ]
    assert _told(run_monitor(mixed)) == told
