"""The examples say what they show: each recorded log raises its failure, the healthy one
nothing, and the annotated config is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamwatch.config import load_config
from streamwatch.incidents import Severity, Status
from streamwatch.replay.files import replay_files

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FAILURES = ["entropy_collapse", "reward_hacking", "length_explosion", "nonfinite_metric",
            "rank_straggler"]  # fmt: skip


def serious(path: Path) -> list[tuple[str, int]]:
    return [
        (i.kind, i.step)
        for i in replay_files([path]).incidents
        if i.status is Status.FIRING and i.severity is not Severity.INFO
    ]


@pytest.mark.parametrize("kind", FAILURES)
def test_each_failure_example_raises_its_failure_after_its_onset(kind: str) -> None:
    found = serious(EXAMPLES / "logs" / f"{kind}.jsonl")
    assert found, f"{kind}.jsonl raised nothing"
    assert found[0][0] == kind, found  # first: what follows from it may come after
    assert min(step for _, step in found) >= 120


def test_replaying_every_example_at_once_raises_every_failure() -> None:
    """The README's own command: one run id per file, so the examples do not merge."""
    result = replay_files(sorted((EXAMPLES / "logs").glob("*.jsonl")))
    assert result.problem_count == 0
    fired = {
        (i.run_id, i.kind)
        for i in result.incidents
        if i.status is Status.FIRING and i.severity is not Severity.INFO
    }
    for kind in FAILURES:
        assert (f"example-{kind.replace('_', '-')}", kind) in fired, kind
    assert not any(run == "example-healthy" for run, _ in fired)


def test_the_healthy_example_raises_no_warning() -> None:
    assert serious(EXAMPLES / "logs" / "healthy.jsonl") == []


def test_every_example_log_is_listed() -> None:
    listed = {*FAILURES, "healthy"}
    assert {p.stem for p in (EXAMPLES / "logs").glob("*.jsonl")} == listed


def test_the_example_config_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLACK_WEBHOOK_URL", "ONCALL_WEBHOOK_URL", "ONCALL_WEBHOOK_SECRET"):
        monkeypatch.setenv(name, f"https://example.com/{name.lower()}")
    config = load_config(EXAMPLES / "streamwatch.toml")
    assert [r.name for r in config.alerting.receivers] == ["slack", "oncall"]
    assert config.indicators.aliases["my/policy_entropy"] == "entropy"
