"""Failures (and healthy runs) reported in public issue threads, replayed through the engine.

Each case in tests/data/field/cases.json is a run whose metric rows a user posted as text,
transcribed into streamwatch JSONL beside the verbatim post. A failing case must raise the
incident a user would expect, at the expected severity or worse, by the printed row that
shows it; a healthy case must raise no warning. Cases the checks cannot catch yet are strict
xfails whose reason names the missing check, so they turn into failures the day it lands.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from streamwatch.config import Config
from streamwatch.incidents import Incident, Severity, Status
from streamwatch.replay.files import ReplayResult, replay_files

FIELD = Path(__file__).parent / "data" / "field"
CASES: list[dict[str, Any]] = json.loads((FIELD / "cases.json").read_text(encoding="utf-8"))
BY_ID = {c["id"]: c for c in CASES}
FAILING = [c for c in CASES if c["expect"]["kind"] != "none"]
HEALTHY = [c for c in CASES if c["expect"]["kind"] == "none"]
NONFINITE = [c for c in CASES if c["class"] == "nonfinite"]
CLASSES = {"broken_from_start/truncation", "no_learning_signal", "absurd_magnitude",
           "reward_component_divergence", "entropy_collapse", "entropy_blowup",
           "length_explosion", "nonfinite", "policy_mismatch", "reward_collapse", "healthy",
           "other"}  # fmt: skip
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\bnan\b", re.IGNORECASE)


@cache
def replayed(case_id: str) -> ReplayResult:
    aliases = BY_ID[case_id].get("aliases", {})
    config = Config.model_validate({"indicators": {"aliases": aliases}})
    return replay_files([FIELD / f"{case_id}.jsonl"], config)


def firing(case_id: str) -> list[Incident]:
    return [i for i in replayed(case_id).incidents if i.status is Status.FIRING]


def rows(case_id: str) -> list[dict[str, Any]]:
    lines = (FIELD / f"{case_id}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def posted_rows(case_id: str) -> str:
    """The verbatim rows of the post, between the markers of the source file."""
    text = (FIELD / f"{case_id}.source.txt").read_text(encoding="utf-8")
    return text.split("--- rows ---\n", 1)[1].split("--- end rows ---", 1)[0]


def param(case: dict[str, Any]) -> Any:
    gap = case.get("missing_check")
    marks = [pytest.mark.xfail(strict=True, reason=gap)] if gap else []
    return pytest.param(case["id"], id=case["id"], marks=marks)


def describe(incidents: list[Incident]) -> str:
    return (
        "\n".join(f"  step {i.step} {i.severity.value} {i.kind} on {i.metric}" for i in incidents)
        or "  (none)"
    )


def test_the_manifest_and_the_files_agree() -> None:
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids))
    assert {p.stem for p in FIELD.glob("*.jsonl")} == set(ids)
    assert {p.name.removesuffix(".source.txt") for p in FIELD.glob("*.source.txt")} == set(ids)
    assert len(CASES) >= 15 and len(HEALTHY) >= 3


@pytest.mark.parametrize("case_id", [c["id"] for c in CASES])
def test_each_case_names_its_source_class_and_expectation(case_id: str) -> None:
    case = BY_ID[case_id]
    assert case["source"]["url"].startswith("https://github.com/" + case["source"]["repo"])
    assert case["source"]["url"] in (FIELD / f"{case_id}.source.txt").read_text("utf-8")
    assert case["quote"] and case["framework"] and case["class"] in CLASSES
    expect = case["expect"]
    assert (expect["kind"] == "none") == (case["class"] == "healthy")
    if expect["kind"] != "none":
        # info only where one row at the run's start is all there is (a second makes a warning)
        start = (Severity.INFO,) if expect.get("warning_at_second_step") else ()
        assert Severity(expect["severity"]) in (*start, Severity.WARNING, Severity.CRITICAL)
        assert expect["by_step"] in [r["step"] for r in rows(case_id)]


@pytest.mark.parametrize("case_id", [c["id"] for c in CASES])
def test_every_value_is_one_the_post_printed(case_id: str) -> None:
    posted = posted_rows(case_id)
    unwrapped = posted.replace("\n", "")  # consoles wrap long lines inside metric names
    printed = [float(t) for t in NUMBER.findall(posted)]
    events = rows(case_id)
    steps = [e["step"] for e in events]
    assert steps == sorted(set(steps)), "steps must rise"
    for event in events:
        assert event["run_id"] == case_id
        for name, value in event["metrics"].items():
            assert name in unwrapped, f"step {event['step']}: {name!r} is not in the post"
            assert any(v == value or (math.isnan(v) and math.isnan(value)) for v in printed), (
                f"step {event['step']}: {name}={value} is not a number the post printed"
            )


@pytest.mark.parametrize("case_id", [c["id"] for c in CASES])
def test_every_row_is_read_without_problems(case_id: str) -> None:
    result = replayed(case_id)
    assert result.events == len(rows(case_id))
    assert result.problem_count == 0, [str(p) for p in result.problems]


@pytest.mark.parametrize("case_id", [param(c) for c in FAILING])
def test_a_failing_case_raises_what_a_user_expects_by_its_row(case_id: str) -> None:
    expect = BY_ID[case_id]["expect"]
    wanted = Severity(expect["severity"])
    found = [
        i
        for i in firing(case_id)
        if i.kind == expect["kind"]
        and i.step <= expect["by_step"]
        and i.severity.rank >= wanted.rank
    ]
    assert found, (
        f"{case_id}: no {expect['kind']} ({wanted.value} or worse) by step {expect['by_step']}; "
        f"raised:\n{describe(firing(case_id))}"
    )


@pytest.mark.parametrize("case_id", [c["id"] for c in HEALTHY])
def test_a_healthy_case_raises_no_warning(case_id: str) -> None:
    serious = [i for i in firing(case_id) if i.severity is not Severity.INFO]
    assert not serious, f"{case_id}: false alarm(s):\n{describe(serious)}"


@pytest.mark.parametrize("case_id", [c["id"] for c in NONFINITE])
def test_one_nonfinite_step_is_one_incident(case_id: str) -> None:
    nonfinite = [i for i in firing(case_id) if i.kind == "nonfinite_metric"]
    per_step: dict[int, int] = {}
    for inc in nonfinite:
        per_step[inc.step] = per_step.get(inc.step, 0) + 1
    assert nonfinite and all(n == 1 for n in per_step.values()), describe(nonfinite)


@pytest.mark.parametrize(
    "case_id", [c["id"] for c in CASES if c["expect"].get("warning_at_second_step")]
)
def test_a_first_row_alone_is_an_info_and_a_second_like_it_a_warning(
    case_id: str, tmp_path: Path
) -> None:
    """One row at a run's start carries the evidence of a weak model's first batch as much
    as of a broken run: an info. The same row again at the next step is a warning."""
    expect = BY_ID[case_id]["expect"]
    first = rows(case_id)[0]
    again = dict(first, step=first["step"] + 1)
    path = tmp_path / f"{case_id}.jsonl"
    path.write_text(json.dumps(first) + "\n" + json.dumps(again) + "\n", encoding="utf-8")
    aliases = BY_ID[case_id].get("aliases", {})
    config = Config.model_validate({"indicators": {"aliases": aliases}})
    fired = [
        (i.step, i.severity)
        for i in replay_files([path], config).incidents
        if i.status is Status.FIRING and i.kind == expect["kind"]
    ]
    assert fired[0] == (first["step"], Severity.INFO)
    assert (again["step"], Severity.WARNING) in fired or any(
        step == again["step"] and sev.rank >= Severity.WARNING.rank for step, sev in fired
    )
