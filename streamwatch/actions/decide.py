"""Should this rule act on this incident now? A pure decision that names its reason.

>>> from streamwatch.actions.config import ActionRule
>>> from streamwatch.alerting.config import InhibitConfig
>>> from streamwatch.incidents import Incident
>>> inc = Incident(id="a1", run_id="grpo-7", kind="entropy_collapse", severity="critical",
...     status="firing", indicator="entropy", metric="actor/entropy", step=800, message="")
>>> rule = ActionRule(do="stop", confirm_steps=10)
>>> def at(step, **kw):
...     args = dict(since=800, step=step, tags={}, now=0.0, silences=(), run_firing=(),
...         inhibit=InhibitConfig(), done=False)
...     return decide_action(rule, inc, **{**args, **kw})
>>> d = at(805)
>>> d.act, d.reason.value, d.detail
(False, 'not_confirmed', 'firing for 5 of 10 steps')
>>> at(810).reason.value
'dry_run'
>>> at(810, done=True).reason.value
'done_before'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase

from streamwatch.actions.config import ActionRule
from streamwatch.alerting.config import InhibitConfig
from streamwatch.alerting.inhibit import inhibited_by
from streamwatch.alerting.silence import Silence, silenced_by
from streamwatch.incidents import Incident, Severity, Status

__all__ = ["ActDecision", "ActReason", "decide_action", "match_rule"]


class ActReason(StrEnum):
    """Why a rule acted (or not). Stable names."""

    ACT = "act"
    DRY_RUN = "dry_run"
    NOT_CONFIRMED = "not_confirmed"
    DONE_BEFORE = "done_before"
    SILENCED = "silenced"
    INHIBITED = "inhibited"
    NOT_FIRING = "not_firing"
    INFO = "info"
    RUN_ID_MISMATCH = "run_id_mismatch"
    KIND_MISMATCH = "kind_mismatch"
    INDICATOR_MISMATCH = "indicator_mismatch"
    TAGS_MISMATCH = "tags_mismatch"
    SEVERITY_BELOW = "severity_below"


@dataclass(frozen=True, slots=True)
class ActDecision:
    act: bool  # carry it out (or, for DRY_RUN, log what it would do): either way, record it
    reason: ActReason
    detail: str = ""

    def __str__(self) -> str:
        return self.detail or self.reason.value


def match_rule(rule: ActionRule, inc: Incident, tags: Mapping[str, str]) -> ActDecision | None:
    """None when the rule applies to the incident; else why not."""
    if inc.status is not Status.FIRING:
        return ActDecision(False, ActReason.NOT_FIRING, "resolved")
    if inc.severity is Severity.INFO:
        return ActDecision(False, ActReason.INFO, "never on info incidents")
    if not fnmatchcase(inc.run_id, rule.run_id):
        why = f"run_id {inc.run_id} does not match {rule.run_id}"
        return ActDecision(False, ActReason.RUN_ID_MISMATCH, why)
    if rule.kinds and inc.kind not in rule.kinds:
        why = f"kind {inc.kind} not in {list(rule.kinds)}"
        return ActDecision(False, ActReason.KIND_MISMATCH, why)
    if not fnmatchcase(inc.indicator, rule.indicator):
        why = f"indicator {inc.indicator} does not match {rule.indicator}"
        return ActDecision(False, ActReason.INDICATOR_MISMATCH, why)
    for name, glob in rule.tags.items():
        value = tags.get(name)
        if value is None or not fnmatchcase(value, glob):
            why = f"tag {name}={value!r} does not match {glob}"
            return ActDecision(False, ActReason.TAGS_MISMATCH, why)
    if inc.severity.rank < rule.min_severity.rank:
        why = f"severity {inc.severity.value} < {rule.min_severity.value}"
        return ActDecision(False, ActReason.SEVERITY_BELOW, why)
    return None


def decide_action(
    rule: ActionRule,
    inc: Incident,
    *,
    since: int,
    step: int,
    tags: Mapping[str, str],
    now: float,
    silences: Iterable[Silence],
    run_firing: Iterable[Incident],
    inhibit: InhibitConfig,
    done: bool,
    healthy: int | None = 0,
) -> ActDecision:
    """One rule, one firing incident, at the run's ``step``.

    ``since``: the step at which the incident reached the rule's severity; ``done``: this
    rule already acted on this incident (in this process or, per the action log or the
    control topic, in an earlier one); ``healthy``: the updates in a row in which the
    incident's check has seen health since it last saw the failure. An incident is confirmed
    when ``confirm_steps`` have passed and its check still sees the failure (``healthy`` 0):
    an incident stays open for ``resolve_after`` healthy updates, so being open is not
    enough. Silences and inhibition apply as they do to alerts.
    """
    mismatch = match_rule(rule, inc, tags)
    if mismatch is not None:
        return mismatch
    if done:
        return ActDecision(False, ActReason.DONE_BEFORE, "done before for this incident")
    firing_for = step - since
    if firing_for < rule.confirm_steps:
        why = f"firing for {firing_for} of {rule.confirm_steps} steps"
        return ActDecision(False, ActReason.NOT_CONFIRMED, why)
    if healthy is None:
        return ActDecision(False, ActReason.NOT_FIRING, "no longer firing in the engine")
    if healthy > 0:
        why = f"its check has seen health for the last {healthy} update(s)"
        return ActDecision(False, ActReason.NOT_CONFIRMED, why)
    silence = silenced_by(inc, silences, now)
    if silence is not None:
        return ActDecision(False, ActReason.SILENCED, f"silenced by {silence.id}")
    hit = inhibited_by(inc, run_firing, inhibit)
    if hit is not None:
        return ActDecision(False, ActReason.INHIBITED, hit)
    why = f"still firing {firing_for} steps after step {since}"
    if rule.dry_run:
        return ActDecision(True, ActReason.DRY_RUN, f"dry run: {why}")
    return ActDecision(True, ActReason.ACT, why)
