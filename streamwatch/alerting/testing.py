"""Test kit for alerting: an incident builder, a scriptable HTTP receiver, a listener that
never answers, and a port where nothing listens.

>>> with RecordingReceiver([Reply(500)]) as rx:
...     codes = [post(rx.url, b"{}") for _ in range(2)]
>>> codes, len(rx.accepted())
([500, 200], 1)
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from streamwatch.clock import SystemClock
from streamwatch.incidents import Incident, Severity, Status, fingerprint

__all__ = [
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
    from urllib.parse import urlsplit

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
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

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
