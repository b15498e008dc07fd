"""Discord and email receivers against real servers on 127.0.0.1 (an HTTP server for
Discord's webhook, aiosmtpd with STARTTLS and AUTH for email), and the shared notifier tests
run over every receiver type: retry per status code, final failures, no secret leaks."""

from __future__ import annotations

import json
import random
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from streamwatch.alerting.config import AlertingConfig
from streamwatch.alerting.dispatcher import Dispatcher
from streamwatch.alerting.message import Message
from streamwatch.alerting.notify.discord import COLORS, check_discord, discord_payload
from streamwatch.alerting.notify.email import SmtpPoster, email_message, mail_text
from streamwatch.alerting.notify.http import HttpRequest
from streamwatch.alerting.redact import Redactor
from streamwatch.alerting.testing import RecordingReceiver, Reply, free_port, incident
from streamwatch.clock import SystemClock
from streamwatch.incidents import Incident

TOKEN = "DISC0RD-t0ken-abcdef123456"
PASSWORD = "smtp-pa55-XYZ987"
HTTP_TYPES = ("slack", "webhook", "discord")


def config(receiver: dict[str, Any], **delivery: Any) -> AlertingConfig:
    policy = {"timeout": 5.0, "backoff_initial": 0.05, "backoff_max": 0.2, "max_attempts": 4}
    policy.update(delivery)
    return AlertingConfig.model_validate(
        {"receivers": [receiver], "group_wait": 0.0, "delivery": policy}
    )


def send_one(cfg: AlertingConfig, state: Path, timeout: float = 10.0) -> tuple[Dispatcher, Any]:
    d = Dispatcher(cfg, state_dir=state, rng=random.Random(3))
    d.send(incident("grpo-7", "entropy_collapse", indicator="entropy", step=812))
    return d, d.close(timeout=timeout)


def failed_records(state: Path) -> list[dict[str, Any]]:
    path = state / "failed.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


# -- shared notifier tests over the HTTP receivers ---------------------------------------


@pytest.mark.parametrize("kind", HTTP_TYPES)
def test_5xx_and_429_are_retried_then_delivered_once(kind: str, tmp_path: Path) -> None:
    script = [Reply(503), Reply(429, {"Retry-After": "1"})]
    with RecordingReceiver(script, default=Reply(204, body=b""), path=f"/{TOKEN}") as rx:
        _, report = send_one(config({"name": "r", "type": kind, "url": rx.url}), tmp_path)
    assert (report.delivered, report.failed, report.spooled) == (1, 0, 0)
    assert [r.reply.status for r in rx.requests] == [503, 429, 204]
    assert len({r.body for r in rx.requests}) == 1  # the same payload each time
    assert rx.requests[2].at - rx.requests[1].at >= 1.0  # Retry-After held


@pytest.mark.parametrize("kind", HTTP_TYPES)
@pytest.mark.parametrize("status", [400, 403, 404])
def test_other_4xx_is_final_after_one_attempt(kind: str, status: int, tmp_path: Path) -> None:
    with RecordingReceiver(default=Reply(status, body=b"bad")) as rx:
        _, report = send_one(config({"name": "r", "type": kind, "url": rx.url}), tmp_path)
    assert (report.delivered, report.failed) == (0, 1) and len(rx.requests) == 1
    [record] = failed_records(tmp_path)
    assert record["status"] == status and record["reason"] == f"final: HTTP {status} (bad)"


@pytest.mark.parametrize("kind", HTTP_TYPES)
def test_the_url_token_never_leaks(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    echo = Reply(500, body=f"no route for /{TOKEN}".encode())
    with RecordingReceiver(default=echo, path=f"/api/webhooks/1/{TOKEN}") as rx:
        cfg = config({"name": "r", "type": kind, "url": rx.url}, max_attempts=2)
        with caplog.at_level("DEBUG"):
            d, report = send_one(cfg, tmp_path, timeout=3.0)
    texts = [r.getMessage() for r in caplog.records] + [o.reason for o in d.outcomes]
    texts += [str(report)] + [p.read_text() for p in tmp_path.rglob("*.jsonl")]
    assert any("[redacted]" in t for t in texts)
    assert not [t for t in texts if TOKEN in t]


# -- Discord ------------------------------------------------------------------------------


def test_discord_gets_embeds_it_would_take(tmp_path: Path) -> None:
    with RecordingReceiver(default=Reply(204, body=b""), path="/api/webhooks/1/x") as rx:
        cfg = config({"name": "discord", "type": "discord", "url": rx.url})
        d = Dispatcher(cfg, state_dir=tmp_path)
        d.send(incident("grpo-7", "entropy_collapse", indicator="entropy", severity="critical"))
        d.send(incident("grpo-7", "reward_hacking", indicator="reward", step=120))
        assert d.close(timeout=10.0).delivered == 1
    body = rx.accepted()[0].json()
    assert body["allowed_mentions"] == {"parse": []}
    assert check_discord(body) == []
    titles = [e["title"] for e in body["embeds"]]
    assert titles == [
        "CRITICAL entropy_collapse on entropy at step 100",
        "WARNING reward_hacking on reward at step 120",
    ]
    assert [e["color"] for e in body["embeds"]] == [COLORS["critical"], COLORS["warning"]]
    assert {f["name"] for f in body["embeds"][0]["fields"]} == {"value", "reference"}
    assert body["embeds"][0]["timestamp"].startswith("2023-11-14T22:15:")


def test_a_big_discord_message_stays_within_the_limits() -> None:
    incs = tuple(
        incident(
            "run-@everyone",
            "metric_spike",
            indicator=f"m{n}",
            message="x" * 3000,
            evidence={f"e{k}": 1.0 / (k + 1) for k in range(30)},
            remedies=["r" * 800] * 3,
        )
        for n in range(40)
    )
    payload = discord_payload(Message.build("d", "g", {"run_id": "run-@everyone"}, incs))
    assert check_discord(payload) == []
    assert payload["embeds"][-1]["title"].startswith("…and ")
    assert len(payload["embeds"]) <= 10


# -- email over SMTP ----------------------------------------------------------------------


@dataclass
class Mailbox:
    """What an aiosmtpd handler took in, and what it should answer."""

    mails: list[tuple[str, list[str], bytes, bool]] = field(default_factory=list)
    data_replies: list[str] = field(default_factory=list)
    rcpt_reply: str = "250 OK"
    logins: list[bytes] = field(default_factory=list)

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        if self.rcpt_reply.startswith("250"):
            envelope.rcpt_tos.append(address)
        return self.rcpt_reply

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if self.data_replies:
            return self.data_replies.pop(0)
        content = envelope.content if isinstance(envelope.content, bytes) else b""
        tls = session.ssl is not None
        self.mails.append((str(envelope.mail_from), list(envelope.rcpt_tos), content, tls))
        return "250 Message accepted"

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        if isinstance(data, LoginPassword):
            self.logins.append(data.login)
            if data.login == b"ml-alerts" and data.password == PASSWORD.encode():
                return AuthResult(success=True)
        return AuthResult(success=False, handled=False)


@pytest.fixture
def certs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    ca = trustme.CA()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    return ctx


@pytest.fixture
def smtp(certs: ssl.SSLContext) -> Iterator[tuple[Mailbox, int]]:
    box = Mailbox()
    port = free_port()
    controller = Controller(
        box,
        hostname="127.0.0.1",
        port=port,
        tls_context=certs,
        require_starttls=True,
        auth_required=True,
        auth_require_tls=True,
        authenticator=box.authenticate,
    )
    controller.start()
    try:
        yield box, port
    finally:
        controller.stop()


def mail_receiver(port: int, password: str = PASSWORD, **over: Any) -> dict[str, Any]:
    return {
        "name": "mail",
        "type": "email",
        "url": f"smtp://127.0.0.1:{port}",
        "email_from": "streamwatch@example.com",
        "email_to": ["ml-oncall@example.com", "team@example.com"],
        "username": "ml-alerts",
        "password": password,
        **over,
    }


def test_email_goes_out_over_starttls_with_login(smtp: tuple[Mailbox, int], tmp_path: Path) -> None:
    box, port = smtp
    _, report = send_one(config(mail_receiver(port)), tmp_path)
    assert report.delivered == 1
    [(sender, rcpts, content, tls)] = box.mails
    assert tls, "the mail was not sent inside STARTTLS"
    assert sender == "streamwatch@example.com"
    assert rcpts == ["ml-oncall@example.com", "team@example.com"]
    text = content.decode()
    assert "Subject: WARNING: entropy_collapse in run grpo-7" in text
    assert "entropy_collapse on entropy at step 812" in text and "try: look at the run" in text
    assert box.logins == [b"ml-alerts"]


def test_email_4xx_is_retried_and_5xx_is_final(smtp: tuple[Mailbox, int], tmp_path: Path) -> None:
    box, port = smtp
    box.data_replies = ["451 4.3.0 try again later"]
    _, report = send_one(config(mail_receiver(port)), tmp_path / "a")
    assert report.delivered == 1 and len(box.mails) == 1
    box.rcpt_reply = "550 5.1.1 no such mailbox"
    _, report = send_one(config(mail_receiver(port)), tmp_path / "b")
    assert (report.delivered, report.failed) == (0, 1)
    [record] = failed_records(tmp_path / "b")
    assert record["status"] == 550 and "no such mailbox" in record["reason"]


def test_a_wrong_password_is_final_and_never_shown(
    smtp: tuple[Mailbox, int], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, port = smtp
    wrong = "wr0ng-" + PASSWORD
    with caplog.at_level("DEBUG"):
        d, report = send_one(config(mail_receiver(port, password=wrong)), tmp_path)
    assert (report.delivered, report.failed) == (0, 1)
    [record] = failed_records(tmp_path)
    assert record["status"] == 535
    texts = [r.getMessage() for r in caplog.records] + [o.reason for o in d.outcomes]
    texts += [p.read_text() for p in tmp_path.rglob("*.jsonl")]
    assert not [t for t in texts if wrong in t or PASSWORD in t]


def test_no_starttls_means_no_mail_and_no_password_sent(tmp_path: Path) -> None:
    box = Mailbox()
    port = free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port, auth_require_tls=False)
    controller.start()
    try:
        _, report = send_one(config(mail_receiver(port)), tmp_path)
    finally:
        controller.stop()
    assert (report.delivered, report.failed) == (0, 1)
    assert box.mails == [] and box.logins == []
    [record] = failed_records(tmp_path)
    assert "does not offer STARTTLS" in record["reason"]


def test_email_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="email needs email_from and email_to"):
        config(mail_receiver(25, email_to=[]))
    with pytest.raises(ValueError, match="never sent without TLS"):
        config(mail_receiver(25, starttls=False))
    with pytest.raises(ValueError, match=r"smtp://host\[:port\]"):
        config({**mail_receiver(25), "url": "https://mail.example.com"})
    with pytest.raises(ValueError, match="are for email"):
        config({"name": "d", "type": "discord", "url": "https://x/y", "email_to": ["a@b"]})


def long_incident(run_id: str) -> Incident:
    """A long, realistic incident: a message, evidence and remedies with lines of thousands
    of characters, text beyond ASCII, a line that starts with a dot and one with ``From ``."""
    trace = " ".join(
        f"step {s}: entropy {0.9 - s / 1e4:.4f} (−{s / 100:.2f} σ)" for s in range(150)
    )
    message = (
        f"entropy collapsed: {trace}\n.\n..hidden\nFrom the policy: the tail of the run\n"
        + "é" * 3000
    )
    return incident(
        run_id,
        "entropy_collapse",
        indicator="entropy",
        severity="critical",
        message=message,
        evidence={"trace": trace, "ratio": 0.05, "window": {"n": 8, "values": list(range(900))}},
        remedies=["lower the learning rate " + "and check the KL penalty " * 200, "☃ " * 2000],
        because=["the entropy fell below 5% of its reference " * 100],
    )


def test_a_long_mail_reaches_a_strict_server_and_decodes_back(tmp_path: Path) -> None:
    """aiosmtpd with its defaults refuses any line over 1,000 bytes ("500 Line too long");
    the mail goes through and reads back as the text that was sent."""
    box = Mailbox()
    port = free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    run_id = "grpo-7\r\nBcc: evil@example.com"
    message = Message.build("mail", "g", {"run_id": run_id}, (long_incident(run_id),))
    plain = {**mail_receiver(port, starttls=False), "username": None, "password": None}
    receiver = config(plain).receivers[0]
    poster = SmtpPoster(receiver, timeout=10.0, redactor=Redactor(), clock=SystemClock())
    mail = email_message(message, sender="sw@example.com", to=("ml@example.com",))
    try:
        result = poster.post(HttpRequest(mail.as_bytes()))
    finally:
        controller.stop()
    assert result.ok, result.reason
    [(_, rcpts, content, _)] = box.mails
    assert rcpts == ["ml-oncall@example.com", "team@example.com"]
    lines = content.split(b"\r\n")
    assert max(len(line) for line in lines) <= 78 and not any(b"\n" in line for line in lines)
    assert content.isascii()
    received = message_from_bytes(content, policy=policy.default)
    assert isinstance(received, EmailMessage)
    assert received["Bcc"] is None
    assert (
        received["Subject"] == "CRITICAL: entropy_collapse in run grpo-7\\r\\nBcc: evil@example.com"
    )
    text = received.get_content().replace("\r\n", "\n")  # lines end in CRLF in a mail
    assert text == mail_text(message)
    assert long_incident(run_id).message in text
