"""Ranks falling behind: a process whose steps lag more and more behind its peers'.

Ranks of one run report the same steps, but not at the same moment: processes start apart,
buffer their metrics, and publish at their own pace, so a rank may always be a few dozen
steps behind the newest step of the run (the fake cluster's ranks start 16-40 steps apart).
That offset is no finding. A rank whose lag grows is: it is slowing down, or it stopped.
The check keeps each source's last step and the smallest lag it ever had (its usual
offset), and on each new newest step of the run finds the sources now ``behind_steps``
further behind than that. Sources are at most ``MAX_SOURCES`` a run.

>>> from streamwatch.config import StragglerSettings
>>> check = LagCheck(StragglerSettings())
>>> found = []
>>> for step in range(1, 40):
...     found += check.heard("node-0/0", step)
...     if step < 20:
...         found += check.heard("node-0/1", step)
>>> found[0].step, found[0].evidence["sources"], found[0].evidence["steps_behind"]
(30, 'node-0/1', 10)
"""

from __future__ import annotations

from typing import Final

from mypy_extensions import mypyc_attr

from streamwatch.config import StragglerSettings
from streamwatch.engine.findings import Finding
from streamwatch.incidents import Kind, Severity

__all__ = ["MAX_SOURCES", "LagCheck"]

MAX_SOURCES: Final = 10_000


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class LagCheck:
    kinds: tuple[Kind, ...] = (Kind.RANK_STRAGGLER,)

    def __init__(self, settings: StragglerSettings) -> None:
        self.s = settings
        self.last: dict[str, int] = {}  # source -> its last step
        self.floor: dict[str, int] = {}  # source -> the smallest lag it had
        self.newest = -1

    def went_back(self, src: str, step: int) -> bool:
        """Is ``step`` before the source's last one (it restarted from a checkpoint)?"""
        last = self.last.get(src)
        return last is not None and step < last

    def restart(self) -> None:
        """The run resumed from a checkpoint: every source's place is new."""
        self.last.clear()
        self.floor.clear()
        self.newest = -1

    def heard(self, src: str, step: int) -> list[Finding]:
        """An event of ``src`` at ``step``; on a new newest step, the sources behind."""
        last = self.last
        at = last.get(src)
        if at is None:
            if len(last) >= MAX_SOURCES:
                return []
        elif len(last) == 1:  # the run's only source: no peer to fall behind
            if step > at:
                last[src] = self.newest = step
            return []
        if step > last.get(src, -1):
            last[src] = step
        if step <= self.newest:
            return []
        self.newest = step
        behind: list[tuple[int, str]] = []
        floor = self.floor
        for source, at in last.items():
            lag = step - at
            usual = floor.get(source)
            if usual is None or lag < usual:
                floor[source] = usual = lag
            if lag - usual >= self.s.behind_steps:
                behind.append((lag - usual, source))
        if not behind or len(last) < 2:
            return []
        behind.sort(reverse=True)
        worst, source = behind[0]
        names = ", ".join(src for _, src in behind)
        return [
            Finding(
                Kind.RANK_STRAGGLER,
                "ranks",
                "",
                Severity.WARNING,
                step,
                f"falling behind: {names} {'is' if len(behind) == 1 else 'are'} {worst} steps "
                f"further behind the run's newest step {step} than usual (at step "
                f"{last[source]})",
                {
                    "sources": names,
                    "steps_behind": worst,
                    "last_step": last[source],
                    "newest_step": step,
                    "usual_lag": floor[source],
                },
                onset_step=last[source],
            )
        ]
