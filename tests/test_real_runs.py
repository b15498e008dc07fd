"""Real healthy GRPO runs (hard negatives): replayed, they must raise no warning; the
healthy-labelled runs of the corpus manifest no critical, and few info incidents, each once."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from streamwatch.incidents import Incident, Severity, Status
from streamwatch.replay.files import ReplayResult, replay_files

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


# -- the healthy-labelled runs of the corpus manifest (tests/data/real/runs.toml) -------------

MANIFEST = Path(__file__).parent / "data" / "real" / "runs.toml"


def _healthy_manifest_runs() -> dict[str, Path]:
    with MANIFEST.open("rb") as f:
        runs = tomllib.load(f)["run"]
    return {r["id"]: MANIFEST.parent / r["file"] for r in runs if r["label"] == "healthy"}


HEALTHY = _healthy_manifest_runs()


def test_the_manifest_has_twenty_healthy_runs() -> None:
    assert len(HEALTHY) >= 20


@pytest.mark.parametrize("path", list(HEALTHY.values()), ids=list(HEALTHY))
def test_a_healthy_run_is_told_a_few_things_once_and_stopped_never(path: Path) -> None:
    """What a person watching a run that ends well sees: no critical (the default stop rule
    acts on one), at most two info incidents in all, and no fingerprint told twice."""
    fired = [i for i in replayed(path).incidents if i.status is Status.FIRING]
    assert not [describe(i) for i in fired if i.severity is Severity.CRITICAL]
    info = [i.id for i in fired if i.severity is Severity.INFO]
    assert len(info) <= 2, [describe(i) for i in fired]
    assert len(set(info)) == len(info)


def _manifest_file(run_id: str) -> Path:
    with MANIFEST.open("rb") as f:
        (run,) = [r for r in tomllib.load(f)["run"] if r["id"] == run_id]
    return MANIFEST.parent / str(run["file"])


def test_a_held_out_score_falling_at_every_evaluation_as_the_train_reward_climbs_is_hacking() -> (
    None
):
    """A recommender's GRPO runs (aashkashah09/rec-grpo): validation NDCG@10 in rows marked
    ``"eval": true`` every 200 steps. With the cold-item bonus uncapped the train reward
    climbs 0.05 -> 0.2 while NDCG@10 falls at each of its 6 evaluations, 0.0222 -> 0.0165 (the
    author: uncapped variants pay in warm accuracy); capped, NDCG@10 holds at 0.026-0.028."""
    fired = replayed(_manifest_file("custom-grpo-rec-semantic-id-capinf")).incidents
    (hacking,) = [i for i in fired if i.kind == "reward_hacking"]
    assert (hacking.severity, hacking.metric) == (Severity.WARNING, "eval/ndcg@10")
    assert (hacking.onset_step, hacking.step) == (200, 1200)  # its first and sixth evaluation
    for healthy in ("custom-grpo-rec-semantic-id-lambda0", "custom-grpo-rec-semantic-id-lambda1"):
        assert not [
            i for i in replayed(_manifest_file(healthy)).incidents if i.kind.endswith("hacking")
        ]
