"""A team's config, whose receivers read ``${SLACK_WEBHOOK_URL}`` and others, with none of
them set: the commands that send nothing load it (saying once which variables are unset and
that they send no alert); the commands that send refuse, naming each variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamwatch.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
CONFIG = str(ROOT / "examples" / "streamwatch.toml")
LOGS = ROOT / "examples" / "logs"
HEALTHY, FAILING = str(LOGS / "healthy.jsonl"), str(LOGS / "entropy_collapse.jsonl")
UNSET = ("SLACK_WEBHOOK_URL", "ONCALL_WEBHOOK_URL", "ONCALL_WEBHOOK_SECRET")
NOTE = "alerts are not sent by this command"


@pytest.fixture(autouse=True)
def _no_secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (*UNSET, "STREAMWATCH_WEBHOOK_URL", "STREAMWATCH_SLACK_WEBHOOK_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # alert state, if any were written, would land here


OFFLINE = {
    "replay": ["replay", "--quiet", FAILING],
    "inspect": ["inspect", HEALTHY],
    "report": ["report", "-o", "r.html", HEALTHY],
    "compare": ["compare", "-b", HEALTHY, "-c", FAILING],
    "ledger": ["ledger", "-b", HEALTHY, "-c", FAILING, "entropy collapse"],
    "silence": ["silence", "list"],
}


@pytest.mark.parametrize("command", list(OFFLINE))
def test_an_offline_command_loads_the_config_without_its_secrets(
    command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main([*OFFLINE[command], "--config", CONFIG]) == 0
    err = capsys.readouterr().err
    assert err.count(NOTE) == 1, err
    (line,) = [x for x in err.splitlines() if NOTE in x]
    assert line.startswith(f"streamwatch: {command}: ")
    assert all(name in line for name in UNSET)
    assert "config error" not in err
    assert not (tmp_path / ".streamwatch" / "alerts").exists()  # no alert spooled nor sent


def test_a_config_whose_variables_are_set_says_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in UNSET:
        monkeypatch.setenv(name, "https://hooks.example.com/x")
    assert main(["inspect", HEALTHY, "--config", CONFIG]) == 0
    assert NOTE not in capsys.readouterr().err


SENDING = {
    "watch": ["watch", "--idle-exit", "1", HEALTHY],
    "replay --webhook-url": ["replay", "--webhook-url", "https://hooks.example.com/h", HEALTHY],
    "run": ["run", "--bootstrap-servers", "127.0.0.1:1"],
    "demo": ["demo", "--steps", "20"],
}


@pytest.mark.parametrize("case", list(SENDING))
def test_a_sending_command_refuses_naming_each_variable(
    case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SENDING[case], "--config", CONFIG]) == 2
    err = capsys.readouterr().err
    command = case.split()[0]
    assert f"{command} sends alerts" in err
    assert all(f"  {name} is not set" in err for name in UNSET), err
    assert NOTE not in err
