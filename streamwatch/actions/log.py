"""The action log: one JSON line per action record, read back at start-up.

A restarted ``watch`` or service reads it and does not repeat what it holds. It keeps the
last ``keep`` records: past twice that many lines the file is rewritten with the newest.

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

import json
import logging
import os
from pathlib import Path

from streamwatch.actions.record import ActionRecord

__all__ = ["ActionLog"]

log = logging.getLogger(__name__)


class ActionLog:
    def __init__(self, path: str | Path, keep: int = 10_000) -> None:
        self.path = Path(path)
        self.keep = keep
        self._records = self._read()

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

    def add(self, record: ActionRecord) -> None:
        self._records.append(record)
        line = json.dumps(record.to_dict(), sort_keys=True) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        if len(self._records) > 2 * self.keep:
            self._records = self._records[-self.keep :]
            self._rewrite()

    def _rewrite(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for r in self._records:
                f.write(json.dumps(r.to_dict(), sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
