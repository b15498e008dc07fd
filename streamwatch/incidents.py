"""Incidents: the contract (the model every sink, topic and report reads), its kinds and
severities, and a stable fingerprint. What checks report and the firing -> resolved lifecycle
that turns their findings into incident updates are in :mod:`streamwatch.engine.findings`.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

__all__ = [
    "KINDS",
    "SEVERITY_RANK",
    "Incident",
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
        return SEVERITY_RANK[self]


#: each severity's order: info < warning < critical
SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


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
    #: a team's own ``[[rules]]`` entry held (the indicator is the rule's name)
    USER_RULE = "user_rule"


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
    #: the compute spent since the onset (:mod:`streamwatch.engine.cost`); None when not timed
    cost: dict[str, Any] | None = None
    #: where a failure that builds is heading (:mod:`streamwatch.engine.projection`)
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
