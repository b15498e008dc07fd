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

A line cut short by a crash is skipped (and said so) when the file is read back.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import deque
from pathlib import Path
from typing import IO, Any

from streamwatch.alerting.message import Message
from streamwatch.incidents import Incident

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
        self._file: IO[str] | None = None

    def append(self, records: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        with self._lock:
            if self._file is None:
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(text)
            self._file.flush()
            os.fsync(self._file.fileno())

    def rewrite(self, records: list[dict[str, Any]]) -> None:
        """Replace the contents atomically (write, fsync, rename)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with self._lock:
            self._close()
            with tmp.open("w", encoding="utf-8") as f:
                for r in records:
                    f.write(json.dumps(r, separators=(",", ":")) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)

    def read(self) -> list[dict[str, Any]]:
        with self._lock:
            return read_jsonl(self.path)

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def close(self) -> None:
        with self._lock:
            self._close()


class Spool(_AppendFile):
    """Messages of one receiver not yet known to be done."""

    def add(self, message: Message) -> None:
        self.append([message.to_record()])

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

    def add(self, inc: Incident) -> None:
        self.append([inc.model_dump(mode="json")])

    def take(self) -> list[Incident]:
        """Everything spilled so far; the file is emptied."""
        records = self.read()
        self.rewrite([])
        return [Incident.model_validate(r) for r in records]
