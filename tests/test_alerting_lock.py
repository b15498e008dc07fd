"""One process per alert state directory: a second `streamwatch` in the same directory is
refused with the directory and the holder's pid named; the lock goes with its process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamwatch.alerting.config import AlertingConfig
from streamwatch.alerting.dispatcher import Dispatcher
from streamwatch.alerting.lock import StateDirInUse
from streamwatch.cli.main import main

HOLDER = """
import sys
from streamwatch.alerting.config import AlertingConfig
from streamwatch.alerting.dispatcher import Dispatcher
cfg = AlertingConfig.model_validate(
    {"receivers": [{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/hook"}]})
d = Dispatcher(cfg, state_dir=sys.argv[1])
print("holding", flush=True)
sys.stdin.read()  # until the test closes our stdin
d.close(timeout=0.5)
"""


def config() -> AlertingConfig:
    return AlertingConfig.model_validate(
        {"receivers": [{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/hook"}]}
    )


def hold(state: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    return proc


def let_go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    proc.wait(timeout=30)
    proc.stdout.close()


def test_a_second_process_is_refused_until_the_first_is_gone(tmp_path: Path) -> None:
    state = tmp_path / "alerts"
    proc = hold(state)
    try:
        with pytest.raises(StateDirInUse) as info:
            Dispatcher(config(), state_dir=state)
        text = str(info.value)
        assert str(state) in text and f"pid {proc.pid}" in text
        assert "--alert-state-dir" in text
    finally:
        let_go(proc)
    d = Dispatcher(config(), state_dir=state)  # free once the holder is gone
    d.close(timeout=0.5)


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    proc = hold(tmp_path)
    proc.kill()
    let_go(proc)
    Dispatcher(config(), state_dir=tmp_path).close(timeout=0.5)


def test_two_dispatchers_of_one_process_cannot_share_a_directory(tmp_path: Path) -> None:
    first = Dispatcher(config(), state_dir=tmp_path)
    with pytest.raises(StateDirInUse):
        Dispatcher(config(), state_dir=tmp_path)
    first.close(timeout=0.5)
    Dispatcher(config(), state_dir=tmp_path).close(timeout=0.5)  # closing let it go


def test_replay_in_a_directory_in_use_says_so_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps({"run_id": "r", "step": 0, "metrics": {"loss": 1.0}}) + "\n")
    state = tmp_path / "alerts"
    proc = hold(state)
    try:
        argv = ["replay", str(log), "--webhook-url", "http://127.0.0.1:9/h"]
        code = main([*argv, "--alert-state-dir", str(state), "--quiet"])
    finally:
        let_go(proc)
    assert code == 2
    err = capsys.readouterr().err
    assert f"the alert state directory {state} is in use" in err
