"""The exit codes of the commands that judge runs (``replay``, ``watch``), decided once.

0: judged, nothing at or above ``--fail-on``; 1: an incident of that severity or worse
fired; 2: a usage error; 3: no event was read at all, so nothing was checked (an empty file
or a directory that never got a log is not a pass); 4: the incidents file could not be
written whole (a full disk): what was judged is not all on disk. Importing this module
imports nothing of the engine.

>>> from streamwatch.incidents import Severity
>>> exit_code(events=10, worst=Severity.WARNING, fail_on="warning")
1
>>> exit_code(events=10, worst=Severity.WARNING, fail_on="critical")
0
>>> exit_code(events=0, worst=None, fail_on=None)
3
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streamwatch.incidents import Severity
    from streamwatch.sinks.jsonl import JsonlSink

__all__ = [
    "EXIT_DISK_FULL",
    "EXIT_INCIDENT",
    "EXIT_NO_EVENTS",
    "EXIT_OK",
    "EXIT_USAGE",
    "exit_code",
    "unwritten",
]

EXIT_OK, EXIT_INCIDENT, EXIT_USAGE = 0, 1, 2
#: No event was read: nothing was checked, which is not a pass.
EXIT_NO_EVENTS = 3
#: The incidents file (``--incidents-out``) could not take every update (a full disk).
EXIT_DISK_FULL = 4


def exit_code(*, events: int, worst: Severity | None, fail_on: str | None) -> int:
    """The code of a judging command that read ``events`` and saw ``worst`` fire."""
    from streamwatch.incidents import Severity

    if events == 0:
        return EXIT_NO_EVENTS
    if fail_on and worst is not None and worst.rank >= Severity(fail_on).rank:
        return EXIT_INCIDENT
    return EXIT_OK


def unwritten(jsonl: JsonlSink | None) -> str | None:
    """The line a command prints when its incidents file (closed) lost updates, else None."""
    if jsonl is None or not jsonl.lost:
        return None
    from streamwatch.sinks.jsonl import describe_error

    failing = jsonl.failing
    why = describe_error(failing) if failing is not None else "an error"
    return f"streamwatch: {why} writing {jsonl.path}: {jsonl.lost} incident update(s) not written"
