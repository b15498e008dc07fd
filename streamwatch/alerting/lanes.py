"""The messages of one receiver, one lane per run: which to try next, and what a failure means.

Pure state: no I/O, no thread, no clock (``now`` is monotonic seconds, passed in). Order is
kept per run, not per receiver: a run's message is tried only after the earlier messages of
that run are delivered or set aside, while every other run's messages go on. A retry waits
for its own backoff, so one message that keeps failing never holds up the other runs.

What a message that used its retries means depends on the receiver:

- the receiver took another message since this one first failed: the receiver works and
  refuses this message: it is **set aside** (the caller writes it to the failed log). Only
  a failure that can be the message's fault counts (:func:`blames_message`: a 500 to its
  payload can, a 429, 503, timeout or refused connection cannot: then the receiver is down);
- nothing was delivered since: the message is a **suspect**; it stays in its lane, and the
  next message of its run may go (a delivery there proves the receiver works, so every
  suspect is then set aside: a later message of the run went out, and the order holds);
- no message is left to try, or :data:`DOWN_AFTER` suspects piled up with no delivery: the
  receiver is **down** (an outage, not a bad message): it rests, and afterwards, or at once
  when a new message comes, one message of the oldest run is tried; if that one goes out,
  every message gets a fresh set of retries (their failures were the outage's).

>>> from streamwatch.alerting.testing import incident
>>> from streamwatch.alerting.message import Message
>>> def msg(run):
...     return Message.build("hook", run, {"run_id": run}, (incident(run),))
>>> lanes = Lanes()
>>> lanes.add(msg("bad")); lanes.add(msg("good"))
>>> first = lanes.pick(now=0.0)[0]; first.message.run_id
'bad'
>>> lanes.tried(first, now=0.0); lanes.failed(first, now=0.0, delay=5.0)
>>> lanes.pick(now=0.1)[0].message.run_id   # the other run goes during the backoff
'good'
>>> lanes.delivered(lanes.pick(now=0.1)[0], now=0.2)
[]
>>> lanes.exhausted(first, now=6.0, rest=60.0)
'set_aside'
>>> len(lanes)
0
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from streamwatch.alerting.message import Message

__all__ = ["DOWN_AFTER", "Entry", "Lanes", "Verdict", "blames_message"]

#: Suspects (messages that used their retries while nothing was delivered) that make the
#: receiver count as down.
DOWN_AFTER = 3

Verdict = Literal["set_aside", "suspect", "down"]


def blames_message(status: int | None) -> bool:
    """Whether a retryable failure can be the message's own fault: an HTTP 5xx answer to its
    payload (or an SMTP 4xx to its data) can; a rate limit (429), an unavailable or timed-out
    gateway (503, 504), an SMTP server closing (421), a timeout or a refused connection says
    the receiver is in trouble, whatever the message.

    >>> [blames_message(s) for s in (500, 502, 503, 504, 429, None)]
    [True, True, False, False, False, False]
    """
    if status is None or status in (421, 429, 503, 504):  # 421: SMTP's "closing, busy"
        return False
    return status >= 400


@dataclass(slots=True)
class Entry:
    """A message in its lane, with its retry state."""

    message: Message
    seq: int
    attempts: int = 0
    first_try: float | None = None
    first_failure: float | None = None
    not_before: float = 0.0
    suspect: bool = False
    last_reason: str = ""
    last_status: int | None = None

    def fresh(self) -> None:
        self.attempts = 0
        self.first_try = self.first_failure = None
        self.not_before = 0.0
        self.suspect = False


class Lanes:
    """The pending messages of one receiver, one FIFO per run, and the receiver's state."""

    def __init__(self) -> None:
        self._runs: dict[str, deque[Entry]] = {}
        self._ids: set[str] = set()
        self._seq = 0
        self.last_ok: float | None = None  # monotonic time of the last delivery
        self.down_until: float | None = None  # resting: the receiver looks down
        self.hold_until = 0.0  # the receiver's Retry-After
        self.probe_now = False  # a new message came while resting: try one at once

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._ids

    def entries(self) -> Iterator[Entry]:
        for lane in self._runs.values():
            yield from lane

    @property
    def down(self) -> bool:
        return self.down_until is not None

    def add(self, message: Message) -> None:
        if message.id in self._ids:
            return
        self._seq += 1
        self._runs.setdefault(message.run_id, deque()).append(Entry(message, self._seq))
        self._ids.add(message.id)
        if self.down:
            self.probe_now = True

    def pick(self, now: float) -> tuple[Entry | None, float | None]:
        """The message to try now; else None and when to look again (None: at the next add)."""
        if self.down_until is not None:
            if now < self.down_until and not self.probe_now:
                return None, self.down_until
            self.probe_now = False
            return self._probe(), None
        if now < self.hold_until:
            return None, self.hold_until
        best: Entry | None = None
        for entry in self._candidates():
            if best is None or (entry.not_before, entry.seq) < (best.not_before, best.seq):
                best = entry
        if best is None:
            return None, None
        if best.not_before > now:
            return None, best.not_before
        return best, None

    def tried(self, entry: Entry, now: float) -> None:
        entry.attempts += 1
        if entry.first_try is None:
            entry.first_try = now

    def delivered(self, entry: Entry, now: float) -> list[Entry]:
        """It went out. Returns the suspects this proves bad (to be set aside), none when it
        ends an outage: then every message starts its retries afresh."""
        self._remove(entry)
        self.last_ok = now
        if self.down_until is not None:
            self.down_until = None
            self.probe_now = False
            for e in self.entries():
                e.fresh()
            return []
        bad = [e for e in self.entries() if e.suspect]
        for e in bad:
            self._remove(e)
        return bad

    def failed(
        self,
        entry: Entry,
        now: float,
        delay: float,
        *,
        hold: float | None = None,
        rest: float = 0.0,
    ) -> None:
        """A retryable failure with retries left: try it again ``delay`` seconds from now
        (every message of the receiver waits out ``hold``, its Retry-After). A probe of a
        receiver that is down failed: it rests ``rest`` seconds more."""
        if entry.first_failure is None:
            entry.first_failure = now
        entry.not_before = now + delay
        if hold is not None:
            self.hold_until = max(self.hold_until, now + hold)
        if self.down_until is not None:
            self.down_until = now + max(rest, delay)

    def exhausted(self, entry: Entry, now: float, rest: float, *, blame: bool = True) -> Verdict:
        """It used its retries: set aside (removed here), a suspect, or the receiver is down
        and rests ``rest`` seconds. ``blame``: whether its last failure can be the message's
        fault (see :func:`blames_message`); if not, the receiver is down."""
        if entry.first_failure is None:
            entry.first_failure = now
        if self.down_until is not None or not blame:
            self.down_until = now + rest
            self.probe_now = False
            return "down"
        if self.last_ok is not None and self.last_ok > entry.first_failure:
            self._remove(entry)
            return "set_aside"
        entry.suspect = True
        suspects = sum(1 for e in self.entries() if e.suspect)
        if suspects >= DOWN_AFTER or next(self._candidates(), None) is None:
            self.down_until = now + rest
            self.probe_now = False
            return "down"
        return "suspect"

    def remove(self, entry: Entry) -> None:
        """Done with it for good (refused with a final answer)."""
        self._remove(entry)

    # -- internals ----------------------------------------------------------------------
    def _candidates(self) -> Iterator[Entry]:
        """Per run, its first message that is not a suspect."""
        for lane in self._runs.values():
            for entry in lane:
                if not entry.suspect:
                    yield entry
                    break

    def _probe(self) -> Entry | None:
        """While down: the oldest run's first message (never one behind a suspect, so that a
        delivery cannot overtake an earlier message of its run that is then retried)."""
        heads = [lane[0] for lane in self._runs.values() if lane]
        clean = [e for e in heads if not e.suspect]
        pool = clean or heads
        return min(pool, key=lambda e: e.seq, default=None)

    def _remove(self, entry: Entry) -> None:
        lane = self._runs.get(entry.message.run_id)
        if lane is None or entry.message.id not in self._ids:
            return
        lane.remove(entry)
        self._ids.discard(entry.message.id)
        if not lane:
            del self._runs[entry.message.run_id]
