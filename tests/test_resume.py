"""A run resumed from a checkpoint, and ranks out of step: values are not lost, the first
steps after a resume are not judged by the checks a resume upsets, a rank falling behind
is a finding."""

from __future__ import annotations

from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event
from streamwatch.incidents import Incident, Severity, Status
from streamwatch.simulate import Fault, RunSpec, healthy_spec, simulate_run


def fired(updates: list[Incident]) -> list[tuple[str, int]]:
    """The warnings and criticals that fired."""
    serious = [u for u in updates if u.status is Status.FIRING and u.severity is not Severity.INFO]
    return [(u.kind, u.step) for u in serious]


def resumed_run(tagged: bool) -> list[Event]:
    """A healthy simulated run that crashes after step 200 and resumes from its checkpoint of
    step 180; its first five steps after the resume have the spikes a resume brings (grad
    norm 30x, reward down by half: slime#1695)."""
    events = list(simulate_run(healthy_spec("resumed", 11, steps=400, hosts=1, ranks_per_host=1)))
    before = [e for e in events if e.step <= 200]
    after = []
    for e in events:
        if e.step <= 180:
            continue
        metrics = dict(e.metrics)
        if e.step <= 185:
            metrics = {
                k: v * 30 if k == "actor/grad_norm" else v * 0.5 if k == "critic/score/mean" else v
                for k, v in metrics.items()
            }
        tags = {"resumed": "true"} if tagged and e.step == 181 else {}
        after.append(e.model_copy(update={"metrics": metrics, "tags": tags}))
    return before + after


def test_a_resume_loses_no_value_and_its_first_steps_raise_nothing() -> None:
    for tagged in (False, True):
        monitor = Monitor()
        updates = [u for e in resumed_run(tagged) for u in monitor.process(e)]
        assert monitor.drain_problems() == []
        assert fired(updates) == [], tagged
        assert monitor.runs["resumed"].resumes == 1


def test_without_a_grace_period_the_resume_spikes_would_page() -> None:
    from streamwatch.config import Config, EngineConfig

    config = Config(engine=EngineConfig(resume_grace_steps=0))
    monitor = Monitor(config)
    updates = [u for e in resumed_run(False) for u in monitor.process(e)]
    assert any(kind == "metric_spike" for kind, _ in fired(updates))


def out_of_step(spec: RunSpec, offsets: dict[int, int]) -> list[Event]:
    """The run's events in the order a service would receive them when rank r publishes
    ``offsets[r]`` steps late (ranks started apart)."""
    events = list(simulate_run(spec))
    rank = {id(e): (e.source.rank or 0) if e.source else 0 for e in events}
    key = {id(e): e.step + offsets.get(rank[id(e)], 0) for e in events}
    return sorted(events, key=lambda e: key[id(e)])


def test_ranks_out_of_step_lose_no_value_and_raise_nothing() -> None:
    spec = healthy_spec("apart", 5, steps=300)
    monitor = Monitor()
    updates = [
        u for e in out_of_step(spec, {0: 0, 1: 16, 2: 24, 3: 40}) for u in monitor.process(e)
    ]
    updates += monitor.flush()
    assert monitor.drain_problems() == []
    assert fired(updates) == []


def test_a_straggler_among_ranks_out_of_step_is_found() -> None:
    spec = RunSpec("apart-slow", seed=5, steps=300, faults=(Fault("rank_straggler", 150),))
    monitor = Monitor()
    events = out_of_step(spec, {0: 0, 1: 16, 2: 24, 3: 40})
    updates = [u for e in events for u in monitor.process(e)]
    stragglers = [s for k, s in fired(updates) if k == "rank_straggler"]
    assert stragglers and 150 <= stragglers[0] <= 170, stragglers


def test_a_rank_that_stops_falling_behind_is_a_finding() -> None:
    spec = healthy_spec("one-stops", 6, steps=120)
    events = [
        e for e in simulate_run(spec) if not (e.source and e.source.rank == 3 and e.step > 60)
    ]
    monitor = Monitor()
    updates = [u for e in events for u in monitor.process(e)]
    lag = [u for u in updates if u.kind == "rank_straggler" and u.indicator == "ranks"]
    assert lag and lag[0].step == 60 + 10  # its last step, and 10 more of its peers
    assert lag[0].evidence["sources"] == "node-1/3"
