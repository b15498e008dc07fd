"""Rules that need no warm-up, on simulated runs broken from their first step (the field
cases hold them to real reports: tests/test_field_cases.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event
from streamwatch.incidents import Incident, Severity, Status
from streamwatch.simulate import healthy_spec, simulate_run

Edit = Callable[[dict[str, float]], dict[str, float]]


def replay(edit: Edit, seed: int = 3) -> tuple[list[Incident], list[Event]]:
    """The firing updates of a simulated run whose metrics ``edit`` changed, and its events."""
    monitor = Monitor()
    out: list[Incident] = []
    events = []
    for event in simulate_run(healthy_spec(f"broken-{seed}", seed, steps=60)):
        event = event.model_copy(update={"metrics": edit(dict(event.metrics))})
        events.append(event)
        out += monitor.process(event)
    return [i for i in out + monitor.flush() if i.status is Status.FIRING], events


def scaled(name: str, factor: float) -> Edit:
    return lambda m: {k: v * factor if k == name else v for k, v in m.items()}


def every_completion_truncated(m: dict[str, float]) -> dict[str, float]:
    if "response_length/clip_ratio" in m:
        m["response_length/clip_ratio"] = 1.0
    return m


@pytest.mark.parametrize(
    ("edit", "metric", "shows", "kind", "first_at", "first_severity", "critical_after"),
    [
        # every completion cut from step 1 (the reward still varies: no second signal):
        # held back until its direction is known, critical then (not falling for 5 steps)
        (
            every_completion_truncated,
            "response_length/clip_ratio",
            1.0,
            "truncation_saturation",
            4,
            Severity.CRITICAL,
            4,
        ),
        # beyond the ceiling: one step is an outlier (no incident) until a second logged
        # step in a row shows it stays (a grad norm: a warning; a KL beside a reward that
        # does not fall: info), 100x the ceiling a warning at once; a third step critical
        (
            scaled("actor/grad_norm", 1e6),
            "actor/grad_norm",
            1e4,
            "metric_spike",
            1,
            Severity.WARNING,
            2,
        ),
        (
            scaled("actor/grad_norm", 1e8),
            "actor/grad_norm",
            1e6,
            "metric_spike",
            0,
            Severity.WARNING,
            2,
        ),
        (scaled("actor/kl_loss", 1e3), "actor/kl_loss", 10.0, "metric_spike", 1, Severity.INFO, 2),
    ],
    ids=["truncated", "grad-norm-1e6x", "grad-norm-1e8x", "kl-1000x"],
)
def test_a_run_broken_from_its_start_is_found_at_the_first_step_that_shows_it(
    edit: Edit,
    metric: str,
    shows: float,
    kind: str,
    first_at: int,
    first_severity: Severity,
    critical_after: int,
) -> None:
    fired, events = replay(edit)
    steps = sorted(e.step for e in events if abs(e.metrics.get(metric, 0.0)) >= shows)
    first = steps[0]
    assert first <= 3, "the edited run should be broken from its first steps"
    found = [i for i in fired if i.kind == kind]
    assert (found[0].step, found[0].severity) == (steps[first_at], first_severity)
    critical = [i for i in found if i.severity is Severity.CRITICAL]
    assert critical and critical[0].step == steps[critical_after]
    assert critical[0].evidence["because"][-1].startswith("critical: ")


@pytest.mark.parametrize("seed", range(10))
def test_healthy_simulated_runs_break_no_absolute_rule(seed: int) -> None:
    fired, _ = replay(lambda m: m, seed)
    assert not [i for i in fired if i.kind in ("truncation_saturation", "no_learning_signal")]
    assert not [i for i in fired if "ceiling" in i.evidence]


def test_an_event_with_a_huge_loss_is_not_judged_by_a_ceiling() -> None:
    monitor = Monitor()
    updates = monitor.process(Event(run_id="r", step=1, metrics={"actor/pg_loss": 1e12}))
    assert updates == []
