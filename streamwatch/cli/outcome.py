"""The exit codes of the commands that judge runs (``replay``, ``watch``), decided once.

0: judged, nothing at or above ``--fail-on``; 1: an incident of that severity or worse
fired; 2: a usage error; 3: no event was read at all, so nothing was checked (an empty file
or a directory that never got a log is not a pass). Importing this module imports nothing of
the engine.

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

__all__ = ["EXIT_INCIDENT", "EXIT_NO_EVENTS", "EXIT_OK", "EXIT_USAGE", "exit_code"]

EXIT_OK, EXIT_INCIDENT, EXIT_USAGE = 0, 1, 2
#: No event was read: nothing was checked, which is not a pass.
EXIT_NO_EVENTS = 3


def exit_code(*, events: int, worst: Severity | None, fail_on: str | None) -> int:
    """The code of a judging command that read ``events`` and saw ``worst`` fire."""
    from streamwatch.incidents import Severity

    if events == 0:
        return EXIT_NO_EVENTS
    if fail_on and worst is not None and worst.rank >= Severity(fail_on).rank:
        return EXIT_INCIDENT
    return EXIT_OK
