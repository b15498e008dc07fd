"""Actions once, and side by side: an action's start is recorded before it runs, so that a
``watch`` killed mid-command and restarted on the same files reports the command as
interrupted instead of running it again (unless the rule says ``retry_interrupted``); one
slow command holds back no other run's actions."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streamwatch.actions.actor import Actor
from streamwatch.actions.config import ActionRule
from streamwatch.actions.execute import Executor
from streamwatch.actions.log import ActionLog
from streamwatch.actions.record import ActionRecord, describe
from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event
from streamwatch.incidents import Incident
from streamwatch.simulate import RunSpec, random_fault_spec, simulate_run

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 60.0


def collapse_events(run_id: str, steps: int = 400) -> list[Event]:
    """One process's logs of a run whose entropy collapses (critical near step 180)."""
    fault = random_fault_spec("entropy_collapse", 0)
    spec = RunSpec(run_id, steps=steps, hosts=1, ranks_per_host=1, seed=0, faults=fault.faults)
    return list(simulate_run(spec))


def wait_for(what: Callable[[], bool], timeout: float = TIMEOUT_S) -> None:
    end = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


# -- the executor ----------------------------------------------------------------------------
def test_a_slow_attempt_holds_back_no_other_lane_and_a_lane_keeps_its_order() -> None:
    ex = Executor(max_concurrent=2)
    order: list[str] = []
    gate = threading.Event()

    def job(name: str, wait: bool = False) -> Callable[[], str]:
        def run() -> str:
            if wait:
                gate.wait(10)
            order.append(name)
            return name

        return run

    ex.submit("a1", job("a1", wait=True), lane="a")
    ex.submit("a2", job("a2"), lane="a")
    ex.submit("b1", job("b1"), lane="b")
    wait_for(lambda: "b1" in order, 5)
    assert order == ["b1"]  # a1 is still running, a2 waits behind it
    gate.set()
    ex.close(5)
    assert order == ["b1", "a1", "a2"]
    assert sorted(o.key for o in ex.outcomes()) == ["a1", "a2", "b1"]


def test_max_concurrent_bounds_the_attempts_running_at_once() -> None:
    ex = Executor(max_concurrent=2)
    running, most = [0], [0]
    lock = threading.Lock()

    def job() -> str:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return "ok"

    for n in range(6):
        ex.submit(f"k{n}", job, lane=f"run-{n}")
    ex.close(10)
    assert most[0] == 2 and len(ex.outcomes()) == 6
    with pytest.raises(ValueError):
        Executor(max_concurrent=0)


# -- the actor -------------------------------------------------------------------------------
def drive(act: Actor, events: list[Event]) -> list[Incident]:
    monitor = Monitor()
    act.probe = monitor.healthy_updates
    out: list[Incident] = []
    for event in events:
        out.extend(act.see(event.run_id, event.step, event.tags, monitor.process(event)))
        out.extend(act.poll())
    return out


def command_rule(counter: Path, **kw: object) -> ActionRule:
    command = f'echo "$STREAMWATCH_ACTION_ID" >> {counter}'
    return ActionRule.model_validate({"do": "command", "command": command, "dry_run": False, **kw})


def first_run(tmp_path: Path, rule: ActionRule) -> tuple[Path, ActionRecord]:
    """An action log holding only the start of the rule's action, as a process killed
    while the command ran leaves it."""
    log = tmp_path / "actions.jsonl"
    act = Actor([rule], action_log=ActionLog(log), executor=Executor(background=False))
    drive(act, collapse_events("r"))
    records = ActionLog(log).records()
    assert [r.status for r in records] == ["started", "done"]
    log.write_text(json.dumps(records[0].to_dict()) + "\n")
    return log, records[0]


def test_a_start_without_an_outcome_is_reported_as_interrupted_and_not_run_again(
    tmp_path: Path,
) -> None:
    counter = tmp_path / "counter"
    log, started = first_run(tmp_path, command_rule(counter))
    assert started.action_id.startswith(f"{started.incident_id}/command/")
    assert counter.read_text().split() == [started.action_id]
    act = Actor([command_rule(counter)], action_log=ActionLog(log), executor=Executor())
    out = drive(act, collapse_events("r"))
    act.close()
    assert counter.read_text().split() == [started.action_id]  # not run again
    (update,) = [u for u in out if u.actions]
    assert [describe(a) for a in update.actions] == [
        f"command at step {started.step} interrupted: started, outcome unknown"
    ]
    statuses = [r.status for r in ActionLog(log).records()]
    assert statuses == ["started", "interrupted"]


def test_retry_interrupted_runs_it_again_once_with_the_same_id(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    rule = command_rule(counter, retry_interrupted=True)
    log, started = first_run(tmp_path, rule)
    act = Actor([rule], action_log=ActionLog(log), executor=Executor(background=False))
    drive(act, collapse_events("r"))
    drive(act, collapse_events("r"))  # a second pass: done now, not run a third time
    assert counter.read_text().split() == [started.action_id] * 2
    last = ActionLog(log).records()[-1]
    assert (last.status, last.attempts, last.action_id) == ("done", 2, started.action_id)


def test_a_start_learnt_from_another_process_blocks_the_action_and_an_outcome_wins(
    tmp_path: Path,
) -> None:
    counter = tmp_path / "counter"
    _, started = first_run(tmp_path, command_rule(counter))
    act = Actor([command_rule(counter)], executor=Executor(background=False))
    done = ActionRecord(**{**started.to_dict(), "status": "done", "detail": "exit status 0"})
    assert act.learn([started, done]) == 1
    assert act.done("r")[0].status == "done"
    assert act.learn([started]) == 0 and act.done("r")[0].status == "done"


# -- watch, killed mid-command and restarted ---------------------------------------------------
def write_log(path: Path, events: list[Event]) -> None:
    with path.open("w") as f:
        for event in events:
            f.write(json.dumps(event.to_json_dict()) + "\n")


def write_config(path: Path, actions: str) -> Path:
    path.write_text('[engine]\ndisabled_kinds = ["run_stalled"]\n\n' + actions)
    return path


def watch(config: Path, state: Path, *logs: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", "import sys; from streamwatch.cli.main import main; main()"]
    args = ["watch", *map(str, logs), "--config", str(config), "--poll", "0.1"]
    args += ["--idle-exit", "2", "--alert-state-dir", str(state), "--quiet"]
    return subprocess.Popen(
        argv + args,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )


@contextlib.contextmanager
def killing(pids: Path) -> Iterator[None]:
    """Kill the process groups of the commands that wrote their pids to ``pids``."""
    try:
        yield
    finally:
        for line in pids.read_text().split() if pids.exists() else ():
            with contextlib.suppress(OSError):
                os.killpg(int(line), signal.SIGKILL)


def kill_mid_command(tmp_path: Path, retry: bool) -> tuple[list[str], str, Path]:
    """``watch`` runs a command that counts its runs and sleeps; killed while it sleeps,
    then started again on the same files: the counter's lines and the second's output."""
    counter, pids, state = tmp_path / "counter", tmp_path / "pids", tmp_path / "state"
    write_log(tmp_path / "train.jsonl", collapse_events("grpo-once"))
    command = f'echo $$ >> {pids}; echo "$STREAMWATCH_ACTION_ID" >> {counter}; sleep "$NAP"'
    rule = f'[[actions]]\ndo = "command"\ncommand = {json.dumps(command)}\ndry_run = false\n'
    rule += f"retry_interrupted = {str(retry).lower()}\n"
    config = write_config(tmp_path / "sw.toml", rule)
    with killing(pids):
        first = watch(config, state, tmp_path / "train.jsonl", env={"NAP": "60"})
        try:
            wait_for(counter.exists)
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=TIMEOUT_S)
        finally:
            first.kill()
        second = watch(config, state, tmp_path / "train.jsonl", env={"NAP": "0"})
        try:
            out, _ = second.communicate(timeout=TIMEOUT_S)
        finally:
            second.kill()
    return counter.read_text().split(), out, state / "actions.jsonl"


def test_watch_killed_mid_command_does_not_run_it_again(tmp_path: Path) -> None:
    runs, out, log = kill_mid_command(tmp_path, retry=False)
    assert len(runs) == 1
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["status"] for r in records] == ["started", "interrupted"]
    assert records[1]["detail"] == "started, outcome unknown"
    assert "interrupted: started, outcome unknown" in out


def test_watch_killed_mid_command_runs_it_again_once_with_retry_interrupted(
    tmp_path: Path,
) -> None:
    runs, out, log = kill_mid_command(tmp_path, retry=True)
    assert len(runs) == 2 and runs[0] == runs[1]  # the same action id both times
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["status"] for r in records] == ["started", "started", "done"]
    assert "command run at step" in out


# -- watch: one slow command, two other runs --------------------------------------------------
def test_a_slow_command_on_one_run_does_not_delay_the_stop_files_of_others(
    tmp_path: Path,
) -> None:
    logs = []
    for run in ("a", "b", "c"):
        logs.append(tmp_path / f"{run}.jsonl")
        write_log(logs[-1], collapse_events(run))
    began, pids = tmp_path / "began", tmp_path / "pids"
    stops = tmp_path / "stops"
    actions = (
        '[[actions]]\nname = "slow"\ndo = "command"\nrun_id = "a"\ndry_run = false\n'
        f'command = "echo $$ >> {pids}; touch {began}; sleep 5"\n\n'
        '[[actions]]\nname = "stop"\ndo = "stop_file"\nrun_id = "[bc]"\ndry_run = false\n'
        f'path = "{stops}/{{run_id}}.stop"\n'
    )
    config = write_config(tmp_path / "sw.toml", actions)
    files = [stops / "b.stop", stops / "c.stop"]
    with killing(pids):
        proc = watch(config, tmp_path / "state", *logs, env={})
        try:
            wait_for(lambda: began.exists() or all(f.exists() for f in files))
            t0 = time.monotonic()
            wait_for(lambda: all(f.exists() for f in files))
            assert time.monotonic() - t0 < 1.0
            out, _ = proc.communicate(timeout=TIMEOUT_S)
        finally:
            proc.kill()
    assert "command run at step" in out and out.count("stop file written at step") == 2
