"""The durable files of a state directory: spools, the sent-log, the failed log.

- ``spool/<receiver>.jsonl``: every message for a receiver is appended (and fsync'd) before
  it is tried, and stays until delivered or failed for good; the file is compacted when
  everything in it is done, and on start, when what is left is delivered again.
- ``sent.jsonl``: ids of delivered messages (the last ``sent_log_keep``), so that a restarted
  service never sends the same message twice.
- ``failed.jsonl``: messages a receiver refused for good (a 4xx other than 429), or set aside
  after their retries while the receiver took other messages, each with the HTTP status and
  the redacted reason; a message is written there once.
- ``intake.jsonl``: incident updates that arrived while the in-memory intake was full.

A line cut short by a crash is skipped (and said so) when the file is read back. A write
that fails (a full disk) does not raise: the lines are written whole or not at all (a part
written is truncated away), and each record not kept is said in the log, by what it was (a
spooled message is still delivered from memory, but would not survive a restart); the file
counts its failures in ``errors``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from pathlib import Path
from typing import Any

from streamwatch.alerting.message import Message
from streamwatch.incidents import Incident
from streamwatch.sinks.jsonl import describe_error, write_whole

__all__ = ["FailedLog", "IncidentSpill", "SentLog", "Spool", "read_jsonl"]

log = logging.getLogger(__name__)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            log.warning("%s:%d: skipping a damaged line (cut short by a crash?)", path, n)
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


class _AppendFile:
    """An append-only JSONL file; every line is flushed and fsync'd before append returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.errors = 0  # writes that failed

    def append(self, records: list[dict[str, Any]]) -> bool:
        """Append whole lines; False when the file could not take them (each record not
        kept is said in the log; nothing of them is left in the file)."""
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode()
        with self._lock:
            try:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                write_whole(self._fd, data)
                os.fsync(self._fd)
            except OSError as exc:
                self._not_kept(records, exc)
                return False
        return True

    def _not_kept(self, records: list[dict[str, Any]], exc: OSError) -> None:
        self.errors += 1
        why = describe_error(exc)
        for r in records:
            log.error("%s: %s: %s not kept on disk", self.path, why, self.what(r))

    def what(self, record: dict[str, Any]) -> str:
        """A record, in a few words (for the log line saying it was not kept)."""
        return "a record"

    def rewrite(self, records: list[dict[str, Any]]) -> bool:
        """Replace the contents atomically (write, fsync, rename); False when that failed
        (the file keeps what it held)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with self._lock:
            self._close()
            try:
                with tmp.open("w", encoding="utf-8") as f:
                    for r in records:
                        f.write(json.dumps(r, separators=(",", ":")) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except OSError as exc:
                self.errors += 1
                log.error("%s: could not rewrite it (%s); it keeps what it held", self.path, exc)
                tmp.unlink(missing_ok=True)
                return False
        return True

    def read(self) -> list[dict[str, Any]]:
        with self._lock:
            return read_jsonl(self.path)

    def _close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            self._close()


class Spool(_AppendFile):
    """Messages of one receiver not yet known to be done."""

    def add(self, message: Message) -> bool:
        """Spool a message; False when the disk did not take it (said in the log)."""
        return self.append([message.to_record()])

    def what(self, record: dict[str, Any]) -> str:
        return f"message {record.get('id')} for receiver {record.get('receiver')}"

    def load(self) -> list[Message]:
        out = []
        for rec in self.read():
            try:
                out.append(Message.from_record(rec))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("%s: skipping an unreadable message: %s", self.path, exc)
        return out

    def keep_only(self, messages: list[Message]) -> None:
        self.rewrite([m.to_record() for m in messages])


class SentLog(_AppendFile):
    """Delivered message ids, shared by all receivers of a state directory."""

    def __init__(self, path: Path, keep: int) -> None:
        super().__init__(path)
        self.keep = keep
        records = read_jsonl(path)
        self._order: deque[str] = deque(str(r.get("id")) for r in records[-keep:])
        self._ids = set(self._order)
        if len(records) > keep:
            self.rewrite(records[-keep:])

    def __contains__(self, message_id: object) -> bool:
        with self._lock:
            return message_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, message: Message, now: float, status: int | None) -> None:
        updates = [f"{i.id}:{i.status.value}:{i.step}" for i in message.incidents]
        record = {"id": message.id, "receiver": message.receiver, "ts": now, "status": status}
        self.append([{**record, "updates": updates}])
        with self._lock:
            self._ids.add(message.id)
            self._order.append(message.id)
            while len(self._order) > self.keep:
                self._ids.discard(self._order.popleft())


class FailedLog(_AppendFile):
    """Messages refused for good or set aside, with the status and redacted reason; the
    last ``keep`` of them (the file is cut back to those when a dispatcher starts)."""

    def __init__(self, path: Path, keep: int = 100_000) -> None:
        super().__init__(path)
        self.keep = keep
        records = read_jsonl(path)
        self._order: deque[str] = deque(str(r.get("message_id")) for r in records[-keep:])
        self._ids = set(self._order)
        if len(records) > keep:
            self.rewrite(records[-keep:])

    def __contains__(self, message_id: object) -> bool:
        with self._lock:
            return message_id in self._ids

    def add(self, message: Message, *, now: float, status: int | None, reason: str) -> None:
        incidents = [
            {"id": i.id, "run_id": i.run_id, "kind": i.kind, "status": i.status, "step": i.step}
            for i in message.incidents
        ]
        record = {
            "ts": now,
            "receiver": message.receiver,
            "message_id": message.id,
            "status": status,
            "reason": reason,
            "incidents": incidents,
        }
        self.append([record])
        with self._lock:
            self._ids.add(message.id)
            self._order.append(message.id)
            while len(self._order) > self.keep:
                self._ids.discard(self._order.popleft())


class IncidentSpill(_AppendFile):
    """Incident updates that found the in-memory intake full, in arrival order."""

    def add(self, inc: Incident) -> bool:
        return self.append([inc.model_dump(mode="json")])

    def what(self, record: dict[str, Any]) -> str:
        return (
            f"incident update {record.get('id')} ({record.get('kind')}, run {record.get('run_id')})"
        )

    def take(self) -> list[Incident]:
        """Everything spilled so far; the file is emptied."""
        records = self.read()
        self.rewrite([])
        return [Incident.model_validate(r) for r in records]
