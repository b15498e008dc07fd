"""Should this update be notified? Pure decisions that say why, with ``now`` passed in.

>>> from streamwatch.incidents import Incident
>>> inc = Incident(id="a1", run_id="r", kind="entropy_collapse", severity="warning",
...     status="resolved", indicator="entropy", metric="actor/entropy", step=900, message="")
>>> decide_update(inc, now=0.0, silences=(), run_firing=(), inhibit=InhibitConfig(),
...     firing_notified=False, send_resolved=True)
Decision(notify=False, reason='resolved, but its firing notice was never sent')
>>> decide_repeat(last_sent=100.0, now=200.0, repeat_interval=3600.0)
Decision(notify=False, reason='reminder due in 3500 s')
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from streamwatch.alerting.config import InhibitConfig
from streamwatch.alerting.inhibit import inhibited_by
from streamwatch.alerting.silence import Silence, silenced_by
from streamwatch.incidents import Incident, Status

__all__ = ["Decision", "decide_repeat", "decide_update"]


@dataclass(frozen=True, slots=True)
class Decision:
    notify: bool
    reason: str


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
        return Decision(False, f"silenced by {silence.id}")
    if inc.status is Status.FIRING:
        hit = inhibited_by(inc, run_firing, inhibit)
        if hit is not None:
            return Decision(False, hit)
        return Decision(True, "firing: severity changed" if firing_notified else "firing: new")
    if not send_resolved:
        return Decision(False, "resolved notices are off for this receiver")
    if not firing_notified:
        return Decision(False, "resolved, but its firing notice was never sent")
    return Decision(True, "resolved after a firing notice")


def decide_repeat(last_sent: float, now: float, repeat_interval: float) -> Decision:
    """A still-firing incident: remind after ``repeat_interval`` seconds (0: never)."""
    if repeat_interval <= 0:
        return Decision(False, "reminders are off (repeat_interval = 0)")
    due = last_sent + repeat_interval
    if now >= due:
        return Decision(True, f"still firing {now - last_sent:.0f} s after the last notice")
    return Decision(False, f"reminder due in {due - now:.0f} s")
