"""No webhook token or signing secret in any log line, error, exception text, output or
state file, whatever fails: connection refused, 500, 400, bad config, a payload bug."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from streamwatch.alerting.config import AlertingConfig, AlertingConfigError, Receiver
from streamwatch.alerting.dispatcher import Dispatcher
from streamwatch.alerting.notify.webhook import WebhookNotifier
from streamwatch.alerting.testing import RecordingReceiver, Reply, free_port, incident
from streamwatch.cli import alerting as cli

TOKEN = "T0KEN-9f8e7d6c5b4a"
SECRET = "s1gning-s3cret-42xyz"
SLACK_TOKEN = "XOXB-abcdef0123456789"


def _leaks(text: str) -> list[str]:
    return [s for s in (TOKEN, SECRET, SLACK_TOKEN) if s in text]


def test_no_secret_leaks_anywhere(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    path = f"/services/{TOKEN}/hook"
    refused = f"http://user:{TOKEN}@127.0.0.1:{free_port()}{path}?token={TOKEN}"
    with (
        RecordingReceiver(default=Reply(500, body=f"no {TOKEN}".encode()), path=path) as rx500,
        RecordingReceiver(default=Reply(400, body=b"invalid_payload"), path=path) as rx400,
        RecordingReceiver(path=f"/services/{SLACK_TOKEN}") as slack_rx,
    ):
        config = AlertingConfig.model_validate(
            {
                "receivers": [
                    {"name": "refused", "type": "webhook", "url": refused, "secret": SECRET},
                    {"name": "e500", "type": "webhook", "url": rx500.url, "secret": SECRET},
                    {"name": "e400", "type": "webhook", "url": rx400.url, "secret": SECRET},
                    {"name": "slack", "type": "slack", "url": slack_rx.url},
                ],
                "group_wait": 0,
                "delivery": {"max_attempts": 2, "backoff_initial": 0.01, "timeout": 1},
            }
        )
        texts += [repr(config), str(config), config.model_dump_json(), repr(config.receivers)]
        d = Dispatcher(config, state_dir=tmp_path)
        d.send(incident("r1", severity="critical"))
        report = d.close(timeout=10)
        texts += [str(report)] + [o.reason for o in d.outcomes]
        assert report.failed == 1 and report.spooled == 2 and report.delivered == 1
        assert {r.headers.get("X-Streamwatch-Signature", "")[:7] for r in rx500.requests} == {
            "sha256="
        }

        # a bug in a payload builder whose exception text carries the URL
        def broken(self: WebhookNotifier, message: object) -> Any:
            raise ValueError(f"cannot post to {rx400.url} with {SECRET}")

        monkeypatch.setattr(WebhookNotifier, "build", broken)
        d2 = Dispatcher(
            config.model_copy(update={"receivers": config.receivers[2:3]}),
            state_dir=tmp_path / "second",
        )
        d2.send(incident("r2", severity="critical"))
        d2.close(timeout=5)
        texts += [o.reason for o in d2.outcomes]
        assert any("[redacted]" in o.reason for o in d2.outcomes)

    # bad configs: the error texts do not echo the URL or secret
    bad_inputs: list[dict[str, Any]] = [
        {"name": "x", "type": "webhook", "url": f"ftp://h/{TOKEN}", "secret": SECRET},
        {"name": "x", "type": "webhook", "url": f"http://h:port{TOKEN}/"},
        {"name": "x", "type": "slack", "url": f"https://h/{SLACK_TOKEN}", "secret": SECRET},
        {"name": "x y", "type": "webhook", "url": f"https://h/{TOKEN}", "secret": SECRET},
    ]
    for bad in bad_inputs:
        with pytest.raises(ValidationError) as info:
            Receiver.model_validate(bad)
        texts += [str(info.value), repr(info.value)]
    args = argparse.Namespace(webhook_url=f"ftp://host/{TOKEN}", webhook_secret=SECRET)
    with pytest.raises(AlertingConfigError) as cli_info:
        cli.alerting_from_args(args, AlertingConfig(), env={})
    texts.append(str(cli_info.value))

    out, err = capsys.readouterr()
    texts += [out, err]
    texts += [f"{r.levelname} {r.name} {r.getMessage()}" for r in caplog.records]
    texts += [p.read_text() for p in tmp_path.rglob("*") if p.is_file()]
    assert "failed.jsonl" in {p.name for p in tmp_path.rglob("*")}
    assert any("[redacted]" in t for t in texts)  # the 500 body echoed the token
    leaks = {t[:200]: _leaks(t) for t in texts if _leaks(t)}
    assert leaks == {}
    assert any("127.0.0.1" in r.getMessage() for r in caplog.records)  # scheme+host only


def test_receiver_secrets_can_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamwatch.config import ConfigError, load_config

    path = tmp_path / "streamwatch.toml"
    path.write_text(
        "[[alerting.receivers]]\n"
        'name = "hook"\ntype = "webhook"\n'
        'url = "${HOOK_URL}"\nsecret = "${HOOK_SECRET}"\n'
    )
    monkeypatch.setenv("HOOK_URL", f"https://alerts.example.com/{TOKEN}")
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    (receiver,) = load_config(path).alerting.receivers
    assert receiver.url.get_secret_value() == f"https://alerts.example.com/{TOKEN}"
    assert receiver.secret is not None and receiver.secret.get_secret_value() == SECRET

    monkeypatch.delenv("HOOK_SECRET")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "environment variable HOOK_SECRET is not set" in str(err.value)
    assert _leaks(str(err.value)) == []
