"""The alerting command-line helpers: flags and environment without a config file,
``silence add|list|expire`` and ``test-route``."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from streamwatch.alerting.config import AlertingConfig, AlertingConfigError
from streamwatch.alerting.silence import read_silences
from streamwatch.alerting.testing import RecordingReceiver, Reply, incident
from streamwatch.cli.alerting import (
    add_alert_args,
    add_silence_commands,
    add_test_route_command,
    alerting_from_args,
    build_dispatcher,
    run_silence_command,
    run_test_route,
)
from streamwatch.config import ConfigError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streamwatch")
    sub = p.add_subparsers(dest="command", required=True)
    add_silence_commands(sub)
    add_test_route_command(sub)
    replay = sub.add_parser("replay")
    add_alert_args(replay)
    return p


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.command == "silence":
        return run_silence_command(args)
    return run_test_route(args)


def test_no_receiver_no_dispatcher(tmp_path: Path) -> None:
    args = parser().parse_args(["replay", "--alert-state-dir", str(tmp_path / "s")])
    assert build_dispatcher(args, None, env={}) is None
    assert not (tmp_path / "s").exists()


def test_webhook_from_the_environment_with_the_default_route(tmp_path: Path) -> None:
    with RecordingReceiver() as rx:
        env = {"STREAMWATCH_WEBHOOK_URL": rx.url, "STREAMWATCH_WEBHOOK_SECRET": "k"}
        args = parser().parse_args(["replay", "--alert-state-dir", str(tmp_path)])
        d = build_dispatcher(args, AlertingConfig(group_wait=0), env=env)
        assert d is not None and d.state_dir == tmp_path
        d.send(incident("r1", severity="info"))  # below the default route's warning
        d.send(incident("r1", "entropy_collapse", indicator="entropy"))
        assert d.close(timeout=5).delivered == 1
    (request,) = rx.requests
    assert [i["kind"] for i in request.json()["incidents"]] == ["entropy_collapse"]
    assert request.headers["X-Streamwatch-Signature"].startswith("sha256=")
    assert (tmp_path / "sent.jsonl").exists()


def test_flags_add_receivers_beside_configured_routes() -> None:
    config = AlertingConfig.model_validate(
        {
            "receivers": [{"name": "slack", "type": "slack", "url": "https://hooks.slack.com/a"}],
            "routes": [{"receivers": ["slack"], "run_id": "grpo-*"}],
        }
    )
    args = parser().parse_args(
        [
            "replay",
            "--webhook-url",
            "https://example.com/hook",
            "--webhook-format",
            "alertmanager",
            "--slack-webhook-url",
            "https://hooks.slack.com/b",
            "--run-link",
            "https://wandb.ai/t/p/runs/{run_id}",
        ]
    )
    merged = alerting_from_args(args, config, env={})
    assert [r.name for r in merged.receivers] == ["slack", "webhook", "slack-2"]
    assert merged.receivers[1].format == "alertmanager"
    first, second = merged.routes
    assert first.receivers == ("webhook", "slack-2") and first.continue_
    assert second.receivers == ("slack",)
    assert merged.templates.link == "https://wandb.ai/t/p/runs/{run_id}"
    bad = parser().parse_args(["replay", "--run-link", "https://x/{nope}"])
    with pytest.raises(AlertingConfigError, match="unknown field"):
        alerting_from_args(bad, config, env={})


def test_silence_add_list_expire(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = ["--alert-state-dir", str(tmp_path)]
    assert (
        run(
            [
                "silence",
                "add",
                "--run",
                "grpo-*",
                "--kind",
                "entropy_collapse",
                "--duration",
                "30m",
                "--comment",
                "known issue",
                *state,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("silence ") and "run_id=grpo-* kind=entropy_collapse" in out
    (silence,) = read_silences(tmp_path / "silences.json")
    assert silence.expires_at - silence.starts_at == 1800
    assert run(["silence", "list", *state]) == 0
    listing = capsys.readouterr().out
    assert silence.id in listing and "active" in listing and "known issue" in listing
    assert run(["silence", "expire", silence.id[:4], *state]) == 0
    assert "expired" in capsys.readouterr().out
    assert run(["silence", "list", *state]) == 0
    assert capsys.readouterr().out.startswith("no active silences")
    assert run(["silence", "list", "--all", *state]) == 0
    assert "expired" in capsys.readouterr().out
    with pytest.raises(ValueError, match="at least one matcher"):
        run(["silence", "add", *state])
    with pytest.raises(SystemExit):
        run(["silence", "add", "--kind", "no_such_kind", *state])


def test_silences_file_from_the_config(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[alerting]\nsilences_file = "{tmp_path / "s.json"}"\n', encoding="utf-8")
    assert run(["silence", "add", "--run", "r1", "--config", str(cfg)]) == 0
    assert len(read_silences(tmp_path / "s.json")) == 1


def write_config(path: Path, url: str) -> Path:
    path.write_text(
        f"""
[alerting]
[[alerting.receivers]]
name = "ops"
type = "webhook"
url = "{url}"

[[alerting.receivers]]
name = "pager"
type = "webhook"
url = "{url}"

[[alerting.routes]]
receivers = ["pager"]
min_severity = "critical"
continue = true

[[alerting.routes]]
receivers = ["ops"]
run_id = "grpo-*"
""",
        encoding="utf-8",
    )
    return path


def test_test_route_says_what_went_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with RecordingReceiver() as rx:
        cfg = write_config(tmp_path / "c.toml", rx.url)
        state = ["--alert-state-dir", str(tmp_path / "state")]
        assert run(["test-route", "--config", str(cfg), "--run", "grpo-1", *state]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == "sample: critical entropy_collapse on entropy in run grpo-1"
        assert lines[1] == "route 1 (severity>=critical, continue): -> pager"
        assert lines[2] == "route 2 (run_id=grpo-*, severity>=info): -> ops"
        assert "  pager: notify: firing: new" in lines and "  ops: notify: firing: new" in lines
        assert any(line.startswith("  ops: delivered after 1 attempt(s)") for line in lines)
        assert len(rx.requests) == 2

        run(["silence", "add", "--run", "grpo-1", "--kind", "entropy_collapse", *state])
        capsys.readouterr()
        assert run(["test-route", "--config", str(cfg), "--run", "grpo-1", *state]) == 0
        out = capsys.readouterr().out
        assert "pager: muted: silenced by" in out and "nothing to send" in out

        argv = [
            "test-route",
            "--config",
            str(cfg),
            "--run",
            "ppo-1",
            "--severity",
            "warning",
            "--kind",
            "metric_spike",
            "--firing",
            "run_stalled",
            *state,
        ]
        assert run(argv) == 0
        out = capsys.readouterr().out
        assert (
            "route 1 (severity>=critical, continue): no match: severity warning < critical" in out
        )
        assert "route 2 (run_id=grpo-*, severity>=info): no match: run_id ppo-1" in out
        assert len(rx.requests) == 2

        argv = [
            "test-route",
            "--config",
            str(cfg),
            "--run",
            "grpo-2",
            "--kind",
            "metric_spike",
            "--severity",
            "warning",
            "--firing",
            "run_stalled",
            *state,
        ]
        assert run(argv) == 0
        assert "ops: muted: inhibited by run_stalled" in capsys.readouterr().out
        assert run([*argv[:-4], "--dry-run", *state]) == 0
        assert "dry run: would send to ops" in capsys.readouterr().out
        assert len(rx.requests) == 2
    assert not (tmp_path / "state" / "sent.jsonl").exists()  # the real state is left alone


def test_test_route_fails_when_a_receiver_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with RecordingReceiver(default=Reply(404, body=b"no_service")) as rx:
        cfg = write_config(tmp_path / "c.toml", rx.url)
        assert run(["test-route", "--config", str(cfg), "--run", "grpo-1"]) == 1
    assert "failed after 1 attempt(s): final: HTTP 404 (no_service)" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="cannot read config"):
        run(["test-route", "--config", str(tmp_path / "missing.toml")])


def test_test_route_without_receivers(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["test-route"]) == 2
    assert "no receivers" in capsys.readouterr().out
