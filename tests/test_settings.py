"""Settings from flags, the environment and the config file: a bad STREAMWATCH_* value is
named (variable, value, option) and stops only the command that uses it; environment values
meet the same types and choices as flags; one config reader, which reads only the tables a
command uses."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from streamwatch.cli.kafka import add_commands, apply_env
from streamwatch.cli.main import main
from streamwatch.config import ConfigError, EnvOption, SettingsError, env_settings, load_config

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = ROOT / "examples" / "logs" / "healthy.jsonl"


def kafka_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamwatch")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def test_a_bad_kafka_variable_does_not_stop_replay(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STREAMWATCH_PARTITIONS", "abc")
    monkeypatch.setenv("STREAMWATCH_SECURITY_PROTOCOL", "TLS")
    assert main(["replay", str(HEALTHY), "--quiet"]) == 0
    assert "STREAMWATCH_PARTITIONS" not in capsys.readouterr().err


def test_a_bad_variable_stops_the_command_that_uses_it_and_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STREAMWATCH_PARTITIONS", "abc")
    assert main(["run", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "STREAMWATCH_PARTITIONS='abc' (for --partitions): input should be a valid integer" in err
    # the flag wins over the variable, so the same command with --partitions gets past it
    args = kafka_parser().parse_args(["run", "--bootstrap-servers", "h:1", "--partitions", "3"])
    apply_env(args)
    assert args.partitions == 3


def test_environment_values_meet_the_flags_choices(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STREAMWATCH_SECURITY_PROTOCOL", "TLS")
    assert main(["record", "--bootstrap-servers", "127.0.0.1:1", "-o", "x.jsonl"]) == 2
    err = capsys.readouterr().err
    assert "STREAMWATCH_SECURITY_PROTOCOL='TLS' (for --security-protocol)" in err
    assert "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL" in err
    with pytest.raises(SystemExit):  # the same value as a flag: argparse refuses it too
        kafka_parser().parse_args(["record", "-o", "x", "--security-protocol", "TLS"])


def test_good_variables_fill_in_what_the_command_line_leaves_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMWATCH_PARTITIONS", "8")
    monkeypatch.setenv("STREAMWATCH_TICK_SECONDS", "0.5")
    monkeypatch.setenv("STREAMWATCH_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.delenv("STREAMWATCH_GROUP", raising=False)
    args = kafka_parser().parse_args(["run", "--bootstrap-servers", "h:1"])
    apply_env(args)
    assert (args.partitions, args.tick_seconds, args.security_protocol) == (8, 0.5, "SASL_SSL")
    assert args.group == "streamwatch" and args.commit_interval == 5.0  # the defaults


def test_a_secret_value_is_not_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMWATCH_PIN", "hunter2")
    with pytest.raises(SettingsError) as info:
        env_settings([EnvOption("pin", int, secret=True)])
    assert "STREAMWATCH_PIN=(secret) (for --pin)" in str(info.value)
    assert "hunter2" not in str(info.value)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_one_reader_reads_only_the_tables_a_command_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write(
        tmp_path / "c.toml",
        "[engine]\nresolve_after = 0\n[alerting]\nstate_dir = 'alerts'\n",
    )
    with pytest.raises(ConfigError, match=r"c\.toml: engine\.resolve_after"):
        load_config(cfg)
    assert load_config(cfg, sections=("alerting",)).alerting.state_dir == "alerts"
    # `silence list` uses only the alerting table: the engine's mistake does not stop it
    assert main(["silence", "list", "--config", str(cfg)]) == 0
    assert "no active silences in alerts/silences.json" in capsys.readouterr().out
    assert main(["replay", str(HEALTHY), "--config", str(cfg), "--quiet"]) == 2
    assert "engine.resolve_after" in capsys.readouterr().err
    bad = write(tmp_path / "d.toml", "[alerts]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"unknown table\(s\) \['alerts'\]"):
        load_config(bad, sections=("alerting",))


def test_a_bad_receiver_variable_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STREAMWATCH_WEBHOOK_URL", "ftp://alerts.example.com/t0ken-abcdef")
    assert main(["replay", str(HEALTHY), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "STREAMWATCH_WEBHOOK_URL: receiver 'webhook': url must be an http:// or https://" in err
    assert "t0ken" not in err
