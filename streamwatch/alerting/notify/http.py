"""Posting a payload: one HTTP request, classified as delivered, retryable or final.

Nothing here lets the URL out: results and logs carry the receiver's name and, at most,
the URL's scheme and host; error texts pass through the receiver's redactor. A proxy named
by the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``: see
:mod:`~streamwatch.alerting.notify.proxy`) is used for every receiver it applies to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import socket
import ssl
import threading
from dataclasses import dataclass, field
from typing import Literal, Protocol
from urllib.parse import urlsplit

from streamwatch import __version__
from streamwatch.alerting.message import Message
from streamwatch.alerting.notify.proxy import Proxy, proxy_for
from streamwatch.alerting.redact import Redactor
from streamwatch.alerting.retry import SendResult, parse_retry_after
from streamwatch.clock import Clock

__all__ = ["USER_AGENT", "HttpPoster", "HttpRequest", "Notifier", "Poster", "classify"]

USER_AGENT = f"streamwatch/{__version__}"
_BODY_EXCERPT = 200
_MAX_READ = 64 * 1024


@dataclass(frozen=True, slots=True)
class HttpRequest:
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


class Notifier(Protocol):
    """Builds the bytes a receiver gets; no I/O."""

    def build(self, message: Message) -> HttpRequest: ...


class Poster(Protocol):
    def post(self, request: HttpRequest) -> SendResult: ...

    def abort(self) -> None: ...


def classify(status: int, body: bytes, retry_after: str | None, now: float) -> SendResult:
    """An HTTP answer as a :class:`SendResult` (the body excerpt says why, e.g. Slack's
    ``invalid_blocks``)."""
    detail = body[:_BODY_EXCERPT].decode("utf-8", "replace").strip().replace("\n", " ")
    return SendResult.http(status, detail, parse_retry_after(retry_after, now))


class HttpPoster:
    """POSTs to one URL; a new connection per request; :meth:`abort` cuts one in flight.

    ``proxy``: the HTTP proxy to go through; by default the one the environment names for
    this URL (None there: direct)."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        redactor: Redactor,
        clock: Clock,
        proxy: Proxy | Literal["environment"] | None = "environment",
    ) -> None:
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.proxy = proxy_for(url) if proxy == "environment" else proxy
        if self.proxy is not None and not self._https:  # a forwarded request: absolute form
            netloc = self._host if self._port is None else f"{self._host}:{self._port}"
            self._target = f"http://{netloc}{self._target}"
        self.timeout = timeout
        self.redact = redactor
        self.clock = clock
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._aborted = False
        self._tls = ssl.create_default_context() if self._https else None

    def _connect(self) -> http.client.HTTPConnection:
        proxy = self.proxy
        host, port = (self._host, self._port) if proxy is None else (proxy.host, proxy.port)
        if self._tls is None:
            return http.client.HTTPConnection(host, port, timeout=self.timeout)
        conn = http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self._tls)
        if proxy is not None:  # TLS to the receiver inside a CONNECT tunnel
            auth = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
            conn.set_tunnel(self._host, self._port or 443, headers=auth)
        return conn

    def post(self, request: HttpRequest) -> SendResult:
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        headers.update(request.headers)
        if self.proxy is not None and self.proxy.authorization and self._tls is None:
            headers["Proxy-Authorization"] = self.proxy.authorization
        conn = self._connect()
        with self._lock:
            if self._aborted:
                conn.close()
                return SendResult.error("aborted: the dispatcher is closing")
            self._conn = conn
        try:
            conn.request("POST", self._target, body=request.body, headers=headers)
            resp = conn.getresponse()
            body = resp.read(_MAX_READ)
            result = classify(resp.status, body, resp.getheader("Retry-After"), self.clock.now())
            return dataclasses.replace(result, reason=self.redact(result.reason))
        except ssl.SSLCertVerificationError as exc:
            return SendResult.error(f"TLS certificate: {self._text(exc)}", retryable=False)
        except TimeoutError:
            return SendResult.error(f"timed out after {self.timeout:g} s")
        except (OSError, http.client.HTTPException) as exc:
            return SendResult.error(f"{type(exc).__name__}: {self._text(exc)}")
        finally:
            with self._lock:
                self._conn = None
            conn.close()

    def _text(self, exc: BaseException) -> str:
        return self.redact(str(exc))[:_BODY_EXCERPT] or "no detail"

    def abort(self) -> None:
        """Cut a request in flight (its thread gets a connection error) and refuse new ones."""
        with self._lock:
            self._aborted = True
            conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
