"""What the silences muted, for the commands that print incidents (``replay``, ``watch``):
each muted incident line says by which silence, and the summary how many updates each
silence muted. The decision is the dispatcher's own (:func:`~streamwatch.alerting.silence.
silenced_by`, on the same silences file, at the same clock), so what is said muted is what
no receiver was sent.

>>> import tempfile, pathlib
>>> from streamwatch.alerting.silence import add_silence
>>> from streamwatch.clock import ManualClock
>>> from streamwatch.incidents import Incident
>>> path = pathlib.Path(tempfile.mkdtemp()) / "silences.json"
>>> s = add_silence(path, now=0.0, duration=60, kind="metric_drift", silence_id="3f2a")
>>> muted = Muted(path, ManualClock(10.0))
>>> inc = Incident(id="a1", run_id="r", kind="metric_drift", severity="info",
...     status="firing", indicator="kl", metric="kl", step=8, message="")
>>> muted.send(inc)
>>> muted.note(inc)
'silenced by 3f2a: no alert'
>>> muted.summary()
['silence 3f2a (run_id=* kind=metric_drift indicator=*): muted 1 incident update(s)']
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from streamwatch.alerting.silence import Silence, SilenceFile, silenced_by
from streamwatch.clock import Clock
from streamwatch.incidents import Incident

__all__ = ["Muted"]


class Muted:
    """The silences of ``path`` applied to each incident update sent to it (a sink, before
    the console), counted per silence."""

    def __init__(self, path: Path, clock: Clock) -> None:
        self.path = path
        self._file = SilenceFile(path)
        self._clock = clock
        self.counts: Counter[str] = Counter()
        self._silences: dict[str, Silence] = {}
        self._last: tuple[Incident, Silence] | None = None

    def send(self, inc: Incident) -> None:
        """Judge an update: is a silence muting it now? Counted per silence."""
        now = self._clock.now()
        silence = silenced_by(inc, self._file.current(now), now)
        self._last = None if silence is None else (inc, silence)
        if silence is not None:
            self.counts[silence.id] += 1
            self._silences[silence.id] = silence

    def note(self, inc: Incident) -> str:
        """What the line of the update just sent says: ``silenced by ID: no alert``, or
        nothing."""
        if self._last is None or self._last[0] is not inc:
            return ""
        return f"silenced by {self._last[1].id}: no alert"

    def summary(self) -> list[str]:
        """Per silence that muted something: its matchers and how many updates it muted."""
        return [
            f"silence {sid} ({self._silences[sid].describe()}): muted {n:,} incident update(s)"
            for sid, n in self.counts.most_common()
        ]
