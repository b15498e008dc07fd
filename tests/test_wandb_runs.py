"""W&B run directories, written by the real ``wandb`` client in offline mode (no server):
``replay`` and ``watch`` of ``wandb/run-<date>-<id>/`` and of a ``wandb/`` folder of runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from framework_writers import WANDB_NAN_STEP as NAN_STEP
from framework_writers import WANDB_STEPS as STEPS
from framework_writers import logged_wandb_run as logged_run
from framework_writers import write_wandb_run as write_run

from streamwatch.clock import ManualClock
from streamwatch.replay.files import replay_files
from streamwatch.replay.watch import Watcher
from streamwatch.sources import FileSource, expand_paths, read_events

pytestmark = pytest.mark.slow  # the real W&B client writes its runs: make test-slow

pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install wandb)")


def test_replay_of_a_run_directory_gives_every_step_under_the_runs_name(tmp_path: Path) -> None:
    run_dir = logged_run(tmp_path, "grpo-qwen-a")
    events = list(read_events([run_dir]))
    assert [e.step for e in events] == list(range(1, STEPS + 1))
    assert {e.run_id for e in events} == {"grpo-qwen-a"}
    first = events[0]
    assert first.metrics["train/rewards/accuracy_reward/mean"] == pytest.approx(0.21)
    assert first.ts is not None and first.ts > 1e9
    assert first.tags["gpus"] == "4" and first.tags["max_response_length"] == "256"
    wandb_id = run_dir.name.rsplit("-", 1)[1]
    assert first.tags["wandb_path"] == f"grpo/{wandb_id}"
    source = FileSource(run_dir / f"run-{wandb_id}.wandb")
    assert source.format == "wandb-run" and source.path_id == wandb_id
    assert len(list(source)) == STEPS and not source.problems
    replay = replay_files([run_dir])
    assert ("grpo-qwen-a", "nonfinite_metric", NAN_STEP) in {
        (i.run_id, i.kind, i.step) for i in replay.incidents
    }


def test_a_wandb_folder_reads_each_run_once_and_nothing_else(tmp_path: Path) -> None:
    """``wandb/`` with three runs, two of one name, ``latest-run`` and the debug log links:
    each run's transaction log once (runs of one name told apart by their W&B ids); their
    console output and debug logs are not read."""
    for name in ("grpo-a", "grpo-b", "grpo-b"):  # grpo-b started again under its name
        logged_run(tmp_path, name)
    wandb_dir = tmp_path / "wandb"
    assert (wandb_dir / "latest-run").is_symlink()
    files = expand_paths([wandb_dir])
    assert len(files) == 3 and all(f.suffix == ".wandb" for f in files)
    events = list(read_events([wandb_dir]))
    b_ids = sorted(f.stem.removeprefix("run-") for f in files if b"grpo-b" in f.read_bytes())
    assert sorted({e.run_id for e in events}) == ["grpo-a", *(f"grpo-b/{i}" for i in b_ids)]
    assert len(events) == 3 * STEPS
    assert len(list(read_events([wandb_dir / "latest-run"]))) == STEPS


def test_watch_follows_a_run_as_it_is_logged_and_new_runs_as_they_start(
    tmp_path: Path,
) -> None:
    """``watch wandb/`` while the client logs one step every 100 ms and writes its log as it
    goes (records cut at any byte): every step is judged once, as it is logged; a second run
    started later is followed too. (Under load the client may write in a few large pieces:
    one read with new steps before a run ended shows it is followed as it is logged.)"""
    (tmp_path / "wandb").mkdir()
    notes: list[str] = []
    watcher = Watcher([tmp_path / "wandb"], ManualClock(), on_note=notes.append)
    steps: list[tuple[str, int]] = []
    seen = 0

    def poll() -> None:
        nonlocal seen
        watcher.poll()
        if watcher.stats.events > seen and watcher.stats.last is not None:
            steps.append(watcher.stats.last)
        seen = watcher.stats.events

    for name in ("grpo-live", "grpo-next"):
        proc = write_run(tmp_path, name, pause=0.1)
        while proc.poll() is None:
            poll()
            time.sleep(0.02)
        assert proc.returncode == 0
        poll()
    watcher.close()
    assert watcher.stats.events == 2 * STEPS and watcher.stats.problems == 0
    assert len(steps) >= 3, "the steps were read while they were logged, not all at the end"
    assert steps[-1] == ("grpo-next", STEPS)
    following = [n for n in notes if n.startswith("following")]
    assert len(following) == 2, "\n".join(notes)
    assert all("(wandb-run, run grpo-" in note for note in following), following


def test_watch_command_summary_names_the_wandb_run(tmp_path: Path) -> None:
    """``streamwatch watch wandb/``: the run is named by its W&B name in what it follows
    and in the summary (a NaN KL at step 20: one critical)."""
    logged_run(tmp_path, "grpo-summary")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    args = ["watch", str(tmp_path / "wandb"), "--poll", "0.05", "--idle-exit", "0.5"]
    done = subprocess.run(
        [sys.executable, "-m", "streamwatch", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert "(wandb-run, run grpo-summary)" in done.stderr
    assert f"{STEPS} events" in done.stdout
    assert "run grpo-summary: 1 critical" in done.stdout


def test_a_log_cut_short_or_corrupt_gives_the_steps_before(tmp_path: Path) -> None:
    """A log cut in the middle of a record (a client killed mid-write) gives the whole
    records before it; a corrupt byte ends the reading there, with a problem naming it."""
    run_dir = logged_run(tmp_path / "src", "grpo-cut")
    log = next(run_dir.glob("run-*.wandb"))
    data = log.read_bytes()
    cut = tmp_path / "cut" / log.name
    cut.parent.mkdir()
    cut.write_bytes(data[: len(data) // 2])
    source = FileSource(cut)
    halfway = [e.step for e in source]
    assert halfway == list(range(1, len(halfway) + 1)) and 0 < len(halfway) < STEPS
    broken = tmp_path / "broken" / log.name
    broken.parent.mkdir()
    middle = len(data) // 2
    broken.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :])
    source = FileSource(broken)
    steps = [e.step for e in source]
    assert len(steps) < STEPS and source.problems
    assert "checksum does not match" in source.problems[0].reason
