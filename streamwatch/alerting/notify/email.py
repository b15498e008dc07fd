"""Email: a message as a plain-text mail, sent over SMTP with STARTTLS (or implicit TLS).

The receiver's ``url`` is ``smtp://host[:port]`` (port 587; STARTTLS is required unless
``starttls = false``, and credentials are never sent without TLS) or ``smtps://host[:port]``
(port 465, TLS from the first byte). Answers are classified the SMTP way: 2xx delivered;
4xx (``421`` busy, ``451`` try later, ``454`` auth unavailable) and lost connections are
retried; 5xx (``550`` no such mailbox, ``535`` bad credentials, ``554``) are final; a server
that does not offer STARTTLS, or whose certificate does not verify, is final too.

The mail: ``Subject`` is the message's header line; one block per incident (severity, kind,
indicator, step, the message, key evidence, what to try, the run link); ``Message-ID`` is
derived from the message id, so a mail system can drop a duplicate.

The mail is what SMTP wants whatever the producer's names: the subject through
:func:`~streamwatch.names.for_header` (no CR, LF or NUL: a run id cannot add a ``Bcc``),
headers folded and encoded, lines ended by CRLF (``email.policy.SMTP``), the body
quoted-printable, so no line is longer than 78 characters however long a message or a piece
of evidence is (RFC 5322 allows 998) and the mail is 7-bit.

>>> from streamwatch.alerting.testing import incident
>>> from streamwatch.alerting.message import Message
>>> m = Message.build("mail", "g", {"run_id": "grpo-7"}, (incident("grpo-7"),))
>>> mail = email_message(m, sender="sw@example.com", to=("ml@example.com",))
>>> mail["Subject"], mail["Message-ID"] == f"<{m.id}@streamwatch>"
('WARNING: metric_spike in run grpo-7', True)
>>> max(len(line) for line in mail.as_bytes().split(b"\\r\\n")) <= 78
True
"""

from __future__ import annotations

import contextlib
import smtplib
import socket
import ssl
import threading
from email import policy
from email.message import EmailMessage
from email.utils import formatdate
from urllib.parse import urlsplit

from streamwatch.alerting.config import Receiver, Templates
from streamwatch.alerting.message import Message
from streamwatch.alerting.notes import incident_notes
from streamwatch.alerting.notify.http import HttpRequest
from streamwatch.alerting.notify.text import flatten_evidence, header_text, incident_link
from streamwatch.alerting.redact import Redactor
from streamwatch.alerting.retry import SendResult
from streamwatch.clock import Clock
from streamwatch.incidents import Incident, Status
from streamwatch.names import for_header

__all__ = ["EmailNotifier", "SmtpPoster", "email_message", "mail_text"]

_KEY_EVIDENCE = 12
_EXCERPT = 200


def _block(inc: Incident, link: str | None) -> str:
    state = "RESOLVED" if inc.status is Status.RESOLVED else inc.severity.value.upper()
    onset = f" (onset step {inc.onset_step})" if inc.onset_step is not None else ""
    lines = [f"{state}  {inc.kind} on {inc.indicator} at step {inc.step}{onset}", inc.message]
    if inc.metric and inc.metric != inc.indicator:
        lines.append(f"metric: {inc.metric}")
    lines += incident_notes(inc)
    if inc.status is Status.FIRING:
        lines += [f"why: {w}" for w in inc.because]
        lines += [f"  {k} = {v}" for k, v in flatten_evidence(inc.evidence)[:_KEY_EVIDENCE]]
        lines += [f"try: {r}" for r in inc.remedies]
    url = incident_link(link, inc)
    if url is not None:
        lines.append(url)
    return "\n".join(lines)


def mail_text(message: Message, link: str | None = None) -> str:
    """The mail's text: one block per incident and a footer; every line break a ``\\n``."""
    blocks = [_block(inc, link) for inc in message.incidents]
    footer = f"-- \nstreamwatch · message {message.id} · group {message.group_key}"
    text = "\n\n".join([*blocks, footer]) + "\n"
    return text.replace("\r\n", "\n").replace("\r", "\n")


def email_message(
    message: Message, *, sender: str, to: tuple[str, ...], link: str | None = None
) -> EmailMessage:
    mail = EmailMessage(policy=policy.SMTP)
    mail["Subject"] = for_header(header_text(message))
    mail["From"] = sender
    mail["To"] = ", ".join(to)
    mail["Date"] = formatdate(message.created or None, usegmt=True)
    mail["Message-ID"] = f"<{message.id}@streamwatch>"
    mail["X-Streamwatch-Message-Id"] = message.id
    mail.set_content(mail_text(message, link), cte="quoted-printable")
    return mail


class EmailNotifier:
    def __init__(self, receiver: Receiver, templates: Templates) -> None:
        self.sender = receiver.email_from or ""
        self.to = receiver.email_to
        self.link = receiver.link or templates.link

    def build(self, message: Message) -> HttpRequest:
        mail = email_message(message, sender=self.sender, to=self.to, link=self.link)
        return HttpRequest(mail.as_bytes())


def _answer(code: int, text: bytes | str) -> SendResult:
    """An SMTP reply as a result: 4xx is worth another try, 5xx is not."""
    detail = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    reason = f"SMTP {code} ({detail.strip()[:_EXCERPT]})"
    return SendResult(200 <= code < 300, 400 <= code < 500, code, reason)


class SmtpPoster:
    """Sends a built mail to one SMTP server; a new connection per mail; :meth:`abort` cuts
    one in flight."""

    def __init__(
        self, receiver: Receiver, *, timeout: float, redactor: Redactor, clock: Clock
    ) -> None:
        parts = urlsplit(receiver.url.get_secret_value())
        self._implicit = parts.scheme == "smtps"
        self._host = parts.hostname or ""
        self._port = parts.port or (465 if self._implicit else 587)
        self._starttls = receiver.starttls and not self._implicit
        self._user = receiver.username
        self._password = receiver.password
        self._sender = receiver.email_from or ""
        self._to = list(receiver.email_to)
        self.timeout = timeout
        self.redact = redactor
        self.clock = clock
        self._tls = ssl.create_default_context()
        self._lock = threading.Lock()
        self._conn: smtplib.SMTP | None = None
        self._aborted = False

    def post(self, request: HttpRequest) -> SendResult:
        try:
            conn = self._open()
        except (OSError, smtplib.SMTPException) as exc:
            return self._failure(exc)
        with self._lock:
            if self._aborted:
                conn.close()
                return SendResult.error("aborted: the dispatcher is closing")
            self._conn = conn
        try:
            return self._send(conn, request.body)
        except (OSError, smtplib.SMTPException) as exc:
            return self._failure(exc)
        finally:
            with self._lock:
                self._conn = None
            conn.close()

    def _open(self) -> smtplib.SMTP:
        if self._implicit:
            return smtplib.SMTP_SSL(self._host, self._port, timeout=self.timeout, context=self._tls)
        return smtplib.SMTP(self._host, self._port, timeout=self.timeout)

    def _send(self, conn: smtplib.SMTP, body: bytes) -> SendResult:
        conn.ehlo()
        if self._starttls:
            if not conn.has_extn("starttls"):
                why = "the server does not offer STARTTLS: not sending in the clear"
                return SendResult.error(why, retryable=False)
            conn.starttls(context=self._tls)
            conn.ehlo()
        if self._user is not None and self._password is not None:
            conn.login(self._user, self._password.get_secret_value())
        refused = conn.sendmail(self._sender, self._to, body)
        with contextlib.suppress(OSError, smtplib.SMTPException):
            conn.quit()
        if refused:
            code, text = next(iter(refused.values()))
            return SendResult(
                True,
                False,
                250,
                self.redact(
                    f"accepted, but {len(refused)} "
                    f"recipient(s) refused: SMTP {code} "
                    f"{text.decode('utf-8', 'replace')}"
                ),
            )
        return SendResult(True, False, 250, "SMTP 250 (accepted)")

    def _failure(self, exc: BaseException) -> SendResult:
        if isinstance(exc, smtplib.SMTPRecipientsRefused):
            codes = [code for code, _ in exc.recipients.values()]
            code, text = next(iter(exc.recipients.values()))
            result = _answer(code, text)
            retry = all(400 <= c < 500 for c in codes)
            return SendResult(
                False, retry, code, self.redact("recipients refused: " + result.reason)
            )
        if isinstance(exc, smtplib.SMTPResponseException):
            result = _answer(exc.smtp_code, exc.smtp_error)
            return SendResult(False, result.retryable, result.status, self.redact(result.reason))
        if isinstance(exc, ssl.SSLCertVerificationError):
            return SendResult.error(f"TLS certificate: {self._text(exc)}", retryable=False)
        if isinstance(exc, smtplib.SMTPNotSupportedError):
            return SendResult.error(
                f"not supported by the server: {self._text(exc)}", retryable=False
            )
        if isinstance(exc, TimeoutError):
            return SendResult.error(f"timed out after {self.timeout:g} s")
        return SendResult.error(f"{type(exc).__name__}: {self._text(exc)}")

    def _text(self, exc: BaseException) -> str:
        return self.redact(str(exc))[:_EXCERPT] or "no detail"

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
