"""Incidents as JSON lines in a file: one update per line, keys sorted, each written through
to the file as it is sent (a reader of the file, or a process killed next, loses none).

A write that fails (a full disk: ``OSError`` ENOSPC, or any other) does not raise: the sink
marks itself failing, counts it, says it once in the log (the file and the error), and keeps
the lines it could not write in memory (up to ``max_backlog``; the oldest are dropped past
it, counted) to write them at the next :meth:`~JsonlSink.send` or :meth:`~JsonlSink.flush`.
Lines are written whole: a write cut short is truncated away, so the file never ends in a
torn line.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "incidents.jsonl"
>>> sink = JsonlSink(path)
>>> sink.write_line('{"a":1}')
True
>>> sink.close()
>>> path.read_text()
'{"a":1}\\n'
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections import deque
from pathlib import Path

from streamwatch.incidents import Incident

__all__ = ["JsonlSink", "describe_error", "write_whole"]

log = logging.getLogger(__name__)

#: Lines held in memory while the file cannot take them.
MAX_BACKLOG = 10_000


def describe_error(exc: OSError) -> str:
    """``disk full`` for ENOSPC (and a quota exceeded), else the error's own words."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk full"
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or exc} ({name})" if name else str(exc)


def write_whole(fd: int, data: bytes) -> None:
    """All of ``data`` at the end of the file, or nothing: a part written before an error is
    truncated away (the file never ends in a torn line) and the error raised."""
    start = os.lseek(fd, 0, os.SEEK_END)
    done = 0
    try:
        while done < len(data):
            n = os.write(fd, data[done:])
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += n
    except OSError:
        if done:
            with contextlib.suppress(OSError):  # not a regular file: nothing to cut
                os.ftruncate(fd, start)
        raise


class JsonlSink:
    def __init__(
        self, path: str | Path, *, append: bool = False, max_backlog: int = MAX_BACKLOG
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if append else os.O_TRUNC)
        self._fd = os.open(self.path, flags, 0o644)
        self.backlog: deque[bytes] = deque()
        self.max_backlog = max_backlog
        #: the last write's error while failing, else None
        self.failing: OSError | None = None
        self.errors = 0  # writes that failed
        self.dropped = 0  # lines dropped from a full backlog (lost)

    @property
    def lost(self) -> int:
        """Lines not in the file: still held, or dropped."""
        return len(self.backlog) + self.dropped

    def send(self, inc: Incident) -> None:
        self.write_line(inc.to_json())

    def write_line(self, line: str) -> bool:
        """Write one line (after those held); False when it is held for later."""
        if len(self.backlog) >= self.max_backlog:
            self.backlog.popleft()
            self.dropped += 1
        self.backlog.append((line + "\n").encode("utf-8"))
        return self._drain()

    def flush(self) -> None:
        """Try again to write what is held (each line goes through as it is sent)."""
        if self.backlog:
            self._drain()

    def _drain(self) -> bool:
        while self.backlog:
            try:
                write_whole(self._fd, self.backlog[0])
            except OSError as exc:
                self._failed(exc)
                return False
            self.backlog.popleft()
        if self.failing is not None:
            log.warning("%s: writing again (%d line(s) dropped meanwhile)", self.path, self.dropped)
            self.failing = None
        return True

    def _failed(self, exc: OSError) -> None:
        self.errors += 1
        if self.failing is None:
            log.error(
                "%s: %s writing incidents (errno %s); %d line(s) held in memory, retried later",
                self.path,
                describe_error(exc),
                errno.errorcode.get(exc.errno or 0, exc.errno),
                len(self.backlog),
            )
        self.failing = exc

    def close(self) -> None:
        """A last try at what is held; then the file is closed (what is still held is lost,
        counted in :attr:`lost`)."""
        self.flush()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
