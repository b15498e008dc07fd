"""Incidents: the contract, a stable fingerprint and the firing -> resolved lifecycle.

A check reports a :class:`Finding` (the run is unhealthy in one respect, now) or nothing (the
check looked and saw health). The :class:`IncidentBook` of a run turns that stream into
incident updates: one firing incident per fingerprint, re-announced only when its severity
rises, resolved once the check has seen health for ``resolve_after`` consecutive updates.
An info of a fingerprint already announced (at any severity) is not announced again once it
resolved: an info says something worth knowing once (entropy at a tenth of its start while
the run learns, a KL beyond its ceiling beside a reward that does not fall), and it stays
true while the run goes on; a warning or a critical is always announced.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

__all__ = [
    "KINDS",
    "Finding",
    "Incident",
    "IncidentBook",
    "Kind",
    "Severity",
    "Status",
    "fingerprint",
]


class Severity(StrEnum):
    """What an incident asks of a person.

    info: a notable change, no action needed; warning: an unhealthy trend, look at the run
    soon; critical: the run is wasting compute now, act.
    """

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class Status(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"


class Kind(StrEnum):
    """Incident kinds. Stable names: add, never rename."""

    ENTROPY_COLLAPSE = "entropy_collapse"
    ENTROPY_BLOWUP = "entropy_blowup"
    REWARD_CHAOS = "reward_chaos"
    REWARD_COLLAPSE = "reward_collapse"
    LENGTH_EXPLOSION = "length_explosion"
    TRUNCATION_SATURATION = "truncation_saturation"
    LENGTH_COLLAPSE = "length_collapse"
    REWARD_HACKING = "reward_hacking"
    NONFINITE_METRIC = "nonfinite_metric"
    METRIC_SPIKE = "metric_spike"
    RUN_STALLED = "run_stalled"
    RANK_STRAGGLER = "rank_straggler"
    METRIC_DRIFT = "metric_drift"
    NO_LEARNING_SIGNAL = "no_learning_signal"
    POLICY_MISMATCH = "policy_mismatch"


KINDS: tuple[str, ...] = tuple(k.value for k in Kind)


def fingerprint(run_id: str, kind: str, indicator: str) -> str:
    """Stable id of an incident: the same (run, kind, indicator) always gives the same id."""
    digest = hashlib.sha256(f"{run_id}\x1f{kind}\x1f{indicator}".encode()).hexdigest()
    return digest[:16]


class Incident(BaseModel):
    """One incident update, as written to files, topics and receivers."""

    model_config = ConfigDict(frozen=True)

    id: str
    run_id: str
    kind: str
    severity: Severity
    status: Status
    indicator: str
    metric: str
    step: int
    onset_step: int | None = None
    ts: float | None = None
    message: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    remedies: list[str] = Field(default_factory=list)
    #: the compute spent since the onset (:mod:`streamwatch.cost`); None when not timed
    cost: dict[str, Any] | None = None
    #: where a failure that builds is heading (:mod:`streamwatch.projection`)
    projection: dict[str, Any] | None = None
    #: what was done about it (``[[actions]]``): ``{"rule", "do", "status", "step", "detail"}``
    #: items, on the update that reports them; absent from the JSON while empty
    actions: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def because(self) -> list[str]:
        """Why it fired at its severity (``evidence["because"]``): the rule and metric that
        raised it, the signals of the run that agreed or spoke against, the decision."""
        why = self.evidence.get("because")
        return [str(w) for w in why] if isinstance(why, list) else []

    def to_json(self) -> str:
        """One line of JSON with sorted keys: byte-identical for identical incidents."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @model_serializer(mode="wrap")
    def _without_empty_actions(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not self.actions:
            data.pop("actions", None)
        return data


@dataclass(slots=True)
class Finding:
    """What a check saw: the run is unhealthy in this respect at this step."""

    kind: Kind
    indicator: str
    metric: str
    severity: Severity
    step: int
    message: str
    evidence: dict[str, Any]
    onset_step: int | None = None
    #: which of the check's rules raised it ("level", "trend", "ceiling", ...): what its
    #: severity is judged by, with the run's context (:mod:`streamwatch.checks.judge`)
    rule: str = ""


@dataclass(slots=True)
class _Open:
    incident: Incident
    healthy: int = 0


@dataclass(slots=True)
class IncidentBook:
    """Lifecycle of one run's incidents. Pure: the caller passes steps and times in."""

    run_id: str
    resolve_after: int
    remedies: dict[str, list[str]]
    open: dict[str, _Open] = field(default_factory=dict)
    #: the (kind, indicator) of every open incident: what a check that saw health asks
    firing: set[tuple[str, str]] = field(default_factory=set)
    _fids: dict[tuple[str, str], str] = field(default_factory=dict)
    #: the fingerprints announced on this run: a later info of one of them is not news
    told: set[str] = field(default_factory=set)

    def fire(self, finding: Finding, ts: float | None) -> Incident | None:
        """Record a finding; return the update to announce, or None if nothing new."""
        fid = self.fid(finding.kind, finding.indicator)
        current = self.open.get(fid)
        if current is not None:
            current.healthy = 0
            if finding.severity.rank <= current.incident.severity.rank:
                return None
        elif finding.severity is Severity.INFO and fid in self.told:
            return None  # said once on this run
        onset = finding.onset_step
        if current is not None and current.incident.onset_step is not None:
            onset = current.incident.onset_step
        incident = Incident(
            id=fid,
            run_id=self.run_id,
            kind=finding.kind.value,
            severity=finding.severity,
            status=Status.FIRING,
            indicator=finding.indicator,
            metric=finding.metric,
            step=finding.step,
            onset_step=onset,
            ts=ts,
            message=finding.message,
            evidence=_copy(finding.evidence),
            remedies=list(self.remedies.get(finding.kind.value, [])),
        )
        self.open[fid] = _Open(incident)
        self.firing.add((finding.kind, finding.indicator))
        self.told.add(fid)
        return incident

    def healthy(self, kind: Kind, indicator: str, step: int, ts: float | None) -> Incident | None:
        """The check looked and saw health; resolve after enough of that in a row."""
        if (kind, indicator) not in self.firing:
            return None
        fid = self.fid(kind, indicator)
        current = self.open[fid]
        current.healthy += 1
        if current.healthy < self.resolve_after:
            return None
        return self.resolve(fid, step, ts, f"healthy for {current.healthy} updates")

    def resolve(self, fid: str, step: int, ts: float | None, why: str) -> Incident | None:
        current = self.open.pop(fid, None)
        if current is None:
            return None
        first = current.incident
        self.firing.discard((first.kind, first.indicator))
        return first.model_copy(
            update={
                "status": Status.RESOLVED,
                "step": step,
                "ts": ts,
                "message": f"resolved: {first.kind} on {first.indicator} ({why})",
            }
        )

    def firing_on(self, kind: Kind) -> set[str]:
        """The indicators with an incident of this kind open."""
        return {o.incident.indicator for o in self.open.values() if o.incident.kind == kind}

    def healthy_updates(self, fid: str) -> int | None:
        """Updates in a row in which the check saw health since it last saw this incident's
        failure (0: it saw the failure last); None when the incident is not firing."""
        current = self.open.get(fid)
        return None if current is None else current.healthy

    def is_firing(self, kind: Kind, indicator: str) -> bool:
        return (kind, indicator) in self.firing

    def fid(self, kind: str, indicator: str) -> str:
        """The fingerprint of this run's (kind, indicator), computed once."""
        key = (kind, indicator)
        fid = self._fids.get(key)
        if fid is None:
            fid = self._fids[key] = fingerprint(self.run_id, kind, indicator)
        return fid


def _copy(evidence: dict[str, Any]) -> dict[str, Any]:
    """The evidence as the check gave it, nested objects copied. Numbers keep their full
    precision (a timestamp rounded to 6 digits is off by hours); what shows them to a
    person rounds them (``format_value``, the console and report formats)."""
    return {k: _copy(v) if isinstance(v, dict) else v for k, v in evidence.items()}
