"""Slack and webhook delivery through a real HTTP proxy on 127.0.0.1, named by the
environment (HTTPS_PROXY / HTTP_PROXY / NO_PROXY): a CONNECT tunnel to an https:// receiver
with its own certificate, a forwarded request to an http:// one, proxy credentials, and
NO_PROXY going direct."""

from __future__ import annotations

import random
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from streamwatch.alerting.config import AlertingConfig
from streamwatch.alerting.dispatcher import Dispatcher
from streamwatch.alerting.notify.proxy import ProxyError
from streamwatch.alerting.notify.webhook import SIGNATURE_HEADER, verify_signature
from streamwatch.alerting.testing import ForwardProxy, RecordingReceiver, incident

PROXY_VARS = ("http_proxy", "https_proxy", "no_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def clean_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ssl.SSLContext]:
    """A server context for 127.0.0.1, its CA trusted by the process (SSL_CERT_FILE)."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.configure_cert(ctx)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    yield ctx


def config(receiver: dict[str, Any]) -> AlertingConfig:
    return AlertingConfig.model_validate(
        {
            "receivers": [receiver],
            "group_wait": 0.0,
            "delivery": {"timeout": 5.0, "backoff_initial": 0.05, "max_attempts": 3},
        }
    )


def deliver(cfg: AlertingConfig, state: Path) -> Any:
    d = Dispatcher(cfg, state_dir=state, rng=random.Random(1))
    d.send(incident("grpo-7b", "entropy_collapse", indicator="entropy", step=812))
    return d.close(timeout=10.0)


def test_slack_goes_through_https_proxy_in_a_connect_tunnel(
    tmp_path: Path, tls: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    with (
        RecordingReceiver(path="/services/T0/B1/XYZsecret", tls=tls) as slack,
        ForwardProxy() as proxy,
    ):
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        report = deliver(config({"name": "slack", "type": "slack", "url": slack.url}), tmp_path)
        assert report.delivered == 1
        [got] = slack.accepted()
        assert got.path == "/services/T0/B1/XYZsecret"
        assert "entropy_collapse" in got.json()["text"]
        # the proxy saw a tunnel to the host, never the secret path (TLS end to end)
        assert [(p.method, p.target) for p in proxy.seen] == [
            ("CONNECT", f"127.0.0.1:{slack.port}")
        ]


def test_a_webhook_goes_through_http_proxy_with_its_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with RecordingReceiver() as hook, ForwardProxy(credentials="ops:pa ss") as proxy:
        user_url = proxy.url.replace("http://", "http://ops:pa%20ss@")
        monkeypatch.setenv("http_proxy", user_url)
        receiver = {"name": "hook", "type": "webhook", "url": hook.url, "secret": "s3cret"}
        report = deliver(config(receiver), tmp_path)
        assert report.delivered == 1
        [got] = hook.accepted()
        assert verify_signature(got.body, got.headers[SIGNATURE_HEADER], "s3cret")
        [seen] = proxy.seen
        assert (seen.method, seen.target) == ("POST", hook.url)
        assert seen.authorization == "Basic b3BzOnBhIHNz"  # ops:pa ss


def test_a_webhook_over_https_goes_through_the_tunnel_too(
    tmp_path: Path, tls: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    with RecordingReceiver(tls=tls) as hook, ForwardProxy() as proxy:
        monkeypatch.setenv("https_proxy", proxy.url)
        report = deliver(config({"name": "hook", "type": "webhook", "url": hook.url}), tmp_path)
        assert report.delivered == 1 and len(hook.accepted()) == 1
        assert [p.method for p in proxy.seen] == ["CONNECT"]


def test_no_proxy_goes_direct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with RecordingReceiver() as hook, ForwardProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
        report = deliver(config({"name": "hook", "type": "webhook", "url": hook.url}), tmp_path)
        assert report.delivered == 1 and len(hook.accepted()) == 1
        assert proxy.seen == []


def test_wrong_proxy_credentials_are_reported_and_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with RecordingReceiver() as hook, ForwardProxy(credentials="ops:right") as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://ops:wrongpw@"))
        cfg = config({"name": "hook", "type": "webhook", "url": hook.url})
        with caplog.at_level("DEBUG"):
            d = Dispatcher(cfg, state_dir=tmp_path, rng=random.Random(1))
            d.send(incident())
            report = d.close(timeout=3.0)
        texts = [r.getMessage() for r in caplog.records] + [o.reason for o in d.outcomes]
    assert report.delivered == 0 and hook.requests == []
    assert len(proxy.seen) >= 1
    assert any("407" in t for t in texts)
    assert not any("wrongpw" in t for t in texts)


def test_an_https_proxy_url_is_refused_with_the_variable_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "https://user:pw@proxy.corp:3128")
    cfg = config({"name": "slack", "type": "slack", "url": "https://hooks.slack.com/x/y/z"})
    with pytest.raises(ProxyError, match="HTTPS_PROXY: must be an http:// proxy") as info:
        Dispatcher(cfg, state_dir=tmp_path)
    assert "pw" not in str(info.value)
