"""Inhibition: a firing incident that explains others mutes them.

Two rules, each switchable in :class:`~streamwatch.alerting.config.InhibitConfig`:

- a firing ``run_stalled`` incident mutes the other incidents of its run (a run that stopped
  reporting makes every other symptom noise);
- a firing critical incident mutes warnings of the same run and indicator.

>>> from streamwatch.incidents import Incident
>>> def inc(kind, severity, indicator="entropy", id=None):
...     return Incident(id=id or kind, run_id="r", kind=kind, severity=severity,
...         status="firing", indicator=indicator, metric=indicator, step=5, message="")
>>> stalled = inc("run_stalled", "critical", "progress")
>>> inhibited_by(inc("entropy_collapse", "warning"), [stalled], InhibitConfig())
'inhibited by run_stalled run_stalled (run r is stalled)'
"""

from __future__ import annotations

from collections.abc import Iterable

from streamwatch.alerting.config import InhibitConfig
from streamwatch.incidents import Incident, Kind, Severity, Status

__all__ = ["FiringSet", "inhibited_by"]

_STALLED = Kind.RUN_STALLED.value


def inhibited_by(inc: Incident, run_firing: Iterable[Incident], rules: InhibitConfig) -> str | None:
    """Why a firing update is muted by another firing incident of its run, or None."""
    if inc.status is not Status.FIRING:
        return None
    for src in run_firing:
        if src.id == inc.id or src.run_id != inc.run_id or src.status is not Status.FIRING:
            continue
        if rules.stalled_mutes_run and src.kind == _STALLED and inc.kind != _STALLED:
            return f"inhibited by run_stalled {src.id} (run {inc.run_id} is stalled)"
        if (
            rules.critical_mutes_warning
            and inc.severity is Severity.WARNING
            and src.severity is Severity.CRITICAL
            and src.indicator == inc.indicator
        ):
            return f"inhibited by critical {src.kind} {src.id} on {src.indicator}"
    return None


class FiringSet:
    """The incidents firing now, per run, and when each first fired (stateful, no clock)."""

    def __init__(self, remember: int = 50_000) -> None:
        self._runs: dict[str, dict[str, Incident]] = {}
        self._since: dict[str, float] = {}
        self._remember = remember

    def observe(self, inc: Incident, now: float) -> None:
        run = self._runs.setdefault(inc.run_id, {})
        if inc.status is Status.FIRING:
            run[inc.id] = inc
            if inc.id not in self._since:
                self._since[inc.id] = inc.ts if inc.ts is not None else now
                if len(self._since) > self._remember:  # forget the oldest start times
                    del self._since[next(iter(self._since))]
        else:
            run.pop(inc.id, None)
            if not run:
                del self._runs[inc.run_id]

    def of_run(self, run_id: str) -> list[Incident]:
        return list(self._runs.get(run_id, {}).values())

    def is_firing(self, inc: Incident) -> bool:
        return inc.id in self._runs.get(inc.run_id, {})

    def since(self, incident_id: str) -> float | None:
        return self._since.get(incident_id)
