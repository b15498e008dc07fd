"""Should this update be notified? Pure decisions that say why, with ``now`` passed in.

A :class:`Decision` carries a :class:`Reason` (a stable name to count and test on) and a
detail text for people (which silence, which route, how long until the reminder).

>>> from streamwatch.incidents import Incident
>>> inc = Incident(id="a1", run_id="r", kind="entropy_collapse", severity="warning",
...     status="resolved", indicator="entropy", metric="actor/entropy", step=900, message="")
>>> d = decide_update(inc, now=0.0, silences=(), run_firing=(), inhibit=InhibitConfig(),
...     firing_notified=False, send_resolved=True)
>>> d.notify, d.reason.value, str(d)
(False, 'resolved_not_notified', 'resolved, but its firing notice was never sent')
>>> r = decide_repeat(last_sent=100.0, now=200.0, repeat_interval=3600.0)
>>> r.reason is Reason.REMINDER_NOT_DUE, r.detail
(True, 'reminder due in 3500 s')
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from streamwatch.alerting.config import InhibitConfig
from streamwatch.alerting.inhibit import inhibited_by
from streamwatch.alerting.silence import Silence, silenced_by
from streamwatch.incidents import Incident, Status

__all__ = ["Decision", "Reason", "decide_repeat", "decide_update"]


class Reason(StrEnum):
    """Why an update was (or was not) notified, or a route matched. Stable names."""

    FIRING_NEW = "firing_new"
    SEVERITY_CHANGED = "severity_changed"
    RESOLVED = "resolved"  # after a firing notice
    REMINDER = "reminder"
    ACTION_TAKEN = "action_taken"  # a firing update that reports an action
    ROUTE_MATCHED = "route_matched"
    SILENCED = "silenced"
    INHIBITED = "inhibited"
    RESOLVED_OFF = "resolved_off"  # resolve notices are off for the receiver
    RESOLVED_NOT_NOTIFIED = "resolved_not_notified"
    REMINDERS_OFF = "reminders_off"
    REMINDER_NOT_DUE = "reminder_not_due"
    NO_ROUTE = "no_route"
    RUN_ID_MISMATCH = "run_id_mismatch"
    KIND_MISMATCH = "kind_mismatch"
    INDICATOR_MISMATCH = "indicator_mismatch"
    LABEL_MISMATCH = "label_mismatch"  # a route's labels, a [[rules]] incident's
    SEVERITY_BELOW = "severity_below"
    NOT_REACHED = "not_reached"  # an earlier route won


@dataclass(frozen=True, slots=True)
class Decision:
    notify: bool
    reason: Reason
    detail: str = ""

    def __str__(self) -> str:
        return self.detail or self.reason.value


def decide_update(
    inc: Incident,
    *,
    now: float,
    silences: Iterable[Silence],
    run_firing: Iterable[Incident],
    inhibit: InhibitConfig,
    firing_notified: bool,
    send_resolved: bool,
) -> Decision:
    """One incident update for one receiver.

    Silences mute firing and resolved updates alike; inhibition mutes firing updates only; a
    resolve notice goes out only after a firing notice of the same incident did.
    """
    silence = silenced_by(inc, silences, now)
    if silence is not None:
        return Decision(False, Reason.SILENCED, f"silenced by {silence.id}")
    if inc.status is Status.FIRING:
        hit = inhibited_by(inc, run_firing, inhibit)
        if hit is not None:
            return Decision(False, Reason.INHIBITED, hit)
        if inc.actions:
            return Decision(True, Reason.ACTION_TAKEN, "firing: an action was taken")
        if firing_notified:
            return Decision(True, Reason.SEVERITY_CHANGED, "firing: severity changed")
        return Decision(True, Reason.FIRING_NEW, "firing: new")
    if not send_resolved:
        return Decision(False, Reason.RESOLVED_OFF, "resolved notices are off for this receiver")
    if not firing_notified:
        why = "resolved, but its firing notice was never sent"
        return Decision(False, Reason.RESOLVED_NOT_NOTIFIED, why)
    return Decision(True, Reason.RESOLVED, "resolved after a firing notice")


def decide_repeat(last_sent: float, now: float, repeat_interval: float) -> Decision:
    """A still-firing incident: remind after ``repeat_interval`` seconds (0: never)."""
    if repeat_interval <= 0:
        return Decision(False, Reason.REMINDERS_OFF, "reminders are off (repeat_interval = 0)")
    due = last_sent + repeat_interval
    if now >= due:
        why = f"still firing {now - last_sent:.0f} s after the last notice"
        return Decision(True, Reason.REMINDER, why)
    return Decision(False, Reason.REMINDER_NOT_DUE, f"reminder due in {due - now:.0f} s")
