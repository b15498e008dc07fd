"""Test kit for alerting: an incident builder, a scriptable HTTP(S) receiver, a listener
that never answers, a port where nothing listens, and an HTTP proxy (CONNECT tunnels and
forwarded requests) that records what went through it.

>>> with RecordingReceiver([Reply(500)]) as rx:
...     codes = [post(rx.url, b"{}") for _ in range(2)]
>>> codes, len(rx.accepted())
([500, 200], 1)
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from streamwatch.clock import SystemClock
from streamwatch.incidents import Incident, Severity, Status, fingerprint

__all__ = [
    "ForwardProxy",
    "Received",
    "RecordingReceiver",
    "Reply",
    "SilentListener",
    "free_port",
    "incident",
    "post",
]

_clock = SystemClock()


def incident(
    run_id: str = "run-1",
    kind: str = "metric_spike",
    *,
    severity: str = "warning",
    status: str = "firing",
    indicator: str = "grad_norm",
    step: int = 100,
    **fields: Any,
) -> Incident:
    """An incident update with its real fingerprint id; any other field by keyword."""
    values: dict[str, Any] = {
        "id": fingerprint(run_id, kind, indicator),
        "run_id": run_id,
        "kind": kind,
        "severity": Severity(severity),
        "status": Status(status),
        "indicator": indicator,
        "metric": indicator,
        "step": step,
        "ts": 1_700_000_000.0 + step,
        "message": f"{kind} on {indicator} at step {step}",
        "evidence": {"value": 12.5, "reference": 1.0},
        "remedies": ["look at the run"],
    }
    values.update(fields)
    return Incident(**values)


def free_port() -> int:
    """A local TCP port where nothing listens (for "connection refused")."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post(url: str, body: bytes, timeout: float = 5.0) -> int:
    """POST a body to an http:// URL; the status code."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        conn.request("POST", parts.path or "/", body=body)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer: a status (with headers and body), or ``hang`` (no answer)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    hang: bool = False


@dataclass(frozen=True, slots=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    reply: Reply
    at: float  # monotonic seconds when the request arrived

    @property
    def ok(self) -> bool:
        return not self.reply.hang and 200 <= self.reply.status < 300

    def json(self) -> Any:
        return json.loads(self.body)


class RecordingReceiver:
    """An HTTP server on 127.0.0.1 (a free port) that records every POST and answers from
    a script (then ``default``). ``reply_for`` may pick the answer from the request instead."""

    def __init__(
        self,
        script: Sequence[Reply] = (),
        *,
        default: Reply | None = None,
        path: str = "/hook",
        port: int = 0,
        reply_for: Callable[[Received], Reply | None] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._script = list(script)
        self._default = default or Reply()
        self._reply_for = reply_for
        self.path = path
        self.requests: list[Received] = []
        self._lock = threading.Condition()
        self._release = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._tls = tls
        if tls is not None:  # an https:// receiver (a server-side context with its cert)
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        scheme = "https" if self._tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}{self.path}"

    def accepted(self) -> list[Received]:
        """Requests answered with a 2xx."""
        with self._lock:
            return [r for r in self.requests if r.ok]

    def wait_for(self, predicate: Callable[[RecordingReceiver], bool], timeout: float) -> bool:
        deadline = _clock.monotonic() + timeout
        with self._lock:
            while not predicate(self):
                left = deadline - _clock.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.05))
        return True

    def _answer(self, received: Received) -> Reply:
        with self._lock:
            reply = self._reply_for(received) if self._reply_for is not None else None
            if reply is None:
                reply = self._script.pop(0) if self._script else self._default
            self.requests.append(
                Received(received.path, received.headers, received.body, reply, received.at)
            )
            self._lock.notify_all()
        return reply

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                headers = {k: v for k, v in self.headers.items()}
                probe = Received(self.path, headers, body, Reply(), _clock.monotonic())
                reply = owner._answer(probe)
                if reply.hang:
                    owner._release.wait()
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> RecordingReceiver:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class SilentListener:
    """A TCP port that takes connections (the kernel's backlog) and never answers: a hung
    receiver."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(1024)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/hook"

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> SilentListener:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class Proxied:
    """One request the proxy saw: ``CONNECT host:port`` or a forwarded ``POST http://...``."""

    method: str
    target: str
    authorization: str | None


class ForwardProxy:
    """An HTTP proxy on 127.0.0.1: tunnels ``CONNECT`` and forwards absolute-form requests,
    recording each in :attr:`seen`. With ``credentials`` ("user:pw"), a request without the
    matching ``Proxy-Authorization: Basic`` gets 407."""

    def __init__(self, credentials: str | None = None) -> None:
        import base64

        self.seen: list[Proxied] = []
        self._lock = threading.Lock()
        self._auth = None
        if credentials is not None:
            self._auth = "Basic " + base64.b64encode(credentials.encode()).decode()
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                owner._handle(self)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _handle(self, h: socketserver.StreamRequestHandler) -> None:
        line = h.rfile.readline(65536).decode("latin-1").strip()
        if not line:
            return
        method, target, _ = line.split(" ", 2)
        headers: list[tuple[str, str]] = []
        while (raw := h.rfile.readline(65536)) not in (b"\r\n", b"\n", b""):
            name, _, value = raw.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        auth = next((v for k, v in headers if k.lower() == "proxy-authorization"), None)
        with self._lock:
            self.seen.append(Proxied(method, target, auth))
        if self._auth is not None and auth != self._auth:
            h.wfile.write(
                b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"
            )
            return
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            with socket.create_connection((host, int(port)), timeout=10) as upstream:
                h.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                h.wfile.flush()
                _pipe(h.connection, upstream)
            return
        parts = urlsplit(target)  # a forwarded request: absolute form
        length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
        body = h.rfile.read(length)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        kept = {k: v for k, v in headers if not k.lower().startswith("proxy-")}
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=kept)
            resp = conn.getresponse()
            data = resp.read()
            h.wfile.write(f"HTTP/1.1 {resp.status} {resp.reason}\r\n".encode())
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    h.wfile.write(f"{k}: {v}\r\n".encode("latin-1"))
            h.wfile.write(f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode())
            h.wfile.write(data)
        finally:
            conn.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> ForwardProxy:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until one side closes."""
    while True:
        ready, _, _ = select.select([a, b], [], [], 10.0)
        if not ready:
            return
        for src in ready:
            dst = b if src is a else a
            data = src.recv(65536)
            if not data:
                return
            dst.sendall(data)
