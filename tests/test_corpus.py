"""The corpus of real RL runs (tests/data/real/runs.toml) is complete: every run's file is
there, streamwatch reads it with at least 30 logged steps (the manifest's count), its label
and source are filled in, and no repository gives more than three runs.

What the engine raises on these runs is not asserted here: benchmarks/false_alarms.py
prints it.
"""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from streamwatch.events import Problem
from streamwatch.sources import read_events

REAL = Path(__file__).parent / "data" / "real"
MANIFEST = REAL / "runs.toml"
LABELS = {"healthy", "failing", "unknown"}
BASES = {"author", "data", "none"}
MIN_STEPS = 30
MAX_BYTES = 2 * 2**20
PER_REPOSITORY = 3


def _load() -> list[dict[str, Any]]:
    with MANIFEST.open("rb") as f:
        runs: list[dict[str, Any]] = tomllib.load(f)["run"]
    return runs


RUNS = _load()
IDS = [r["id"] for r in RUNS]


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


def test_ids_and_files_are_unique() -> None:
    assert len(set(IDS)) == len(IDS), [i for i, n in Counter(IDS).items() if n > 1]
    files = [r["file"] for r in RUNS]
    assert len(set(files)) == len(files)


def test_at_most_three_runs_per_repository() -> None:
    per_repo = Counter(r["source"]["repository"] for r in RUNS)
    over = {repo: n for repo, n in per_repo.items() if n > PER_REPOSITORY}
    assert not over, over


def test_every_raw_file_under_runs_is_in_the_manifest() -> None:
    listed = {(REAL / r[key]).resolve() for r in RUNS for key in ("file", "raw") if key in r}
    for path in (REAL / "runs").rglob("*"):
        if path.is_file():
            assert any(path.resolve() == f or f in path.resolve().parents for f in listed), path


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_entry_is_complete(run: dict[str, Any]) -> None:
    for key in ("id", "file", "framework", "algorithm", "steps", "label", "basis", "evidence"):
        assert run.get(key) not in (None, ""), f"{run['id']}: no {key}"
    assert run["label"] in LABELS, run["label"]
    assert run["basis"] in BASES, run["basis"]
    if run["label"] != "unknown":
        assert run["basis"] != "none", f"{run['id']}: a {run['label']} label rests on nothing"
    if "onset_step" in run:
        assert run["label"] == "failing", f"{run['id']}: an onset on a {run['label']} run"
        assert isinstance(run["onset_step"], int) and run["onset_step"] >= 0
    source = run["source"]
    for key in ("repository", "commit", "path"):
        assert source.get(key), f"{run['id']}: no source {key}"
    assert "/" in source["repository"], source["repository"]


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_file_is_read_with_its_steps(run: dict[str, Any]) -> None:
    path = REAL / run["file"]
    assert path.exists(), path
    assert _size(path) <= MAX_BYTES, f"{path}: {_size(path)} bytes"
    problems: list[Problem] = []
    steps = {e.step for e in read_events([path], on_problem=problems.append)}
    assert len(steps) == run["steps"], f"{run['id']}: {len(steps)} logged steps read"
    assert len(steps) >= MIN_STEPS, f"{run['id']}: {len(steps)} logged steps"
    if "onset_step" in run:
        assert min(steps) <= run["onset_step"] <= max(steps), run["onset_step"]


RECAST = [r for r in RUNS if "raw" in r]


@pytest.mark.parametrize("run", RECAST, ids=[r["id"] for r in RECAST])
def test_a_recast_file_holds_the_raw_rows_unchanged(run: dict[str, Any]) -> None:
    """A committed JSON array of per-step dicts is replayed as the same dicts, one a line."""
    raw = json.loads((REAL / run["raw"]).read_text(encoding="utf-8"))
    lines = (REAL / run["file"]).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == raw
