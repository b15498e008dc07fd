"""Silences and test-route as a user runs them (the README's commands, in a process of their
own): what a silence muted is said on the incident line and counted in the summary, and no
receiver gets it; a duration needs its unit; ``test-route --dry-run`` needs no secret; a
failed send says what happened and that nothing was kept."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from streamwatch.alerting.testing import RecordingReceiver, free_port

ROOT = Path(__file__).resolve().parent.parent
FIELD = ROOT / "tests" / "data" / "field"
KL_NAN = FIELD / "ms-swift-4465-kl-nan-step-300.jsonl"  # critical: a NaN KL
# the field case's one verl row (every reward 0) at two steps: a warning (one row alone is an info)
ZERO_REWARD = FIELD.parent / "zero-reward-two-steps.jsonl"
STREAMWATCH = [sys.executable, "-m", "streamwatch.cli.main"]


def streamwatch(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMWATCH_")}
    env = {k: v for k, v in env.items() if not k.endswith(("WEBHOOK_URL", "WEBHOOK_SECRET"))}
    return subprocess.run(
        [*STREAMWATCH, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_silence_is_said_on_each_muted_line_and_counted(tmp_path: Path) -> None:
    state = str(tmp_path / "alerts")
    added = streamwatch(
        "silence", "add", "--run", "ms-swift-*", "--kind", "nonfinite_metric",
        "--duration", "2h", "--comment", "known", "--alert-state-dir", state,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    silence_id = re.match(r"silence (\w+) added", added.stdout)
    assert silence_id is not None
    sid = silence_id.group(1)
    with RecordingReceiver() as rx:
        replay = streamwatch(
            "replay", str(KL_NAN), str(ZERO_REWARD), "--alert-state-dir", state,
            "--webhook-url", rx.url,
        )  # fmt: skip
        assert replay.returncode == 0, replay.stderr
        sent = [i["kind"] for r in rx.accepted() for i in r.json()["incidents"]]
    lines = replay.stdout.splitlines()
    (nan_line,) = [x for x in lines if x.startswith("CRITICAL") and "nonfinite_metric" in x]
    assert nan_line.endswith(f"(silenced by {sid}: no alert)")
    (zero_line,) = [x for x in lines if x.startswith("WARNING") and "no_learning_signal" in x]
    assert "silenced" not in zero_line
    expected = (
        f"silence {sid} (run_id=ms-swift-* kind=nonfinite_metric indicator=*): "
        "muted 1 incident update(s)"
    )
    assert expected in lines
    assert sent == ["no_learning_signal"]  # the muted one went nowhere


def test_a_duration_without_a_unit_is_refused(tmp_path: Path) -> None:
    out = streamwatch(
        "silence", "add", "--run", "grpo-*", "--duration", "2",
        "--alert-state-dir", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 2
    assert "duration '2' has no unit: write 2s, 2m, 2h, 2d or 2w" in out.stderr
    assert not (tmp_path / "silences.json").exists()


def test_test_route_dry_run_needs_no_secret(tmp_path: Path) -> None:
    """The README's ``test-route --config streamwatch.toml --dry-run`` with none of the
    receivers' variables set."""
    config = tmp_path / "streamwatch.toml"
    config.write_text((ROOT / "examples" / "streamwatch.toml").read_text())
    out = streamwatch("test-route", "--config", "streamwatch.toml", "--dry-run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    unset = "unset (a real send needs them): ONCALL_WEBHOOK_SECRET, ONCALL_WEBHOOK_URL"
    assert out.stdout.startswith(unset + ", SLACK_WEBHOOK_URL\n")
    assert "dry run: would send to oncall, slack" in out.stdout
    sent = streamwatch("test-route", "--config", "streamwatch.toml", cwd=tmp_path)
    assert sent.returncode == 2 and "SLACK_WEBHOOK_URL is not set" in sent.stderr


def test_the_readme_tries_routes_without_sending() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [ln for ln in readme.splitlines() if "streamwatch test-route" in ln]
    assert commands and all("--dry-run" in ln for ln in commands)


def test_a_failed_send_says_what_happened_and_that_nothing_was_kept(tmp_path: Path) -> None:
    state = tmp_path / "alerts"
    url = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    out = streamwatch("test-route", "--webhook-url", url, "--alert-state-dir", str(state))
    assert out.returncode == 1
    (line,) = [x for x in out.stdout.splitlines() if x.startswith("  webhook: not delivered")]
    assert "gave up after 3 attempt(s): ConnectionRefusedError" in line
    assert line.endswith("nothing kept (test-route spools nothing)")
    assert "spool" not in out.stderr and "0 attempt" not in out.stdout
    assert not state.exists() or not any(state.rglob("*.json*"))
