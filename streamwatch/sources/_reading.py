"""What every file reader shares: bounded line reading, JSON parsing, problem reporting.

Lines are read from a binary file with a length limit, so a line of any size costs at most
``max_line_bytes`` of memory: the rest of an over-long line is read in chunks and discarded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from streamwatch.events import Event, Problem, decode_event
from streamwatch.sources._json import loads

__all__ = ["BOM", "ReadContext", "ReadStats"]

BOM = b"\xef\xbb\xbf"
_CHUNK = 1 << 20
_PREVIEW = 60


@dataclass
class ReadStats:
    """Running counts for one pass over a file; ``bytes_read`` advances as it is read."""

    lines: int = 0
    events: int = 0
    values: int = 0
    problems: int = 0
    #: lines (or entries) with at least one problem: a line with five bad values counts once
    bad_lines: int = 0
    #: blank lines skipped
    blank_lines: int = 0
    bytes_read: int = 0
    #: where the step came from (a key, a column, the progress bar...)
    step_source: str = ""
    #: where the last event was read (a line number, ``log_history[3]``, ``record 12``)
    where: int | str = 0

    def reset(self) -> None:
        self.lines = self.events = self.values = self.problems = self.bytes_read = 0
        self.bad_lines = self.blank_lines = 0
        self.step_source = ""
        self.where = 0


def preview(raw: bytes | str) -> str:
    """The start of a line, for a problem's reason; bytes that are not text (a binary
    file) are shown escaped, as Python writes bytes.

    >>> preview("  {bad json"), preview(b"\\x00\\x01\\xff\\xfebin")
    ("'{bad json'", "b'\\\\x00\\\\x01\\\\xff\\\\xfebin'")
    """
    if isinstance(raw, bytes):
        raw = raw.strip()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            cut = raw[:_PREVIEW]
            return repr(cut) + ("..." if len(raw) > _PREVIEW else "")
    else:
        text = raw
    text = text.strip()
    return repr(text if len(text) <= _PREVIEW else text[:_PREVIEW] + "...")


def _cut_short(raw: bytes, exc: json.JSONDecodeError) -> bool:
    """Whether a JSON error is the line ending before its object does."""
    text = raw.rstrip()
    if text.endswith((b"}", b"]")):
        return False
    return exc.msg.startswith("Unterminated string") or exc.pos >= len(text) - 1


class ReadContext:
    """One pass over one file: where it is, how to report, what has been counted."""

    def __init__(
        self,
        path: Path,
        *,
        fallback_run_id: str,
        run_id: str | None,
        report: Callable[[Problem], None],
        max_line_bytes: int,
        stats: ReadStats | None = None,
    ) -> None:
        self.path = path
        self.name = str(path)
        self.fallback_run_id = fallback_run_id
        self.run_id = run_id
        #: The run named in problems about whole lines (a reader sets it once it knows).
        self.line_run_id = run_id
        self.stats = stats if stats is not None else ReadStats()
        self.stats.reset()
        self.max_line_bytes = max_line_bytes
        self._report = report
        self._last_bad: int | str | None = None

    def origin(self, where: int | str) -> str:
        return f"{self.name}:{where}"

    def problem(
        self,
        where: int | str,
        reason: str,
        run_id: str | None = None,
        step: int | None = None,
        metric: str | None = None,
    ) -> None:
        self._count(where, 1)
        self._report(Problem(self.origin(where), reason, run_id, step, metric))

    def _count(self, where: int | str, problems: int) -> None:
        stats = self.stats
        stats.problems += problems
        if where != self._last_bad:
            self._last_bad = where
            stats.bad_lines += 1

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """Numbered lines that carry content (blank lines skipped, a leading BOM removed).

        Over-long lines are reported and skipped; a file without content is reported empty.
        """
        limit = self.max_line_bytes
        stats = self.stats
        content = False
        with open(self.path, "rb", buffering=_CHUNK) as fh:
            readline = fh.readline
            lineno = 0
            while line := readline(limit + 1):
                lineno += 1
                stats.lines += 1
                stats.bytes_read += len(line)
                if len(line) > limit and line[-1] != 0x0A:
                    content = True
                    length = len(line) + self._discard_rest(readline)
                    self.problem(
                        lineno,
                        f"line is {length:,} bytes, longer than the limit of {limit:,} bytes;"
                        " skipped",
                        self.line_run_id,
                    )
                    continue
                if lineno == 1 and line.startswith(BOM):
                    line = line[len(BOM) :]
                if not line or line.isspace():
                    stats.blank_lines += 1
                    continue
                content = True
                yield lineno, line
        if not content:
            self.problem(1, "file is empty", self.line_run_id)

    def _discard_rest(self, readline: Callable[[int], bytes]) -> int:
        """Read and drop the rest of the current line; return its length without the newline."""
        length = 0
        while chunk := readline(_CHUNK):
            self.stats.bytes_read += len(chunk)
            if chunk[-1] == 0x0A:
                return length + len(chunk) - 1
            length += len(chunk)
        return length

    @property
    def file_run_id(self) -> str:
        """The run id for formats that carry none in the data: the override, else the name."""
        return self.run_id if self.run_id is not None else self.fallback_run_id

    def parse_json(self, lineno: int, raw: bytes, *, document: bool = False) -> tuple[bool, object]:
        """Decode one JSON line (or, with ``document``, a whole file starting at ``lineno``).

        Returns ``(True, value)``, or ``(False, None)`` after reporting why it cannot be read.
        """
        try:
            return True, loads(raw)
        except UnicodeDecodeError as exc:
            reason = f"invalid UTF-8 at byte {exc.start}: {preview(raw)}"
        except json.JSONDecodeError as exc:
            msg = exc.msg.removesuffix(" at")  # json's "Invalid control character at"
            if document:
                lineno += exc.lineno - 1
                reason = f"invalid JSON ({msg} at column {exc.colno})"
            elif _cut_short(raw, exc):
                reason = (
                    f"line ends in the middle of its JSON (cut short at column {exc.colno},"
                    f" as by a writer stopped mid-line?): {preview(raw)}"
                )
            else:
                reason = f"invalid JSON ({msg} at column {exc.colno}): {preview(raw)}"
        except (ValueError, RecursionError) as exc:
            reason = f"unreadable JSON ({exc}): {preview(raw)}"
        self.problem(lineno, reason, self.line_run_id)
        return False, None

    def decode(self, obj: object, where: int | str, run_id: str | None = None) -> Event | None:
        """``decode_event`` with its problems reported; ``run_id`` fills in a missing one."""
        event, problems = decode_event(obj, self.origin(where), run_id)
        self.stats.where = where
        if problems:
            self._count(where, len(problems))
            for problem in problems:
                self._report(problem)
        return event
