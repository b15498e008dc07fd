"""Every option of every command reads ``STREAMWATCH_<OPTION>`` (a flag on the command line
wins; a bad value is named and exits 2), and every option's help says what it does, its
default and its variable."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamwatch.cli.args import build_parser
from streamwatch.cli.commands import COMMANDS
from streamwatch.cli.env import _own, _parsers, _shows_default, prepare
from streamwatch.cli.main import main

FIELD = Path(__file__).parent / "data" / "field"
#: a real NaN KL (critical) and a real step where every reward was 0 (a warning)
KL_NAN = FIELD / "ms-swift-4465-kl-nan-step-300.jsonl"
# the field case's one verl row (every reward 0) at two steps: a warning (one row alone is an info)
ZERO_REWARD = FIELD.parent / "zero-reward-two-steps.jsonl"
STREAMWATCH = [sys.executable, "-m", "streamwatch.cli.main"]

#: the arguments each command needs to parse at all
NEEDED = {
    "replay": ["x.jsonl"],
    "inspect": ["x.jsonl"],
    "watch": ["x.jsonl"],
    "demo": [],
    "simulate": ["-o", "x.jsonl"],
    "check-config": ["x.toml"],
    "silence add": ["--run", "r"],
    "silence list": [],
    "silence expire": ["abc"],
    "test-route": [],
    "test-rules": ["r.toml", "--cases", "c.toml"],
    "report": ["x.jsonl"],
    "compare": ["-b", "x.jsonl", "-c", "y.jsonl"],
    "ledger": ["-b", "x.jsonl", "-c", "a=y.jsonl", "a change"],
    "run": ["--bootstrap-servers", "127.0.0.1:9"],
    "publish": ["x.jsonl", "--bootstrap-servers", "127.0.0.1:9"],
    "record": ["-o", "x.jsonl", "--bootstrap-servers", "127.0.0.1:9"],
}


def streamwatch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STREAMWATCH, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_command_is_covered() -> None:
    assert {c.split()[0] for c in NEEDED} == set(COMMANDS)


def test_fail_on_from_the_environment_as_the_readme_says() -> None:
    """``STREAMWATCH_FAIL_ON=warning streamwatch replay ...`` fails on a warning; the flag on
    the command line wins over the variable; ``=bogus`` is named, exit 2."""
    warned = streamwatch("replay", str(ZERO_REWARD), env={"STREAMWATCH_FAIL_ON": "warning"})
    assert warned.returncode == 1, warned.stderr
    assert "failing: a warning incident fired" in warned.stderr
    flag_wins = streamwatch(
        "replay", str(ZERO_REWARD), "--fail-on", "critical", env={"STREAMWATCH_FAIL_ON": "info"}
    )
    assert flag_wins.returncode == 0, flag_wins.stderr
    bogus = streamwatch("replay", str(ZERO_REWARD), env={"STREAMWATCH_FAIL_ON": "bogus"})
    assert bogus.returncode == 2
    assert "STREAMWATCH_FAIL_ON='bogus' (for --fail-on)" in bogus.stderr
    assert "info, warning, critical" in bogus.stderr


def test_flags_of_other_types_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "incidents.jsonl"
    monkeypatch.setenv("STREAMWATCH_INCIDENTS_OUT", str(out))
    monkeypatch.setenv("STREAMWATCH_QUIET", "true")
    monkeypatch.setenv("STREAMWATCH_IDLE_EXIT", "0.2")
    monkeypatch.setenv("STREAMWATCH_POLL", "0.05")
    assert main(["watch", str(KL_NAN)]) == 0
    text = capsys.readouterr().out
    assert "CRITICAL" not in text  # quiet: no live lines
    assert [json.loads(line)["kind"] for line in out.read_text().splitlines()] == [
        "nonfinite_metric"
    ]
    monkeypatch.setenv("STREAMWATCH_QUIET", "perhaps")
    assert main(["watch", str(KL_NAN)]) == 2
    assert "STREAMWATCH_QUIET='perhaps' (for --quiet)" in capsys.readouterr().err


def _typed_options() -> list[tuple[str, str]]:
    """(command, flag) of every option whose value has a type or choices to check."""
    out = []
    for command in NEEDED:
        words = command.split()
        parser = build_parser(words[0])
        for p in _parsers(parser):
            if not p.prog.endswith(" " + " ".join(words)):
                continue
            for a in p._actions:
                if not a.option_strings or isinstance(a, argparse._HelpAction):
                    continue
                if a.type in (int, float) or a.choices is not None or a.nargs == 0:
                    out.append((command, max(a.option_strings, key=len)))
    return out


@pytest.mark.parametrize(("command", "flag"), _typed_options())
def test_a_bad_variable_of_any_option_is_named_and_exits_2(
    command: str,
    flag: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    variable = "STREAMWATCH_" + flag.lstrip("-").upper().replace("-", "_")
    monkeypatch.setenv(variable, "bogus")
    assert main([*command.split(), *NEEDED[command]]) == 2
    assert f"{variable}='bogus' (for {flag})" in capsys.readouterr().err


def test_every_option_of_every_command_has_help_with_its_default_and_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the defaults as a new shell has them: a variable set here (CI exports the broker's
    # STREAMWATCH_BOOTSTRAP_SERVERS) becomes its option's default, read from the environment
    for name in [v for v in os.environ if v.startswith("STREAMWATCH_")]:
        monkeypatch.delenv(name)
    parser = build_parser()
    prepare(parser)
    missing, no_default, no_variable = [], [], []
    for p in _parsers(parser):
        assert p.description, f"{p.prog} has no description"
        for a in p._actions:
            if isinstance(
                a, argparse._HelpAction | argparse._SubParsersAction | argparse._VersionAction
            ):
                continue
            name = f"{p.prog} {'/'.join(a.option_strings) or a.dest}"
            if not a.help or not a.help.split("(env ")[0].strip():
                missing.append(name)
            default = getattr(a, "_streamwatch_default", a.default)
            shown = default not in (None, False, "", []) and "secret" not in a.dest
            if a.option_strings and shown and "default" not in (a.help or ""):
                no_default.append(name)
            if a.option_strings and "STREAMWATCH_" not in (a.help or ""):
                no_variable.append(name)
    assert (missing, no_default, no_variable) == ([], [], [])


def test_help_of_watch_poll_says_what_it_does_and_its_default() -> None:
    text = subprocess.run(
        [*STREAMWATCH, "watch", "--help"], capture_output=True, text=True, check=True
    ).stdout
    flat = " ".join(text.split())
    assert "--poll SECONDS look for new data this often (default 2.0; env STREAMWATCH_POLL)" in flat
    replay = subprocess.run(
        [*STREAMWATCH, "replay", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "Replay recorded logs" in replay


def test_shown_defaults_leave_out_what_is_empty_or_secret() -> None:
    p = argparse.ArgumentParser()
    shown = {
        "--seed": p.add_argument("--seed", type=int, default=0),
        "--name": p.add_argument("--name", default=""),
        "--sasl-password": p.add_argument("--sasl-password", default="pw"),
    }
    assert {k: _shows_default(a) for k, a in shown.items()} == {
        "--seed": True,
        "--name": False,
        "--sasl-password": False,
    }
    assert len(_own(p)) == 3


def test_no_option_reads_the_variables_a_command_action_gets(tmp_path: Path) -> None:
    """A command action gets the incident as ``STREAMWATCH_INCIDENT_*`` variables: were one
    of them an option's variable, a ``streamwatch`` the command runs would take the incident's
    run id or kind as its own option. The incident's variables leave a replay unchanged."""
    from streamwatch.actions.execute import ACTION_ID_ENV, INCIDENT_ENV_PREFIX, incident_env
    from streamwatch.incidents import Incident, Severity, Status

    parser = build_parser()
    variables = {
        f"STREAMWATCH_{a.dest.upper()}" for p in _parsers(parser) for a in p._actions if a.dest
    }
    assert not [v for v in variables if v.startswith(INCIDENT_ENV_PREFIX)]
    assert ACTION_ID_ENV not in variables  # the action's id, given beside the incident
    inc = Incident(
        id="6f1c0c8f2a0d4e4b",
        status=Status.FIRING,
        run_id="grpo-7b",
        kind="entropy_collapse",
        severity=Severity.CRITICAL,
        indicator="entropy",
        metric="actor/entropy",
        step=812,
        message="entropy collapsing",
    )
    env = incident_env(inc, 822)
    assert all(v.startswith(INCIDENT_ENV_PREFIX) for v in env) and len(env) == 9
    plain = streamwatch("replay", str(ZERO_REWARD), env={})
    within = streamwatch("replay", str(ZERO_REWARD), env=env)
    timed = re.compile(r" in [0-9.]+ s")  # the replay's own duration
    assert (within.returncode, timed.sub("", within.stdout)) == (
        plain.returncode,
        timed.sub("", plain.stdout),
    )
