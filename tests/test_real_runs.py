"""Real healthy GRPO runs (hard negatives): replayed, they must raise no warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamwatch.incidents import Incident, Severity, Status
from streamwatch.replay import ReplayResult, replay_files

REAL = sorted((Path(__file__).parent / "data" / "real").glob("*.jsonl"))
EVENTS_PER_RUN = 106

_results: dict[Path, ReplayResult] = {}


def replayed(path: Path) -> ReplayResult:
    if path not in _results:
        _results[path] = replay_files([path])
    return _results[path]


def test_all_six_runs_are_present() -> None:
    assert len(REAL) == 6, [p.name for p in REAL]


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_every_event_is_read_without_problems(path: Path) -> None:
    result = replayed(path)
    assert result.events == EVENTS_PER_RUN
    assert result.problem_count == 0, [str(p) for p in result.problems]


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_no_warning_or_critical_incident(path: Path) -> None:
    result = replayed(path)
    fired = [i for i in result.incidents if i.status is Status.FIRING]
    serious = [i for i in fired if i.severity is not Severity.INFO]
    info = [i for i in fired if i.severity is Severity.INFO]
    assert not serious, (
        f"{path.name}: {len(serious)} warning-or-worse incident(s):\n"
        + "\n".join(f"  {describe(i)} {i.evidence}" for i in serious)
        + "\ninfo incidents of the run:\n"
        + ("\n".join(f"  {describe(i)}" for i in info) or "  (none)")
    )


def describe(inc: Incident) -> str:
    return f"step {inc.step} {inc.severity.value} {inc.kind} on {inc.metric}: {inc.message}"
