"""Incidents as JSON lines in a file: one update per line, keys sorted, each written through
to the file as it is sent (a reader of the file, or a process killed next, loses none)."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from streamwatch.incidents import Incident


class JsonlSink:
    def __init__(self, path: str | Path, *, append: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = self.path.open("a" if append else "w", encoding="utf-8")

    def send(self, inc: Incident) -> None:
        self._file.write(inc.to_json() + "\n")
        self._file.flush()

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
