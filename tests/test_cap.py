"""Every completion cut at the length cap, found from the length statistics alone: on the
real rows of public reports (tests/data/field, sources in their .source.txt) with the clip
ratio column taken out, as a framework that logs no clip ratio would write them, and on
simulated runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from streamwatch.config import Config
from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event
from streamwatch.incidents import Incident, Severity, Status
from streamwatch.simulate import healthy_spec, simulate_run

FIELD = Path(__file__).parent / "data" / "field"
CLIP_RATIOS = {"completions/clipped_ratio", "response_length/clip_ratio", "clipped_ratio"}


def field_events(case: str) -> list[Event]:
    """A field case's rows without the clip ratio."""
    rows = [json.loads(line) for line in (FIELD / f"{case}.jsonl").read_text().splitlines()]
    return [
        Event(
            run_id=r["run_id"],
            step=r["step"],
            metrics={k: v for k, v in r["metrics"].items() if k not in CLIP_RATIOS},
        )
        for r in rows
    ]


def run(events: list[Event], config: dict[str, Any] | None = None) -> list[Incident]:
    monitor = Monitor(Config.model_validate(config or {}))
    out = [u for e in events for u in monitor.process(e)]
    return out + monitor.flush()


def truncations(updates: list[Incident]) -> list[Incident]:
    return [u for u in updates if u.kind == "truncation_saturation" and u.status is Status.FIRING]


@pytest.mark.parametrize(
    ("case", "step", "length"),
    [("ms-swift-9261-all-truncated-4096", 1, 4096), ("agent-r1-30-nan-step-83", 83, 257)],
)
def test_a_step_whose_completions_all_have_one_length_is_truncation(
    case: str, step: int, length: int
) -> None:
    [found] = truncations(run(field_events(case)))
    assert (found.step, found.severity) == (step, Severity.CRITICAL)
    assert found.metric in ("completions/max_length", "response_length/max")
    because = found.evidence.pop("because")
    assert found.evidence == {"min_length": length, "max_length": length, "steps": 1}
    assert f"{length} tokens long" in found.message
    # one step of one length is critical for the second signal that agrees at that step
    assert any(b.startswith("agreed: every") for b in because), because


def test_a_mean_length_at_the_configured_cap_is_truncation() -> None:
    """TRL's quickstart (trl#5697) with its 256-token cap: the user's table gives the mean
    length only."""
    aliases = {"mean_length": "response_length", "reward_mean": "train_reward"}
    events = field_events("trl-5697-quickstart-truncation")
    assert not truncations(run(events, {"indicators": {"aliases": aliases}}))  # cap unknown
    config = {
        "indicators": {"aliases": aliases},
        "engine": {"length": {"max_response_length": 256}},
    }
    [found] = truncations(run(events, config))
    assert (found.step, found.severity, found.metric) == (1, Severity.CRITICAL, "mean_length")
    because = found.evidence.pop("because")
    assert found.evidence == {"mean_length": 256.0, "cap": 256, "steps": 1}
    assert "agreed: the gradient is exactly 0" in because


def simulated(seed: int, framework: str, all_cut: bool, clip_ratio: bool) -> list[Event]:
    spec = healthy_spec(f"cap-{seed}", seed, steps=60, framework=framework)
    events = []
    for event in simulate_run(spec):
        m = dict(event.metrics)
        names = [k for k in m if k.endswith(("max_length", "/max")) and "length" in k]
        if all_cut and names:  # every completion cut: the cap is the batch's longest
            cap = m[names[0]]
            for k in list(m):
                if "length" in k and k.endswith(("mean", "max", "min", "_length")):
                    m[k] = cap
                if k in CLIP_RATIOS:
                    m[k] = 1.0
        if not clip_ratio:
            m = {k: v for k, v in m.items() if k not in CLIP_RATIOS}
        events.append(event.model_copy(update={"metrics": m}))
    return events


@pytest.mark.parametrize("framework", ["verl", "trl"])
def test_a_simulated_run_cut_from_its_start_is_found_at_step_one(framework: str) -> None:
    events = simulated(5, framework, all_cut=True, clip_ratio=False)
    first = min(e.step for e in events if any("max_length" in k or "/max" in k for k in e.metrics))
    found = truncations(run(events))
    # one step alone is a warning; the second in a row makes it critical
    assert [(u.step, u.severity) for u in found] == [
        (first, Severity.WARNING),
        (first + 1, Severity.CRITICAL),
    ]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("framework", ["verl", "trl"])
def test_healthy_simulated_runs_without_a_clip_ratio_are_not_truncated(
    seed: int, framework: str
) -> None:
    events = simulated(seed, framework, all_cut=False, clip_ratio=False)
    assert any("max_length" in k or "response_length/max" in k for e in events for k in e.metrics)
    assert not truncations(run(events))


def test_the_incident_resolves_once_completions_end_on_their_own() -> None:
    """Without a clip ratio, the cap check itself says when the truncation is over: after
    ``resolve_after`` healthy steps, each judged when the next one begins (its values are
    all in then)."""
    events = [
        Event(
            run_id="r",
            step=step,
            metrics={
                "response_length/mean": 4096.0 if step <= 3 else 900.0,
                "response_length/max": 4096.0,
                "response_length/min": 4096.0 if step <= 3 else 120.0,
            },
        )
        for step in range(1, 40)
    ]
    updates = [u for u in run(events) if u.kind == "truncation_saturation"]
    assert [(u.status, u.severity, u.step) for u in updates] == [
        (Status.FIRING, Severity.WARNING, 1),
        (Status.FIRING, Severity.CRITICAL, 2),  # a second step of it
        (Status.RESOLVED, Severity.CRITICAL, 3 + Config().engine.resolve_after + 1),
    ]


def test_a_policy_that_writes_one_short_answer_is_not_truncated() -> None:
    """Completions of one length that is shorter than the run's longest (a policy collapsed
    onto one answer) were not cut at a cap."""
    events = simulated(7, "verl", all_cut=False, clip_ratio=False)
    collapsed = []
    for e in events:
        m = dict(e.metrics)
        if e.step >= 40 and "response_length/max" in m:
            m.update({"response_length/mean": 120.0, "response_length/max": 120.0})
            m["response_length/min"] = 120.0
        collapsed.append(e.model_copy(update={"metrics": m}))
    assert max(e.metrics.get("response_length/max", 0.0) for e in events[:40]) > 120.0
    assert not truncations(run(collapsed))
