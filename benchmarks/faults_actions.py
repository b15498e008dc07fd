"""The ``action-kill`` fault test: ``streamwatch watch`` with a ``command`` action, SIGKILLed
while its commands run, then started again on the same logs and state (``kills`` times).

Three runs collapse; the command appends its ``STREAMWATCH_ACTION_ID`` to a counter file and
sleeps. Printed: the commands run per incident (expected 1 each) and the actions the last
``watch`` reported as interrupted; then the same with ``retry_interrupted = true`` (expected
one more run per incident, at most its ``retries``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from streamwatch.simulate import RunSpec, random_fault_spec, simulate_run

__all__ = ["action_kill"]

ROOT = Path(__file__).resolve().parent.parent
RUNS = ("act-a", "act-b", "act-c")
TIMEOUT_S = 60.0


def _logs(where: Path) -> list[Path]:
    fault = random_fault_spec("entropy_collapse", 0)
    out = []
    for run in RUNS:
        spec = RunSpec(run, steps=400, hosts=1, ranks_per_host=1, seed=0, faults=fault.faults)
        out.append(where / f"{run}.jsonl")
        with out[-1].open("w") as f:
            for event in simulate_run(spec):
                f.write(json.dumps(event.to_json_dict()) + "\n")
    return out


def _watch(where: Path, logs: list[Path], nap: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "streamwatch.cli.main", "watch", *map(str, logs)]
    argv += ["--config", str(where / "sw.toml"), "--poll", "0.1", "--idle-exit", "2"]
    argv += ["--alert-state-dir", str(where / "state"), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NAP": nap}
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def _kill_commands(pids: Path) -> None:
    for pid in _lines(pids):
        with contextlib.suppress(OSError):
            os.killpg(int(pid), signal.SIGKILL)


def _round(where: Path, logs: list[Path], counter: Path) -> None:
    """One ``watch`` killed once every incident's command has started (or after a minute)."""
    proc = _watch(where, logs, "60")
    end = time.monotonic() + TIMEOUT_S
    seen = len(_lines(counter))
    while len(_lines(counter)) < seen + len(RUNS) and time.monotonic() < end:
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.communicate()


def _scenario(retry: bool, kills: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        counter, pids = where / "counter", where / "pids"
        command = f'echo $$ >> {pids}; echo "$STREAMWATCH_ACTION_ID" >> {counter}; sleep "$NAP"'
        (where / "sw.toml").write_text(
            '[engine]\ndisabled_kinds = ["run_stalled"]\n\n[[actions]]\ndo = "command"\n'
            f"command = {json.dumps(command)}\ndry_run = false\n"
            f"retry_interrupted = {str(retry).lower()}\n"
        )
        logs = _logs(where)
        try:
            for _ in range(kills):
                _round(where, logs, counter)
                _kill_commands(pids)
            proc = _watch(where, logs, "0")
            out, _ = proc.communicate(timeout=TIMEOUT_S)
        finally:
            _kill_commands(pids)
        per = Counter(_lines(counter))
        interrupted = out.count("interrupted: started, outcome unknown")
        runs = ", ".join(str(per[k]) for k in sorted(per))
    return (
        f"retry_interrupted={str(retry).lower()}: {kills} kill(s); commands run per incident: "
        f"{runs or 'none'} ({len(per)} incident(s)); reported interrupted: {interrupted}"
    )


def action_kill(kills: int = 1) -> str:
    """Both rules' lines, the default's first."""
    return "action-kill: " + "; ".join(_scenario(retry, kills) for retry in (False, True))
