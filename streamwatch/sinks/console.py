"""Readable incident lines for a terminal, coloured by severity when it is a TTY. Control
characters in a run id, a message or a remedy are shown as escapes
(:func:`~streamwatch.names.for_terminal`): a producer cannot forge a line or move the cursor."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from streamwatch.incidents import Incident, Severity, Status
from streamwatch.names import for_terminal

_COLOURS = {Severity.INFO: "\033[36m", Severity.WARNING: "\033[33m", Severity.CRITICAL: "\033[31m"}
_RESET = "\033[0m"
_KEY_EVIDENCE = 4


def format_incident(inc: Incident, colour: bool = False) -> str:
    """One line (two with remedies) a person can act on.

    >>> from streamwatch.incidents import Incident
    >>> i = Incident(id="a1", run_id="r", kind="entropy_collapse", severity="warning",
    ...     status="firing", indicator="entropy", metric="actor/entropy", step=812,
    ...     message="entropy collapsing", evidence={"ratio_to_reference": 0.05})
    >>> format_incident(i)
    'WARNING  r  step 812  entropy_collapse  entropy collapsing  [ratio_to_reference=0.05]'
    """
    label = inc.severity.value.upper() if inc.status is Status.FIRING else "RESOLVED"
    head = f"{label:<8} {inc.run_id}  step {inc.step}  {inc.kind}  {inc.message}"
    if inc.status is Status.FIRING and inc.evidence:
        items = list(inc.evidence.items())[:_KEY_EVIDENCE]
        head += "  [" + ", ".join(f"{k}={_num(v)}" for k, v in items) + "]"
    head = for_terminal(head)
    if colour:
        code = _COLOURS[inc.severity] if inc.status is Status.FIRING else "\033[32m"
        head = f"{code}{head}{_RESET}"
    return head


def _action(entry: Mapping[str, Any]) -> str:
    """``halt: would send SIGTERM to pid 12 (dry run, step 300)``."""
    status = entry.get("status")
    how = "dry run, " if status == "dry_run" else "failed, " if status == "failed" else ""
    return f"{entry.get('rule')}: {entry.get('detail', '')} ({how}step {entry.get('step')})"


def _num(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class ConsoleSink:
    """Prints incident updates as they happen, with the first remedy under firing ones;
    ``note`` adds a word to a line (which silence muted it)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        min_severity: Severity = Severity.INFO,
        note: Callable[[Incident], str] | None = None,
    ):
        self.stream = stream or sys.stdout
        self.colour = self.stream.isatty()
        self.min_severity = min_severity
        self.note = note
        #: per firing incident: the update last printed and the actions shown for it
        self._shown: dict[str, tuple[tuple[int, Severity, str], int]] = {}

    def send(self, inc: Incident) -> None:
        if inc.severity.rank < self.min_severity.rank:
            return
        shown = self._shown.pop(inc.id, None) if inc.status is not Status.FIRING else None
        if inc.status is Status.FIRING:
            key = (inc.step, inc.severity, inc.message)
            shown = self._shown.get(inc.id)
            if shown is not None and shown[0] == key and inc.actions:
                # the same update, now carrying what was done about it: that alone is new
                for entry in inc.actions[shown[1] :]:
                    print(f"         action: {for_terminal(_action(entry))}", file=self.stream)
                self._shown[inc.id] = (key, len(inc.actions))
                self.stream.flush()
                return
            self._shown[inc.id] = (key, len(inc.actions))
        line = format_incident(inc, self.colour)
        extra = for_terminal(self.note(inc)) if self.note is not None else ""
        print(f"{line}  ({extra})" if extra else line, file=self.stream)
        if inc.status is Status.FIRING and inc.remedies:
            print(f"         try: {for_terminal(inc.remedies[0])}", file=self.stream)
        self.stream.flush()  # a line as it happens, also into a pipe or a file

    def close(self) -> None:
        self.stream.flush()
