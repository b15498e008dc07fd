"""The action log: one JSON line per action record, read back at start-up.

A restarted ``watch`` or service reads it and does not repeat what it holds. It keeps the
last ``keep`` records: past twice that many lines the file is rewritten with the newest.
Several processes may share one log (the workers of ``run --workers``, whose runs move
between them): each line is appended, and the file compacted, under an exclusive ``flock``
on ``<log>.lock``, and a compaction reads the file again, so it keeps every writer's newest
records, not only its own.

>>> import tempfile
>>> from pathlib import Path
>>> from streamwatch.actions.record import ActionRecord
>>> path = Path(tempfile.mkdtemp()) / "actions.jsonl"
>>> book = ActionLog(path)
>>> book.add(ActionRecord(run_id="r", incident_id="a1", kind="entropy_collapse",
...     rule="stop", do="stop", status="done", step=812))
>>> [r.key for r in ActionLog(path).records()]
['a1/stop']
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from streamwatch.actions.record import ActionRecord

__all__ = ["ActionLog"]

log = logging.getLogger(__name__)


class ActionLog:
    def __init__(self, path: str | Path, keep: int = 10_000) -> None:
        self.path = Path(path)
        self.keep = keep
        self._records = self._read()
        self._lines = len(self._records)  # lines in the file, as far as this process knows

    def _read(self) -> list[ActionRecord]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out: list[ActionRecord] = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(ActionRecord.from_dict(json.loads(line)))
            except (ValueError, AttributeError) as exc:  # a torn last line, a hand edit
                log.warning("action log %s line %d set aside: %s", self.path, n, exc)
        return out[-self.keep :]

    def records(self) -> list[ActionRecord]:
        return list(self._records)

    def read(self) -> list[ActionRecord]:
        """The file's records as they are now, every writer's (the workers that share it):
        what a new owner of a run learns beside the control topic."""
        return self._read()

    def add(self, record: ActionRecord) -> None:
        self._records.append(record)
        if len(self._records) > self.keep:
            del self._records[0]
        line = json.dumps(record.to_dict(), sort_keys=True) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self._lines += 1
            if self._lines > 2 * self.keep:
                self._compact()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The log's lock: one writer at a time, whatever the process."""
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _compact(self) -> None:
        """The file rewritten with its newest ``keep`` records, every writer's (under the
        lock: read again, since other processes append to it too)."""
        records = self._read()
        self._lines = len(records)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r.to_dict(), sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
